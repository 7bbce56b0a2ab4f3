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

package cachepurge

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

func TestSetStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	purge := func(nodes ...v1alpha1.PurgeNode) *v1alpha1.CachePurge {
		return &v1alpha1.CachePurge{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Generation: 1, CreationTimestamp: metav1.NewTime(t0)},
			Spec:       v1alpha1.CachePurgeSpec{CacheNode: "edge", ActiveDeadlineSeconds: 60},
			Status:     v1alpha1.CachePurgeStatus{Nodes: nodes},
		}
	}
	done := v1alpha1.PurgeNode{Node: "a", Pod: "edge-a", Phase: v1alpha1.PurgeDone, ObjectsRemoved: 4}
	soft := func(p *v1alpha1.CachePurge) *v1alpha1.CachePurge { p.Spec.Soft = true; return p }
	for _, tc := range []struct {
		name                           string
		p                              *v1alpha1.CachePurge
		obs                            observation
		complete, failed, reconciling  metav1.ConditionStatus
		reason                         string
		pending, doneN, failedN, nodes int32
		message                        string
	}{
		{"no pods", purge(), observation{now: t0},
			"True", "False", "False", "Purged", 0, 0, 0, 0, "no cache pod runs"},
		{"one done, one pending", purge(), observation{now: t0, answers: map[string]answer{
			"a": {pod: "edge-a", phase: v1alpha1.PurgeDone, removed: 4}, "b": {pod: "edge-b", phase: v1alpha1.PurgePending, message: "connection refused"}}},
			"False", "False", "True", "NodesPending", 1, 1, 0, 2, "1 of 2 nodes pending: b (connection refused)"},
		{"a done node stays done", purge(done), observation{now: t0, answers: map[string]answer{"a": {pod: "edge-a2", phase: v1alpha1.PurgePending, message: "x"}}},
			"True", "False", "False", "Purged", 0, 1, 0, 1, "purged on 1 nodes: 4 objects removed"},
		{"soft", soft(purge(done)), observation{now: t0},
			"True", "False", "False", "Purged", 0, 1, 0, 1, "purged on 1 nodes: 4 objects marked stale"},
		{"pending at the deadline", purge(done), observation{now: t0.Add(time.Minute), answers: map[string]answer{"b": {pod: "edge-b", phase: v1alpha1.PurgePending, message: "timeout"}}},
			"False", "True", "False", "NodesFailed", 0, 1, 1, 2, "1 of 2 nodes failed: b (did not confirm the purge before its deadline: timeout)"},
		{"no CacheNode", purge(), observation{now: t0, cacheNodeMissing: true},
			"False", "False", "True", "CacheNodeNotFound", 0, 0, 0, 0, "CacheNode edge not found in namespace ns; waiting"},
		{"no CacheNode at the deadline", purge(), observation{now: t0.Add(time.Hour), cacheNodeMissing: true},
			"False", "True", "False", "CacheNodeNotFound", 0, 0, 0, 0, "not found in namespace ns before the deadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setStatus(tc.p, tc.obs)
			st := tc.p.Status
			c, f, r := conditionOf(tc.p, v1alpha1.ConditionComplete), conditionOf(tc.p, v1alpha1.ConditionFailed), conditionOf(tc.p, v1alpha1.ConditionReconciling)
			if c.Status != tc.complete || f.Status != tc.failed || r.Status != tc.reconciling || c.Reason != tc.reason {
				t.Errorf("Complete %s, Failed %s, Reconciling %s, reason %s", c.Status, f.Status, r.Status, c.Reason)
			}
			if st.PendingNodes != tc.pending || st.DoneNodes != tc.doneN || st.FailedNodes != tc.failedN || int32(len(st.Nodes)) != tc.nodes {
				t.Errorf("pending %d, done %d, failed %d, nodes %d", st.PendingNodes, st.DoneNodes, st.FailedNodes, len(st.Nodes))
			}
			if !strings.Contains(c.Message, tc.message) {
				t.Errorf("message %q lacks %q", c.Message, tc.message)
			}
			if finished(tc.p) == st.CompletionTime.IsZero() || st.ObservedGeneration != 1 {
				t.Errorf("completionTime %v, observedGeneration %d", st.CompletionTime, st.ObservedGeneration)
			}
			if conditionOf(tc.p, v1alpha1.ConditionStalled).Status != tc.failed {
				t.Errorf("Stalled is not Failed's status")
			}
		})
	}
}
