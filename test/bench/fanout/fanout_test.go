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

package fanout

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/test/testkit"
)

// TestSmoke runs P1 small: the harness cannot rot, every purge reaches every agent
// process through the operator, and the table comes out. Times are reported, not asserted.
func TestSmoke(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Agents: 3, Purges: 3, RepoRoot: root, Log: testkit.LogWriter(t.Log),
		KubeBin: envOr("KUBE_BIN", filepath.Join(root, "bin", "k8s-v1.36.3")),
		KwokBin: envOr("KWOK_BIN", filepath.Join(root, "bin", "k8s-v1.36.3")), NginxBin: os.Getenv("NGINX_BIN")}
	if opts.NginxBin == "" {
		t.Fatal("NGINX_BIN is unset: run `make test`, which installs nginx")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.ObjectsRemoved != 2*3*3 {
		t.Errorf("the purges removed %d objects, want one per node and purge: 18", res.ObjectsRemoved)
	}
	if len(res.CompleteMs) != 3 || len(res.TagCompleteMs) != 3 || res.P50Ms <= 0 || res.P50Ms > res.P99Ms ||
		res.TagP50Ms <= 0 || res.TagP50Ms > res.TagP99Ms || res.StartupMs <= 0 {
		t.Errorf("implausible result: %+v", res)
	}
	md := res.Markdown()
	if !strings.Contains(md, "| CachePurge of a tag created → Complete on all 3 nodes, p50 / p99 (max) |") {
		t.Errorf("table lacks its row:\n%s", md)
	}
	t.Logf("\n%s", md)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
