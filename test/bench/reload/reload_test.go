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

package reload

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSmoke runs C2 small: every change is served, the agent reloaded once per change,
// and no request failed.
func TestSmoke(t *testing.T) {
	res := runScenario(t, Options{Reloads: 3})
	if res.FailedRequests != 0 {
		t.Errorf("%d of %d requests failed during the reloads, first: %s", res.FailedRequests, res.Requests, res.FirstError)
	}
	if res.AgentReloads != 3 || res.AgentFailedReloads != 0 {
		t.Errorf("agent reloads: %d, failed %d; want 3 and 0", res.AgentReloads, res.AgentFailedReloads)
	}
	if res.ServingConfigHash != res.ConfigHash {
		t.Errorf("the agent serves configuration %s, not the last one written (%s)", res.ServingConfigHash, res.ConfigHash)
	}
	if res.Requests < 3*res.Clients*2 {
		t.Errorf("only %d requests were sent: the load did not run", res.Requests)
	}
	if res.ReloadP50Ms <= 0 || res.ReloadP50Ms > res.ReloadP99Ms || res.ReloadP99Ms > res.ReloadMaxMs ||
		res.SettledMaxMs < res.ReloadMaxMs || res.Probes < 3 {
		t.Errorf("implausible latencies: %+v", res)
	}
}

// TestFull runs C2 at its default size when EDGEPOOL_BENCH_FULL=1 and prints the result
// as JSON.
func TestFull(t *testing.T) {
	if os.Getenv("EDGEPOOL_BENCH_FULL") != "1" {
		t.Skip("set EDGEPOOL_BENCH_FULL=1 to run C2 at full size")
	}
	res := runScenario(t, Options{})
	out, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("C2 result:\n%s", out)
}

func runScenario(t *testing.T, opts Options) *Result {
	t.Helper()
	opts.NginxBin = os.Getenv("NGINX_BIN")
	if opts.NginxBin == "" {
		t.Skip("NGINX_BIN is not set (`make test` sets it)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run the agent and nginx as nobody (as `make test` in CI does)")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	opts.RepoRoot, opts.Log = root, testWriter{t}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
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

func TestMetricValue(t *testing.T) {
	body := "# HELP edgepool_config_reloads_total Reloads.\nedgepool_config_reloads_total 3\nedgepool_config_reloads_total_other 9\n"
	if v, err := metricValue(body, "edgepool_config_reloads_total"); err != nil || v != 3 {
		t.Errorf("metricValue = %v, %v; want 3", v, err)
	}
	if _, err := metricValue(body, "edgepool_missing"); err == nil {
		t.Error("metricValue of a missing metric: want an error")
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for p, want := range map[float64]time.Duration{50: 5, 99: 10, 100: 10, 1: 1} {
		if got := percentile(ds, p); got != want {
			t.Errorf("percentile(1..10, %v) = %v, want %v", p, got, want)
		}
	}
}

func TestProcHelpers(t *testing.T) {
	if ppid, err := parentPID("4242 (nginx: worker) (x) S 4240 4240 4240 0 -1"); err != nil || ppid != 4240 {
		t.Errorf("parentPID = %v, %v; want 4240", ppid, err)
	}
	if _, err := parentPID("4242 nginx"); err == nil {
		t.Error("parentPID without a command name: want an error")
	}
	if got := commandTitle([]byte("nginx: worker process\x00\x00\x00   ")); got != acceptingWorkerTitle {
		t.Errorf("commandTitle = %q", got)
	}
	procs := []proc{
		{pid: 10, ppid: 1, title: "edgepool-agent --nginx nginx"},
		{pid: 11, ppid: 10, title: "nginx: master process nginx -p /run/edgepool"},
		{pid: 12, ppid: 11, title: "nginx: worker process is shutting down"},
		{pid: 13, ppid: 11, title: "nginx: worker process"},
		{pid: 14, ppid: 11, title: "nginx: cache manager process"},
		{pid: 15, ppid: 11, title: "nginx: worker process"},
		{pid: 21, ppid: 20, title: "nginx: worker process"}, // another nginx
	}
	if got := acceptingWorkers(procs, 10); !slices.Equal(got, []int{13, 15}) {
		t.Errorf("acceptingWorkers = %v, want [13 15]", got)
	}
}
