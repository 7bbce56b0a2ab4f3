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
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	lua "github.com/yuin/gopher-lua"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/cachepod"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/ssa"
)

func condition(cn *v1alpha1.CacheNode, t string) metav1.Condition {
	if c := meta.FindStatusCondition(cn.Status.Conditions, t); c != nil {
		return *c
	}
	return metav1.Condition{Type: t, Status: "Missing"}
}

// get reads obj from the API server, failing the assertion (not the test) on error, so it
// can be polled inside Eventually.
func get(g Gomega, obj client.Object, key types.NamespacedName) {
	g.Expect(k8s.Get(context.Background(), key, obj)).To(Succeed())
}

// updateCacheNode applies change to the latest cn and writes it, again when the write conflicts
// with one of the operator's own status writes.
func updateCacheNode(g Gomega, cn *v1alpha1.CacheNode, change func(*v1alpha1.CacheNode)) {
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(cn), cn); err != nil {
			return err
		}
		change(cn)
		return k8s.Update(context.Background(), cn)
	})).To(Succeed())
}

func TestCreateRendersConfigMapAndDaemonSet(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	with := func(extra map[string]string) map[string]string {
		l := map[string]string{"edgepool.test/group": "create"}
		for k, v := range extra {
			l[k] = v
		}
		return l
	}
	newNode(t, "create-fit", with(map[string]string{"disk.edgepool.io/nvme": "2", "disk.edgepool.io/hdd": "4"}))
	newNode(t, "create-one-nvme", with(map[string]string{"disk.edgepool.io/nvme": "1", "disk.edgepool.io/hdd": "1"}))
	newNode(t, "create-tainted", with(map[string]string{"disk.edgepool.io/nvme": "2", "disk.edgepool.io/hdd": "1"}),
		corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule})
	newNode(t, "create-other-group", map[string]string{"disk.edgepool.io/nvme": "9", "disk.edgepool.io/hdd": "9"})

	cn := newCacheNode(ns, "edge", "create")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)

	cm := &corev1.ConfigMap{}
	g.Eventually(func(g Gomega) { get(g, cm, types.NamespacedName{Namespace: ns, Name: "edge-nginx"}) }, timeout, interval).Should(Succeed())
	get(g, cn, key)
	want, err := render.NginxConf(&cn.Spec)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cm.Data).To(HaveKeyWithValue(agentapi.ConfigKey, want))
	g.Expect(cm.Data[agentapi.FactsKey]).To(MatchJSON(fmt.Sprintf(`{"configHash": %q, "backlog": 511, "statusPort": 18081,
		"split": {"key": "$host$request_uri", "disks": [{"name": "nvme0", "weight": 3}, {"name": "nvme1", "weight": 3}, {"name": "hdd0", "weight": 1}]},
		"failover": {"ioErrors": 5, "checkFailures": 2, "errorWindowSeconds": 10, "cooldownSeconds": 60, "maxCooldownSeconds": 1800},
		"tagHeaders": ["Cache-Tag", "Surrogate-Key"]}`,
		agentapi.Hash([]byte(want)))))

	ds := &appsv1.DaemonSet{}
	g.Eventually(func(g Gomega) { get(g, ds, key) }, timeout, interval).Should(Succeed())
	for _, obj := range []client.Object{cm, ds} {
		ref := metav1.GetControllerOf(obj)
		g.Expect(ref).NotTo(BeNil(), "%T has a controller", obj)
		g.Expect(ref.UID).To(Equal(cn.UID))
		g.Expect(*ref.BlockOwnerDeletion).To(BeTrue(), "deleting the CacheNode deletes %T through the garbage collector", obj)
		g.Expect(obj.GetManagedFields()).To(ContainElement(HaveField("Manager", FieldOwner)), "applied server-side by %s", FieldOwner)
	}
	pod := ds.Spec.Template.Spec
	g.Expect(*pod.AutomountServiceAccountToken).To(BeFalse())
	g.Expect(pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms).To(Equal([]corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "disk.edgepool.io/nvme", Operator: corev1.NodeSelectorOpGt, Values: []string{"1"}},
			{Key: "disk.edgepool.io/hdd", Operator: corev1.NodeSelectorOpGt, Values: []string{"0"}},
		},
	}}))
	var hostPaths []string
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			g.Expect(*v.HostPath.Type).To(Equal(corev1.HostPathDirectory), "a missing disk must not be created on the root filesystem")
			hostPaths = append(hostPaths, v.HostPath.Path)
		}
	}
	g.Expect(hostPaths).To(Equal([]string{"/mnt/nvme0", "/mnt/nvme1", "/mnt/hdd0"}))

	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.ObservedGeneration).To(Equal(cn.Generation))
		g.Expect(cn.Status.ConfigHash).To(Equal(agentapi.Hash([]byte(want))))
		g.Expect(cn.Status.SelectedNodes).To(BeEquivalentTo(3))
		g.Expect(cn.Status.EligibleNodes).To(BeEquivalentTo(1))
		g.Expect(condition(cn, v1alpha1.ConditionConfigRendered).Status).To(Equal(metav1.ConditionTrue))
		eligible := condition(cn, v1alpha1.ConditionNodesEligible)
		g.Expect(eligible.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(eligible.Message).To(And(
			ContainSubstring("1 of 3 selected nodes"),
			ContainSubstring("create-one-nvme (lacks disk.edgepool.io/nvme>=2)"),
			ContainSubstring("create-tainted (taint dedicated=db:NoSchedule not tolerated)"),
		))
		g.Expect(condition(cn, v1alpha1.ConditionAvailable).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition(cn, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
	}, timeout, interval).Should(Succeed())

	// envtest runs no DaemonSet controller: report its pods as it would.
	get(g, ds, key)
	ds.Status = appsv1.DaemonSetStatus{
		ObservedGeneration: ds.Generation, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
		UpdatedNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1,
	}
	g.Expect(k8s.Status().Update(ctx, ds)).To(Succeed())
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(condition(cn, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(condition(cn, v1alpha1.ConditionAvailable).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(condition(cn, v1alpha1.ConditionProgressing).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition(cn, v1alpha1.ConditionDegraded).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(cn.Status.ScheduledNodes).To(BeEquivalentTo(1))
		g.Expect(cn.Status.ReadyNodes).To(BeEquivalentTo(1))
	}, timeout, interval).Should(Succeed())
}

// TestConfigOnlyChangeKeepsPodTemplate: a change of cache policy or pool sizes rewrites
// the ConfigMap but not the DaemonSet, so pods are not rolled; a change of disks rolls them.
func TestConfigOnlyChangeKeepsPodTemplate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "update")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	ds := &appsv1.DaemonSet{}
	g.Eventually(func(g Gomega) { get(g, ds, key) }, timeout, interval).Should(Succeed())
	dsGeneration := ds.Generation

	updateCacheNode(g, cn, func(cn *v1alpha1.CacheNode) {
		cn.Spec.Disks[0].ThreadPool.Threads = 128
		cn.Spec.Cache.Valid = []v1alpha1.CacheValidity{{Codes: []string{"200"}, Duration: "2h"}}
	})
	cm := &corev1.ConfigMap{}
	g.Eventually(func(g Gomega) {
		get(g, cm, types.NamespacedName{Namespace: ns, Name: "edge-nginx"})
		g.Expect(cm.Data["nginx.conf"]).To(And(
			ContainSubstring("thread_pool pool_nvme0 threads=128 "),
			ContainSubstring("proxy_cache_valid 200 2h;"),
		))
		get(g, cn, key)
		g.Expect(cn.Status.ObservedGeneration).To(Equal(cn.Generation))
		g.Expect(cn.Status.ConfigHash).To(Equal(agentapi.Hash([]byte(cm.Data["nginx.conf"]))))
	}, timeout, interval).Should(Succeed())
	get(g, ds, key)
	g.Expect(ds.Generation).To(Equal(dsGeneration), "a configuration-only change must not change the DaemonSet")

	updateCacheNode(g, cn, func(cn *v1alpha1.CacheNode) {
		cn.Spec.Disks = append(cn.Spec.Disks, v1alpha1.Disk{Name: "ssd0", Path: "/mnt/ssd0", Media: v1alpha1.MediaSSD, Size: cn.Spec.Disks[0].Size})
	})
	g.Eventually(func(g Gomega) {
		get(g, ds, key)
		g.Expect(ds.Generation).To(BeNumerically(">", dsGeneration))
		g.Expect(ds.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("Name", "disk-ssd0")))
		g.Expect(ds.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions).
			To(ContainElement(corev1.NodeSelectorRequirement{Key: "disk.edgepool.io/ssd", Operator: corev1.NodeSelectorOpGt, Values: []string{"0"}}))
	}, timeout, interval).Should(Succeed())
}

// TestConfigChangeAnnotatesPods: the kubelet refreshes a ConfigMap volume at its periodic
// sync (a minute or more), or at once when the pod changes. So a new configuration, and a
// new purge list, is announced on every cache pod; the pod template, and so the pod, stays
// as it is.
func TestConfigChangeAnnotatesPods(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "nudge")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	// A pod as the DaemonSet controller would make it (envtest runs no controllers).
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-abcde", Namespace: ns, Labels: cachepod.ObjectLabels(cn)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "cache", Image: "edgepool/cache:0.1.0"}}},
	}
	g.Expect(k8s.Create(ctx, pod)).To(Succeed())
	podKey := client.ObjectKeyFromObject(pod)

	// What is announced is the hash of the ConfigMap data the pod must have at once.
	cm := &corev1.ConfigMap{}
	announced := func(g Gomega) string {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: cachepod.ConfigMapName(cn)}, cm)).To(Succeed())
		get(g, pod, podKey)
		g.Expect(pod.Annotations).To(HaveKeyWithValue(ConfigHashAnnotation, volumeHash(cm)))
		return volumeHash(cm)
	}
	var first string
	g.Eventually(func(g Gomega) { first = announced(g) }, timeout, interval).Should(Succeed())

	updateCacheNode(g, cn, func(cn *v1alpha1.CacheNode) { cn.Spec.Disks[0].Weight = 5 })
	var second string
	g.Eventually(func(g Gomega) {
		second = announced(g)
		g.Expect(second).NotTo(Equal(first))
	}, timeout, interval).Should(Succeed())
	// The status follows the ConfigMap's apply: wait for it to name the new nginx.conf.
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.ConfigHash).To(Equal(agentapi.Hash([]byte(cm.Data[agentapi.ConfigKey]))))
	}, timeout, interval).Should(Succeed())
	config := cn.Status.ConfigHash

	// A purge changes purges.json, not nginx.conf, and is announced too: a pod that
	// restarts before its kubelet's own sync must find it.
	p := &v1alpha1.CachePurge{ObjectMeta: metav1.ObjectMeta{Name: "home", Namespace: ns},
		Spec: v1alpha1.CachePurgeSpec{CacheNode: cn.Name, Scope: v1alpha1.PurgeURLs, URLs: []string{"https://www.example.com/"}}}
	g.Expect(k8s.Create(ctx, p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(announced(g)).NotTo(Equal(second))
		g.Expect(cm.Data[agentapi.ActivePurgesKey]).To(ContainSubstring(string(p.UID)))
	}, timeout, interval).Should(Succeed())
	get(g, cn, key)
	g.Expect(cn.Status.ConfigHash).To(Equal(config), "a purge changed the configuration")

	// Once announced, reconciling again writes nothing.
	eventuallyReconcilesWithoutWrites(g, key)
}

// TestRenderFailureKeepsLastGoodConfig: a spec the renderer refuses is reported in status
// and as a Warning event, and the ConfigMap keeps the last good configuration.
func TestRenderFailureKeepsLastGoodConfig(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "render-failure")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	cm := &corev1.ConfigMap{}
	g.Eventually(func(g Gomega) { get(g, cm, types.NamespacedName{Namespace: ns, Name: "edge-nginx"}) }, timeout, interval).Should(Succeed())
	good := cm.Data["nginx.conf"]
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.ObservedGeneration).To(Equal(cn.Generation))
	}, timeout, interval).Should(Succeed())
	goodHash := cn.Status.ConfigHash

	updateCacheNode(g, cn, func(cn *v1alpha1.CacheNode) { cn.Spec.Origin.Servers = []string{renderFailsOrigin} })
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.ObservedGeneration).To(Equal(cn.Generation))
		rendered := condition(cn, v1alpha1.ConditionConfigRendered)
		g.Expect(rendered.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(rendered.Reason).To(Equal("RenderFailed"))
		g.Expect(rendered.Message).To(ContainSubstring("spec.origin.servers[0]"))
		g.Expect(condition(cn, v1alpha1.ConditionReady).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(condition(cn, v1alpha1.ConditionDegraded).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cn.Status.ConfigHash).To(Equal(goodHash), "status keeps the hash of the configuration still served")
	}, timeout, interval).Should(Succeed())

	g.Eventually(func(g Gomega) {
		evs := &eventsv1.EventList{}
		g.Expect(k8s.List(ctx, evs, client.InNamespace(ns))).To(Succeed())
		g.Expect(evs.Items).To(ContainElement(And(
			HaveField("Type", corev1.EventTypeWarning),
			HaveField("Reason", "RenderFailed"),
			HaveField("Regarding.Name", "edge"),
			HaveField("Note", ContainSubstring("spec.origin.servers[0]")),
		)))
	}, timeout, interval).Should(Succeed())
	get(g, cm, types.NamespacedName{Namespace: ns, Name: "edge-nginx"})
	g.Expect(cm.Data["nginx.conf"]).To(Equal(good))
}

// TestDiskOutsideTheAllowlistIsRefused: the operator checks disk paths against the
// cluster admin's allowlist again (the admission policy may be missing): nothing is
// applied, and the status and a Warning event name the field.
func TestDiskOutsideTheAllowlistIsRefused(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "allowlist")
	cn.Spec.Disks[1].Path = "/var/lib/etcd"
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		c := condition(cn, v1alpha1.ConditionReady)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Message).To(ContainSubstring(`spec.disks[1].path: Invalid value: "/var/lib/etcd": must lie under a prefix the cluster admin allows: /mnt, /data, /srv`))
		g.Expect(condition(cn, v1alpha1.ConditionStalled).Status).To(Equal(metav1.ConditionTrue))
	}, timeout, interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		evs := &eventsv1.EventList{}
		g.Expect(k8s.List(ctx, evs, client.InNamespace(ns))).To(Succeed())
		g.Expect(evs.Items).To(ContainElement(And(HaveField("Type", corev1.EventTypeWarning), HaveField("Note", ContainSubstring("spec.disks[1].path")))))
	}, timeout, interval).Should(Succeed())
	g.Expect(apierrors.IsNotFound(k8s.Get(ctx, key, &appsv1.DaemonSet{}))).To(BeTrue(), "a DaemonSet was applied for a refused CacheNode")
	g.Expect(apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "edge-nginx"}, &corev1.ConfigMap{}))).To(BeTrue(),
		"a ConfigMap was applied for a refused CacheNode")
}

// TestDiskPathConflict: of two CacheNodes with the same disk paths on a node, the later
// one gets nothing applied and says which one it yields to; once the earlier one is
// deleted, the later one is applied.
func TestDiskPathConflict(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	newNode(t, "shared-paths-node", map[string]string{"edgepool.test/group": "shared-paths", "disk.edgepool.io/nvme": "2", "disk.edgepool.io/hdd": "1"})
	first := newCacheNode(newNamespace(t), "images", "shared-paths")
	g.Expect(k8s.Create(ctx, first)).To(Succeed())
	g.Eventually(func(g Gomega) { get(g, &appsv1.DaemonSet{}, client.ObjectKeyFromObject(first)) }, timeout, interval).Should(Succeed())

	ns := newNamespace(t)
	later := newCacheNode(ns, "edge", "shared-paths")
	g.Expect(k8s.Create(ctx, later)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), later) })
	key := client.ObjectKeyFromObject(later)
	g.Eventually(func(g Gomega) {
		get(g, later, key)
		c := condition(later, v1alpha1.ConditionStalled)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Reason).To(Equal("DiskPathConflict"))
		g.Expect(c.Message).To(ContainSubstring("is also used by a CacheNode of another namespace (the cluster admin can tell which), which came first, on shared-paths-node"))
		g.Expect(c.Message).NotTo(ContainSubstring(first.Namespace), "the other namespace is not named to this one's readers")
		g.Expect(condition(later, v1alpha1.ConditionReady).Reason).To(Equal("DiskPathConflict"))
	}, timeout, interval).Should(Succeed())
	g.Expect(apierrors.IsNotFound(k8s.Get(ctx, key, &appsv1.DaemonSet{}))).To(BeTrue(), "the later CacheNode's DaemonSet was applied")
	g.Eventually(func(g Gomega) {
		evs := &eventsv1.EventList{}
		g.Expect(k8s.List(ctx, evs, client.InNamespace(ns))).To(Succeed())
		g.Expect(evs.Items).To(ContainElement(And(HaveField("Reason", "DiskPathConflict"), HaveField("Type", corev1.EventTypeWarning))))
	}, timeout, interval).Should(Succeed())

	g.Expect(k8s.Delete(ctx, first)).To(Succeed())
	g.Eventually(func(g Gomega) {
		get(g, &appsv1.DaemonSet{}, key)
		get(g, later, key)
		g.Expect(condition(later, v1alpha1.ConditionStalled).Status).To(Equal(metav1.ConditionFalse))
	}, timeout, interval).Should(Succeed())
}

// TestNoOpReconcileWritesNothing: once converged, reconciling again makes no API writes.
func TestNoOpReconcileWritesNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	newNode(t, "noop-node", map[string]string{"edgepool.test/group": "noop", "disk.edgepool.io/nvme": "2", "disk.edgepool.io/hdd": "1"})
	cn := newCacheNode(ns, "edge", "noop")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.ObservedGeneration).To(Equal(cn.Generation))
		g.Expect(cn.Status.EligibleNodes).To(BeEquivalentTo(1))
	}, timeout, interval).Should(Succeed())

	// Let the cache catch up with the status write, then reconcile repeatedly.
	eventuallyReconcilesWithoutWrites(g, key)
	before := writes.Load()
	for range 20 {
		_, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(writes.Load()-before).To(BeZero(), "writes during 20 no-op reconciles")

	// A real change is written: the counter can see writes.
	updateCacheNode(g, cn, func(cn *v1alpha1.CacheNode) { cn.Spec.Disks[0].Weight = 7 })
	g.Eventually(func(g Gomega) {
		_, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(writes.Load() - before).To(BeNumerically(">", 0))
	}, timeout, interval).Should(Succeed())
}

// eventuallyReconcilesWithoutWrites waits until a reconcile of key writes nothing (the
// manager's cache has caught up with the last writes).
func eventuallyReconcilesWithoutWrites(g Gomega, key client.ObjectKey) {
	g.Eventually(func(g Gomega) {
		before := writes.Load()
		_, err := reconciler.Reconcile(context.Background(), ctrl.Request{NamespacedName: key})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(writes.Load() - before).To(BeZero())
	}, timeout, interval).Should(Succeed())
}

// TestStatusConflictIsRetriedNotFailed: a status computed from a stale copy of the
// CacheNode meets the optimistic lock. The reconcile then asks to run again soon instead
// of failing (which controller-runtime logs as an error with a stack trace), and the next
// one writes the status.
func TestStatusConflictIsRetriedNotFailed(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "conflict")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.ObservedGeneration).To(Equal(cn.Generation))
	}, timeout, interval).Should(Succeed())

	// The real API server, through a client whose first read of the CacheNode is stale.
	stale := &staleOnce{Client: k8s}
	r := *reconciler
	r.Client = stale
	res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.RequeueAfter).To(Equal(conflictRetry))
	g.Expect(stale.done).To(BeTrue(), "the stale read happened")

	// The retry reads the current CacheNode and succeeds without asking again. The
	// manager's own reconciler runs beside this one (the status update below wakes it), so
	// a retry may meet its write and ask once more: never an error, and soon a success.
	get(g, cn, key)
	cn.Status = v1alpha1.CacheNodeStatus{}
	g.Expect(k8s.Status().Update(ctx, cn)).To(Succeed())
	g.Eventually(func(eg Gomega) {
		res, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		g.Expect(err).NotTo(HaveOccurred()) // the test's g: an error fails it at once
		eg.Expect(res.RequeueAfter).To(BeZero())
	}, timeout, interval).Should(Succeed())
	get(g, cn, key)
	g.Expect(cn.Status.ObservedGeneration).To(Equal(cn.Generation), "the retry wrote the status")
}

// TestCacheKeepsOnlyWhatReconcileReads: the manager's cache holds the operator's
// ConfigMaps and DaemonSets without nginx.conf, pod template or managedFields (what kept
// its memory over budget at 1,000 CacheNodes in `make bench`'s C1), while the API server
// has them all.
func TestCacheKeepsOnlyWhatReconcileReads(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "cache")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	cmKey := types.NamespacedName{Namespace: ns, Name: cachepod.ConfigMapName(cn)}
	dsKey := types.NamespacedName{Namespace: ns, Name: cachepod.DaemonSetName(cn)}

	cached := reconciler.Client
	g.Eventually(func(g Gomega) {
		cm, ds := &corev1.ConfigMap{}, &appsv1.DaemonSet{}
		g.Expect(cached.Get(ctx, cmKey, cm)).To(Succeed())
		g.Expect(cached.Get(ctx, dsKey, ds)).To(Succeed())
		g.Expect(cm.Annotations).To(HaveKey(ssa.AppliedHashAnnotation))
		g.Expect(metav1.IsControlledBy(cm, cn)).To(BeTrue())
		g.Expect(cm.Data).To(BeEmpty())
		g.Expect(cm.ManagedFields).To(BeEmpty())
		g.Expect(ds.Generation).To(BeNumerically(">", 0))
		g.Expect(ds.Spec.Template.Spec.Containers).To(BeEmpty())
		g.Expect(ds.ManagedFields).To(BeEmpty())
	}, timeout, interval).Should(Succeed())

	cm, ds := &corev1.ConfigMap{}, &appsv1.DaemonSet{}
	get(g, cm, cmKey)
	get(g, ds, dsKey)
	g.Expect(cm.Data).To(HaveKey(agentapi.ConfigKey))
	g.Expect(cm.ManagedFields).NotTo(BeEmpty())
	g.Expect(ds.Spec.Template.Spec.Containers).NotTo(BeEmpty())
}

// TestEditedConfigMapIsRestored: someone who may edit ConfigMaps in the namespace changes
// what the cache pods read (an origin of their own in nginx.conf) and keeps edgepool's
// applied hash; the operator sees the data itself differ, restores it in the reconcile
// the edit triggers, and says so in a Warning event.
func TestEditedConfigMapIsRestored(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "drift")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := types.NamespacedName{Namespace: ns, Name: cachepod.ConfigMapName(cn)}
	cm := &corev1.ConfigMap{}
	g.Eventually(func(g Gomega) { get(g, cm, key) }, timeout, interval).Should(Succeed())
	rendered := maps.Clone(cm.Data)

	for _, edit := range []func(cm *corev1.ConfigMap){
		func(cm *corev1.ConfigMap) {
			cm.Data[agentapi.ConfigKey] = strings.Replace(cm.Data[agentapi.ConfigKey], "server 127.0.0.1:9000;", "server 169.254.169.254:80;", 1)
		},
		func(cm *corev1.ConfigMap) { cm.Data[agentapi.OperatorKeysKey] = "someone-else's key" },
		func(cm *corev1.ConfigMap) { delete(cm.Data, agentapi.ActivePurgesKey) },
	} {
		get(g, cm, key)
		edit(cm)
		g.Expect(cm.Annotations).To(HaveKey(ssa.AppliedHashAnnotation), "the edit keeps edgepool's applied hash")
		g.Expect(k8s.Update(ctx, cm)).To(Succeed())
		g.Eventually(func(g Gomega) {
			get(g, cm, key)
			g.Expect(cm.Data).To(Equal(rendered))
		}, timeout, interval).Should(Succeed(), "the operator restores what it rendered")
	}
	g.Eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(k8s.List(ctx, events, client.InNamespace(ns))).To(Succeed())
		g.Expect(events.Items).To(ContainElement(And(
			HaveField("Reason", "ConfigMapRestored"),
			HaveField("Type", corev1.EventTypeWarning),
			HaveField("Note", ContainSubstring("ConfigMap edge-nginx held data edgepool did not write; restored it")),
		)))
	}, timeout, interval).Should(Succeed())
}

// staleOnce is a client whose first read of a CacheNode returns it without its status,
// as a cache that has not seen the status write yet would, while the stored CacheNode
// moves on (an annotation, which the manager's reconciler ignores).
type staleOnce struct {
	client.Client
	done bool
}

func (c *staleOnce) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	cn, ok := obj.(*v1alpha1.CacheNode)
	if !ok || c.done {
		return nil
	}
	c.done = true
	cn.Status = v1alpha1.CacheNodeStatus{}
	moved := cn.DeepCopy()
	moved.Annotations = map[string]string{"edgepool.test/moved": "on"}
	return c.Client.Patch(ctx, moved, client.MergeFrom(cn))
}

// TestNodeChangesUpdateEligibility: labelling a node with disks makes it eligible.
func TestNodeChangesUpdateEligibility(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	node := newNode(t, "relabel-node", map[string]string{"edgepool.test/group": "relabel"})
	cn := newCacheNode(ns, "edge", "relabel")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		eligible := condition(cn, v1alpha1.ConditionNodesEligible)
		g.Expect(eligible.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(eligible.Message).To(ContainSubstring("relabel-node (lacks disk.edgepool.io/nvme>=2, disk.edgepool.io/hdd>=1)"))
		g.Expect(condition(cn, v1alpha1.ConditionReady).Reason).To(Equal("NoEligibleNodes"))
	}, timeout, interval).Should(Succeed())

	patch := client.MergeFrom(node.DeepCopy())
	node.Labels["disk.edgepool.io/nvme"] = "3"
	node.Labels["disk.edgepool.io/hdd"] = "1"
	g.Expect(k8s.Patch(ctx, node, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.EligibleNodes).To(BeEquivalentTo(1))
		g.Expect(condition(cn, v1alpha1.ConditionNodesEligible).Status).To(Equal(metav1.ConditionTrue))
	}, timeout, interval).Should(Succeed())
}

// TestDeleteLeavesCleanupToGarbageCollector: the CacheNode needs no finalizer; its objects
// carry controller owner references (checked in the create test) and the reconciler
// accepts a CacheNode that is gone.
func TestDeleteLeavesCleanupToGarbageCollector(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "delete")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	g.Eventually(func(g Gomega) { get(g, &appsv1.DaemonSet{}, key) }, timeout, interval).Should(Succeed())
	get(g, cn, key)
	g.Expect(cn.Finalizers).To(BeEmpty())
	g.Expect(k8s.Delete(ctx, cn)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, key, &v1alpha1.CacheNode{}))
	}, timeout, interval).Should(BeTrue())
	before := writes.Load()
	_, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(writes.Load()).To(Equal(before))
}

// TestDeletingCacheNodeIsLeftAlone: once a CacheNode is being deleted, the objects it
// owns are not recreated (here a finalizer of the test's keeps it in that state).
func TestDeletingCacheNodeIsLeftAlone(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "deleting")
	cn.Finalizers = []string{"edgepool.test/hold"}
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	cm := &corev1.ConfigMap{}
	g.Eventually(func(g Gomega) { get(g, cm, types.NamespacedName{Namespace: ns, Name: "edge-nginx"}) }, timeout, interval).Should(Succeed())

	ds := &appsv1.DaemonSet{}
	g.Eventually(func(g Gomega) { get(g, ds, key) }, timeout, interval).Should(Succeed())
	g.Expect(k8s.Delete(ctx, cn)).To(Succeed())
	// The manager's cache sees the deletion before the ConfigMap goes: a reconcile from a
	// copy older than the deletion would rightly recreate it.
	g.Eventually(func(g Gomega) {
		cached := &v1alpha1.CacheNode{}
		g.Expect(reconciler.Get(ctx, key, cached)).To(Succeed())
		g.Expect(cached.DeletionTimestamp).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	g.Expect(k8s.Delete(ctx, cm)).To(Succeed()) // as the garbage collector would
	get(g, cn, key)
	get(g, ds, key)
	// No write to the CacheNode or its objects (other tests' CacheNodes may be reconciled
	// meanwhile, so the suite's write counter cannot tell).
	_, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	g.Expect(err).NotTo(HaveOccurred())
	after, dsAfter := &v1alpha1.CacheNode{}, &appsv1.DaemonSet{}
	get(g, after, key)
	get(g, dsAfter, key)
	g.Expect(after.ResourceVersion).To(Equal(cn.ResourceVersion), "the CacheNode being deleted was written")
	g.Expect(dsAfter.ResourceVersion).To(Equal(ds.ResourceVersion), "its DaemonSet was written")
	g.Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}))).To(BeTrue(), "its ConfigMap was recreated")

	updateCacheNode(g, cn, func(cn *v1alpha1.CacheNode) { cn.Finalizers = nil })
}

// TestForeignObjectIsNotTakenOver: a ConfigMap of the same name that the CacheNode does
// not control is left as it is: one labelled as edgepool's (in the manager's cache, once
// its event arrived) and one without the labels (never in the cache).
func TestForeignObjectIsNotTakenOver(t *testing.T) {
	for name, labels := range map[string]map[string]string{"labelled": cachepod.ManagedObjectsSelector(), "unlabelled": nil} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := context.Background()
			ns := newNamespace(t)
			foreign := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "edge-nginx", Namespace: ns, Labels: labels},
				Data:       map[string]string{"nginx.conf": "# someone else's"},
			}
			g.Expect(k8s.Create(ctx, foreign)).To(Succeed())
			cn := newCacheNode(ns, "edge", "foreign")
			g.Expect(k8s.Create(ctx, cn)).To(Succeed())
			key := client.ObjectKeyFromObject(cn)
			g.Eventually(func(g Gomega) {
				_, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: key})
				g.Expect(err).To(MatchError(ContainSubstring("ConfigMap edge-nginx exists and is not controlled by this CacheNode")))
			}, timeout, interval).Should(Succeed())
			time.Sleep(time.Second) // give the running manager time to misbehave
			get(g, foreign, client.ObjectKeyFromObject(foreign))
			g.Expect(foreign.Data).To(Equal(map[string]string{"nginx.conf": "# someone else's"}))
			g.Expect(metav1.GetControllerOf(foreign)).To(BeNil())
			// The status says so, and someone must act.
			g.Eventually(func(g Gomega) {
				get(g, cn, key)
				g.Expect(condition(cn, "Ready").Reason).To(Equal("ApplyFailed"))
				g.Expect(condition(cn, "Ready").Message).To(ContainSubstring("ConfigMap edge-nginx exists and is not controlled by this CacheNode"))
				g.Expect(condition(cn, "Stalled").Status).To(Equal(metav1.ConditionTrue))
			}, timeout, interval).Should(Succeed())
		})
	}
}

// TestApplyRefusedIsReported: a field the API server refuses and the CRD schema does not
// check (a negative CPU limit) fails the DaemonSet's apply. The status names that error,
// as the API server gave it, on Ready and Stalled, and a Warning event; the conditions it
// did not prevent observing (the nodes) still say what they saw.
func TestApplyRefusedIsReported(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	newNode(t, "refused-node", map[string]string{"edgepool.test/group": "refused", "disk.edgepool.io/nvme": "2", "disk.edgepool.io/hdd": "1"})
	cn := newCacheNode(ns, "edge", "refused")
	cn.Spec.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("-1")}
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	// Its reconcile is retried with backoff; deleted, it stops (envtest deletes no
	// namespace contents), and the write-counting tests see no retry of it.
	t.Cleanup(func() { _ = k8s.Delete(ctx, cn) })
	key := client.ObjectKeyFromObject(cn)
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.ObservedGeneration).To(Equal(cn.Generation))
		ready := condition(cn, "Ready")
		g.Expect(ready.Reason).To(Equal("ApplyFailed"))
		g.Expect(ready.Message).To(ContainSubstring("must be greater than or equal to 0"))
		g.Expect(condition(cn, "Stalled").Reason).To(Equal("ApplyFailed"))
		g.Expect(condition(cn, "NodesEligible").Status).To(Equal(metav1.ConditionTrue), "the nodes were observed: 1 of 1 eligible")
	}, timeout, interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		events := &eventsv1.EventList{}
		g.Expect(k8s.List(ctx, events, client.InNamespace(ns))).To(Succeed())
		var reasons []string
		for _, e := range events.Items {
			reasons = append(reasons, e.Reason)
		}
		g.Expect(reasons).To(ContainElement("ApplyFailed"))
	}, timeout, interval).Should(Succeed())
}

// TestGitOpsHealth computes the health of real CacheNodes the way GitOps tools do: with
// kstatus (Flux, kpt) and with the Argo CD health check in docs/gitops. InProgress /
// Progressing while rolling out, Current / Healthy when ready, Failed / Degraded when the
// spec cannot be rendered or no node can run it.
func TestGitOpsHealth(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	newNode(t, "kstatus-node", map[string]string{"edgepool.test/group": "kstatus", "disk.edgepool.io/nvme": "2", "disk.edgepool.io/hdd": "1"})
	health := func(g Gomega, name string) string {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("CacheNode"))
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, u)).To(Succeed())
		res, err := kstatus.Compute(u)
		g.Expect(err).NotTo(HaveOccurred())
		argo, msg, err := argoCDHealth(u.Object)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(msg).NotTo(BeEmpty())
		return string(res.Status) + "/" + argo
	}

	cn := newCacheNode(ns, "edge", "kstatus")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(health(g, "edge")).To(Equal("InProgress/Progressing")) }, timeout, interval).Should(Succeed())

	ds := &appsv1.DaemonSet{}
	get(g, ds, client.ObjectKeyFromObject(cn))
	ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: 1, CurrentNumberScheduled: 1,
		UpdatedNumberScheduled: 1, NumberReady: 1, NumberAvailable: 1}
	g.Expect(k8s.Status().Update(ctx, ds)).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(health(g, "edge")).To(Equal("Current/Healthy")) }, timeout, interval).Should(Succeed())

	updateCacheNode(g, cn, func(cn *v1alpha1.CacheNode) { cn.Spec.Origin.Servers = []string{renderFailsOrigin} })
	g.Eventually(func(g Gomega) { g.Expect(health(g, "edge")).To(Equal("Failed/Degraded")) }, timeout, interval).Should(Succeed())

	g.Expect(k8s.Create(ctx, newCacheNode(ns, "nowhere", "kstatus-no-such-nodes"))).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(health(g, "nowhere")).To(Equal("Failed/Degraded")) }, timeout, interval).Should(Succeed())
}

// argoCDHealth runs docs/gitops/argocd-health.lua on obj, as Argo CD does.
func argoCDHealth(obj map[string]any) (status, message string, err error) {
	L := lua.NewState()
	defer L.Close()
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoFile(filepath.Join("..", "..", "docs", "gitops", "argocd-health.lua")); err != nil {
		return "", "", err
	}
	hs, ok := L.Get(-1).(*lua.LTable)
	if !ok {
		return "", "", fmt.Errorf("the health check returned %s, not a table", L.Get(-1).Type())
	}
	return hs.RawGetString("status").String(), hs.RawGetString("message").String(), nil
}

// toLua converts decoded JSON to Lua values.
func toLua(L *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case map[string]any:
		t := L.NewTable()
		for k, e := range v {
			t.RawSetString(k, toLua(L, e))
		}
		return t
	case []any:
		t := L.NewTable()
		for _, e := range v {
			t.Append(toLua(L, e))
		}
		return t
	case string:
		return lua.LString(v)
	case bool:
		return lua.LBool(v)
	case int64:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	}
	return lua.LNil
}

func TestNetworkPolicyGuardsCachePods(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "netpol")
	cn.Spec.Listener.ClientCIDRs = []string{"10.0.0.0/8"}
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	npKey := types.NamespacedName{Namespace: ns, Name: "edge-cache"}

	np := &networkingv1.NetworkPolicy{}
	g.Eventually(func(g Gomega) { get(g, np, npKey) }, timeout, interval).Should(Succeed())
	get(g, cn, key)
	ref := metav1.GetControllerOf(np)
	g.Expect(ref).NotTo(BeNil())
	g.Expect(ref.UID).To(Equal(cn.UID))
	g.Expect(*ref.BlockOwnerDeletion).To(BeTrue(), "deleting the CacheNode deletes its NetworkPolicy through the garbage collector")
	g.Expect(np.GetManagedFields()).To(ContainElement(HaveField("Manager", FieldOwner)))
	g.Expect(equality.Semantic.DeepEqual(np.Spec, desiredNetworkPolicy(cn, chartAccess).Spec)).To(BeTrue(), "stored: %+v", np.Spec)
	g.Expect(np.Spec.Ingress[0].From).To(Equal([]networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}}))

	// Deleted by someone: the Owns watch brings it back.
	g.Expect(k8s.Delete(ctx, np)).To(Succeed())
	g.Eventually(func(g Gomega) {
		again := &networkingv1.NetworkPolicy{}
		get(g, again, npKey)
		g.Expect(again.UID).NotTo(Equal(np.UID))
	}, timeout, interval).Should(Succeed())

	// clientCIDRs removed: clients from anywhere.
	get(g, cn, key)
	patch := client.MergeFrom(cn.DeepCopy())
	cn.Spec.Listener.ClientCIDRs = nil
	g.Expect(k8s.Patch(ctx, cn, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		get(g, np, npKey)
		g.Expect(np.Spec.Ingress[0].From).To(BeEmpty())
		g.Expect(np.Spec.Ingress[1].From).To(HaveLen(2), "the operator's pods and the scraper")
	}, timeout, interval).Should(Succeed())

	eventuallyReconcilesWithoutWrites(g, key)
	before := writes.Load()
	for range 5 {
		_, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(writes.Load()-before).To(BeZero(), "writes during no-op reconciles")
}

// TestPurgeAnnouncementsAreSpaced: each purge changes the purge list every cache pod's
// volume carries; announcing each one on every pod would make one purge a second on 5,000
// nodes 5,000 pod writes a second. A list alone is announced at most every
// PurgeAnnounceInterval per CacheNode, so a burst of 100 purges costs each pod a few
// writes, and the last list always reaches the pods.
func TestPurgeAnnouncementsAreSpaced(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "spaced")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	var pods []*corev1.Pod
	for i := range 3 {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("edge-%d", i), Namespace: ns, Labels: cachepod.ObjectLabels(cn)},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "cache", Image: "edgepool/cache:0.1.0"}}},
		}
		g.Expect(k8s.Create(ctx, pod)).To(Succeed())
		pods = append(pods, pod)
	}
	cm := &corev1.ConfigMap{}
	allAnnounced := func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: cachepod.ConfigMapName(cn)}, cm)).To(Succeed())
		for _, pod := range pods {
			get(g, pod, client.ObjectKeyFromObject(pod))
			g.Expect(pod.Annotations).To(HaveKeyWithValue(ConfigHashAnnotation, volumeHash(cm)))
		}
	}
	g.Eventually(allAnnounced, timeout, interval).Should(Succeed())

	podPatchesBefore := podPatches(ns)
	start := time.Now()
	const purges = 100
	for i := range purges {
		g.Expect(k8s.Create(ctx, &v1alpha1.CachePurge{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%03d", i), Namespace: ns},
			Spec: v1alpha1.CachePurgeSpec{CacheNode: cn.Name, Scope: v1alpha1.PurgeURLs, URLs: []string{fmt.Sprintf("https://www.example.com/%d", i)}}})).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		allAnnounced(g)
		list := agentapi.ActivePurges{}
		g.Expect(json.Unmarshal([]byte(cm.Data[agentapi.ActivePurgesKey]), &list)).To(Succeed())
		g.Expect(list.Purges).To(HaveLen(purges))
	}, timeout, interval).Should(Succeed(), "the last purge list reaches every pod")
	elapsed := time.Since(start)
	writes := podPatches(ns) - podPatchesBefore
	bound := len(pods) * (int(elapsed/reconciler.PurgeAnnounceInterval) + 2)
	t.Logf("%d purges in %s: %d pod writes (%d pods; at most %d at one announcement per %s)",
		purges, elapsed.Round(time.Millisecond), writes, len(pods), bound, reconciler.PurgeAnnounceInterval)
	g.Expect(writes).To(BeNumerically(">=", len(pods)), "the last list was announced on every pod")
	g.Expect(writes).To(BeNumerically("<=", bound))
}

// TestAnnouncementsWaitOnlyForPurgeLists: a purge list alone (the same configuration,
// another volume) waits for the interval since the last announcement; a new
// configuration, the volume last announced, or a CacheNode never announced, does not.
func TestAnnouncementsWaitOnlyForPurgeLists(t *testing.T) {
	a := &announcements{}
	key := types.NamespacedName{Namespace: "ns", Name: "edge"}
	t0 := time.Unix(1000, 0)
	if w := a.wait(key, "conf1", "vol1", 5*time.Second, t0); w != 0 {
		t.Errorf("never announced: wait %s", w)
	}
	a.record(key, "conf1", "vol1", t0)
	for _, tc := range []struct {
		conf, vol string
		after     time.Duration
		want      time.Duration
	}{
		{"conf1", "vol2", time.Second, 4 * time.Second},
		{"conf1", "vol2", 5 * time.Second, 0},
		{"conf1", "vol2", time.Minute, 0},
		{"conf1", "vol1", time.Second, 0}, // announced already: new pods get it at once
		{"conf2", "vol3", time.Second, 0}, // a new configuration: at once
		{"", "vol2", time.Second, 0},      // nothing rendered: nothing held
	} {
		if got := a.wait(key, tc.conf, tc.vol, 5*time.Second, t0.Add(tc.after)); got != tc.want {
			t.Errorf("%s %s %s after: wait %s, want %s", tc.conf, tc.vol, tc.after, got, tc.want)
		}
	}
	a.forget(key)
	if w := a.wait(key, "conf1", "vol2", 5*time.Second, t0.Add(time.Second)); w != 0 {
		t.Errorf("forgotten: wait %s", w)
	}
	var none *announcements
	none.record(key, "conf1", "vol1", t0)
	if w := none.wait(key, "conf1", "vol2", 5*time.Second, t0); w != 0 {
		t.Errorf("a nil record holds: %s", w)
	}
}
