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
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/edgepool/edgepool/internal/test/testkit"
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
	// The product's promise: an unchanged CacheNode costs no write. A new leader has a new
	// purge key (in memory only: the operator reads no Secret), so it publishes it once in
	// each CacheNode's ConfigMap; nothing else is written.
	if keys := res.WriteBreakdown["APPLY configmaps"]; res.WritesPerNoopResync != keys || res.OperatorWrites != keys || keys > 1+5+30 {
		t.Errorf("no-op resync wrote: %d requests by the apiserver's count, %d by the operator's, want only the new key's ConfigMap applies, at most one per CacheNode: %v",
			res.WritesPerNoopResync, res.OperatorWrites, res.WriteBreakdown)
	}
	// A status patch that meets a newer CacheNode is retried, not failed.
	if res.ReconcileErrors != 0 || res.ResyncReconcileErrors != 0 {
		t.Errorf("failed reconciles: %d (changes and burst), %d (no-op resync)", res.ReconcileErrors, res.ResyncReconcileErrors)
	}
}

func runScenario(t *testing.T, opts Options, timeout time.Duration) *Result {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Fatal("KUBEBUILDER_ASSETS is unset: run `make test`, which installs kube-apiserver and etcd")
	}
	log.SetLogger(logr.Discard())
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	opts.RepoRoot, opts.Log = root, testkit.LogWriter(t.Log)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestWritesAndStats(t *testing.T) {
	before := writesByResource(metrics(t, `
apiserver_request_total{code="201",resource="configmaps",subresource="",verb="APPLY"} 10
apiserver_request_total{code="200",resource="leases",subresource="",verb="PUT"} 3
apiserver_request_total{code="200",resource="configmaps",subresource="",verb="GET"} 50
`))
	after := writesByResource(metrics(t, `
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

	st := statsOf(metrics(t, `
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

func metrics(t *testing.T, text string) testkit.Metrics {
	t.Helper()
	m, err := testkit.ParseMetrics(text)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
