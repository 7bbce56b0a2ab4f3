//go:build bench

/*
Copyright 2026 The edgepool Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package controlplane

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// TestSmoke runs C1 small: every CacheNode converges and a no-op resync writes nothing.
func TestSmoke(t *testing.T) {
	res := runScenario(t, Options{CacheNodes: 30, Sequential: 5}, 2*time.Minute)
	if res.Converged != 30 {
		t.Errorf("converged = %d, want 30", res.Converged)
	}
	for name, v := range map[string]float64{
		"createP50Ms": res.CreateP50Ms, "createP99Ms": res.CreateP99Ms,
		"updateP50Ms": res.UpdateP50Ms, "updateP99Ms": res.UpdateP99Ms,
		"burstConvergeMs": res.BurstConvergeMs, "rssMiB": res.RSSMiB, "hwmMiB": res.HWMMiB,
	} {
		if v <= 0 {
			t.Errorf("%s = %v, want > 0", name, v)
		}
	}
	if res.CreateP50Ms > res.CreateP99Ms || res.UpdateP50Ms > res.UpdateP99Ms {
		t.Errorf("p50 above p99: %+v", res)
	}
	if want := 1 + 5 + 30; res.ResyncReconciles < want {
		t.Errorf("restarted operator made %d reconciles, want at least %d", res.ResyncReconciles, want)
	}
	// The apiserver's counter sees the burst's writes, so its 0 below is not vacuous.
	for _, key := range []string{"POST cachenodes", "APPLY configmaps", "APPLY daemonsets", "PATCH cachenodes/status"} {
		if res.BurstWriteBreakdown[key] < 30 {
			t.Errorf("burst writes %q = %d, want at least 30: %v", key, res.BurstWriteBreakdown[key], res.BurstWriteBreakdown)
		}
	}
	// The product's promise: an unchanged CacheNode costs no write.
	if res.WritesPerNoopResync != 0 || res.OperatorWrites != 0 {
		t.Errorf("no-op resync wrote: %d requests by the apiserver's count, %d by the operator's: %v",
			res.WritesPerNoopResync, res.OperatorWrites, res.WriteBreakdown)
	}
	if res.ResyncReconcileErrors != 0 {
		t.Errorf("%d reconciles of the no-op resync failed", res.ResyncReconcileErrors)
	}
}

// TestFull runs C1 at its default size (1,000 CacheNodes) when EDGEPOOL_BENCH_FULL=1 and
// prints the result as JSON.
func TestFull(t *testing.T) {
	if os.Getenv("EDGEPOOL_BENCH_FULL") != "1" {
		t.Skip("set EDGEPOOL_BENCH_FULL=1 to run C1 at full size")
	}
	res := runScenario(t, Options{}, 20*time.Minute)
	out, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("C1 result:\n%s", out)
}

func runScenario(t *testing.T, opts Options, timeout time.Duration) *Result {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set (`make test` sets it)")
	}
	log.SetLogger(logr.Discard())
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	opts.RepoRoot, opts.Log = root, testWriter{t}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// testWriter sends each line written to it to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestParseSample(t *testing.T) {
	for _, tc := range []struct {
		line string
		want sample
		ok   bool
	}{
		{`up 1`, sample{name: "up", labels: map[string]string{}, value: 1}, true},
		{`apiserver_request_total{code="201",resource="configmaps",subresource="",verb="APPLY"} 42`,
			sample{name: "apiserver_request_total", labels: map[string]string{"code": "201", "resource": "configmaps", "subresource": "", "verb": "APPLY"}, value: 42}, true},
		{`m{path="a\"b\\c",x="1"} 2.5e+01 1700000000`, sample{name: "m", labels: map[string]string{"path": `a"b\c`, "x": "1"}, value: 25}, true},
		{`# TYPE up gauge`, sample{}, false},
		{`broken{a="1" 3`, sample{}, false},
		{`novalue`, sample{}, false},
	} {
		got, ok := parseSample(tc.line)
		if ok != tc.ok {
			t.Errorf("parseSample(%q) ok = %v, want %v", tc.line, ok, tc.ok)
			continue
		}
		if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(sample{})); ok && diff != "" {
			t.Errorf("parseSample(%q) (-want +got):\n%s", tc.line, diff)
		}
	}
}

func TestWritesAndStats(t *testing.T) {
	before := writesByResource(parseSamples(`
apiserver_request_total{code="201",resource="configmaps",subresource="",verb="APPLY"} 10
apiserver_request_total{code="200",resource="leases",subresource="",verb="PUT"} 3
apiserver_request_total{code="200",resource="configmaps",subresource="",verb="GET"} 50
`))
	after := writesByResource(parseSamples(`
apiserver_request_total{code="201",resource="configmaps",subresource="",verb="APPLY"} 10
apiserver_request_total{code="200",resource="leases",subresource="",verb="PUT"} 5
apiserver_request_total{code="200",resource="cachenodes",subresource="status",verb="PATCH"} 1
apiserver_request_total{code="200",resource="configmaps",subresource="",verb="GET"} 90
`))
	delta := writeDelta(before, after)
	if diff := cmp.Diff(map[string]int{"PUT leases": 2, "PATCH cachenodes/status": 1}, delta); diff != "" {
		t.Errorf("writeDelta (-want +got):\n%s", diff)
	}
	if !excludedResource("PUT leases") || excludedResource("PATCH cachenodes/status") {
		t.Error("excludedResource: only leases and events are excluded")
	}

	st := statsOf(parseSamples(`
controller_runtime_reconcile_total{controller="cachenode",result="success"} 7
controller_runtime_reconcile_total{controller="cachenode",result="error"} 1
controller_runtime_reconcile_total{controller="other",result="success"} 100
controller_runtime_reconcile_errors_total{controller="cachenode"} 1
workqueue_depth{controller="cachenode",name="cachenode",priority=""} 0
controller_runtime_active_workers{controller="cachenode"} 0
rest_client_requests_total{code="200",host="h",method="GET"} 40
rest_client_requests_total{code="201",host="h",method="PATCH"} 2
rest_client_requests_total{code="409",host="h",method="PATCH"} 1
`))
	if diff := cmp.Diff(reconcileStats{reconciles: 8, errors: 1, idle: true, clientWrites: 3, conflicts: 1}, st, cmp.AllowUnexported(reconcileStats{})); diff != "" {
		t.Errorf("statsOf (-want +got):\n%s", diff)
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for p, want := range map[float64]time.Duration{50: 5, 90: 9, 99: 10, 100: 10, 1: 1} {
		if got := percentile(ds, p); got != want {
			t.Errorf("percentile(1..10, %v) = %v, want %v", p, got, want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("percentile(nil) = %v, want 0", got)
	}
	if p50, p99 := quantiles([]time.Duration{3 * time.Millisecond, time.Millisecond, 2 * time.Millisecond}); p50 != 2 || p99 != 3 {
		t.Errorf("quantiles = %v, %v; want 2, 3", p50, p99)
	}
}

func TestProcMemory(t *testing.T) {
	rss, hwm, err := procMemory("Name:\tmanager\nVmHWM:\t   81920 kB\nVmRSS:\t   40960 kB\nThreads:\t9\n")
	if err != nil || rss != 40 || hwm != 80 {
		t.Errorf("procMemory = %v, %v, %v; want 40, 80, nil", rss, hwm, err)
	}
	if _, _, err := procMemory("Name:\tmanager\n"); err == nil {
		t.Error("procMemory without VmRSS: want an error")
	}
}
