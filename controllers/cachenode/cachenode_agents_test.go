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
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/cachepod"
	"github.com/edgepool/edgepool/internal/test/fakeagent"
)

// runningCachePod creates a pod of cn on node, reported running at 127.0.0.1 with its
// agent on the given port, as the DaemonSet controller and a kubelet would (envtest runs neither).
func runningCachePod(t *testing.T, cn *v1alpha1.CacheNode, node string, agentPort int32) {
	g := NewWithT(t)
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: cn.Name + "-" + node, Namespace: cn.Namespace, Labels: cachepod.ObjectLabels(cn)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "cache", Image: "edgepool/cache:0.1.0",
			Ports: []corev1.ContainerPort{{Name: cachepod.AgentPortName, ContainerPort: agentPort}}}}},
	}
	g.Expect(k8s.Create(ctx, pod)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	patch := client.MergeFrom(pod.DeepCopy()) // the operator annotates the pod meanwhile
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", HostIP: "127.0.0.1"}
	g.Expect(k8s.Status().Patch(ctx, pod, patch)).To(Succeed())
}

// TestAgentReportsReachStatus: the watcher asks the agents outside the reconcile; a report
// reaches the status when it changes, an unchanged one writes nothing, and an agent that
// hangs delays neither the others' reports nor a reconcile.
func TestAgentReportsReachStatus(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "agents")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.ConfigHash).NotTo(BeEmpty())
	}, timeout, interval).Should(Succeed())

	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	hanging := fakeagent.Start(t, nil, fakeagent.State{Hang: hang})
	runningCachePod(t, cn, "edge-slow", hanging.Port())
	g.Eventually(hanging.StatusAsked, timeout, interval).Should(BeNumerically(">=", 1))

	healthy := fakeagent.Start(t, nil, fakeagent.State{Status: agentapi.Status{ConfigHash: cn.Status.ConfigHash, WindowSeconds: 60,
		Disks: []agentapi.DiskStatus{{Name: "nvme0", Ready: true}}}})
	runningCachePod(t, cn, "edge-1", healthy.Port())
	// Still "not asked yet" for the hanging agent: the healthy one's report came first.
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		c := condition(cn, v1alpha1.ConditionDisksReady)
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(c.Message).To(ContainSubstring("on 1 node; no answer from edge-slow (not asked yet)"))
	}, timeout, interval).Should(Succeed())

	start := time.Now()
	_, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: key})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(time.Since(start)).To(BeNumerically("<", agentTimeout), "a reconcile waited for an agent")

	// Unchanged reports write nothing, however often the agents are asked.
	eventuallyReconcilesWithoutWrites(g, key)
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(condition(cn, v1alpha1.ConditionDisksReady).Message).To(ContainSubstring("no answer from edge-slow (Get "))
	}, timeout, interval).Should(Succeed())
	eventuallyReconcilesWithoutWrites(g, key)
	before, seen := writes.Load(), healthy.StatusAsked()
	g.Eventually(healthy.StatusAsked, timeout, interval).Should(BeNumerically(">=", seen+5))
	g.Expect(writes.Load()-before).To(BeZero(), "writes while the reports did not change")

	// A changed report reaches the status without any other event.
	healthy.Set(func(s *fakeagent.State) {
		s.Status.Disks = []agentapi.DiskStatus{{Name: "nvme0", Reason: "not a mount point"}}
	})
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		c := condition(cn, v1alpha1.ConditionDisksReady)
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Message).To(ContainSubstring("edge-1 (nvme0: not a mount point)"))
	}, timeout, interval).Should(Succeed())
}
