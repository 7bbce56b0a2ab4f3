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
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// Pure functions from what a reconcile observed to the CachePurge's status.

// answer is what one node's cache pod said, or why it could not be asked.
type answer struct {
	pod     string
	phase   v1alpha1.PurgePhase // Pending or Done
	removed int64
	message string
	running bool // the agent is purging: ask again soon
}

// observation is what a reconcile saw.
type observation struct {
	now time.Time
	// cacheNodeMissing: the CacheNode the purge names does not exist.
	cacheNodeMissing bool
	// answers are the nodes asked, by node name.
	answers map[string]answer
}

// maxNamed bounds the nodes a condition message names.
const maxNamed = 5

// deadline is when the purge stops waiting for nodes.
func deadline(p *v1alpha1.CachePurge) time.Time {
	return p.CreationTimestamp.Add(time.Duration(p.Spec.ActiveDeadlineSeconds) * time.Second)
}

// finished says whether the purge is Complete or Failed.
func finished(p *v1alpha1.CachePurge) bool {
	return meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionComplete) ||
		meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionFailed)
}

// setStatus merges the answers into the per-node entries (a node that is Done or Failed
// stays so), fails what is still pending after the deadline, and sets the counts and
// conditions.
func setStatus(p *v1alpha1.CachePurge, obs observation) {
	st := &p.Status
	expired := !obs.now.Before(deadline(p))
	stamp := metav1.NewTime(obs.now.UTC().Truncate(time.Second))
	for node, a := range obs.answers {
		i := slices.IndexFunc(st.Nodes, func(n v1alpha1.PurgeNode) bool { return n.Node == node })
		if i < 0 {
			st.Nodes = append(st.Nodes, v1alpha1.PurgeNode{Node: node, Phase: v1alpha1.PurgePending})
			i = len(st.Nodes) - 1
		}
		n := &st.Nodes[i]
		if n.Phase != v1alpha1.PurgePending {
			continue
		}
		if n.Pod != a.pod || n.Phase != a.phase || n.ObjectsRemoved != a.removed || n.Message != a.message {
			n.LastUpdateTime = stamp
		}
		n.Pod, n.Phase, n.ObjectsRemoved, n.Message = a.pod, a.phase, a.removed, a.message
	}
	slices.SortFunc(st.Nodes, func(a, b v1alpha1.PurgeNode) int { return strings.Compare(a.Node, b.Node) })
	if expired {
		for i := range st.Nodes {
			if n := &st.Nodes[i]; n.Phase == v1alpha1.PurgePending {
				n.Phase, n.LastUpdateTime = v1alpha1.PurgeFailed, stamp
				n.Message = clip("did not confirm the purge before its deadline: " + n.Message)
			}
		}
	}
	st.PendingNodes, st.DoneNodes, st.FailedNodes, st.ObjectsRemoved = 0, 0, 0, 0
	for _, n := range st.Nodes {
		switch n.Phase {
		case v1alpha1.PurgePending:
			st.PendingNodes++
		case v1alpha1.PurgeDone:
			st.DoneNodes++
		case v1alpha1.PurgeFailed:
			st.FailedNodes++
		}
		st.ObjectsRemoved += n.ObjectsRemoved
	}

	complete, failed := conditions(p, obs, expired)
	for _, c := range []metav1.Condition{
		complete, failed,
		// kstatus: in progress until it finished; stalled once it failed.
		{Type: v1alpha1.ConditionReconciling, Status: not(complete.Status == metav1.ConditionTrue || failed.Status == metav1.ConditionTrue), Reason: complete.Reason, Message: complete.Message},
		{Type: v1alpha1.ConditionStalled, Status: failed.Status, Reason: failed.Reason, Message: failed.Message},
	} {
		c.ObservedGeneration = p.Generation
		meta.SetStatusCondition(&st.Conditions, c)
	}
	if finished(p) && st.CompletionTime.IsZero() {
		st.CompletionTime = stamp
	}
	st.ObservedGeneration = p.Generation
}

func conditions(p *v1alpha1.CachePurge, obs observation, expired bool) (complete, failed metav1.Condition) {
	st := &p.Status
	complete = metav1.Condition{Type: v1alpha1.ConditionComplete, Status: metav1.ConditionFalse}
	failed = metav1.Condition{Type: v1alpha1.ConditionFailed, Status: metav1.ConditionFalse}
	switch {
	case obs.cacheNodeMissing && len(st.Nodes) == 0:
		msg := fmt.Sprintf("CacheNode %s not found in namespace %s", p.Spec.CacheNode, p.Namespace)
		complete.Reason, complete.Message = v1alpha1.ReasonCacheNodeNotFound, msg+"; waiting for it until the deadline"
		failed.Reason, failed.Message = v1alpha1.ReasonCacheNodeNotFound, complete.Message
		if expired {
			failed.Status, failed.Message = metav1.ConditionTrue, msg+" before the deadline"
			complete.Message = failed.Message
		}
	case st.PendingNodes > 0:
		complete.Reason = v1alpha1.ReasonNodesPending
		complete.Message = fmt.Sprintf("%d of %d nodes pending: %s", st.PendingNodes, len(st.Nodes), named(st.Nodes, v1alpha1.PurgePending))
		failed.Reason, failed.Message = v1alpha1.ReasonNodesPending, "asking the pending nodes again until the deadline"
	case st.FailedNodes > 0:
		complete.Reason, failed.Reason = v1alpha1.ReasonNodesFailed, v1alpha1.ReasonNodesFailed
		failed.Status = metav1.ConditionTrue
		failed.Message = fmt.Sprintf("%d of %d nodes failed: %s", st.FailedNodes, len(st.Nodes), named(st.Nodes, v1alpha1.PurgeFailed))
		complete.Message = failed.Message
	default:
		complete.Status, complete.Reason, failed.Reason = metav1.ConditionTrue, v1alpha1.ReasonPurged, v1alpha1.ReasonPurged
		complete.Message = fmt.Sprintf("purged on %d nodes: %d objects %s", st.DoneNodes, st.ObjectsRemoved, purgedAs(p))
		if len(st.Nodes) == 0 {
			complete.Message = "no cache pod runs: nothing cached to purge"
		}
		failed.Message = complete.Message
	}
	return complete, failed
}

// purgedAs says what the purge did to the objects it counts.
func purgedAs(p *v1alpha1.CachePurge) string {
	if p.Spec.Soft {
		return "marked stale"
	}
	return "removed"
}

// named lists the first nodes in phase, with their messages.
func named(nodes []v1alpha1.PurgeNode, phase v1alpha1.PurgePhase) string {
	var parts []string
	n := 0
	for _, node := range nodes {
		if node.Phase != phase {
			continue
		}
		if n++; n <= maxNamed {
			parts = append(parts, fmt.Sprintf("%s (%s)", node.Node, node.Message))
		}
	}
	if n > maxNamed {
		parts = append(parts, fmt.Sprintf("and %d more", n-maxNamed))
	}
	return clip(strings.Join(parts, ", "))
}

func not(b bool) metav1.ConditionStatus {
	if b {
		return metav1.ConditionFalse
	}
	return metav1.ConditionTrue
}

// clip bounds a message: PurgeNode.message holds at most 1024 bytes.
func clip(s string) string {
	const limit = 1024
	if len(s) <= limit {
		return s
	}
	return s[:limit-3] + "..."
}
