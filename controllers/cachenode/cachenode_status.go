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

package cachenode

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// Pure functions that turn what a reconcile observed into status.

// maxNamedNodes caps the node names a condition message lists.
const maxNamedNodes = 5

// observation is what one reconcile saw.
type observation struct {
	renderErr  error
	configHash string
	// applyErr is the API server's answer when applying the ConfigMap or DaemonSet failed;
	// applyFinal says it needs someone to act (the object is invalid, or its name taken).
	applyErr   error
	applyFinal bool
	nodes      *nodeEligibility  // nil when the nodes could not be listed
	daemonSet  *appsv1.DaemonSet // nil until it exists
	agents     []agentReport     // one per running cache pod
}

// nodeEligibility counts the nodes a CacheNode selects and those that can run its pods.
type nodeEligibility struct {
	selected, eligible int32
	// ineligible explains, per node name, why a selected node cannot run the cache.
	ineligible map[string]string
}

// daemonSetTolerations are the taints the DaemonSet controller tolerates on its own, so a
// node with only these taints still runs the cache.
var daemonSetTolerations = []corev1.Toleration{
	{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists},
	{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists},
	{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists},
	{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists},
	{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists},
	{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists},
}

// evaluateNodes applies the DaemonSet's scheduling rules (node selector, required node
// affinity, taints) to each node, as the scheduler would.
func evaluateNodes(cn *v1alpha1.CacheNode, ds *appsv1.DaemonSet, nodes []corev1.Node) nodeEligibility {
	selector := labels.SelectorFromSet(cn.Spec.NodeSelector)
	pod := &corev1.Pod{Spec: ds.Spec.Template.Spec}
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	tolerations := append(append([]corev1.Toleration{}, cn.Spec.Tolerations...), daemonSetTolerations...)
	if cn.Spec.HostNetwork {
		tolerations = append(tolerations, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists})
	}
	hardTaints := func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}
	reqs := ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions

	out := nodeEligibility{ineligible: map[string]string{}}
	for i := range nodes {
		node := &nodes[i]
		if !selector.Matches(labels.Set(node.Labels)) {
			continue
		}
		out.selected++
		if ok, _ := affinity.Match(node); !ok {
			out.ineligible[node.Name] = "lacks " + missingDisks(reqs, node)
			continue
		}
		if taint, bad := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, tolerations, hardTaints, false); bad {
			out.ineligible[node.Name] = "taint " + taint.ToString() + " not tolerated"
			continue
		}
		out.eligible++
	}
	return out
}

// missingDisks names the disk requirements a node does not meet.
func missingDisks(reqs []corev1.NodeSelectorRequirement, node *corev1.Node) string {
	var missing []string
	for _, r := range reqs {
		term := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{r}}}}
		if ok, _ := nodeaffinity.NewLazyErrorNodeSelector(term).Match(node); !ok {
			missing = append(missing, describeRequirement(r))
		}
	}
	return strings.Join(missing, ", ")
}

// setStatus computes the status of cn from an observation. It keeps the last transition
// times of conditions whose status did not change.
func setStatus(cn *v1alpha1.CacheNode, obs observation) {
	st := &cn.Status
	gen := cn.Generation
	setTo := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen,
		})
	}
	set := func(t string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		setTo(t, status, reason, msg)
	}

	st.Disks = int32(len(cn.Spec.Disks))
	rendered := obs.renderErr == nil
	if rendered {
		st.ConfigHash = obs.configHash
		set(v1alpha1.ConditionConfigRendered, true, "Rendered", "nginx.conf rendered, hash "+short(obs.configHash))
	} else {
		set(v1alpha1.ConditionConfigRendered, false, "RenderFailed", obs.renderErr.Error()+"; the last good configuration keeps serving")
	}

	// noNodes: the nodes were observed and none can run the cache. Unobserved nodes say
	// nothing, and leave the last counts in place.
	noNodes := false
	var eligibleMsg string
	if n := obs.nodes; n != nil {
		st.SelectedNodes, st.EligibleNodes = n.selected, n.eligible
		eligibleMsg = fmt.Sprintf("%d of %d selected nodes have the required disks and tolerate their taints", n.eligible, n.selected)
		if len(n.ineligible) > 0 {
			eligibleMsg += "; not eligible: " + nameSome(n.ineligible)
		}
		noNodes = n.eligible == 0
		if noNodes {
			set(v1alpha1.ConditionNodesEligible, false, "NoEligibleNodes", eligibleMsg)
		} else {
			set(v1alpha1.ConditionNodesEligible, true, "NodesEligible", eligibleMsg)
		}
	} else {
		setTo(v1alpha1.ConditionNodesEligible, metav1.ConditionUnknown, "NotObserved", "the nodes could not be listed")
	}
	applyFailed := obs.applyErr != nil
	var applyMsg string
	if applyFailed {
		applyMsg = obs.applyErr.Error()
	}

	var desired, available, updated, ready int32
	dsCurrent := false
	if ds := obs.daemonSet; ds != nil {
		s := ds.Status
		desired, available, updated, ready = s.DesiredNumberScheduled, s.NumberAvailable, s.UpdatedNumberScheduled, s.NumberReady
		st.ScheduledNodes = s.CurrentNumberScheduled
		dsCurrent = s.ObservedGeneration >= ds.Generation
	} else {
		st.ScheduledNodes = 0
	}
	st.ReadyNodes = ready

	isAvailable := dsCurrent && desired > 0 && available >= desired
	podsMsg := fmt.Sprintf("%d of %d cache pods available, %d updated", available, desired, updated)
	switch {
	case isAvailable:
		set(v1alpha1.ConditionAvailable, true, "PodsAvailable", podsMsg)
	case desired == 0:
		set(v1alpha1.ConditionAvailable, false, "NoPods", "no node runs a cache pod")
	default:
		set(v1alpha1.ConditionAvailable, false, "PodsUnavailable", podsMsg)
	}

	progressing := obs.daemonSet == nil || !dsCurrent || updated < desired || available < desired
	if progressing {
		set(v1alpha1.ConditionProgressing, true, "RollingOut", podsMsg)
	} else {
		set(v1alpha1.ConditionProgressing, false, "Stable", podsMsg)
	}

	agents := setAgentConditions(cn, obs.agents)

	switch {
	case !rendered:
		set(v1alpha1.ConditionDegraded, true, "RenderFailed", "the desired configuration cannot be rendered")
	case applyFailed:
		set(v1alpha1.ConditionDegraded, true, "ApplyFailed", "see the Ready condition")
	case noNodes:
		set(v1alpha1.ConditionDegraded, true, "NoEligibleNodes", eligibleMsg)
	case agents.disksFailed:
		set(v1alpha1.ConditionDegraded, true, "DisksNotReady", "see the DisksReady condition")
	case agents.configRejected:
		set(v1alpha1.ConditionDegraded, true, "ConfigRejected", "see the ConfigApplied condition")
	case agents.overflowed:
		set(v1alpha1.ConditionDegraded, true, "QueueOverflow", "see the QueueOverflow condition")
	case !progressing && !isAvailable:
		set(v1alpha1.ConditionDegraded, true, "PodsUnavailable", podsMsg)
	default:
		set(v1alpha1.ConditionDegraded, false, "AsExpected", "")
	}

	// kstatus: Stalled (Failed) needs a change of spec or nodes; Reconciling (InProgress)
	// resolves by itself.
	switch {
	case !rendered:
		set(v1alpha1.ConditionStalled, true, "RenderFailed", "the spec cannot be rendered; see ConfigRendered")
	case applyFailed && obs.applyFinal:
		set(v1alpha1.ConditionStalled, true, "ApplyFailed", applyMsg)
	case noNodes:
		set(v1alpha1.ConditionStalled, true, "NoEligibleNodes", eligibleMsg)
	default:
		set(v1alpha1.ConditionStalled, false, "NotStalled", "")
	}
	switch {
	case applyFailed && !obs.applyFinal:
		set(v1alpha1.ConditionReconciling, true, "ApplyFailed", applyMsg+"; retrying")
	case rendered && !applyFailed && !noNodes && progressing:
		set(v1alpha1.ConditionReconciling, true, "RollingOut", podsMsg)
	default:
		set(v1alpha1.ConditionReconciling, false, "Reconciled", "")
	}

	switch {
	case !rendered:
		set(v1alpha1.ConditionReady, false, "RenderFailed", "see the ConfigRendered condition")
	case applyFailed:
		set(v1alpha1.ConditionReady, false, "ApplyFailed", applyMsg)
	case noNodes:
		set(v1alpha1.ConditionReady, false, "NoEligibleNodes", eligibleMsg)
	case !isAvailable:
		set(v1alpha1.ConditionReady, false, "PodsUnavailable", podsMsg)
	default:
		set(v1alpha1.ConditionReady, true, "Ready", podsMsg)
	}
}

// nameSome lists up to maxNamedNodes "node (reason)" entries in name order.
func nameSome(reasons map[string]string) string {
	names := make([]string, 0, len(reasons))
	for name := range reasons {
		names = append(names, name)
	}
	sort.Strings(names)
	var parts []string
	for i, name := range names {
		if i == maxNamedNodes {
			parts = append(parts, fmt.Sprintf("and %d more", len(names)-maxNamedNodes))
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", name, reasons[name]))
	}
	return strings.Join(parts, ", ")
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
}

// agentFindings are the bad news in the agents' reports, for the Degraded condition.
type agentFindings struct {
	disksFailed, configRejected, overflowed bool
}

// setAgentConditions turns the agents' reports into QueueOverflow, DisksReady and
// ConfigApplied. Agents that did not answer are named in the messages, not treated as
// failures; with no answer at all the conditions are Unknown.
func setAgentConditions(cn *v1alpha1.CacheNode, reports []agentReport) agentFindings {
	gen := cn.Generation
	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&cn.Status.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen,
		})
	}
	var answered []agentReport
	unreachable := map[string]string{}
	for _, r := range reports {
		if r.err != nil {
			unreachable[nodeOrPod(r)] = r.err.Error()
		} else {
			answered = append(answered, r)
		}
	}
	suffix := ""
	if len(unreachable) > 0 {
		suffix = "; no answer from " + nameSome(unreachable)
	}
	if len(answered) == 0 {
		msg := "no running cache pod to ask"
		if len(reports) > 0 {
			msg = "no cache pod's agent answered" + suffix
		}
		for _, t := range []string{v1alpha1.ConditionQueueOverflow, v1alpha1.ConditionDisksReady, v1alpha1.ConditionConfigApplied} {
			set(t, metav1.ConditionUnknown, "NoAgentReports", msg)
		}
		return agentFindings{}
	}

	var f agentFindings

	// QueueOverflow: the worst pools first.
	type overflow struct {
		node, pool string
		count      int64
	}
	var overflows []overflow
	window := 0
	for _, r := range answered {
		window = max(window, r.status.WindowSeconds)
		for _, o := range r.status.Overflows {
			overflows = append(overflows, overflow{nodeOrPod(r), o.Pool, o.Count})
		}
	}
	sort.Slice(overflows, func(i, j int) bool {
		if overflows[i].count != overflows[j].count {
			return overflows[i].count > overflows[j].count
		}
		return overflows[i].node+overflows[i].pool < overflows[j].node+overflows[j].pool
	})
	if len(overflows) > 0 {
		f.overflowed = true
		parts := make([]string, 0, maxNamedNodes+1)
		for i, o := range overflows {
			if i == maxNamedNodes {
				parts = append(parts, fmt.Sprintf("and %d more", len(overflows)-maxNamedNodes))
				break
			}
			parts = append(parts, fmt.Sprintf("%s %s: %d", o.node, o.pool, o.count))
		}
		set(v1alpha1.ConditionQueueOverflow, metav1.ConditionTrue, "QueueOverflow", fmt.Sprintf(
			"thread-pool queues overflowed in the last %ds (failed reads): %s; raise the disk's threadPool.threads above its cold concurrency, or maxQueue%s",
			window, strings.Join(parts, ", "), suffix))
	} else {
		set(v1alpha1.ConditionQueueOverflow, metav1.ConditionFalse, "NoOverflow", fmt.Sprintf(
			"no thread-pool queue overflowed in the last %ds on %s%s", window, nodes(len(answered)), suffix))
	}

	// DisksReady.
	badDisks := map[string]string{}
	for _, r := range answered {
		var bad []string
		for _, d := range r.status.Disks {
			if !d.Ready {
				bad = append(bad, d.Name+": "+d.Reason)
			}
		}
		if len(bad) > 0 {
			badDisks[nodeOrPod(r)] = strings.Join(bad, "; ")
		}
	}
	if len(badDisks) > 0 {
		f.disksFailed = true
		set(v1alpha1.ConditionDisksReady, metav1.ConditionFalse, "DiskCheckFailed", fmt.Sprintf(
			"%d of %s have disks that failed their checks (nginx is not started there): %s%s",
			len(badDisks), nodes(len(answered)), nameSome(badDisks), suffix))
	} else {
		set(v1alpha1.ConditionDisksReady, metav1.ConditionTrue, "DisksReady", fmt.Sprintf(
			"all disks passed their checks on %s%s", nodes(len(answered)), suffix))
	}

	// ConfigApplied: every pod runs the configuration the CacheNode's status names.
	behind := map[string]string{}
	for _, r := range answered {
		if r.status.ConfigHash == cn.Status.ConfigHash {
			continue
		}
		why := "runs " + short(r.status.ConfigHash)
		if r.status.ConfigHash == "" {
			why = "runs no configuration yet"
		}
		if r.status.ConfigError != "" {
			f.configRejected = true
			why += ", rejected the newest: " + r.status.ConfigError
		}
		behind[nodeOrPod(r)] = why
	}
	if len(behind) > 0 {
		set(v1alpha1.ConditionConfigApplied, metav1.ConditionFalse, "ConfigNotApplied", fmt.Sprintf(
			"configuration %s is running on %d of %s; %s%s",
			short(cn.Status.ConfigHash), len(answered)-len(behind), nodes(len(answered)), nameSome(behind), suffix))
	} else {
		set(v1alpha1.ConditionConfigApplied, metav1.ConditionTrue, "ConfigApplied", fmt.Sprintf(
			"configuration %s is running on %s%s", short(cn.Status.ConfigHash), nodes(len(answered)), suffix))
	}
	return f
}

// nodes says "1 node" or "n nodes".
func nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

func nodeOrPod(r agentReport) string {
	if r.node != "" {
		return r.node
	}
	return r.pod
}
