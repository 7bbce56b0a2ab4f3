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
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/test/testkit"
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

// TestReloadUnderLoad applies 10 configuration changes while clients keep sending
// requests through nginx, with C2's scenario run small: no request
// fails, each new configuration is served, and the agent reports what it runs.
func TestReloadUnderLoad(t *testing.T) {
	const changes = 10
	agentLog := &testkit.Buffer{}
	res := runScenario(t, Options{Reloads: changes, Clients: 8, Debounce: 100 * time.Millisecond, AgentLog: agentLog})
	if res.ReloadMaxMs > 15000 {
		t.Errorf("a change was served only after %.0fms, want within 15s", res.ReloadMaxMs)
	}
	if res.FailedRequests != 0 {
		t.Errorf("%d requests failed during reloads, first: %v", res.FailedRequests, res.FirstError)
	}
	if strings.Contains(agentLog.String(), "NGINX environment variable") {
		t.Error("the agent's NGINX environment variable reached nginx")
	}
	ok := res.Requests - res.FailedRequests
	if ok < 100 {
		t.Errorf("only %d requests were sent: the load did not run", ok)
	}
	if res.AgentReloads != changes {
		t.Errorf("the agent counted %d reloads (and %d failed ones), want %d", res.AgentReloads, res.AgentFailedReloads, changes)
	}
	st := res.Status
	if st.ConfigHash != res.ConfigHash {
		t.Errorf("/status configHash %s is not the last configuration's", st.ConfigHash)
	}
	somaxconn, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err != nil {
		t.Fatal(err)
	}
	if st.Backlog != int(res.Spec.Listener.Backlog) || fmt.Sprint(st.Somaxconn) != strings.TrimSpace(string(somaxconn)) {
		t.Errorf("/status backlog %d, somaxconn %d; want %d and the kernel's %s", st.Backlog, st.Somaxconn, res.Spec.Listener.Backlog, somaxconn)
	}
	for _, sample := range []struct {
		name   string
		labels map[string]string
	}{
		{"edgepool_nginx_up", nil}, {"edgepool_listen_backlog", nil}, {"edgepool_net_core_somaxconn", nil},
		{"edgepool_disk_ready", map[string]string{"disk": "d0", "path": res.Spec.Disks[0].Path}},
		{"edgepool_disk_used_bytes", map[string]string{"disk": "d0"}},
		{"edgepool_config_info", map[string]string{"hash": st.ConfigHash}},
	} {
		if v := res.Metrics.Sum(sample.name, sample.labels); v <= 0 {
			t.Errorf("metric %s%v = %v, want > 0", sample.name, sample.labels, v)
		}
	}
	if v := res.Metrics.Sum("edgepool_nginx_http_requests_total", nil); v < float64(ok) {
		t.Errorf("edgepool_nginx_http_requests_total = %v, want at least the %d requests sent", v, ok)
	}
}

func runScenario(t *testing.T, opts Options) *Result {
	t.Helper()
	opts.NginxBin = os.Getenv("NGINX_BIN")
	if opts.NginxBin == "" {
		t.Fatal("NGINX_BIN is unset: run `make test`, which installs nginx")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	opts.RepoRoot, opts.Log = root, testkit.LogWriter(t.Log)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestAcceptingWorkers(t *testing.T) {
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
