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
	"errors"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
)

func defaulted(cn *v1alpha1.CacheNode) *v1alpha1.CacheNode {
	cn.Spec.Default()
	return cn
}

func TestDiskRequirements(t *testing.T) {
	gt := func(media string, n string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: "disk.edgepool.io/" + media, Operator: corev1.NodeSelectorOpGt, Values: []string{n}}
	}
	nfd := corev1.NodeSelectorRequirement{Key: NFDNonRotationalLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}
	for _, tc := range []struct {
		name   string
		media  []v1alpha1.Media
		source v1alpha1.DiskLabelSource
		want   []corev1.NodeSelectorRequirement
	}{
		{"two NVMe and an HDD", []v1alpha1.Media{"HDD", "NVMe", "NVMe"}, "Edgepool", []corev1.NodeSelectorRequirement{gt("nvme", "1"), gt("hdd", "0")}},
		{"one SSD", []v1alpha1.Media{"SSD"}, "Edgepool", []corev1.NodeSelectorRequirement{gt("ssd", "0")}},
		{"four HDDs", []v1alpha1.Media{"HDD", "HDD", "HDD", "HDD"}, "Edgepool", []corev1.NodeSelectorRequirement{gt("hdd", "3")}},
		{"NFD with every media", []v1alpha1.Media{"NVMe", "SSD", "HDD"}, "NodeFeatureDiscovery", []corev1.NodeSelectorRequirement{nfd}},
		{"NFD with HDDs only", []v1alpha1.Media{"HDD"}, "NodeFeatureDiscovery", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &v1alpha1.CacheNodeSpec{Placement: v1alpha1.Placement{DiskLabels: tc.source}}
			for _, m := range tc.media {
				spec.Disks = append(spec.Disks, v1alpha1.Disk{Media: m})
			}
			NewWithT(t).Expect(diskRequirements(spec)).To(Equal(tc.want))
		})
	}
}

// TestDaemonSetDependsOnlyOnPodShape: configuration-only fields leave the DaemonSet as it
// is (nginx reloads), fields that shape the pod change it (pods roll).
func TestDaemonSetDependsOnlyOnPodShape(t *testing.T) {
	base := defaulted(newCacheNode("ns", "edge", "g"))
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.CacheNodeSpec)
		rolls  bool
	}{
		{"threads", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].ThreadPool.Threads = 200 }, false},
		{"weights", func(s *v1alpha1.CacheNodeSpec) { s.Disks[1].Weight = 50 }, false},
		{"cache validity", func(s *v1alpha1.CacheNodeSpec) { s.Cache.Valid = nil }, false},
		{"origin", func(s *v1alpha1.CacheNodeSpec) { s.Origin.Servers = []string{"10.0.0.1:80"} }, false},
		{"io mode", func(s *v1alpha1.CacheNodeSpec) { s.IO = v1alpha1.IOSync }, false},
		{"backlog", func(s *v1alpha1.CacheNodeSpec) { s.Listener.Backlog = 1024 }, false},
		{"a disk's path", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Path = "/mnt/other" }, true},
		{"a new disk", func(s *v1alpha1.CacheNodeSpec) {
			s.Disks = append(s.Disks, v1alpha1.Disk{Name: "x", Path: "/mnt/x", Media: "SSD"})
		}, true},
		{"port", func(s *v1alpha1.CacheNodeSpec) { s.Listener.Port = 9090 }, true},
		{"image", func(s *v1alpha1.CacheNodeSpec) { s.Image = "nginx:1.28" }, true},
		{"placement", func(s *v1alpha1.CacheNodeSpec) { s.NodeSelector = map[string]string{"a": "b"} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changed := base.DeepCopy()
			tc.mutate(&changed.Spec)
			same := equality.Semantic.DeepEqual(desiredDaemonSet(base), desiredDaemonSet(changed))
			if same == tc.rolls {
				t.Errorf("changing %s: DaemonSet changed = %v, want %v", tc.name, !same, tc.rolls)
			}
		})
	}
}

func TestDaemonSetSecurity(t *testing.T) {
	g := NewWithT(t)
	cn := defaulted(newCacheNode("ns", "edge", "g"))
	pod := desiredDaemonSet(cn).Spec.Template.Spec
	g.Expect(*pod.AutomountServiceAccountToken).To(BeFalse())
	g.Expect(*pod.SecurityContext.RunAsNonRoot).To(BeTrue())
	g.Expect(pod.SecurityContext.Sysctls).To(BeEmpty())
	c := pod.Containers[0]
	g.Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
	g.Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
	g.Expect(c.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
	g.Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "config", MountPath: ConfigDir, ReadOnly: true}))

	cn.Spec.Listener.Port = 80
	g.Expect(desiredDaemonSet(cn).Spec.Template.Spec.SecurityContext.Sysctls).To(ConsistOf(
		corev1.Sysctl{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}))
	cn.Spec.Listener.Port = 8080
	cn.Spec.HostNetwork = true
	g.Expect(desiredDaemonSet(cn).Spec.Template.Spec.DNSPolicy).To(Equal(corev1.DNSClusterFirstWithHostNet))
}

func TestEvaluateNodes(t *testing.T) {
	g := NewWithT(t)
	cn := defaulted(newCacheNode("ns", "edge", "g"))
	cn.Spec.Tolerations = []corev1.Toleration{{Key: "edge", Operator: corev1.TolerationOpExists}}
	node := func(name string, nvme, hdd string, taints ...corev1.Taint) corev1.Node {
		l := map[string]string{"edgepool.test/group": "g"}
		if nvme != "" {
			l["disk.edgepool.io/nvme"] = nvme
		}
		if hdd != "" {
			l["disk.edgepool.io/hdd"] = hdd
		}
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}, Spec: corev1.NodeSpec{Taints: taints}}
	}
	nodes := []corev1.Node{
		node("fits", "2", "1"),
		node("more-disks", "8", "12"),
		node("tolerated-taint", "2", "1", corev1.Taint{Key: "edge", Effect: corev1.TaintEffectNoSchedule}),
		node("cordoned", "2", "1", corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}),
		node("prefer-no-schedule", "2", "1", corev1.Taint{Key: "x", Effect: corev1.TaintEffectPreferNoSchedule}),
		node("one-nvme", "1", "1"),
		node("not-a-number", "two", "1"),
		node("no-labels", "", ""),
		node("untolerated", "2", "1", corev1.Taint{Key: "gpu", Value: "yes", Effect: corev1.TaintEffectNoExecute}),
		{ObjectMeta: metav1.ObjectMeta{Name: "unselected", Labels: map[string]string{"disk.edgepool.io/nvme": "4", "disk.edgepool.io/hdd": "4"}}},
	}
	got := evaluateNodes(cn, desiredDaemonSet(cn), nodes)
	g.Expect(got.selected).To(BeEquivalentTo(9))
	g.Expect(got.eligible).To(BeEquivalentTo(5))
	g.Expect(got.ineligible).To(Equal(map[string]string{
		"one-nvme":     "lacks disk.edgepool.io/nvme>=2",
		"not-a-number": "lacks disk.edgepool.io/nvme>=2",
		"no-labels":    "lacks disk.edgepool.io/nvme>=2, disk.edgepool.io/hdd>=1",
		"untolerated":  "taint gpu=yes:NoExecute not tolerated",
	}))
}

func TestSetStatus(t *testing.T) {
	eligible := nodeEligibility{selected: 2, eligible: 2}
	dsWith := func(desired, available, updated int32, current bool) *appsv1.DaemonSet {
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
		ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, NumberAvailable: available, UpdatedNumberScheduled: updated, NumberReady: available, CurrentNumberScheduled: desired, ObservedGeneration: 1}
		if current {
			ds.Status.ObservedGeneration = 2
		}
		return ds
	}
	for _, tc := range []struct {
		name string
		obs  observation
		want map[string]string // condition type -> "Status/Reason"
	}{
		{"ready", observation{configHash: "h", nodes: &eligible, daemonSet: dsWith(2, 2, 2, true)}, map[string]string{
			"Ready": "True/Ready", "ConfigRendered": "True/Rendered", "NodesEligible": "True/NodesEligible",
			"Available": "True/PodsAvailable", "Progressing": "False/Stable", "Degraded": "False/AsExpected",
			"Reconciling": "False/Reconciled", "Stalled": "False/NotStalled"}},
		{"rolling out", observation{configHash: "h", nodes: &eligible, daemonSet: dsWith(2, 2, 1, true)}, map[string]string{
			"Ready": "True/Ready", "Progressing": "True/RollingOut", "Degraded": "False/AsExpected", "Reconciling": "True/RollingOut"}},
		{"DaemonSet not yet observed", observation{configHash: "h", nodes: &eligible, daemonSet: dsWith(2, 2, 2, false)}, map[string]string{
			"Ready": "False/PodsUnavailable", "Available": "False/PodsUnavailable", "Progressing": "True/RollingOut"}},
		{"pods stuck unavailable", observation{configHash: "h", nodes: &eligible, daemonSet: dsWith(2, 1, 2, true)}, map[string]string{
			"Ready": "False/PodsUnavailable", "Progressing": "True/RollingOut"}},
		{"no eligible nodes", observation{configHash: "h", nodes: &nodeEligibility{selected: 3}, daemonSet: dsWith(0, 0, 0, true)}, map[string]string{
			"Ready": "False/NoEligibleNodes", "NodesEligible": "False/NoEligibleNodes", "Available": "False/NoPods", "Degraded": "True/NoEligibleNodes",
			"Stalled": "True/NoEligibleNodes", "Reconciling": "False/Reconciled"}},
		{"render failed", observation{renderErr: errors.New("spec.disks[0].size: too small"), nodes: &eligible, daemonSet: dsWith(2, 2, 2, true)}, map[string]string{
			"Ready": "False/RenderFailed", "ConfigRendered": "False/RenderFailed", "Degraded": "True/RenderFailed", "Stalled": "True/RenderFailed"}},
		{"apply refused", observation{configHash: "h", applyErr: errors.New(`DaemonSet "edge" is invalid`), applyFinal: true, nodes: &eligible, daemonSet: dsWith(2, 2, 2, true)}, map[string]string{
			"Ready": "False/ApplyFailed", "NodesEligible": "True/NodesEligible", "Degraded": "True/ApplyFailed",
			"Stalled": "True/ApplyFailed", "Reconciling": "False/Reconciled"}},
		{"apply failed, retrying", observation{configHash: "h", applyErr: errors.New("etcdserver: request timed out"), nodes: &eligible}, map[string]string{
			"Ready": "False/ApplyFailed", "Degraded": "True/ApplyFailed", "Stalled": "False/NotStalled", "Reconciling": "True/ApplyFailed"}},
		{"nodes not observed", observation{configHash: "h", daemonSet: dsWith(2, 2, 2, true)}, map[string]string{
			"NodesEligible": "Unknown/NotObserved", "Ready": "True/Ready", "Stalled": "False/NotStalled", "Degraded": "False/AsExpected"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cn := &v1alpha1.CacheNode{ObjectMeta: metav1.ObjectMeta{Generation: 4}}
			cn.Status.ConfigHash = "previous"
			setStatus(cn, tc.obs)
			for typ, want := range tc.want {
				c := condition(cn, typ)
				if got := string(c.Status) + "/" + c.Reason; got != want {
					t.Errorf("%s = %s, want %s (%s)", typ, got, want, c.Message)
				}
				if c.ObservedGeneration != 4 {
					t.Errorf("%s.observedGeneration = %d, want 4", typ, c.ObservedGeneration)
				}
			}
			if tc.obs.renderErr != nil && cn.Status.ConfigHash != "previous" {
				t.Errorf("a render failure replaced the hash of the served configuration")
			}
		})
	}
}

func TestNameSomeCapsTheList(t *testing.T) {
	reasons := map[string]string{}
	for _, n := range []string{"g", "f", "e", "d", "c", "b", "a"} {
		reasons[n] = "r"
	}
	NewWithT(t).Expect(nameSome(reasons)).To(Equal("a (r), b (r), c (r), d (r), e (r), and 2 more"))
}

func TestSetAgentConditions(t *testing.T) {
	const desired = "aaaaaaaaaaaaaaaa"
	healthy := func(node string) agentReport {
		return agentReport{pod: "p-" + node, node: node, status: &agentapi.Status{
			ConfigHash: desired, WindowSeconds: 300,
			Disks: []agentapi.DiskStatus{{Name: "nvme0", Ready: true}, {Name: "hdd0", Ready: true}},
		}}
	}
	with := func(r agentReport, change func(*agentapi.Status)) agentReport {
		change(r.status)
		return r
	}
	overflow := func(pools ...agentapi.PoolOverflow) func(*agentapi.Status) {
		return func(s *agentapi.Status) { s.Overflows = pools }
	}
	for _, tc := range []struct {
		name     string
		reports  []agentReport
		want     map[string]string // condition type -> "Status/Reason"
		messages map[string]string // condition type -> message substring
		findings agentFindings
	}{
		{"no pods", nil,
			map[string]string{"QueueOverflow": "Unknown/NoAgentReports", "DisksReady": "Unknown/NoAgentReports", "ConfigApplied": "Unknown/NoAgentReports"},
			map[string]string{"QueueOverflow": "no running cache pod"}, agentFindings{}},
		{"no agent answers", []agentReport{{pod: "p", node: "edge-1", err: errors.New("i/o timeout")}},
			map[string]string{"QueueOverflow": "Unknown/NoAgentReports"},
			map[string]string{"DisksReady": "no answer from edge-1 (i/o timeout)"}, agentFindings{}},
		{"healthy", []agentReport{healthy("edge-1"), healthy("edge-2")},
			map[string]string{"QueueOverflow": "False/NoOverflow", "DisksReady": "True/DisksReady", "ConfigApplied": "True/ConfigApplied"},
			map[string]string{"QueueOverflow": "in the last 300s on 2 nodes", "ConfigApplied": "configuration aaaaaaaaaaaa is running on 2 nodes"}, agentFindings{}},
		{"overflows, worst first", []agentReport{
			with(healthy("edge-1"), overflow(agentapi.PoolOverflow{Pool: "pool_nvme0", Count: 3})),
			with(healthy("edge-2"), overflow(agentapi.PoolOverflow{Pool: "pool_hdd0", Count: 120}, agentapi.PoolOverflow{Pool: "pool_nvme0", Count: 1})),
			{pod: "p3", node: "edge-3", err: errors.New("connection refused")},
		},
			map[string]string{"QueueOverflow": "True/QueueOverflow", "DisksReady": "True/DisksReady"},
			map[string]string{"QueueOverflow": "edge-2 pool_hdd0: 120, edge-1 pool_nvme0: 3, edge-2 pool_nvme0: 1; raise the disk's threadPool.threads above its cold concurrency, or maxQueue; no answer from edge-3 (connection refused)"},
			agentFindings{overflowed: true}},
		{"a disk failed", []agentReport{healthy("edge-1"), with(healthy("edge-2"), func(s *agentapi.Status) {
			s.Disks[1] = agentapi.DiskStatus{Name: "hdd0", Reason: "not a mount point"}
		})},
			map[string]string{"DisksReady": "False/DiskCheckFailed"},
			map[string]string{"DisksReady": "1 of 2 nodes have disks that failed their checks (nginx is not started there): edge-2 (hdd0: not a mount point)"},
			agentFindings{disksFailed: true}},
		{"configuration still propagating", []agentReport{healthy("edge-1"), with(healthy("edge-2"), func(s *agentapi.Status) { s.ConfigHash = "bbbbbbbbbbbbbbbb" })},
			map[string]string{"ConfigApplied": "False/ConfigNotApplied"},
			map[string]string{"ConfigApplied": "configuration aaaaaaaaaaaa is running on 1 of 2 nodes; edge-2 (runs bbbbbbbbbbbb)"},
			agentFindings{}},
		{"configuration rejected", []agentReport{with(healthy("edge-1"), func(s *agentapi.Status) {
			s.ConfigHash, s.ConfigError = "bbbbbbbbbbbbbbbb", "nginx -t: unknown directive"
		})},
			map[string]string{"ConfigApplied": "False/ConfigNotApplied"},
			map[string]string{"ConfigApplied": "rejected the newest: nginx -t: unknown directive"},
			agentFindings{configRejected: true}},
		{"many overflows are capped", func() []agentReport {
			var rs []agentReport
			for i := range 7 {
				rs = append(rs, with(healthy(fmt.Sprintf("edge-%d", i)), overflow(agentapi.PoolOverflow{Pool: "pool_hdd0", Count: int64(10 + i)})))
			}
			return rs
		}(),
			map[string]string{"QueueOverflow": "True/QueueOverflow"},
			map[string]string{"QueueOverflow": "edge-6 pool_hdd0: 16, edge-5 pool_hdd0: 15, edge-4 pool_hdd0: 14, edge-3 pool_hdd0: 13, edge-2 pool_hdd0: 12, and 2 more"},
			agentFindings{overflowed: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cn := &v1alpha1.CacheNode{}
			cn.Status.ConfigHash = desired
			got := setAgentConditions(cn, tc.reports)
			if got != tc.findings {
				t.Errorf("findings = %+v, want %+v", got, tc.findings)
			}
			for typ, want := range tc.want {
				c := condition(cn, typ)
				if s := string(c.Status) + "/" + c.Reason; s != want {
					t.Errorf("%s = %s, want %s (%s)", typ, s, want, c.Message)
				}
			}
			for typ, want := range tc.messages {
				if c := condition(cn, typ); !strings.Contains(c.Message, want) {
					t.Errorf("%s message %q lacks %q", typ, c.Message, want)
				}
			}
		})
	}
}

func TestAgentFindingsMakeDegraded(t *testing.T) {
	cn := &v1alpha1.CacheNode{}
	cn.Status.ConfigHash = "h"
	ds := &appsv1.DaemonSet{}
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: 1, NumberAvailable: 1, UpdatedNumberScheduled: 1, NumberReady: 1}
	setStatus(cn, observation{configHash: "h", nodes: &nodeEligibility{selected: 1, eligible: 1}, daemonSet: ds, agents: []agentReport{{
		node: "edge-1", status: &agentapi.Status{ConfigHash: "h", Overflows: []agentapi.PoolOverflow{{Pool: "pool_hdd0", Count: 2}}},
	}}})
	if c := condition(cn, "Degraded"); c.Status != metav1.ConditionTrue || c.Reason != "QueueOverflow" {
		t.Errorf("Degraded = %s/%s, want True/QueueOverflow", c.Status, c.Reason)
	}
	if c := condition(cn, "Ready"); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready = %s: overflows degrade a cache but it still serves", c.Status)
	}
}
