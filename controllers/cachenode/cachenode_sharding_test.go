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
	"regexp"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/cachepod"
)

// ringServers are the addresses of the ring's members in a rendered nginx.conf, in the
// order of their upstreams (their names').
func ringServers(conf string) []string {
	var servers []string
	for _, m := range regexp.MustCompile(`upstream ring_(?:\d+|self) \{ server (\S+?)[ ;]`).FindAllStringSubmatch(conf, -1) {
		servers = append(servers, m[1])
	}
	return servers
}

// TestShardingRingFollowsReadyPods: a sharded CacheNode's ring is its ready cache pods,
// by node name, at their addresses, and nothing else: a pod joins when it turns ready and leaves when it
// turns unready or its deletion starts. With no pod ready, each pod owns every key. The
// status counts the members, and the peer port is open to the CacheNode's pods only.
func TestShardingRingFollowsReadyPods(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "fleet", "sharding")
	cn.Spec.Sharding = &v1alpha1.Sharding{}
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	g.Expect(cn.Spec.Sharding.PeerPort).To(BeEquivalentTo(v1alpha1.DefaultPeerPort), "the schema's default")

	ring := func(g Gomega) []string {
		cm := &corev1.ConfigMap{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: cachepod.ConfigMapName(cn)}, cm)).To(Succeed())
		return ringServers(cm.Data[agentapi.ConfigKey])
	}
	members := func(g Gomega) int32 {
		get(g, cn, key)
		g.Expect(cn.Status.Sharding).NotTo(BeNil())
		return cn.Status.Sharding.Members
	}
	g.Eventually(func(g Gomega) {
		g.Expect(ring(g)).To(Equal([]string{"127.0.0.1:8090"}))
		g.Expect(members(g)).To(BeZero())
	}, timeout, interval).Should(Succeed())

	// Pods as the DaemonSet controller and the kubelets would make them (envtest runs
	// neither).
	// The operator annotates its pods meanwhile: read, change, write until it holds.
	writeStatus := func(pod *corev1.Pod, change func(*corev1.PodStatus)) {
		t.Helper()
		g.Eventually(func(g Gomega) {
			get(g, pod, client.ObjectKeyFromObject(pod))
			change(&pod.Status)
			g.Expect(k8s.Status().Update(ctx, pod)).To(Succeed())
		}, timeout, interval).Should(Succeed())
	}
	setReady := func(pod *corev1.Pod, ready bool) {
		t.Helper()
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		writeStatus(pod, func(s *corev1.PodStatus) {
			s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		})
	}
	newPod := func(name, node, ip string, ready bool) *corev1.Pod {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: cachepod.ObjectLabels(cn)},
			Spec: corev1.PodSpec{NodeName: node,
				Containers: []corev1.Container{{Name: "cache", Image: "edgepool/cache:0.1.0"}}},
		}
		g.Expect(k8s.Create(ctx, pod)).To(Succeed())
		writeStatus(pod, func(s *corev1.PodStatus) {
			s.Phase, s.PodIP, s.PodIPs = corev1.PodRunning, ip, []corev1.PodIP{{IP: ip}}
		})
		setReady(pod, ready)
		return pod
	}
	a := newPod("fleet-a", "edge-c", "10.1.0.30", true)
	newPod("fleet-b", "edge-a", "10.1.0.4", true)
	c := newPod("fleet-c", "edge-b", "10.1.0.5", false)
	// Another CacheNode's pod never joins.
	other := newCacheNode(ns, "other", "sharding-other")
	stranger := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "other-a", Namespace: ns, Labels: cachepod.ObjectLabels(other)},
		Spec: corev1.PodSpec{NodeName: "edge-d",
			Containers: []corev1.Container{{Name: "cache", Image: "edgepool/cache:0.1.0"}}},
	}
	g.Expect(k8s.Create(ctx, stranger)).To(Succeed())
	stranger.Status = corev1.PodStatus{PodIP: "10.1.0.6", PodIPs: []corev1.PodIP{{IP: "10.1.0.6"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	g.Expect(k8s.Status().Update(ctx, stranger)).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(ring(g)).To(Equal([]string{"10.1.0.4:8090", "10.1.0.30:8090"}), "by node name")
		g.Expect(members(g)).To(BeEquivalentTo(2))
		g.Expect(cn.Status.Sharding.MemberPods).To(Equal([]string{"fleet-a", "fleet-b"}), "the pods in the ring, by name")
	}, timeout, interval).Should(Succeed())

	setReady(c, true)
	g.Eventually(ring, timeout, interval).Should(Equal([]string{"10.1.0.4:8090", "10.1.0.5:8090", "10.1.0.30:8090"}))

	setReady(a, false)
	g.Eventually(ring, timeout, interval).Should(Equal([]string{"10.1.0.4:8090", "10.1.0.5:8090"}))

	// A pod whose deletion started leaves at once, before its nginx stops.
	g.Eventually(func(g Gomega) {
		get(g, c, client.ObjectKeyFromObject(c))
		c.Finalizers = []string{"edgepool.test/hold"}
		g.Expect(k8s.Update(ctx, c)).To(Succeed())
	}, timeout, interval).Should(Succeed())
	g.Expect(k8s.Delete(ctx, c)).To(Succeed())
	t.Cleanup(func() {
		held := &corev1.Pod{}
		if k8s.Get(ctx, client.ObjectKeyFromObject(c), held) == nil {
			held.Finalizers = nil
			_ = k8s.Update(ctx, held)
		}
	})
	g.Eventually(func(g Gomega) {
		g.Expect(ring(g)).To(Equal([]string{"10.1.0.4:8090"}))
		g.Expect(members(g)).To(BeEquivalentTo(1))
	}, timeout, interval).Should(Succeed())

	np := &networkingv1.NetworkPolicy{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: cachepod.NetworkPolicyName(cn)}, np)).To(Succeed())
	g.Expect(np.Spec.Ingress).To(ContainElement(networkingv1.NetworkPolicyIngressRule{
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(v1alpha1.DefaultPeerPort))}},
		From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: cachepod.ObjectLabels(cn)}}},
	}))

	// Turning sharding off drops the ring and its status.
	updateCacheNode(g, cn, func(cn *v1alpha1.CacheNode) { cn.Spec.Sharding = nil })
	g.Eventually(func(g Gomega) {
		g.Expect(ring(g)).To(BeEmpty())
		get(g, cn, key)
		g.Expect(cn.Status.Sharding).To(BeNil())
	}, timeout, interval).Should(Succeed())
}
