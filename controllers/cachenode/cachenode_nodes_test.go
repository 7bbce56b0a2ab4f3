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
	"sort"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// TestNodeEventsEnqueueOnlySelectingCacheNodes feeds Node events to the controller's Node
// handler, with the CacheNodes in the manager's cache: an event enqueues the CacheNodes
// that select the node before or after it, and no other.
func TestNodeEventsEnqueueOnlySelectingCacheNodes(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	group := func(s string) string { return ns + "-" + s }
	for _, name := range []string{"a", "b", "c"} {
		g.Expect(k8s.Create(ctx, newCacheNode(ns, name, group(name)))).To(Succeed())
	}
	node := func(labels map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-node", Labels: labels}}
	}
	inGroup := func(s string, more ...string) *corev1.Node {
		labels := map[string]string{"edgepool.test/group": group(s)}
		for i := 0; i+1 < len(more); i += 2 {
			labels[more[i]] = more[i+1]
		}
		return node(labels)
	}
	h := reconciler.nodeHandler()
	// enqueued runs one event through the handler and names the CacheNodes of ns it enqueued.
	enqueued := func(send func(q workqueue.TypedRateLimitingInterface[reconcile.Request])) []string {
		q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
		defer q.ShutDown()
		send(q)
		var names []string
		for q.Len() > 0 {
			req, _ := q.Get()
			if req.Namespace == ns {
				names = append(names, req.Name)
			}
			q.Done(req)
		}
		sort.Strings(names)
		return names
	}
	update := func(old, new *corev1.Node) []string {
		return enqueued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			h.Update(ctx, event.TypedUpdateEvent[client.Object]{ObjectOld: old, ObjectNew: new}, q)
		})
	}
	// Once the manager's cache holds the three CacheNodes, a new node concerns the one
	// that selects it.
	for _, name := range []string{"a", "b", "c"} {
		g.Eventually(func() []string {
			return enqueued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				h.Create(ctx, event.TypedCreateEvent[client.Object]{Object: inGroup(name)}, q)
			})
		}, timeout, interval).Should(Equal([]string{name}))
	}

	g.Expect(update(inGroup("a"), inGroup("b"))).To(Equal([]string{"a", "b"}), "a node leaving a's selection for b's concerns both")
	g.Expect(update(inGroup("a"), inGroup("a", DiskLabel(v1alpha1.MediaNVMe), "2"))).To(Equal([]string{"a"}), "a disk label concerns the CacheNodes selecting the node")
	g.Expect(update(inGroup("a"), node(map[string]string{"other": "x"}))).To(Equal([]string{"a"}), "a node leaving every selection concerns the one it left")
	g.Expect(update(node(map[string]string{"other": "x"}), node(map[string]string{"other": "y"}))).To(BeEmpty(), "a node no CacheNode selects concerns none")
	g.Expect(enqueued(func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		h.Delete(ctx, event.TypedDeleteEvent[client.Object]{Object: inGroup("c")}, q)
	})).To(Equal([]string{"c"}))
}

// TestNodeMovingBetweenSelectionsUpdatesBoth relabels a real Node from one CacheNode's
// selection to another's: both statuses follow, though only the two are enqueued.
func TestNodeMovingBetweenSelectionsUpdatesBoth(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	for _, name := range []string{"from", "to"} {
		g.Expect(k8s.Create(ctx, newCacheNode(ns, name, ns+"-"+name))).To(Succeed())
	}
	n := newNode(t, ns+"-mover", map[string]string{"edgepool.test/group": ns + "-from"})
	selected := func(name string) func(Gomega) int32 {
		return func(g Gomega) int32 {
			cn := &v1alpha1.CacheNode{}
			get(g, cn, types.NamespacedName{Namespace: ns, Name: name})
			return cn.Status.SelectedNodes
		}
	}
	g.Eventually(selected("from"), timeout, interval).Should(BeEquivalentTo(1))
	g.Eventually(selected("to"), timeout, interval).Should(BeEquivalentTo(0))

	patch := client.MergeFrom(n.DeepCopy())
	n.Labels["edgepool.test/group"] = ns + "-to"
	g.Expect(k8s.Patch(ctx, n, patch)).To(Succeed())
	g.Eventually(selected("from"), timeout, interval).Should(BeEquivalentTo(0))
	g.Eventually(selected("to"), timeout, interval).Should(BeEquivalentTo(1))
}
