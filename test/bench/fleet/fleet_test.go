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

package fleet

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/test/testkit"
	"github.com/edgepool/edgepool/internal/test/testkit/clusterslot"
)

// TestSmoke runs C3 small: 40 nodes, 4 CacheNodes, 40 fake agents (10% each slow, hung
// and dead), the churn at one size (the shrink is make bench's); make bench runs the
// 5,000-node fleet. It asserts what is correct, not how fast: the fleet converges, a poll
// interval with nothing changed writes nothing and reconciles nothing, a node label
// change reconciles exactly the CacheNodes that select the node before or after, and a new
// operator asks every live agent.
func TestSmoke(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Nodes: 40, CacheNodes: 4, ShrinkTo: -1, Unhealthy: 0.1,
		PollInterval: 3 * time.Second, AgentTimeout: time.Second, AgentConcurrency: 8, PromptPodExit: true,
		Slot: clusterslot.FleetSmoke, Work: "c3-smoke",
		RepoRoot: root, Log: testkit.LogWriter(t.Log),
		KubeBin: envOr("KUBE_BIN", filepath.Join(root, "bin", "k8s-v1.36.3")),
		KwokBin: envOr("KWOK_BIN", filepath.Join(root, "bin", "k8s-v1.36.3"))}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Eligible == 0 || res.Eligible >= res.Selected {
		t.Errorf("the fleet should have selected nodes that are not eligible and eligible ones: %d selected, %d eligible", res.Selected, res.Eligible)
	}
	if n := res.NoOp; n.OperatorWrites != 0 || n.APIWrites != 0 || n.Reconciles != 0 || n.AgentsAsked == 0 {
		t.Errorf("a poll interval with nothing changed: %+v, want 0 writes and reconciles", n)
	}
	if len(res.Churn) != 4 {
		t.Errorf("%d churn events, want 4", len(res.Churn))
	}
	for _, c := range res.Churn {
		got := slices.Sorted(maps.Keys(c.Reconciled))
		if !slices.Equal(got, c.Affected) {
			t.Errorf("%d nodes, %s: reconciled %v, want exactly the CacheNodes selecting the node before or after: %v", c.Nodes, c.Event, got, c.Affected)
		}
	}
	if s := res.Sweep; s.Healthy == 0 || s.Slow == 0 || s.Hung == 0 || s.Dead == 0 {
		t.Errorf("the sweep should meet every kind of agent: %+v", s)
	}
	md := res.Markdown()
	if !strings.Contains(md, "| a new operator's first sweep of ") {
		t.Errorf("table lacks its sweep row:\n%s", md)
	}
	t.Logf("\n%s", md)
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
