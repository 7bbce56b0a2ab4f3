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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/cachepod"
	"github.com/edgepool/edgepool/internal/ssa"
)

// TestServiceCreatedUpdatedRemoved: spec.service makes a Service owned by the CacheNode,
// selecting its pods, named in the status; a change reaches it (type, annotations, the
// load balancer's addresses back into the status); removing spec.service deletes it.
func TestServiceCreatedUpdatedRemoved(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "service")
	cn.Spec.Service = &v1alpha1.CacheNodeService{}
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)

	svc := &corev1.Service{}
	g.Eventually(func(g Gomega) { get(g, svc, key) }, timeout, interval).Should(Succeed())
	g.Expect(metav1.IsControlledBy(svc, cn)).To(BeTrue())
	g.Expect(svc.Spec.Type).To(Equal(corev1.ServiceTypeClusterIP))
	g.Expect(svc.Spec.ClusterIP).NotTo(BeEmpty())
	g.Expect(svc.Spec.Selector).To(Equal(cachepod.SelectorLabels(cn)))
	g.Expect(svc.Spec.PublishNotReadyAddresses).To(BeFalse())
	g.Expect(svc.Spec.TrafficDistribution).To(HaveValue(Equal("PreferSameZone")))
	g.Expect(svc.Spec.Ports).To(HaveLen(1))
	g.Expect(svc.Spec.Ports[0].Port).To(BeEquivalentTo(80))
	g.Expect(svc.Spec.Ports[0].TargetPort).To(Equal(intstr.FromInt32(8080)))
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.Service).To(Equal(v1alpha1.CacheNodeServiceStatus{Name: "edge"}))
	}, timeout, interval).Should(Succeed())
	// The apply keeps the operator's own annotations beside the desired ones: the
	// ConfigMap publishes the operator's key.
	cm := &corev1.ConfigMap{}
	get(g, cm, types.NamespacedName{Namespace: ns, Name: cachepod.ConfigMapName(cn)})
	g.Expect(cm.Annotations).To(HaveKey(OperatorKeysAnnotation))

	updateCacheNode(g, cn, func(cn *v1alpha1.CacheNode) {
		cn.Spec.Service = &v1alpha1.CacheNodeService{Type: v1alpha1.ServiceTypeLoadBalancer,
			Ports:       v1alpha1.ServicePorts{HTTP: 8000},
			Annotations: map[string]string{"lb.example.com/health-check": "/readyz"}}
	})
	g.Eventually(func(g Gomega) {
		get(g, svc, key)
		g.Expect(svc.Spec.Type).To(Equal(corev1.ServiceTypeLoadBalancer))
		g.Expect(svc.Spec.ExternalTrafficPolicy).To(Equal(corev1.ServiceExternalTrafficPolicyLocal))
		g.Expect(svc.Spec.HealthCheckNodePort).NotTo(BeZero(), "Local gives the load balancer a health check per node")
		g.Expect(svc.Spec.Ports[0].Port).To(BeEquivalentTo(8000))
		g.Expect(svc.Spec.Ports[0].NodePort).NotTo(BeZero())
		g.Expect(svc.Annotations).To(HaveKeyWithValue("lb.example.com/health-check", "/readyz"))
		g.Expect(svc.Annotations).To(HaveKey(ssa.AppliedHashAnnotation))
	}, timeout, interval).Should(Succeed())

	// A load balancer controller (none runs here) reports its address.
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.10"}}
	g.Expect(k8s.Status().Update(ctx, svc)).To(Succeed())
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.Service).To(Equal(v1alpha1.CacheNodeServiceStatus{Name: "edge", LoadBalancerAddresses: []string{"203.0.113.10"}}))
	}, timeout, interval).Should(Succeed())
	// Converged, the Service costs no write: the fields the API server fills in (cluster
	// IP, node ports, health check port) are not the operator's to compare.
	eventuallyReconcilesWithoutWrites(g, key)
	before := writes.Load()
	for range 10 {
		_, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(writes.Load()-before).To(BeZero(), "writes during 10 no-op reconciles")

	updateCacheNode(g, cn, func(cn *v1alpha1.CacheNode) { cn.Spec.Service = nil })
	g.Eventually(func() bool { return apierrors.IsNotFound(k8s.Get(ctx, key, &corev1.Service{})) }, timeout, interval).Should(BeTrue())
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.Service).To(BeZero())
		g.Expect(cn.Status.ObservedGeneration).To(Equal(cn.Generation))
	}, timeout, interval).Should(Succeed())
	eventuallyReconcilesWithoutWrites(g, key)
}

// TestForeignServiceIsNotTakenOver: a Service of the CacheNode's name that it does not
// control, without edgepool's labels (so not in the manager's cache), is neither changed
// nor deleted; the status says so and someone must act.
func TestForeignServiceIsNotTakenOver(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns, Labels: map[string]string{"app": "theirs"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "theirs"},
			Ports: []corev1.ServicePort{{Port: 9999, TargetPort: intstr.FromInt32(9999)}}},
	}
	g.Expect(k8s.Create(ctx, foreign)).To(Succeed())
	cn := newCacheNode(ns, "edge", "foreign-service")
	cn.Spec.Service = &v1alpha1.CacheNodeService{}
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(ctx, cn) })
	key := client.ObjectKeyFromObject(cn)
	g.Eventually(func(g Gomega) {
		_, err := reconciler.Reconcile(ctx, ctrl.Request{NamespacedName: key})
		g.Expect(err).To(MatchError(ContainSubstring("Service edge exists and is not controlled by this CacheNode")))
	}, timeout, interval).Should(Succeed())
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(condition(cn, "Ready").Reason).To(Equal("ApplyFailed"))
		g.Expect(condition(cn, "Ready").Message).To(ContainSubstring("Service edge exists and is not controlled by this CacheNode"))
		g.Expect(condition(cn, "Stalled").Status).To(Equal(metav1.ConditionTrue))
		g.Expect(cn.Status.Service).To(BeZero())
	}, timeout, interval).Should(Succeed())

	// Removing spec.service does not delete it either.
	updateCacheNode(g, cn, func(cn *v1alpha1.CacheNode) { cn.Spec.Service = nil })
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.ObservedGeneration).To(Equal(cn.Generation))
		g.Expect(condition(cn, "Ready").Reason).To(Equal("NoEligibleNodes")) // no node in its group: the next blocker
	}, timeout, interval).Should(Succeed())
	time.Sleep(time.Second) // give the running manager time to misbehave
	after := &corev1.Service{}
	get(g, after, client.ObjectKeyFromObject(foreign))
	g.Expect(after.UID).To(Equal(foreign.UID))
	g.Expect(after.Spec.Selector).To(Equal(foreign.Spec.Selector))
	g.Expect(after.Spec.Ports[0].Port).To(BeEquivalentTo(9999))
	g.Expect(after.Annotations).NotTo(HaveKey(ssa.AppliedHashAnnotation))
	g.Expect(after.OwnerReferences).To(BeEmpty())
}
