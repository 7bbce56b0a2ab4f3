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
	"time"
	"unicode/utf8"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
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
			same := equality.Semantic.DeepEqual(desiredDaemonSet(base, render.DefaultDiskPrefixes, DefaultCacheImage), desiredDaemonSet(changed, render.DefaultDiskPrefixes, DefaultCacheImage))
			if same == tc.rolls {
				t.Errorf("changing %s: DaemonSet changed = %v, want %v", tc.name, !same, tc.rolls)
			}
		})
	}
}

func TestDaemonSetSecurity(t *testing.T) {
	g := NewWithT(t)
	cn := defaulted(newCacheNode("ns", "edge", "g"))
	pod := desiredDaemonSet(cn, render.DefaultDiskPrefixes, DefaultCacheImage).Spec.Template.Spec
	g.Expect(*pod.AutomountServiceAccountToken).To(BeFalse())
	g.Expect(*pod.SecurityContext.RunAsNonRoot).To(BeTrue())
	g.Expect(pod.SecurityContext.Sysctls).To(BeEmpty())
	c := pod.Containers[0]
	g.Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
	g.Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
	g.Expect(c.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
	g.Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "config", MountPath: ConfigDir, ReadOnly: true}))
	// The root init step checks the agent's allowlist.
	adopt := pod.InitContainers[0]
	g.Expect(adopt.Args).To(ContainElement("--allowed-disk-prefixes=/mnt"))
	prepared := cn.DeepCopy()
	prepared.Spec.DiskAdoption = v1alpha1.DiskAdoptionPrepared
	g.Expect(desiredDaemonSet(prepared, render.DefaultDiskPrefixes, DefaultCacheImage).Spec.Template.Spec.InitContainers).To(BeEmpty(),
		"disks prepared for the cache user: nothing in the pod runs as root")

	unprivilegedPorts := ConsistOf(corev1.Sysctl{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"})
	cn.Spec.Listener.Port = 80
	g.Expect(desiredDaemonSet(cn, render.DefaultDiskPrefixes, DefaultCacheImage).Spec.Template.Spec.SecurityContext.Sysctls).To(unprivilegedPorts)
	cn.Spec.Listener.Port = 8080
	// Any port nginx binds: the TLS one (a site has TLS), the peers', the status port.
	tls := cn.DeepCopy()
	tls.Spec.Listener.TLSPort = 443
	tls.Spec.Sites = []v1alpha1.Site{{Name: "shop", Hostnames: []string{"shop.example"}, TLS: &v1alpha1.SiteTLS{SecretName: "shop-tls"}}}
	g.Expect(desiredDaemonSet(tls, render.DefaultDiskPrefixes, DefaultCacheImage).Spec.Template.Spec.SecurityContext.Sysctls).To(unprivilegedPorts)
	tls.Spec.Sites[0].TLS = nil // no site listens on tlsPort
	g.Expect(desiredDaemonSet(tls, render.DefaultDiskPrefixes, DefaultCacheImage).Spec.Template.Spec.SecurityContext.Sysctls).To(BeEmpty())
	peers := cn.DeepCopy()
	peers.Spec.Sharding = &v1alpha1.Sharding{PeerPort: 900}
	g.Expect(desiredDaemonSet(peers, render.DefaultDiskPrefixes, DefaultCacheImage).Spec.Template.Spec.SecurityContext.Sysctls).To(unprivilegedPorts)
	status := cn.DeepCopy()
	status.Spec.Listener.StatusPort = 999
	g.Expect(desiredDaemonSet(status, render.DefaultDiskPrefixes, DefaultCacheImage).Spec.Template.Spec.SecurityContext.Sysctls).To(unprivilegedPorts)
	g.Expect(c.Args).NotTo(ContainElement(HavePrefix("--listen-ip")))
	cn.Spec.HostNetwork = true
	pod = desiredDaemonSet(cn, render.DefaultDiskPrefixes, DefaultCacheImage).Spec.Template.Spec
	g.Expect(pod.DNSPolicy).To(Equal(corev1.DNSClusterFirstWithHostNet))
	// In the node's network namespace the agent port listens on the node's address only.
	g.Expect(pod.Containers[0].Args).To(ContainElement("--listen-ip=$(POD_IP)"))
	g.Expect(pod.Containers[0].Env).To(ContainElement(HaveField("ValueFrom.FieldRef.FieldPath", "status.podIP")))
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
	got := evaluateNodes(cn, desiredDaemonSet(cn, render.DefaultDiskPrefixes, DefaultCacheImage), nodes)
	g.Expect(got.selected).To(BeEquivalentTo(9))
	g.Expect(got.eligible).To(BeEquivalentTo(5))
	g.Expect(got.ineligible).To(Equal(map[string]string{
		"one-nvme":     "lacks disk.edgepool.io/nvme>=2",
		"not-a-number": "lacks disk.edgepool.io/nvme>=2",
		"no-labels":    "lacks disk.edgepool.io/nvme>=2, disk.edgepool.io/hdd>=1",
		"untolerated":  "taint gpu=yes:NoExecute not tolerated",
	}))
}

// Observations for the condition tables: healthy() is all seen and all well; each case
// changes one input.
const servedHash = "aaaaaaaaaaaaaaaa"

func dsWith(desired, available, updated int32, current bool) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, NumberAvailable: available, UpdatedNumberScheduled: updated,
		NumberReady: available, CurrentNumberScheduled: desired, ObservedGeneration: 1}
	if current {
		ds.Status.ObservedGeneration = 2
	}
	return ds
}

func agentOn(node string) agentReport {
	return agentReport{pod: "p-" + node, node: node, status: &agentapi.Status{
		ConfigHash: servedHash, WindowSeconds: 300,
		Disks: []agentapi.DiskStatus{{Name: "nvme0", Ready: true}, {Name: "hdd0", Ready: true}},
	}}
}

func healthy(change ...func(*observation)) observation {
	obs := observation{
		configHash: servedHash, nodes: &nodeEligibility{selected: 2, eligible: 2},
		daemonSet: dsWith(2, 2, 2, true), daemonSetSeen: true,
		agents: []agentReport{agentOn("edge-1"), agentOn("edge-2")}, agentsSeen: true,
	}
	for _, c := range change {
		c(&obs)
	}
	return obs
}

var (
	renderFailed    = func(o *observation) { o.renderErr = errors.New("spec.disks[0].size: too small") }
	applyRefused    = func(o *observation) { o.applyErr, o.applyFinal = errors.New(`DaemonSet "edge" is invalid`), true }
	applyTimedOut   = func(o *observation) { o.applyErr = errors.New("etcdserver: request timed out") }
	noEligible      = func(o *observation) { o.nodes = &nodeEligibility{selected: 3} }
	nodesUnseen     = func(o *observation) { o.nodes, o.observeErr = nil, errors.New("list Nodes: timeout") }
	daemonSetUnseen = func(o *observation) {
		o.daemonSet, o.daemonSetSeen, o.observeErr = nil, false, errors.New("get DaemonSet: timeout")
	}
	noDaemonSet  = func(o *observation) { o.daemonSet = nil }
	rollingOut   = func(o *observation) { o.daemonSet = dsWith(2, 2, 1, true) }
	dsNotCurrent = func(o *observation) { o.daemonSet = dsWith(2, 2, 2, false) }
	stuck        = func(o *observation) { o.daemonSet = dsWith(2, 1, 2, true) }
	podsUnseen   = func(o *observation) {
		o.agents, o.agentsSeen, o.observeErr = nil, false, errors.New("list Pods: timeout")
	}
	noPods      = func(o *observation) { o.agents = nil }
	agentSilent = func(o *observation) {
		o.agents[1] = agentReport{pod: "p-edge-2", node: "edge-2", err: errors.New("i/o timeout")}
	}
	agentsSilent = func(o *observation) { agentSilent(o); o.agents = o.agents[1:] }
	agent2       = func(change func(*agentapi.Status)) func(*observation) {
		return func(o *observation) { change(o.agents[1].status) }
	}
	// diskFailed: a disk failed its checks before nginx started, which keeps nginx stopped.
	diskFailed = agent2(func(s *agentapi.Status) {
		s.ConfigHash, s.Disks[1] = "", agentapi.DiskStatus{Name: "hdd0", Reason: "not a mount point"}
	})
	// diskFailing: a check of a disk nginx runs on failed, not (yet) enough to take it out.
	diskFailing = agent2(func(s *agentapi.Status) {
		s.Disks[1] = agentapi.DiskStatus{Name: "hdd0", Reason: "I/O probe failed: EIO"}
	})
	// diskOut: the agent took a failing disk out of its node's split.
	diskOut = agent2(func(s *agentapi.Status) {
		s.Disks[1] = agentapi.DiskStatus{Name: "hdd0", Reason: "I/O probe failed: EIO", Out: true,
			OutReason: "5 I/O errors in 10s, the last: pread() failed (5: Input/output error)", CooldownSeconds: 60}
	})
	allOut = agent2(func(s *agentapi.Status) {
		s.Disks[0] = agentapi.DiskStatus{Name: "nvme0", Out: true, OutReason: "read-only: EROFS"}
		s.Disks[1] = agentapi.DiskStatus{Name: "hdd0", Out: true, OutReason: "5 I/O errors in 10s, the last: pread() failed (5: Input/output error)"}
	})
	diskElsewhere = func(o *observation) {
		o.agents[0].status.Disks[0] = agentapi.DiskStatus{Name: "nvme0", Out: true, OtherFilesystem: true, OutReason: "not a mount point",
			Reason: "another filesystem is mounted at /mnt/nvme0 (device 7:3, nginx started on 7:1): not written to; out until the filesystem nginx started on is back or the pod restarts"}
	}
	configBehind  = agent2(func(s *agentapi.Status) { s.ConfigHash = "bbbbbbbbbbbbbbbb" })
	configRefused = agent2(func(s *agentapi.Status) {
		s.ConfigHash, s.ConfigError = "bbbbbbbbbbbbbbbb", "nginx -t: unknown directive"
	})
	podFailing = func(o *observation) {
		o.daemonSet = dsWith(2, 1, 2, true)
		o.troubles = []podTrouble{{node: "edge-2", pod: "edge-x7k2p", why: "FailedMount: hostPath type check failed"}}
	}
	overflowed = func(o *observation) {
		o.agents[0].status.Overflows = []agentapi.PoolOverflow{{Pool: "pool_nvme0", Count: 3}}
		o.agents[1].status.Overflows = []agentapi.PoolOverflow{{Pool: "pool_hdd0", Count: 120}, {Pool: "pool_nvme0", Count: 1}}
	}
)

// setterCase is one row of a condition's table: want is "Status/Reason", msg a substring
// of the message.
type setterCase struct {
	name      string
	obs       observation
	want, msg string
}

func testSetter(t *testing.T, setter func(*v1alpha1.CacheNode, observation) metav1.Condition, cases []setterCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cn := &v1alpha1.CacheNode{}
			cn.Status.ConfigHash = servedHash
			c := setter(cn, tc.obs)
			if got := string(c.Status) + "/" + c.Reason; got != tc.want {
				t.Errorf("%s = %s, want %s (%s)", c.Type, got, tc.want, c.Message)
			}
			if !strings.Contains(c.Message, tc.msg) {
				t.Errorf("%s message %q lacks %q", c.Type, c.Message, tc.msg)
			}
		})
	}
}

func TestConfigRenderedCondition(t *testing.T) {
	testSetter(t, configRenderedCondition, []setterCase{
		{"rendered", healthy(), "True/Rendered", "hash aaaaaaaaaaaa"},
		{"render failed", healthy(renderFailed), "False/RenderFailed", "too small; the last good configuration keeps serving"},
	})
}

func TestNodesEligibleCondition(t *testing.T) {
	testSetter(t, nodesEligibleCondition, []setterCase{
		{"eligible", healthy(), "True/NodesEligible", "2 of 2 selected nodes"},
		{"none eligible", healthy(noEligible), "False/NoEligibleNodes", "0 of 3 selected nodes"},
		{"nodes not listed", healthy(nodesUnseen), "Unknown/NotObserved", "list Nodes: timeout"},
		{"apply failed: the nodes are still seen", healthy(applyRefused), "True/NodesEligible", ""},
	})
}

func TestAvailableCondition(t *testing.T) {
	testSetter(t, availableCondition, []setterCase{
		{"all available", healthy(), "True/PodsAvailable", "2 of 2 cache pods available"},
		{"DaemonSet status not current", healthy(dsNotCurrent), "False/PodsUnavailable", ""},
		{"pods stuck", healthy(stuck), "False/PodsUnavailable", "1 of 2"},
		{"no DaemonSet", healthy(noDaemonSet), "False/NoPods", ""},
		{"DaemonSet not read", healthy(daemonSetUnseen), "Unknown/NotObserved", "get DaemonSet: timeout"},
	})
}

func TestProgressingCondition(t *testing.T) {
	testSetter(t, progressingCondition, []setterCase{
		{"stable", healthy(), "False/Stable", ""},
		{"rolling out", healthy(rollingOut), "True/RollingOut", "1 updated"},
		{"DaemonSet status not current", healthy(dsNotCurrent), "True/RollingOut", ""},
		{"no DaemonSet yet", healthy(noDaemonSet), "True/RollingOut", ""},
		{"DaemonSet not read", healthy(daemonSetUnseen), "Unknown/NotObserved", ""},
	})
}

func TestDegradedCondition(t *testing.T) {
	testSetter(t, degradedCondition, []setterCase{
		{"healthy", healthy(), "False/AsExpected", ""},
		{"render failed", healthy(renderFailed), "True/RenderFailed", "too small"},
		{"apply refused", healthy(applyRefused), "True/ApplyFailed", "is invalid"},
		{"apply failed", healthy(applyTimedOut), "True/ApplyFailed", "timed out"},
		{"no eligible nodes", healthy(noEligible), "True/NoEligibleNodes", "0 of 3"},
		{"a disk failed", healthy(diskFailed), "True/DisksNotReady", "DisksReady"},
		{"a disk failing, still in the split", healthy(diskFailing), "True/DisksNotReady", "DisksReady"},
		{"a disk out of the split", healthy(diskOut), "True/DisksOut",
			"disks taken out of their node's split, served from the origin into the other disks: edge-2 (hdd0); see the DisksReady condition"},
		{"every disk of a node out", healthy(allOut), "True/DisksOut", "edge-2 (every disk: nvme0, hdd0)"},
		{"disks out on two nodes", healthy(diskOut, diskElsewhere), "True/DisksOut", "edge-1 (nvme0), edge-2 (hdd0)"},
		{"a failover not applied", healthy(diskOut, agent2(func(s *agentapi.Status) { s.FailoverError = "nginx -t: failed" })), "True/DisksNotReady", ""},
		{"disks not ready over disks out", healthy(diskOut, func(o *observation) {
			o.agents[0].status.Disks[0] = agentapi.DiskStatus{Name: "nvme0", Reason: "I/O probe failed"}
		}), "True/DisksNotReady", ""},
		{"configuration rejected", healthy(configRefused), "True/ConfigRejected", "ConfigApplied"},
		{"configuration still propagating", healthy(configBehind), "False/AsExpected", ""},
		{"queues overflowed", healthy(overflowed), "True/QueueOverflow", "QueueOverflow"},
		{"a certificate not serving", healthy(certs(1, cert("shop-tls", agentapi.CertificateExpired, ""))), "True/CertificatesNotReady", "CertificatesReady"},
		{"no pods though nodes are eligible", healthy(func(o *observation) { o.daemonSet = dsWith(0, 0, 0, true) }), "True/PodsUnavailable", "0 of 0"},
		{"pods not yet available: rolling out", healthy(stuck), "False/AsExpected", ""},
		{"a pod failing", healthy(podFailing), "True/PodsFailing", "cache pods do not run: edge-2 (pod edge-x7k2p: FailedMount: hostPath type check failed)"},
		{"a pod failing over a disk's news", healthy(podFailing, diskOut), "True/PodsFailing", ""},
		{"DaemonSet not read", healthy(daemonSetUnseen), "Unknown/NotObserved", ""},
		{"the worst first: render over disks", healthy(renderFailed, diskFailed), "True/RenderFailed", ""},
	})
}

func TestStalledCondition(t *testing.T) {
	testSetter(t, stalledCondition, []setterCase{
		{"healthy", healthy(), "False/NotStalled", ""},
		{"render failed", healthy(renderFailed), "True/RenderFailed", "too small"},
		{"apply refused", healthy(applyRefused), "True/ApplyFailed", `DaemonSet "edge" is invalid`},
		{"apply failed, retrying", healthy(applyTimedOut), "False/NotStalled", ""},
		{"no eligible nodes", healthy(noEligible), "True/NoEligibleNodes", "0 of 3"},
		{"nodes not listed", healthy(nodesUnseen), "False/NotStalled", ""},
	})
}

func TestReconcilingCondition(t *testing.T) {
	testSetter(t, reconcilingCondition, []setterCase{
		{"healthy", healthy(), "False/Reconciled", ""},
		{"rolling out", healthy(rollingOut), "True/RollingOut", ""},
		{"apply failed, retrying", healthy(applyTimedOut), "True/ApplyFailed", "timed out; retrying"},
		{"apply refused", healthy(applyRefused), "False/Reconciled", ""},
		{"no eligible nodes", healthy(noEligible, noDaemonSet), "False/Reconciled", ""},
		{"reads failed", healthy(nodesUnseen), "True/ObserveFailed", "list Nodes: timeout; retrying"},
	})
}

func TestReadyCondition(t *testing.T) {
	testSetter(t, readyCondition, []setterCase{
		{"healthy", healthy(), "True/Ready", "2 of 2"},
		{"rolling out, all available", healthy(rollingOut), "True/Ready", ""},
		{"render failed", healthy(renderFailed), "False/RenderFailed", "too small"},
		{"apply refused", healthy(applyRefused), "False/ApplyFailed", `DaemonSet "edge" is invalid`},
		{"no eligible nodes", healthy(noEligible), "False/NoEligibleNodes", "0 of 3"},
		{"pods stuck", healthy(stuck), "False/PodsUnavailable", "1 of 2"},
		{"a pod failing", healthy(podFailing), "False/PodsFailing", "1 of 2 cache pods available, 2 updated; not running: edge-2 (pod edge-x7k2p: FailedMount"},
		{"a disk keeps nginx from starting, the pods last counted available", healthy(diskFailed), "False/DisksNotReady",
			"2 of 2 cache pods available, 2 updated; not serving because of their disks: edge-2 (hdd0: not a mount point); see the DisksReady condition"},
		{"every disk out", healthy(allOut), "False/DisksNotReady", "edge-2 (every disk out: nvme0: read-only: EROFS; hdd0: 5 I/O errors"},
		{"a failover not applied", healthy(diskOut, agent2(func(s *agentapi.Status) { s.FailoverError = "nginx -t: failed" })), "False/DisksNotReady",
			"edge-2 (failover not applied: hdd0: nginx -t: failed)"},
		{"a disk out, the others serve", healthy(diskOut), "True/Ready", ""},
		{"a disk failing, still in the split", healthy(diskFailing), "True/Ready", ""},
		{"DaemonSet status not current", healthy(dsNotCurrent), "False/PodsUnavailable", ""},
		{"DaemonSet not read", healthy(daemonSetUnseen), "Unknown/NotObserved", ""},
		{"nodes not listed", healthy(nodesUnseen), "True/Ready", ""},
		{"queues overflowed: degraded, still serving", healthy(overflowed), "True/Ready", ""},
	})
}

func TestQueueOverflowCondition(t *testing.T) {
	testSetter(t, queueOverflowCondition, []setterCase{
		{"healthy", healthy(), "False/NoOverflow", "in the last 300s on 2 nodes"},
		{"overflows, worst first", healthy(overflowed, func(o *observation) {
			o.agents = append(o.agents, agentReport{node: "edge-3", err: errors.New("connection refused")})
		}),
			"True/QueueOverflow", "edge-2 pool_hdd0: 120, edge-1 pool_nvme0: 3, edge-2 pool_nvme0: 1; raise the disk's threadPool.threads above its cold concurrency, or maxQueue; no answer from edge-3 (connection refused)"},
		{"many overflows are capped", func() observation {
			obs := healthy(noPods)
			for i := range 7 {
				r := agentOn(fmt.Sprintf("edge-%d", i))
				r.status.Overflows = []agentapi.PoolOverflow{{Pool: "pool_hdd0", Count: int64(10 + i)}}
				obs.agents = append(obs.agents, r)
			}
			return obs
		}(), "True/QueueOverflow", "edge-6 pool_hdd0: 16, edge-5 pool_hdd0: 15, edge-4 pool_hdd0: 14, edge-3 pool_hdd0: 13, edge-2 pool_hdd0: 12, and 2 more"},
		{"one agent silent", healthy(agentSilent), "False/NoOverflow", "on 1 node; no answer from edge-2 (i/o timeout)"},
		{"no agent answers", healthy(agentsSilent), "Unknown/NoAgentReports", "no cache pod's agent answered; no answer from edge-2 (i/o timeout)"},
		{"no pods", healthy(noPods), "Unknown/NoAgentReports", "no running cache pod to ask"},
		{"pods not listed", healthy(podsUnseen), "Unknown/NotObserved", "list Pods: timeout"},
	})
}

func TestDisksReadyCondition(t *testing.T) {
	testSetter(t, disksReadyCondition, []setterCase{
		{"healthy", healthy(), "True/DisksReady", "all disks passed their checks on 2 nodes"},
		{"a disk failed", healthy(diskFailed), "False/DiskCheckFailed",
			"1 of 2 nodes have disks that failed their checks (nginx is not started there): edge-2 (hdd0: not a mount point)"},
		{"a disk failing, still in the split", healthy(diskFailing), "False/DiskCheckFailed",
			"1 of 2 nodes have disks failing their checks, still in the split: edge-2 (hdd0: I/O probe failed: EIO)"},
		{"a disk out of the split", healthy(diskOut), "False/DisksOut",
			"1 of 2 nodes took disks out of their split (their keys go to the node's other disks): edge-2 (hdd0: 5 I/O errors in 10s, the last: pread() failed (5: Input/output error))"},
		{"every disk of a node out", healthy(allOut), "False/AllDisksOut",
			"1 of 2 nodes took every disk out of their split (they do not serve, their pods are unready): edge-2 (nvme0: read-only: EROFS; hdd0: 5 I/O errors"},
		{"a failover that could not be applied", healthy(diskOut, agent2(func(s *agentapi.Status) {
			s.FailoverError = "disk hdd0: /mnt/hdd0/cache is gone (the disk is not mounted?)"
		})), "False/FailoverFailed", "1 of 2 nodes could not take failing disks out of their split (nginx still sends them keys, the pods are unready): " +
			"edge-2 (hdd0: disk hdd0: /mnt/hdd0/cache is gone (the disk is not mounted?)); 1 of 2 nodes took disks out of their split"},
		{"a disk back as another filesystem", healthy(diskElsewhere), "False/DisksOut",
			"edge-1 (nvme0: another filesystem is mounted at /mnt/nvme0 (device 7:3, nginx started on 7:1): not written to; out until the filesystem nginx started on is back or the pod restarts)"},
		{"out and failing on two nodes", healthy(diskOut, func(o *observation) {
			o.agents[0].status.Disks[1] = agentapi.DiskStatus{Name: "hdd0", Reason: "I/O probe failed"}
		}), "False/DisksOut", "took disks out of their split (their keys go to the node's other disks): edge-2 (hdd0: 5 I/O errors in 10s, the last: pread() failed (5: Input/output error)); 1 of 2 nodes have disks failing their checks, still in the split: edge-1 (hdd0: I/O probe failed)"},
		{"no agent answers", healthy(agentsSilent), "Unknown/NoAgentReports", ""},
		{"pods not listed", healthy(podsUnseen), "Unknown/NotObserved", ""},
	})
}

// certs sets the certificates node reports.
func certs(node int, c ...agentapi.CertificateStatus) func(*observation) {
	return func(o *observation) { o.agents[node].status.Certificates = c }
}

func cert(secret string, state agentapi.CertificateState, msg string) agentapi.CertificateStatus {
	return agentapi.CertificateStatus{Site: strings.TrimSuffix(secret, "-tls"), SecretName: secret, State: state, Message: msg}
}

func TestCertificatesReadyCondition(t *testing.T) {
	serving := cert("shop-tls", agentapi.CertificateServing, "")
	missing := cert("shop-tls", agentapi.CertificateMissing, "Secret shop-tls is missing or empty; serving the last good certificate")
	badKey := cert("blog-tls", agentapi.CertificateInvalid,
		"Secret blog-tls: tls.key does not go with the certificate: tls: private key does not match public key; serving the last good certificate")
	placeholder := cert("blog-tls", agentapi.CertificatePlaceholder, "Secret blog-tls is missing or empty; serving a self-signed placeholder")
	testSetter(t, certificatesReadyCondition, []setterCase{
		{"no site has TLS", healthy(), "True/NoCertificates", "no site has TLS"},
		{"no site has TLS, no agent answers", healthy(agentsSilent), "True/NoCertificates", "no site has TLS"},
	})
	withTLS := func(cn *v1alpha1.CacheNode, obs observation) metav1.Condition {
		cn.Spec.Sites = []v1alpha1.Site{{Name: "plain"}, {Name: "shop", TLS: &v1alpha1.SiteTLS{SecretName: "shop-tls"}}}
		return certificatesReadyCondition(cn, obs)
	}
	notStarted := func(o *observation) {
		for _, r := range o.agents {
			r.status.ConfigHash = ""
		}
	}
	testSetter(t, withTLS, []setterCase{
		{"nginx runs on no node", healthy(notStarted), "Unknown/NoAgentReports", "nginx runs on none of the 2 nodes that answered, so no certificate is served yet"},
		{"nginx runs on one node", healthy(certs(0, serving), agent2(func(s *agentapi.Status) { s.ConfigHash = "" })), "True/CertificatesServing", "serve on 1 node"},
		{"serving", healthy(certs(0, serving), certs(1, serving)), "True/CertificatesServing", "the certificates of 1 Secret(s) serve on 2 nodes"},
		{"missing on both nodes", healthy(certs(0, missing), certs(1, missing)), "False/CertificateMissing",
			"Secret shop-tls: Missing on 2 nodes (edge-1, edge-2); serving the last good certificate"},
		{"the worst first", healthy(certs(0, missing, badKey), certs(1, serving, placeholder)), "False/CertificatePlaceholder",
			"Secret blog-tls: Placeholder on 1 node (edge-2); serving a self-signed placeholder (no good certificate seen since the pod started; a Secret created since reaches the pod at its kubelet's next sync, within about 90 s: the operator does not read Secrets to announce it) (edge-2: Secret blog-tls is missing or empty; serving a self-signed placeholder); " +
				"Secret shop-tls: Missing on 1 node (edge-1); serving the last good certificate; " +
				"Secret blog-tls: Invalid on 1 node (edge-1); serving the last good certificate (edge-1: tls.key does not go with the certificate: tls: private key does not match public key)"},
		{"one agent silent", healthy(certs(0, serving), agentSilent), "True/CertificatesServing", "on 1 node; no answer from edge-2"},
		{"no agent answers", healthy(agentsSilent), "Unknown/NoAgentReports", ""},
		{"pods not listed", healthy(podsUnseen), "Unknown/NotObserved", ""},
	})
}

func TestTurnedBad(t *testing.T) {
	g := NewWithT(t)
	c := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: v1alpha1.ConditionCertificatesReady, Status: status, Reason: reason}}
	}
	for _, tc := range []struct {
		before, after []metav1.Condition
		want          bool
	}{
		{nil, c(metav1.ConditionFalse, "CertificateMissing"), true},
		{c(metav1.ConditionTrue, "CertificatesServing"), c(metav1.ConditionFalse, "CertificateMissing"), true},
		{c(metav1.ConditionUnknown, "NoAgentReports"), c(metav1.ConditionFalse, "CertificateMissing"), true},
		{c(metav1.ConditionFalse, "CertificateMissing"), c(metav1.ConditionFalse, "CertificateMissing"), false},
		{c(metav1.ConditionFalse, "CertificateMissing"), c(metav1.ConditionFalse, "CertificateExpired"), true},
		{c(metav1.ConditionFalse, "CertificateMissing"), c(metav1.ConditionTrue, "CertificatesServing"), false},
	} {
		_, bad := turnedBad(tc.before, tc.after, v1alpha1.ConditionCertificatesReady)
		g.Expect(bad).To(Equal(tc.want), "%v -> %v", tc.before, tc.after)
	}
}

func TestConfigAppliedCondition(t *testing.T) {
	testSetter(t, configAppliedCondition, []setterCase{
		{"healthy", healthy(), "True/ConfigApplied", "configuration aaaaaaaaaaaa is running on 2 nodes"},
		{"still propagating", healthy(configBehind), "False/ConfigNotApplied", "configuration aaaaaaaaaaaa is running on 1 of 2 nodes; edge-2 (runs bbbbbbbbbbbb)"},
		{"rejected", healthy(configRefused), "False/ConfigNotApplied", "rejected the newest: nginx -t: unknown directive"},
		{"no configuration yet", healthy(agent2(func(s *agentapi.Status) { s.ConfigHash = "" })), "False/ConfigNotApplied", "runs no configuration yet"},
		{"no agent answers", healthy(agentsSilent), "Unknown/NoAgentReports", ""},
		{"pods not listed", healthy(podsUnseen), "Unknown/NotObserved", ""},
	})
}

// A message that echoes a long value (a spec's, a kubelet's) is clipped, at a character's
// boundary, so the status can always be written.
func TestSetStatusClipsMessages(t *testing.T) {
	g := NewWithT(t)
	cn := &v1alpha1.CacheNode{}
	long := strings.Repeat("é", 40000) // two bytes each
	setStatus(cn, healthy(func(o *observation) { o.renderErr = errors.New(long) }))
	for _, c := range cn.Status.Conditions {
		g.Expect(len(c.Message)).To(BeNumerically("<=", maxConditionMessage+len("…")), c.Type)
		g.Expect(utf8.ValidString(c.Message)).To(BeTrue(), c.Type)
	}
	g.Expect(conditionMessage(cn, v1alpha1.ConditionReady)).To(HaveSuffix("é…"))
}

func conditionMessage(cn *v1alpha1.CacheNode, typ string) string {
	for _, c := range cn.Status.Conditions {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}

// TestSetStatus: every condition is set with the generation, the counts come from what
// was observed, and what was not observed leaves the last counts and hash in place.
func TestSetStatus(t *testing.T) {
	g := NewWithT(t)
	cn := &v1alpha1.CacheNode{ObjectMeta: metav1.ObjectMeta{Generation: 4}, Spec: v1alpha1.CacheNodeSpec{Disks: make([]v1alpha1.Disk, 3)}}
	setStatus(cn, healthy())
	g.Expect(cn.Status.Conditions).To(HaveLen(len(conditionSetters)))
	for _, c := range cn.Status.Conditions {
		g.Expect(c.ObservedGeneration).To(BeEquivalentTo(4), c.Type)
	}
	g.Expect(cn.Status.ConfigHash).To(Equal(servedHash))
	g.Expect([]int32{cn.Status.Disks, cn.Status.SelectedNodes, cn.Status.EligibleNodes, cn.Status.ScheduledNodes, cn.Status.ReadyNodes}).
		To(Equal([]int32{3, 2, 2, 2, 2}))

	setStatus(cn, healthy(renderFailed, nodesUnseen, daemonSetUnseen, func(o *observation) { o.configHash = "" }))
	g.Expect(cn.Status.ConfigHash).To(Equal(servedHash), "a render failure must not replace the hash of the served configuration")
	g.Expect([]int32{cn.Status.SelectedNodes, cn.Status.EligibleNodes, cn.Status.ScheduledNodes, cn.Status.ReadyNodes}).
		To(Equal([]int32{2, 2, 2, 2}), "counts not observed are kept")

	setStatus(cn, healthy(noDaemonSet))
	g.Expect([]int32{cn.Status.ScheduledNodes, cn.Status.ReadyNodes}).To(Equal([]int32{0, 0}), "no DaemonSet schedules nothing")
}

func TestNameSomeCapsTheList(t *testing.T) {
	reasons := map[string]string{}
	for _, n := range []string{"g", "f", "e", "d", "c", "b", "a"} {
		reasons[n] = "r"
	}
	NewWithT(t).Expect(nameSome(reasons)).To(Equal("a (r), b (r), c (r), d (r), e (r), and 2 more"))
}

func notRunning(*v1alpha1.CacheNode) bool { return false }

// TestDiskConflict: a CacheNode yields to an earlier one that uses one of its disk paths
// (or one nested in it) on a node both can run on.
func TestDiskConflict(t *testing.T) {
	node := func(name, group string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"edgepool.test/group": group, "kubernetes.io/hostname": name, "disk.edgepool.io/nvme": "2", "disk.edgepool.io/hdd": "1"}}}
	}
	nodes := []corev1.Node{node("a1", "a"), node("a2", "a"), node("b1", "b")}
	at := func(cn *v1alpha1.CacheNode, minute int) *v1alpha1.CacheNode {
		cn.CreationTimestamp = metav1.NewTime(time.Date(2026, 11, 23, 0, minute, 0, 0, time.UTC))
		return defaulted(cn)
	}
	first := at(newCacheNode("shop", "images", "a"), 1)
	for _, tc := range []struct {
		name  string
		later *v1alpha1.CacheNode
		want  string // substring of the conflict; "" for none
	}{
		{"same paths, same nodes", at(newCacheNode("web", "edge", "a"), 2),
			"disk path /mnt/nvme0, /mnt/nvme1, /mnt/hdd0 is also used by a CacheNode of another namespace (the cluster admin can tell which), which came first, on a1, a2"},
		{"same paths, same nodes, same namespace", at(newCacheNode("shop", "edge", "a"), 2),
			"disk path /mnt/nvme0, /mnt/nvme1, /mnt/hdd0 is also used by CacheNode images, which came first, on a1, a2"},
		{"same paths, other nodes", at(newCacheNode("web", "edge", "b"), 2), ""},
		{"same paths, a narrower selector on the same nodes", func() *v1alpha1.CacheNode {
			cn := at(newCacheNode("web", "edge", "a"), 2)
			cn.Spec.NodeSelector["kubernetes.io/hostname"] = "a2"
			return cn
		}(), "is also used by a CacheNode of another namespace (the cluster admin can tell which), which came first, on a2"},
		{"a nested path", func() *v1alpha1.CacheNode {
			cn := at(newCacheNode("web", "edge", "a"), 2)
			cn.Spec.Disks = cn.Spec.Disks[:1]
			cn.Spec.Disks[0].Path = "/mnt/hdd0/web"
			return cn
		}(), "disk path /mnt/hdd0/web is also used by a CacheNode of another namespace"},
		{"other paths", func() *v1alpha1.CacheNode {
			cn := at(newCacheNode("web", "edge", "a"), 2)
			for i := range cn.Spec.Disks {
				cn.Spec.Disks[i].Path += "-web"
			}
			return cn
		}(), ""},
		{"created earlier: the other one yields", at(newCacheNode("web", "edge", "a"), 0), ""},
		{"created at the same time: by name", at(newCacheNode("shop", "aaa", "a"), 1), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mine := evaluateNodes(tc.later, desiredDaemonSet(tc.later, render.DefaultDiskPrefixes, DefaultCacheImage), nodes)
			got := diskConflict(tc.later, &mine, []v1alpha1.CacheNode{*tc.later, *first}, nodes, render.DefaultDiskPrefixes, notRunning)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("conflict = %q, want %q", got, tc.want)
			}
		})
	}
	deleting := first.DeepCopy()
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	later := at(newCacheNode("web", "edge", "a"), 2)
	mine := evaluateNodes(later, desiredDaemonSet(later, render.DefaultDiskPrefixes, DefaultCacheImage), nodes)
	if got := diskConflict(later, &mine, []v1alpha1.CacheNode{*deleting}, nodes, render.DefaultDiskPrefixes, notRunning); got != "" {
		t.Errorf("a CacheNode being deleted still blocks: %s", got)
	}
	// One that runs comes before one that does not, whenever it was created.
	older := at(newCacheNode("web", "edge", "a"), 0)
	running := func(cn *v1alpha1.CacheNode) bool { return cn.Name == first.Name }
	if got := diskConflict(older, &mine, []v1alpha1.CacheNode{*first}, nodes, render.DefaultDiskPrefixes, running); !strings.Contains(got, "another namespace (the cluster admin can tell which), which came first") {
		t.Errorf("a CacheNode yielded to nothing, or to one that does not run: %q", got)
	}
}

// TestDiskConflictReadsOnlyRivals: whether a CacheNode runs (a DaemonSet read) is asked
// once, and only about it and those sharing a path on nodes both may select, not about
// every CacheNode of the cluster on every comparison (1,000 CacheNodes made each
// reconcile of C1's burst take tens of milliseconds).
func TestDiskConflictReadsOnlyRivals(t *testing.T) {
	nodes := []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "a1", Labels: map[string]string{
		"edgepool.test/group": "a", "disk.edgepool.io/nvme": "2", "disk.edgepool.io/hdd": "1"}}}}
	cn := defaulted(newCacheNode("web", "edge", "a"))
	rival := defaulted(newCacheNode("shop", "images", "a"))
	rival.CreationTimestamp = metav1.NewTime(cn.CreationTimestamp.Add(-time.Minute))
	others := []v1alpha1.CacheNode{*cn, *rival}
	for i := range 500 {
		elsewhere := defaulted(newCacheNode("web", fmt.Sprintf("b%d", i), "b")) // disjoint selector
		otherPaths := defaulted(newCacheNode("web", fmt.Sprintf("a%d", i), "a"))
		for j := range otherPaths.Spec.Disks {
			otherPaths.Spec.Disks[j].Path += "-" + otherPaths.Name
		}
		others = append(others, *elsewhere, *otherPaths)
	}
	asked := map[string]int{}
	running := func(c *v1alpha1.CacheNode) bool {
		asked[c.Name]++
		return false
	}
	mine := evaluateNodes(cn, desiredDaemonSet(cn, render.DefaultDiskPrefixes, DefaultCacheImage), nodes)
	got := diskConflict(cn, &mine, others, nodes, render.DefaultDiskPrefixes, running)
	g := NewWithT(t)
	g.Expect(got).To(ContainSubstring("also used by a CacheNode of another namespace"))
	g.Expect(asked).To(Equal(map[string]int{"edge": 1, "images": 1}))
}

func TestSelectorsDisjoint(t *testing.T) {
	for _, tc := range []struct {
		a, b map[string]string
		want bool
	}{
		{map[string]string{"region": "r0", "tier": "edge"}, map[string]string{"region": "r1", "tier": "edge"}, true},
		{map[string]string{"region": "r0", "tier": "edge"}, map[string]string{"region": "r0"}, false},
		{map[string]string{"region": "r0"}, map[string]string{"tier": "edge"}, false},
		{nil, map[string]string{"region": "r0"}, false},
	} {
		if got := selectorsDisjoint(tc.a, tc.b); got != tc.want || selectorsDisjoint(tc.b, tc.a) != tc.want {
			t.Errorf("selectorsDisjoint(%v, %v) = %v, want %v both ways", tc.a, tc.b, got, tc.want)
		}
	}
}
