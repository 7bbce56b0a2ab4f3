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
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/cachepod"
	"github.com/edgepool/edgepool/internal/render"
)

// The Service in front of the cache pods (spec.service): a pure builder, and the steps that
// apply it, delete it when spec.service goes, and read it back for the status.

// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch;delete

func serviceName(cn *v1alpha1.CacheNode) string { return cn.Name }

// desiredService is the Service spec.service asks for, or nil. It selects the cache pods
// by their selector labels, so its endpoints are the ready ones: the EndpointSlice
// controller marks a pod whose readiness probe fails (every disk out, nginx not answering)
// not ready, and kube-proxy stops sending it new connections. publishNotReadyAddresses
// stays false for that reason. The https port exists only while a site has tls: nginx
// listens on listener.tlsPort only then. Its IP families are listener.ipFamilies when
// set (nginx listens on those), else the cluster's default.
func desiredService(cn *v1alpha1.CacheNode) *corev1.Service {
	s := cn.Spec.Service
	if s == nil {
		return nil
	}
	tcp := corev1.ProtocolTCP
	ports := []corev1.ServicePort{{Name: "http", Protocol: tcp, Port: s.Ports.HTTP,
		TargetPort: intstr.FromInt32(cn.Spec.Listener.Port), NodePort: s.Ports.HTTPNodePort}}
	if siteHasTLS(&cn.Spec) {
		ports = append(ports, corev1.ServicePort{Name: "https", Protocol: tcp, Port: s.Ports.HTTPS,
			TargetPort: intstr.FromInt32(cn.Spec.Listener.TLSPort), NodePort: s.Ports.HTTPSNodePort})
		if render.HTTP3(&cn.Spec) { // QUIC, on the same port numbers over UDP
			ports = append(ports, corev1.ServicePort{Name: "h3", Protocol: corev1.ProtocolUDP, Port: s.Ports.HTTPS,
				TargetPort: intstr.FromInt32(cn.Spec.Listener.TLSPort), NodePort: s.Ports.HTTPSNodePort})
		}
	}
	if s.Type == v1alpha1.ServiceTypeClusterIP {
		for i := range ports {
			ports[i].NodePort = 0 // the schema refuses them; the API server would too
		}
	}
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        serviceName(cn),
			Namespace:   cn.Namespace,
			Labels:      cachepod.ObjectLabels(cn),
			Annotations: maps.Clone(s.Annotations),
		},
		Spec: corev1.ServiceSpec{
			Type:                     corev1.ServiceType(s.Type),
			Selector:                 cachepod.SelectorLabels(cn),
			Ports:                    ports,
			ExternalTrafficPolicy:    corev1.ServiceExternalTrafficPolicy(s.TrafficPolicy()),
			LoadBalancerSourceRanges: s.LoadBalancerSourceRanges,
		},
	}
	if families := cn.Spec.Listener.IPFamilies; len(families) > 0 {
		policy := corev1.IPFamilyPolicySingleStack
		if len(families) > 1 {
			policy = corev1.IPFamilyPolicyRequireDualStack
		}
		svc.Spec.IPFamilyPolicy = &policy
		for _, f := range families {
			svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, corev1.IPFamily(f))
		}
	}
	if s.TrafficDistribution != "" {
		svc.Spec.TrafficDistribution = ptr.To(string(s.TrafficDistribution))
	}
	if s.LoadBalancerClass != "" {
		svc.Spec.LoadBalancerClass = ptr.To(s.LoadBalancerClass)
	}
	return svc
}

func siteHasTLS(spec *v1alpha1.CacheNodeSpec) bool {
	for _, site := range spec.Sites {
		if site.TLS != nil {
			return true
		}
	}
	return false
}

// reconcileService applies the Service spec.service asks for, or deletes the one cn
// controls when it asks for none. It runs after the DaemonSet's apply: a Service the API
// server refuses (a node port taken, say) fails the reconcile and shows in the status, but
// does not keep the cache pods from running.
func (r *Reconciler) reconcileService(ctx context.Context, cn *v1alpha1.CacheNode) error {
	svc := desiredService(cn)
	if svc == nil {
		return r.deleteService(ctx, cn)
	}
	switch applied, err := r.apply(ctx, cn, svc, &corev1.Service{}); {
	case err != nil:
		return err
	case applied:
		log.FromContext(ctx).Info("Applied Service", "service", klog.KObj(svc))
	}
	return nil
}

// deleteService deletes the Service of cn's name if cn controls it; the cache holds only
// labelled Services, so a Service of someone else's is not even seen.
func (r *Reconciler) deleteService(ctx context.Context, cn *v1alpha1.CacheNode) error {
	live := &corev1.Service{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: cn.Namespace, Name: serviceName(cn)}, live); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get Service: %w", err)
	case !metav1.IsControlledBy(live, cn):
		return nil
	}
	// The UID precondition: only the very Service that was read, not one recreated since.
	if err := r.Delete(ctx, live, client.Preconditions{UID: &live.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete Service: %w", err)
	}
	log.FromContext(ctx).Info("Deleted Service", "service", klog.KObj(live))
	return nil
}

// observeService reads cn's Service into obs when spec.service asks for one.
func (r *Reconciler) observeService(ctx context.Context, cn *v1alpha1.CacheNode, obs *observation) error {
	if cn.Spec.Service == nil {
		obs.serviceSeen = true
		return nil
	}
	live := &corev1.Service{}
	switch err := r.Get(ctx, client.ObjectKey{Namespace: cn.Namespace, Name: serviceName(cn)}, live); {
	case err == nil:
		obs.serviceSeen = true
		if metav1.IsControlledBy(live, cn) {
			obs.service = live
		}
	case apierrors.IsNotFound(err):
		obs.serviceSeen = true
	default:
		return fmt.Errorf("get Service: %w", err)
	}
	return nil
}

// serviceStatus is status.service: the Service's name and its load balancer's addresses,
// while the Service spec.service asks for exists.
func serviceStatus(svc *corev1.Service) v1alpha1.CacheNodeServiceStatus {
	if svc == nil {
		return v1alpha1.CacheNodeServiceStatus{}
	}
	st := v1alpha1.CacheNodeServiceStatus{Name: svc.Name}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		addr := in.IP
		if addr == "" {
			addr = in.Hostname
		}
		if addr != "" && len(st.LoadBalancerAddresses) < 16 { // the schema's bound
			st.LoadBalancerAddresses = append(st.LoadBalancerAddresses, addr)
		}
	}
	return st
}

// apiReader reads from the API server, past the manager's cache.
func (r *Reconciler) apiReader() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}
