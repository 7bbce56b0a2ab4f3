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
	"os"
	"path/filepath"
	"slices"
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
