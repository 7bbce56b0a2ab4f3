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

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

const (
	timeout  = 3 * time.Minute // generous: a 2-core CI machine under load is slow, and a pass is not slowed by it
	interval = 200 * time.Millisecond
)

// nvmeCacheNode needs two NVMe disks on nodes of the given test group.
func nvmeCacheNode(ns, name, group string) *v1alpha1.CacheNode {
	cn := &v1alpha1.CacheNode{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.CacheNodeSpec{
			Placement: v1alpha1.Placement{NodeSelector: map[string]string{"edgepool.test/group": group}},
			Origin:    v1alpha1.Origin{Servers: []string{"127.0.0.1:9000"}},
		},
	}
	for i := range 2 {
		cn.Spec.Disks = append(cn.Spec.Disks, v1alpha1.Disk{
			// Each CacheNode its own paths: two on a node never share one.
			Name: fmt.Sprintf("nvme%d", i), Path: fmt.Sprintf("/mnt/%s/nvme%d", name, i), Media: v1alpha1.MediaNVMe, Size: resource.MustParse("100Gi"),
		})
	}
	return cn
}

// podNodes lists the nodes running a pod of the CacheNode, sorted.
func podNodes(g Gomega, ns, name string) []string {
	pods := &corev1.PodList{}
	g.Expect(k8s.List(context.Background(), pods, client.InNamespace(ns),
		client.MatchingLabels{"app.kubernetes.io/instance": name})).To(Succeed())
	var nodes []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	slices.Sort(nodes)
	return nodes
}

func getCacheNode(g Gomega, ns, name string) *v1alpha1.CacheNode {
	cn := &v1alpha1.CacheNode{}
	g.Expect(k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, cn)).To(Succeed())
	return cn
}

func conditionOf(cn *v1alpha1.CacheNode, t string) metav1.Condition {
	if c := meta.FindStatusCondition(cn.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// TestPlacementFollowsDiskLabels: pods land only on nodes with enough disks of the
// declared media, move when a node is relabelled, and follow a new node.
func TestPlacementFollowsDiskLabels(t *testing.T) {
	t.Parallel() // each test has its own namespace and nodes
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	newNode(t, "place-two", "place", map[string]string{"disk.edgepool.io/nvme": "2"})
	newNode(t, "place-three", "place", map[string]string{"disk.edgepool.io/nvme": "3"})
	newNode(t, "place-one", "place", map[string]string{"disk.edgepool.io/nvme": "1"})
	newNode(t, "place-hdd", "place", map[string]string{"disk.edgepool.io/hdd": "4"})
	g.Expect(k8s.Create(ctx, nvmeCacheNode(ns, "edge", "place"))).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(podNodes(g, ns, "edge")).To(Equal([]string{"place-three", "place-two"}))
		cn := getCacheNode(g, ns, "edge")
		g.Expect(cn.Status.SelectedNodes).To(BeEquivalentTo(4))
		g.Expect(cn.Status.EligibleNodes).To(BeEquivalentTo(2))
		g.Expect(cn.Status.ScheduledNodes).To(BeEquivalentTo(2))
		g.Expect(cn.Status.ReadyNodes).To(BeEquivalentTo(2))
		g.Expect(conditionOf(cn, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(conditionOf(cn, v1alpha1.ConditionNodesEligible).Message).To(And(
			ContainSubstring("2 of 4 selected nodes"),
			ContainSubstring("place-one (lacks disk.edgepool.io/nvme>=2)"),
			ContainSubstring("place-hdd (lacks disk.edgepool.io/nvme>=2)"),
		))
	}, timeout, interval).Should(Succeed())

	// A disk fails on place-two: relabelled to one NVMe disk, it loses its pod.
	node := &corev1.Node{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: "place-two"}, node)).To(Succeed())
	patch := client.MergeFrom(node.DeepCopy())
	node.Labels["disk.edgepool.io/nvme"] = "1"
	g.Expect(k8s.Patch(ctx, node, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(podNodes(g, ns, "edge")).To(Equal([]string{"place-three"}))
		g.Expect(getCacheNode(g, ns, "edge").Status.EligibleNodes).To(BeEquivalentTo(1))
	}, timeout, interval).Should(Succeed())

	// A new node with disks gets a pod.
	newNode(t, "place-new", "place", map[string]string{"disk.edgepool.io/nvme": "2"})
	g.Eventually(func(g Gomega) {
		g.Expect(podNodes(g, ns, "edge")).To(Equal([]string{"place-new", "place-three"}))
		cn := getCacheNode(g, ns, "edge")
		g.Expect(cn.Status.EligibleNodes).To(BeEquivalentTo(2))
		g.Expect(cn.Status.ReadyNodes).To(BeEquivalentTo(2))
	}, timeout, interval).Should(Succeed())
}

// TestPodsThatCannotBeCreatedAreNamed: when the DaemonSet controller cannot create the
// cache pods (here a PriorityClass that does not exist; an admission policy or a quota
// does the same), Ready and Degraded say why, from the controller's warning.
func TestPodsThatCannotBeCreatedAreNamed(t *testing.T) {
	t.Parallel() // each test has its own namespace and nodes
	g := NewWithT(t)
	ns := newNamespace(t)
	newNode(t, "uncreated-1", "uncreated", map[string]string{"disk.edgepool.io/nvme": "2"})
	cn := nvmeCacheNode(ns, "edge", "uncreated")
	cn.Spec.PriorityClassName = "no-such-class"
	g.Expect(k8s.Create(context.Background(), cn)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := getCacheNode(g, ns, "edge")
		ready := conditionOf(got, v1alpha1.ConditionReady)
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(v1alpha1.ReasonPodsFailing), ready.Message)
		g.Expect(ready.Message).To(ContainSubstring("DaemonSet edge (1 of 1 cache pods not created: "))
		g.Expect(ready.Message).To(ContainSubstring("no PriorityClass with name no-such-class was found"))
		g.Expect(conditionOf(got, v1alpha1.ConditionDegraded).Reason).To(Equal(v1alpha1.ReasonPodsFailing))
	}, timeout, interval).Should(Succeed())
}

// TestCachePodsAreGuaranteedWhenLimitsAreSet: a CacheNode whose resources set limits
// (requests default to them) gets cache pods of the Guaranteed QoS class, the last the
// kubelet evicts, its disk-adopting init step included (one container without resources
// makes the pod Burstable). The API server computes the class from the pod the
// DaemonSet controller created.
func TestCachePodsAreGuaranteedWhenLimitsAreSet(t *testing.T) {
	t.Parallel() // each test has its own namespace and nodes
	g := NewWithT(t)
	ns := newNamespace(t)
	newNode(t, "qos-one", "qos", map[string]string{"disk.edgepool.io/nvme": "2"})
	cn := nvmeCacheNode(ns, "edge", "qos")
	cn.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")}
	g.Expect(k8s.Create(context.Background(), cn)).To(Succeed())
	g.Eventually(func(g Gomega) {
		pods := &corev1.PodList{}
		g.Expect(k8s.List(context.Background(), pods, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/instance": "edge"})).To(Succeed())
		g.Expect(pods.Items).To(HaveLen(1))
		pod := pods.Items[0]
		g.Expect(pod.Spec.InitContainers).To(HaveLen(1), "the adopt-disks step")
		g.Expect(pod.Status.QOSClass).To(Equal(corev1.PodQOSGuaranteed))
	}, timeout, interval).Should(Succeed())
}

// TestNodeFeatureDiscoveryLabels: a CacheNode that asks for NFD's labels is placed on
// nodes with feature.node.kubernetes.io/storage-nonrotationaldisk=true.
func TestNodeFeatureDiscoveryLabels(t *testing.T) {
	t.Parallel() // each test has its own namespace and nodes
	g := NewWithT(t)
	ns := newNamespace(t)
	newNode(t, "nfd-ssd", "nfd", map[string]string{"feature.node.kubernetes.io/storage-nonrotationaldisk": "true"})
	newNode(t, "nfd-edgepool-only", "nfd", map[string]string{"disk.edgepool.io/nvme": "2"})
	newNode(t, "nfd-rotational", "nfd", map[string]string{"feature.node.kubernetes.io/storage-nonrotationaldisk": "false"})
	cn := nvmeCacheNode(ns, "edge", "nfd")
	cn.Spec.DiskLabels = v1alpha1.DiskLabelsNFD
	g.Expect(k8s.Create(context.Background(), cn)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(podNodes(g, ns, "edge")).To(Equal([]string{"nfd-ssd"}))
		g.Expect(getCacheNode(g, ns, "edge").Status.EligibleNodes).To(BeEquivalentTo(1))
	}, timeout, interval).Should(Succeed())
}

func podUIDs(g Gomega, ns, name string) []types.UID {
	pods := &corev1.PodList{}
	g.Expect(k8s.List(context.Background(), pods, client.InNamespace(ns),
		client.MatchingLabels{"app.kubernetes.io/instance": name})).To(Succeed())
	var uids []types.UID
	for _, p := range pods.Items {
		uids = append(uids, p.UID)
	}
	slices.Sort(uids)
	return uids
}

// TestConfigChangeReloadsDiskChangeRolls: changing pool sizes or cache policy rewrites the
// ConfigMap and leaves the pods alone (the agent reloads nginx); changing disks rolls them.
func TestConfigChangeReloadsDiskChangeRolls(t *testing.T) {
	t.Parallel() // each test has its own namespace and nodes
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	newNode(t, "roll-a", "roll", map[string]string{"disk.edgepool.io/nvme": "3"})
	newNode(t, "roll-b", "roll", map[string]string{"disk.edgepool.io/nvme": "3"})
	rolling := nvmeCacheNode(ns, "edge", "roll")
	// Replace both pods at once: each old pod takes its grace period to terminate.
	all := intstr.FromString("100%")
	rolling.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{
		Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &all},
	}
	g.Expect(k8s.Create(ctx, rolling)).To(Succeed())
	var before []types.UID
	g.Eventually(func(g Gomega) {
		g.Expect(getCacheNode(g, ns, "edge").Status.ReadyNodes).To(BeEquivalentTo(2))
		before = podUIDs(g, ns, "edge")
		g.Expect(before).To(HaveLen(2))
	}, timeout, interval).Should(Succeed())
	ds := &appsv1.DaemonSet{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "edge"}, ds)).To(Succeed())
	generation := ds.Generation

	updateCacheNode(g, ns, "edge", func(cn *v1alpha1.CacheNode) {
		cn.Spec.Disks[0].ThreadPool.Threads = 256
		cn.Spec.Cache.Valid = []v1alpha1.CacheValidity{{Codes: []string{"200"}, Duration: "1h"}}
	})
	g.Eventually(func(g Gomega) {
		cm := &corev1.ConfigMap{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "edge-nginx"}, cm)).To(Succeed())
		g.Expect(cm.Data["nginx.conf"]).To(ContainSubstring("thread_pool pool_nvme0 threads=256 "))
		cn := getCacheNode(g, ns, "edge")
		g.Expect(cn.Status.ObservedGeneration).To(Equal(cn.Generation))
	}, timeout, interval).Should(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "edge"}, ds)).To(Succeed())
		g.Expect(ds.Generation).To(Equal(generation))
		g.Expect(podUIDs(g, ns, "edge")).To(Equal(before))
	}, 3*time.Second, interval).Should(Succeed(), "a configuration-only change must not roll the pods")

	updateCacheNode(g, ns, "edge", func(cn *v1alpha1.CacheNode) {
		cn.Spec.Disks = append(cn.Spec.Disks, v1alpha1.Disk{Name: "nvme2", Path: "/mnt/nvme2", Media: v1alpha1.MediaNVMe, Size: resource.MustParse("100Gi")})
	})
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "edge"}, ds)).To(Succeed())
		g.Expect(ds.Generation).To(BeNumerically(">", generation))
		g.Expect(ds.Status.ObservedGeneration).To(Equal(ds.Generation))
		g.Expect(ds.Status.UpdatedNumberScheduled).To(BeEquivalentTo(2))
		after := podUIDs(g, ns, "edge")
		g.Expect(after).To(HaveLen(2))
		for _, uid := range after {
			g.Expect(before).NotTo(ContainElement(uid))
		}
		g.Expect(conditionOf(getCacheNode(g, ns, "edge"), v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
	}, timeout, interval).Should(Succeed(), "a disk change rolls the pods")
}

// TestDeleteCascades: deleting a CacheNode removes its ConfigMap, DaemonSet and pods
// through the garbage collector.
func TestDeleteCascades(t *testing.T) {
	t.Parallel() // each test has its own namespace and nodes
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	newNode(t, "delete-a", "delete", map[string]string{"disk.edgepool.io/nvme": "2"})
	cn := nvmeCacheNode(ns, "edge", "delete")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(getCacheNode(g, ns, "edge").Status.ReadyNodes).To(BeEquivalentTo(1))
	}, timeout, interval).Should(Succeed())

	g.Expect(k8s.Delete(ctx, cn)).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, obj := range []client.Object{&corev1.ConfigMap{}, &appsv1.DaemonSet{}} {
			name := "edge"
			if _, ok := obj.(*corev1.ConfigMap); ok {
				name = "edge-nginx"
			}
			err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, obj)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T still exists: %v", obj, err)
		}
		// The pods are deleted too; finishing their termination is the kubelet's (kwok's) job.
		pods := &corev1.PodList{}
		g.Expect(k8s.List(ctx, pods, client.InNamespace(ns))).To(Succeed())
		for _, p := range pods.Items {
			g.Expect(p.DeletionTimestamp).NotTo(BeNil(), "pod %s is not being deleted", p.Name)
		}
	}, timeout, interval).Should(Succeed())
}

// updateCacheNode changes a CacheNode, reading it again when a status write of the
// operator's came in between.
func updateCacheNode(g Gomega, ns, name string, change func(*v1alpha1.CacheNode)) {
	g.Eventually(func() error {
		cn := &v1alpha1.CacheNode{}
		if err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, cn); err != nil {
			return err
		}
		change(cn)
		return k8s.Update(context.Background(), cn)
	}, timeout, interval).Should(Succeed())
}

// TestOperatorRestartMidStream: the operator is killed while 20 CacheNodes are being
// created; once it is back, all converge, with one ConfigMap and one DaemonSet each.
// It is the one serial test: Go runs it before the parallel ones, which need the operator.
func TestOperatorRestartMidStream(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	newNode(t, "restart-a", "restart", map[string]string{"disk.edgepool.io/nvme": "2"})
	const count = 20
	for i := range count {
		if i == 5 {
			operator.kill()
		}
		g.Expect(k8s.Create(ctx, nvmeCacheNode(ns, fmt.Sprintf("edge-%02d", i), "restart"))).To(Succeed())
	}
	g.Expect(operator.start()).To(Succeed())

	g.Eventually(func(g Gomega) {
		cns := &v1alpha1.CacheNodeList{}
		g.Expect(k8s.List(ctx, cns, client.InNamespace(ns))).To(Succeed())
		g.Expect(cns.Items).To(HaveLen(count))
		for _, cn := range cns.Items {
			g.Expect(cn.Status.ObservedGeneration).To(Equal(cn.Generation), cn.Name)
			g.Expect(cn.Status.ReadyNodes).To(BeEquivalentTo(1), cn.Name)
		}
		cms, dss := &corev1.ConfigMapList{}, &appsv1.DaemonSetList{}
		g.Expect(k8s.List(ctx, cms, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/managed-by": "edgepool"})).To(Succeed())
		g.Expect(k8s.List(ctx, dss, client.InNamespace(ns))).To(Succeed())
		g.Expect(cms.Items).To(HaveLen(count))
		g.Expect(dss.Items).To(HaveLen(count))
		for _, ds := range dss.Items {
			owner := metav1.GetControllerOf(&ds)
			g.Expect(owner).NotTo(BeNil())
			g.Expect(owner.Name).To(Equal(ds.Name))
		}
		g.Expect(podUIDs(g, ns, "edge-00")).To(HaveLen(1))
	}, 2*timeout, interval).Should(Succeed())
}

// TestKubectlRejectsInvalidCacheNodes: kubectl apply of a bad CacheNode fails with a
// message naming the field.
func TestKubectlRejectsInvalidCacheNodes(t *testing.T) {
	t.Parallel() // each test has its own namespace and nodes
	ns := newNamespace(t)
	valid := `apiVersion: cache.edgepool.io/v1alpha1
kind: CacheNode
metadata:
  name: bad
  namespace: ` + ns + `
spec:
  disks:
    - {name: nvme0, path: /mnt/nvme0, media: NVMe, size: 10Gi}
    - {name: hdd0, path: /mnt/hdd0, media: HDD, size: 10Gi}
  origin:
    servers: ["origin.example:80"]
`
	for _, tc := range []struct {
		name, from, to string
		want           []string
	}{
		{"duplicate disk names", "name: hdd0", "name: nvme0", []string{`spec.disks[1]: Duplicate value`}},
		{"path with ..", "path: /mnt/hdd0", "path: /mnt/../etc", []string{"spec.disks[1].path", "path must not contain '..'"}},
		{"threads out of range", "size: 10Gi}\n  origin", "size: 10Gi, threadPool: {threads: 600}}\n  origin", []string{"spec.disks[1].threadPool.threads", "less than or equal to 512"}},
		{"origin not host:port", "origin.example:80", "http://origin.example", []string{"spec.origin.servers[0]"}},
		{"acceptMutex with reusePort", "  origin:", "  listener: {acceptMutex: true}\n  origin:", []string{"spec.listener.acceptMutex", "acceptMutex may be set only when reusePort is false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			manifest := strings.Replace(valid, tc.from, tc.to, 1)
			if manifest == valid {
				t.Fatalf("the case did not change the manifest")
			}
			file := filepath.Join(t.TempDir(), "cachenode.yaml")
			if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := kubectl("apply", "-f", file)
			if err == nil {
				t.Fatalf("kubectl apply accepted it:\n%s", out)
			}
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("kubectl's message lacks %q:\n%s", want, out)
				}
			}
		})
	}
	file := filepath.Join(t.TempDir(), "cachenode.yaml")
	if err := os.WriteFile(file, []byte(valid), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl("apply", "--dry-run=server", "-f", file); err != nil {
		t.Fatalf("the valid manifest was rejected: %v\n%s", err, out)
	}
}
