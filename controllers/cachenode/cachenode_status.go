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
	nodes      nodeEligibility
	daemonSet  *appsv1.DaemonSet // nil until it exists
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
	set := func(t string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: gen,
		})
	}

	rendered := obs.renderErr == nil
	if rendered {
		st.ConfigHash = obs.configHash
		set(v1alpha1.ConditionConfigRendered, true, "Rendered", "nginx.conf rendered, hash "+short(obs.configHash))
	} else {
		set(v1alpha1.ConditionConfigRendered, false, "RenderFailed", obs.renderErr.Error()+"; the last good configuration keeps serving")
	}

	n := obs.nodes
	st.SelectedNodes, st.EligibleNodes = n.selected, n.eligible
	eligibleMsg := fmt.Sprintf("%d of %d selected nodes have the required disks and tolerate their taints", n.eligible, n.selected)
	if len(n.ineligible) > 0 {
		eligibleMsg += "; not eligible: " + nameSome(n.ineligible)
	}
	if n.eligible > 0 {
		set(v1alpha1.ConditionNodesEligible, true, "NodesEligible", eligibleMsg)
	} else {
		set(v1alpha1.ConditionNodesEligible, false, "NoEligibleNodes", eligibleMsg)
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

	switch {
	case !rendered:
		set(v1alpha1.ConditionDegraded, true, "RenderFailed", "the desired configuration cannot be rendered")
	case n.eligible == 0:
		set(v1alpha1.ConditionDegraded, true, "NoEligibleNodes", eligibleMsg)
	case !progressing && !isAvailable:
		set(v1alpha1.ConditionDegraded, true, "PodsUnavailable", podsMsg)
	default:
		set(v1alpha1.ConditionDegraded, false, "AsExpected", "")
	}

	switch {
	case !rendered:
		set(v1alpha1.ConditionReady, false, "RenderFailed", "see the ConfigRendered condition")
	case n.eligible == 0:
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
