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

package failover

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/test/testkit"
)

// TestSmoke runs F1 small, with both faults: the harness cannot rot, and what is not a
// performance figure holds: no request for a healthy disk's keys fails, none fails once
// nginx switched, and the table comes out. Times and throughputs are reported, not asserted.
func TestSmoke(t *testing.T) {
	nginx := os.Getenv("NGINX_BIN")
	if nginx == "" {
		t.Fatal("NGINX_BIN is unset: run `make test`, which installs nginx")
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{NginxBin: nginx, RepoRoot: root, Log: testkit.LogWriter(t.Log),
		Disks: 2, Objects: 60, ObjectSize: 16 << 10, Clients: 2, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 2 {
		t.Fatalf("%d runs, want one per fault", len(res.Runs))
	}
	for _, r := range res.Runs {
		for name, p := range map[string]Phase{"before": r.Before, "detecting": r.Detecting, "switching": r.Switching, "after": r.After} {
			if p.FailedHealthy != 0 {
				t.Errorf("%s, %s: %d requests for the healthy disk's keys failed: %q", r.Fault, name, p.FailedHealthy, p.HealthyFailures)
			}
		}
		if r.Before.Requests == 0 || r.After.Requests == 0 || r.Before.HealthyMBps <= 0 {
			t.Errorf("%s: the load did not run: %+v", r.Fault, r)
		}
		if r.After.Failed != 0 {
			t.Errorf("%s: %d of %d requests failed after nginx switched, want 0", r.Fault, r.After.Failed, r.After.Requests)
		}
		if r.DetectionMs <= 0 || r.SwitchedMs < r.DetectionMs || r.Reason == "" {
			t.Errorf("%s: implausible times: %+v", r.Fault, r)
		}
	}
	md := res.Markdown()
	if !strings.Contains(md, "| dead | failure → the agent took the disk out |") || !strings.Contains(md, "| read-only | healthy disks' throughput after / before |") {
		t.Errorf("table lacks rows:\n%s", md)
	}
	t.Logf("\n%s", md)
}
