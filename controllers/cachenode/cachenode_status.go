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
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// Pure functions that turn what a reconcile observed into status.

// maxNamedNodes caps the node names a condition message lists.
const maxNamedNodes = 5

// observation is what one reconcile saw. What it could not observe stays unset, and the
// conditions that depend on it are Unknown: the status never says what was not seen.
type observation struct {
	renderErr  error
	configHash string
	// volumeHash is the applied ConfigMap's volumeHash, "" when it was not applied.
	volumeHash string
	// announceAfter is when to reconcile again to announce a purge list that was held
	// back (see announcements); zero when nothing waits.
	announceAfter time.Duration
	// ringAfter is when to reconcile again to render a sharded CacheNode's ring change that
	// was held back (see rings); zero when nothing waits.
	ringAfter time.Duration
	// conflict says which earlier CacheNode would share a disk path on a node with this
	// one: nothing is applied then.
	conflict string
	// applyErr is the API server's answer when applying the ConfigMap or DaemonSet failed;
	// applyFinal says it needs someone to act (the object is invalid, or its name taken).
	applyErr   error
	applyFinal bool
	// observeErr is why the nodes, pods or DaemonSet could not be read.
	observeErr error
	nodes      *nodeEligibility // nil when the nodes could not be listed
	// daemonSet is the live DaemonSet, nil when it does not exist (or is not ours);
	// daemonSetSeen is false when it could not be read.
	daemonSet     *appsv1.DaemonSet
	daemonSetSeen bool
	// agents holds one report per running cache pod; agentsSeen is false when the pods
	// could not be listed.
	agents     []agentReport
	agentsSeen bool
	// service is the live Service spec.service asks for, nil when it does not exist (or
	// is not ours); serviceSeen is false when it could not be read.
	service     *corev1.Service
	serviceSeen bool
	// ringMembers is the size of the ring rendered for a sharded CacheNode, nil when it
	// is not sharded or its pods could not be read.
	ringMembers *int32
	// ringPods names the pods at the ring's addresses (see ringPods).
	ringPods []string
	// troubles say why cache pods do not run (see podTroubles); troublesAfter is when to
	// read their warnings again, zero when no pod is pending.
	troubles      []podTrouble
	troublesAfter time.Duration
}

// nodeEligibility counts the nodes a CacheNode selects and those that can run its pods.
type nodeEligibility struct {
	selected, eligible int32
	// eligibleNames are the nodes that can run its pods.
	eligibleNames []string
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
		out.eligibleNames = append(out.eligibleNames, node.Name)
	}
	return out
}

// diskConflict names the first CacheNode that comes before cn (see comesBefore) and
// shares one of cn's disk paths (or one nested in it) on a node both can run on; mine
// are cn's eligible nodes. Two caches on one directory would corrupt each other: the
// later one yields. running says whether a CacheNode's DaemonSet exists. others is only
// read.
func diskConflict(cn *v1alpha1.CacheNode, mine *nodeEligibility, others []v1alpha1.CacheNode, nodes []corev1.Node,
	diskPrefixes []string, running func(*v1alpha1.CacheNode) bool) string {
	eligible := map[string]bool{}
	for _, name := range mine.eligibleNames {
		eligible[name] = true
	}
	// A conflict is on a node both run on: each other CacheNode is evaluated on cn's
	// eligible nodes only, so a reconcile costs cn's share of the fleet times the
	// CacheNodes sharing its paths, not every node times every CacheNode.
	var candidates []corev1.Node
	for i := range nodes {
		if eligible[nodes[i].Name] {
			candidates = append(candidates, nodes[i])
		}
	}
	if len(candidates) == 0 {
		return ""
	}
	// Only the CacheNodes sharing a path on nodes both may select are ordered: the order
	// reads each one's DaemonSet.
	var rivals []*v1alpha1.CacheNode
	for i := range others {
		o := &others[i]
		if (o.Namespace == cn.Namespace && o.Name == cn.Name) || !o.DeletionTimestamp.IsZero() ||
			len(sharedDiskPaths(cn, o)) == 0 || selectorsDisjoint(cn.Spec.NodeSelector, o.Spec.NodeSelector) {
			continue
		}
		rivals = append(rivals, o)
	}
	if len(rivals) == 0 {
		return ""
	}
	runs := map[types.NamespacedName]bool{}
	isRunning := func(c *v1alpha1.CacheNode) bool {
		key := types.NamespacedName{Namespace: c.Namespace, Name: c.Name}
		r, ok := runs[key]
		if !ok {
			r = running(c)
			runs[key] = r
		}
		return r
	}
	before := func(a, b *v1alpha1.CacheNode) bool { return comesBefore(a, b, isRunning) }
	sort.Slice(rivals, func(i, j int) bool { return before(rivals[i], rivals[j]) })
	for _, o := range rivals {
		if !before(o, cn) {
			continue
		}
		common := evaluateNodes(o, desiredDaemonSet(o, diskPrefixes, ""), candidates).eligibleNames
		if len(common) > 0 {
			return fmt.Sprintf("disk path %s is also used by %s, which came first, on %s; choose other paths, or nodes the two do not share",
				strings.Join(sharedDiskPaths(cn, o), ", "), visibleName(cn, o), nameList(common))
		}
	}
	return ""
}

// selectorsDisjoint reports whether no node can match both node selectors: they ask one
// label for two values. CacheNodes that split a fleet by region or tier never share a node,
// and need not be evaluated on any.
func selectorsDisjoint(a, b map[string]string) bool {
	for k, v := range a {
		if w, ok := b[k]; ok && w != v {
			return true
		}
	}
	return false
}

// comesBefore orders CacheNodes: one that runs (has its DaemonSet) before one that does
// not, then by creation (to the second), then by namespace and name.
func comesBefore(a, b *v1alpha1.CacheNode, running func(*v1alpha1.CacheNode) bool) bool {
	if ra, rb := running(a), running(b); ra != rb {
		return ra
	}
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
}

// sharedDiskPaths lists a's disk paths that equal, contain or lie in one of b's.
func sharedDiskPaths(a, b *v1alpha1.CacheNode) []string {
	var shared []string
	for _, da := range a.Spec.Disks {
		for _, db := range b.Spec.Disks {
			if nestedPath(da.Path, db.Path) || nestedPath(db.Path, da.Path) {
				shared = append(shared, da.Path)
				break
			}
		}
	}
	return shared
}

// nestedPath reports whether p is dir or lies inside it.
func nestedPath(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// nameList lists up to maxNamedNodes names, and how many more there are.
func nameList(names []string) string {
	sort.Strings(names)
	if len(names) <= maxNamedNodes {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:maxNamedNodes], ", "), len(names)-maxNamedNodes)
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

// setStatus computes the status of cn from an observation: first the counts and hash it
// observed, then each condition from its own setter. A condition whose status did not
// change keeps its last transition time.
func setStatus(cn *v1alpha1.CacheNode, obs observation) {
	st := &cn.Status
	st.Disks = int32(len(cn.Spec.Disks))
	if obs.renderErr == nil {
		st.ConfigHash = obs.configHash
	}
	if n := obs.nodes; n != nil {
		st.SelectedNodes, st.EligibleNodes = n.selected, n.eligible
	}
	if obs.daemonSetSeen {
		st.ScheduledNodes, st.ReadyNodes = 0, 0
		if ds := obs.daemonSet; ds != nil {
			st.ScheduledNodes, st.ReadyNodes = ds.Status.CurrentNumberScheduled, ds.Status.NumberReady
		}
	}
	if obs.serviceSeen {
		st.Service = serviceStatus(obs.service)
	}
	switch {
	case cn.Spec.Sharding == nil:
		st.Sharding = nil
	case obs.ringMembers != nil && obs.renderErr == nil:
		st.Sharding = &v1alpha1.ShardingStatus{Members: *obs.ringMembers, MemberPods: obs.ringPods}
	}
	for _, setter := range conditionSetters {
		c := setter(cn, obs)
		c.ObservedGeneration = cn.Generation
		c.Message = clip(c.Message, maxConditionMessage)
		meta.SetStatusCondition(&st.Conditions, c)
	}
}

// maxConditionMessage bounds what a condition says (the API allows 32768 characters; the
// sixteen conditions together must fit in a status a person reads and etcd takes): what
// the operator echoes of a spec, a kubelet or an agent never keeps the status from being
// written.
const maxConditionMessage = 4096

// turnedBad returns the condition typ of after when it is False and was not, or was for
// another reason, in before: what deserves a Warning event once, not at every reconcile.
func turnedBad(before, after []metav1.Condition, typ string) (metav1.Condition, bool) {
	now := meta.FindStatusCondition(after, typ)
	if now == nil || now.Status != metav1.ConditionFalse {
		return metav1.Condition{}, false
	}
	was := meta.FindStatusCondition(before, typ)
	return *now, was == nil || was.Status != metav1.ConditionFalse || was.Reason != now.Reason
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

// clip cuts s to at most n bytes, at a character's boundary, and says it was cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12]
	}
	return hash
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

// visibleName names another CacheNode to the readers of cn's status, who may see cn's
// namespace and no other: by name in the same namespace, else only as another namespace's.
func visibleName(cn, other *v1alpha1.CacheNode) string {
	if other.Namespace == cn.Namespace {
		return "CacheNode " + other.Name
	}
	return "a CacheNode of another namespace (the cluster admin can tell which)"
}
