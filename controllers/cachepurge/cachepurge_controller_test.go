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
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/controllers/cachenode"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/cachepod"
	"github.com/edgepool/edgepool/internal/test/fakeagent"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// The suite runs the CachePurge controller against a real kube-apiserver (envtest), with
// test agents that check the operator's signatures as the real agent does (the real
// agent's endpoint is tested in test/agent). envtest has no kubelet: the tests create the
// cache pods and report them running at 127.0.0.1, where the test agents listen.

var (
	k8s         client.Client
	operatorKey ed25519.PrivateKey
	// clockAhead moves the controller's clock forward, past deadlines.
	clockAhead atomic.Int64
)

const (
	timeout  = 20 * time.Second
	interval = 50 * time.Millisecond
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	if os.Getenv("PURGE_DEBUG") != "" {
		ctrl.SetLogger(zap.New())
	}
	var err error
	if _, operatorKey, err = ed25519.GenerateKey(rand.Reader); err != nil {
		panic(err)
	}
	env, err := testkit.StartEnv(context.Background(), testkit.EnvOptions{
		CRDs: filepath.Join("..", "..", "config", "crd", "bases"), Cache: cachenode.CacheOptions(),
		Controllers: func(mgr ctrl.Manager) error {
			return (&Reconciler{
				Client: mgr.GetClient(), OperatorKey: operatorKey, Agents: agentapi.NewClient(500 * time.Millisecond),
				Concurrency: 4, RetryInterval: 100 * time.Millisecond, MaxConcurrentReconciles: 4,
				Now: func() time.Time { return time.Now().Add(time.Duration(clockAhead.Load())) },
			}).SetupWithManager(mgr)
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s = env.Client
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// startTestAgent answers purges for one pod (cachePod names it) as the real agent does: it
// checks the signature against the operator's key, the audience and the time, and answers
// by UID, each purge having removed the given number of files.
func startTestAgent(t *testing.T, removes int64) *fakeagent.Agent {
	return fakeagent.Start(t, []ed25519.PublicKey{operatorKey.Public().(ed25519.PublicKey)}, fakeagent.State{Removes: removes})
}

func newNamespace(t *testing.T) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "purge-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func newCacheNode(t *testing.T, ns string) *v1alpha1.CacheNode {
	cn := &v1alpha1.CacheNode{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns},
		Spec: v1alpha1.CacheNodeSpec{
			Disks:  []v1alpha1.Disk{{Name: "nvme0", Path: "/mnt/nvme0", Media: v1alpha1.MediaNVMe, Size: resource.MustParse("1Gi")}},
			Origin: v1alpha1.Origin{Servers: []string{"origin.example:80"}},
		},
	}
	if err := k8s.Create(context.Background(), cn); err != nil {
		t.Fatal(err)
	}
	return cn
}

// cachePod creates cn's pod on node; with an agent, it is reported running at 127.0.0.1
// with its agent on the agent's port.
func cachePod(t *testing.T, cn *v1alpha1.CacheNode, node string, a *fakeagent.Agent) {
	g := NewWithT(t)
	ctx := context.Background()
	labels := cachepod.SelectorLabels(cn)
	labels["app.kubernetes.io/managed-by"] = "edgepool"
	port := int32(1)
	if a != nil {
		port = a.Port()
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: cn.Name + "-" + node, Namespace: cn.Namespace, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "cache", Image: "edgepool/cache:0.1.0",
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: port}}}}},
	}
	g.Expect(k8s.Create(ctx, pod)).To(Succeed())
	if a != nil {
		a.Set(func(s *fakeagent.State) { s.Pod = cn.Namespace + "/" + pod.Name })
		patch := client.MergeFrom(pod.DeepCopy())
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", HostIP: "127.0.0.1"}
		g.Expect(k8s.Status().Patch(ctx, pod, patch)).To(Succeed())
	}
}

func newPurge(ns string, ttl int32) *v1alpha1.CachePurge {
	return &v1alpha1.CachePurge{
		ObjectMeta: metav1.ObjectMeta{Name: "home", Namespace: ns},
		Spec: v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: v1alpha1.PurgeURLs, URLs: []string{"https://www.example.com/"},
			ActiveDeadlineSeconds: 60, TTLSecondsAfterFinished: &ttl},
	}
}

func getPurge(g Gomega, p *v1alpha1.CachePurge) {
	g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(p), p)).To(Succeed())
}

func conditionOf(p *v1alpha1.CachePurge, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(p.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// TestPurgeReachesEveryNode: every running cache pod gets the purge, signed for itself,
// and the status counts them, once each, per node.
func TestPurgeReachesEveryNode(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cn := newCacheNode(t, ns)
	agents := map[string]*fakeagent.Agent{}
	for i, node := range []string{"node-a", "node-b", "node-c"} {
		agents[node] = startTestAgent(t, int64(i+1))
		cachePod(t, cn, node, agents[node])
	}
	agents["node-b"].Set(func(s *fakeagent.State) { s.Slow = 3 })
	p := newPurge(ns, 3600)
	g.Expect(k8s.Create(context.Background(), p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		getPurge(g, p)
		g.Expect(conditionOf(p, v1alpha1.ConditionComplete).Status).To(Equal(metav1.ConditionTrue))
	}, timeout, interval).Should(Succeed())
	g.Expect(p.Status.DoneNodes).To(BeEquivalentTo(3))
	g.Expect(p.Status.PendingNodes + p.Status.FailedNodes).To(BeZero())
	g.Expect(p.Status.ObjectsRemoved).To(BeEquivalentTo(6))
	g.Expect(p.Status.CompletionTime.IsZero()).To(BeFalse())
	g.Expect(p.Status.ObservedGeneration).To(Equal(p.Generation))
	g.Expect(conditionOf(p, v1alpha1.ConditionComplete).Message).To(Equal("purged on 3 nodes: 6 objects removed"))
	for _, typ := range []string{v1alpha1.ConditionFailed, v1alpha1.ConditionReconciling, v1alpha1.ConditionStalled} {
		g.Expect(conditionOf(p, typ).Status).To(Equal(metav1.ConditionFalse), typ)
	}
	for _, n := range p.Status.Nodes {
		g.Expect(n.Phase).To(Equal(v1alpha1.PurgeDone), n.Node)
		g.Expect(n.Pod).To(Equal("edge-" + n.Node))
		reqs := agents[n.Node].Purges()
		g.Expect(reqs).NotTo(BeEmpty())
		for _, r := range reqs {
			g.Expect(r.UID).To(Equal(string(p.UID)))
			g.Expect(r.Spec).To(Equal(agentapi.PurgeSpec{Scope: "URLs", URLs: []string{"https://www.example.com/"}}))
		}
	}
	g.Expect(agents["node-b"].Purges()).To(HaveLen(4), "asked while it purged, then done")
	// Done nodes are not asked again.
	asked := len(agents["node-a"].Purges())
	g.Consistently(func() int { return len(agents["node-a"].Purges()) }, time.Second, interval).Should(Equal(asked))
}

// TestPendingNodes: a node whose agent does not answer stays pending, and gets the purge
// when it answers; one still pending at the deadline fails the purge, naming it. A pod
// created after the purge that is not running is not waited for.
func TestPendingNodes(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cn := newCacheNode(t, ns)
	back := startTestAgent(t, 1)
	back.Set(func(s *fakeagent.State) { s.Down = true })
	cachePod(t, cn, "node-back", back)
	gone := startTestAgent(t, 1)
	gone.Set(func(s *fakeagent.State) { s.Down = true })
	cachePod(t, cn, "node-gone", gone)
	cachePod(t, cn, "node-stopped", nil) // not running, older than the purge
	p := newPurge(ns, 3600)
	g.Expect(k8s.Create(context.Background(), p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		getPurge(g, p)
		st, _ := json.Marshal(p.Status)
		g.Expect(p.Status.PendingNodes).To(BeEquivalentTo(3), string(st))
		c := conditionOf(p, v1alpha1.ConditionComplete)
		g.Expect(c.Reason).To(Equal("NodesPending"))
		g.Expect(c.Message).To(ContainSubstring("node-back (the agent refused the purge (503 Service Unavailable): not ready)"))
		g.Expect(c.Message).To(ContainSubstring("node-stopped (cache pod not running)"))
		g.Expect(conditionOf(p, v1alpha1.ConditionReconciling).Status).To(Equal(metav1.ConditionTrue))
	}, timeout, interval).Should(Succeed())
	time.Sleep(time.Second)           // creation times are in seconds
	cachePod(t, cn, "node-late", nil) // created after the purge, not running

	back.Set(func(s *fakeagent.State) { s.Down = false })
	g.Eventually(func(g Gomega) {
		getPurge(g, p)
		g.Expect(p.Status.DoneNodes).To(BeEquivalentTo(1))
		g.Expect(p.Status.PendingNodes).To(BeEquivalentTo(2))
	}, timeout, interval).Should(Succeed())

	clockAhead.Store(int64(65 * time.Second))
	t.Cleanup(func() { clockAhead.Store(0) })
	g.Eventually(func(g Gomega) {
		getPurge(g, p)
		g.Expect(conditionOf(p, v1alpha1.ConditionFailed).Status).To(Equal(metav1.ConditionTrue))
	}, timeout, interval).Should(Succeed())
	g.Expect(p.Status.Nodes).To(HaveLen(3), "the late node was waited for")
	g.Expect(p.Status.FailedNodes).To(BeEquivalentTo(2))
	g.Expect(conditionOf(p, v1alpha1.ConditionStalled).Status).To(Equal(metav1.ConditionTrue))
	g.Expect(conditionOf(p, v1alpha1.ConditionReconciling).Status).To(Equal(metav1.ConditionFalse))
	g.Expect(conditionOf(p, v1alpha1.ConditionFailed).Message).To(ContainSubstring("2 of 3 nodes failed: node-gone (did not confirm the purge before its deadline"))
}

// TestMissingCacheNode: a purge of a CacheNode that does not exist says so, and fails at
// its deadline.
func TestMissingCacheNode(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	p := newPurge(ns, 3600)
	g.Expect(k8s.Create(context.Background(), p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		getPurge(g, p)
		c := conditionOf(p, v1alpha1.ConditionComplete)
		g.Expect(c.Reason).To(Equal("CacheNodeNotFound"))
		g.Expect(c.Message).To(Equal("CacheNode edge not found in namespace " + ns + "; waiting for it until the deadline"))
	}, timeout, interval).Should(Succeed())
	clockAhead.Store(int64(65 * time.Second))
	t.Cleanup(func() { clockAhead.Store(0) })
	g.Eventually(func(g Gomega) {
		getPurge(g, p)
		g.Expect(conditionOf(p, v1alpha1.ConditionFailed).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(conditionOf(p, v1alpha1.ConditionFailed).Reason).To(Equal("CacheNodeNotFound"))
	}, timeout, interval).Should(Succeed())
}

// newConfigMap creates cn's ConfigMap, empty, as the CacheNode controller (not running
// here) would have.
func newConfigMap(t *testing.T, cn *v1alpha1.CacheNode) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: cachepod.ConfigMapName(cn), Namespace: cn.Namespace,
		Labels: map[string]string{"app.kubernetes.io/managed-by": "edgepool"}}}
	if err := k8s.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

// TestFinishedPurgeIsDeletedAfterItsTTL: the purge goes once it finished and its TTL
// passed, and the CacheNode's list of purges is moved past it first.
func TestFinishedPurgeIsDeletedAfterItsTTL(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(t, ns)
	cm := newConfigMap(t, cn)
	a := startTestAgent(t, 1)
	cachePod(t, cn, "node-a", a)
	p := newPurge(ns, 1)
	g.Expect(k8s.Create(ctx, p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(p), &v1alpha1.CachePurge{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "still there: %v", err)
	}, timeout, interval).Should(Succeed())
	g.Expect(a.Purges()).NotTo(BeEmpty())
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
	g.Expect(cm.Annotations[cachepod.PurgesSinceAnnotation]).To(Equal(p.CreationTimestamp.UTC().Format(time.RFC3339)))
}

// TestDeletedUnfinishedPurgeMovesTheList: a user's delete of a purge still pending on a
// node waits for the finalizer, which moves the CacheNode's list of purges past it, so a
// cache pod that restarts later does not take the purge for one it need not apply.
func TestDeletedUnfinishedPurgeMovesTheList(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(t, ns)
	cm := newConfigMap(t, cn)
	a := startTestAgent(t, 1)
	a.Set(func(s *fakeagent.State) { s.Down = true })
	cachePod(t, cn, "node-a", a)
	p := newPurge(ns, 3600)
	g.Expect(k8s.Create(ctx, p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		getPurge(g, p)
		g.Expect(p.Finalizers).To(ContainElement(Finalizer))
		g.Expect(p.Status.PendingNodes).To(BeEquivalentTo(1))
	}, timeout, interval).Should(Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
	g.Expect(cm.Annotations).NotTo(HaveKey(cachepod.PurgesSinceAnnotation))

	g.Expect(k8s.Delete(ctx, p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(p), &v1alpha1.CachePurge{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "still there: %v", err)
	}, timeout, interval).Should(Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(cm), cm)).To(Succeed())
	g.Expect(cm.Annotations[cachepod.PurgesSinceAnnotation]).To(Equal(p.CreationTimestamp.UTC().Format(time.RFC3339)))
	g.Expect(conditionOf(p, v1alpha1.ConditionComplete).Status).NotTo(Equal(metav1.ConditionTrue), "it was deleted unfinished")
}
