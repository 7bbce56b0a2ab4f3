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

package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

func withService(name string, svc v1alpha1.CacheNodeService) *v1alpha1.CacheNode {
	cn := minimal(name)
	cn.Spec.Service = &svc
	return cn
}

// TestServiceDefaults: an empty service is a ClusterIP Service on 80 and 443 preferring the
// client's zone, as the Go defaults (used offline) say; no externalTrafficPolicy is
// written, since the API server refuses it on ClusterIP.
func TestServiceDefaults(t *testing.T) {
	cn := withService("service-defaults", v1alpha1.CacheNodeService{})
	if err := k8s.Create(context.Background(), cn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), cn) })
	got := &v1alpha1.CacheNode{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(cn), got); err != nil {
		t.Fatal(err)
	}
	want := v1alpha1.CacheNodeService{Type: v1alpha1.ServiceTypeClusterIP, Ports: v1alpha1.ServicePorts{HTTP: 80, HTTPS: 443},
		TrafficDistribution: v1alpha1.TrafficDistributionPreferSameZone}
	if diff := cmp.Diff(&want, got.Spec.Service); diff != "" {
		t.Errorf("schema defaults (-want +API server):\n%s", diff)
	}
	spec := withService("service-defaults", v1alpha1.CacheNodeService{}).Spec
	spec.Default()
	if diff := cmp.Diff(got.Spec, spec, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("Go defaults differ from the schema's (-API server +Go):\n%s", diff)
	}
	if p := got.Spec.Service.TrafficPolicy(); p != "" {
		t.Errorf("ClusterIP: externalTrafficPolicy %q, want none", p)
	}
	got.Spec.Service.Type = v1alpha1.ServiceTypeNodePort
	if p := got.Spec.Service.TrafficPolicy(); p != v1alpha1.ExternalTrafficPolicyLocal {
		t.Errorf("NodePort: externalTrafficPolicy %q, want Local", p)
	}
}

func TestInvalidServicesAreRejected(t *testing.T) {
	lb := v1alpha1.ServiceTypeLoadBalancer
	for _, tc := range []struct {
		name string
		svc  v1alpha1.CacheNodeService
		want []string
	}{
		{"unknown type", v1alpha1.CacheNodeService{Type: "ExternalName"},
			[]string{"spec.service.type", "Unsupported value"}},
		{"externalTrafficPolicy on ClusterIP", v1alpha1.CacheNodeService{ExternalTrafficPolicy: v1alpha1.ExternalTrafficPolicyLocal},
			[]string{"spec.service.externalTrafficPolicy", "externalTrafficPolicy applies to NodePort and LoadBalancer Services only"}},
		{"unknown externalTrafficPolicy", v1alpha1.CacheNodeService{Type: lb, ExternalTrafficPolicy: "Nearest"},
			[]string{"spec.service.externalTrafficPolicy", "Unsupported value"}},
		{"PreferClose", v1alpha1.CacheNodeService{TrafficDistribution: "PreferClose"},
			[]string{"spec.service.trafficDistribution", "Unsupported value"}},
		{"http port 0", v1alpha1.CacheNodeService{Ports: v1alpha1.ServicePorts{HTTP: -1}},
			[]string{"spec.service.ports.http", "greater than or equal to 1"}},
		{"https port too big", v1alpha1.CacheNodeService{Ports: v1alpha1.ServicePorts{HTTPS: 65536}},
			[]string{"spec.service.ports.https", "less than or equal to 65535"}},
		{"http equals https", v1alpha1.CacheNodeService{Ports: v1alpha1.ServicePorts{HTTP: 8443, HTTPS: 8443}},
			[]string{"spec.service.ports.https", "http and https must differ"}},
		{"http equals the default https", v1alpha1.CacheNodeService{Ports: v1alpha1.ServicePorts{HTTP: 443}},
			[]string{"spec.service.ports.https", "http and https must differ"}},
		{"node ports equal", v1alpha1.CacheNodeService{Type: lb, Ports: v1alpha1.ServicePorts{HTTPNodePort: 30080, HTTPSNodePort: 30080}},
			[]string{"spec.service.ports.httpsNodePort", "httpNodePort and httpsNodePort must differ"}},
		{"node port on ClusterIP", v1alpha1.CacheNodeService{Ports: v1alpha1.ServicePorts{HTTPNodePort: 30080}},
			[]string{"spec.service.ports", "node ports apply to NodePort and LoadBalancer Services only"}},
		{"source ranges on NodePort", v1alpha1.CacheNodeService{Type: v1alpha1.ServiceTypeNodePort, LoadBalancerSourceRanges: []string{"10.0.0.0/8"}},
			[]string{"spec.service.loadBalancerSourceRanges", "loadBalancerSourceRanges applies to LoadBalancer Services only"}},
		{"source range with host bits", v1alpha1.CacheNodeService{Type: lb, LoadBalancerSourceRanges: []string{"203.0.113.7/24"}},
			[]string{"spec.service.loadBalancerSourceRanges", "must be CIDRs in canonical form"}},
		{"source range not canonical", v1alpha1.CacheNodeService{Type: lb, LoadBalancerSourceRanges: []string{"2001:DB8::/32"}},
			[]string{"spec.service.loadBalancerSourceRanges", "must be CIDRs in canonical form"}},
		{"source range injection", v1alpha1.CacheNodeService{Type: lb, LoadBalancerSourceRanges: []string{"10.0.0.0/8,0.0.0.0/0"}},
			[]string{"spec.service.loadBalancerSourceRanges", "must be CIDRs in canonical form"}},
		{"duplicate source ranges", v1alpha1.CacheNodeService{Type: lb, LoadBalancerSourceRanges: []string{"10.0.0.0/8", "10.0.0.0/8"}},
			[]string{"spec.service.loadBalancerSourceRanges[1]", "Duplicate value"}},
		{"load balancer class on NodePort", v1alpha1.CacheNodeService{Type: v1alpha1.ServiceTypeNodePort, LoadBalancerClass: "example.com/lb"},
			[]string{"spec.service.loadBalancerClass", "loadBalancerClass applies to LoadBalancer Services only"}},
		{"load balancer class without a prefix", v1alpha1.CacheNodeService{Type: lb, LoadBalancerClass: "nlb"},
			[]string{"spec.service.loadBalancerClass", "loadBalancerClass is a domain-prefixed name, e.g. service.k8s.aws/nlb"}},
		{"annotation key with a space", v1alpha1.CacheNodeService{Annotations: map[string]string{"example.com/a b": "x"}},
			[]string{"spec.service.annotations", "annotation keys must be qualified names"}},
		{"annotation key of the operator", v1alpha1.CacheNodeService{Annotations: map[string]string{"edgepool.io/applied-hash": "x"}},
			[]string{"spec.service.annotations", "annotation keys under edgepool.io/ are the operator's"}},
		{"annotation key's name over 63", v1alpha1.CacheNodeService{Annotations: map[string]string{"example.com/" + strings.Repeat("n", 64): "x"}},
			[]string{"spec.service.annotations", "then a name of at most 63 letters"}},
		{"annotation key's prefix over 253", v1alpha1.CacheNodeService{Annotations: map[string]string{strings.Repeat("p", 254) + "/n": "x"}},
			[]string{"spec.service.annotations", "an annotation key's prefix is at most 253 characters"}},
		{"annotation value too long", v1alpha1.CacheNodeService{Annotations: map[string]string{"example.com/a": strings.Repeat("x", 4097)}},
			[]string{"spec.service.annotations", "values at most 4096"}},
		{"too many annotations", v1alpha1.CacheNodeService{Annotations: func() map[string]string {
			m := map[string]string{}
			for _, k := range strings.Split("abcdefghijklmnopq", "") {
				m["example.com/"+k] = "x"
			}
			return m
		}()}, []string{"spec.service.annotations", "must have at most 16 items"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := dryRunCreate(withService("invalid-service", tc.svc))
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
		})
	}
}

// TestServiceNameMustBeADNSLabel: the Service is named as the CacheNode, and a Service's
// name is a DNS label starting with a letter; a CacheNode without a service may keep any name.
func TestServiceNameMustBeADNSLabel(t *testing.T) {
	for _, name := range []string{"1edge", "edge.v2"} {
		if err := dryRunCreate(minimal(name)); err != nil {
			t.Fatalf("%s without a service: %v", name, err)
		}
		err := dryRunCreate(withService(name, v1alpha1.CacheNodeService{}))
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.name must start with a letter") {
			t.Errorf("%s with a service: want metadata.name refused, got %v", name, err)
		}
	}
}

func TestValidServicesAreAccepted(t *testing.T) {
	for _, svc := range []v1alpha1.CacheNodeService{
		{Type: v1alpha1.ServiceTypeNodePort, Ports: v1alpha1.ServicePorts{HTTP: 8080, HTTPS: 8443, HTTPNodePort: 30080, HTTPSNodePort: 30443},
			ExternalTrafficPolicy: v1alpha1.ExternalTrafficPolicyCluster, TrafficDistribution: v1alpha1.TrafficDistributionPreferSameNode},
		{Type: v1alpha1.ServiceTypeLoadBalancer, LoadBalancerClass: "service.k8s.aws/nlb",
			LoadBalancerSourceRanges: []string{"203.0.113.0/24", "2001:db8::/32", "0.0.0.0/0"},
			Annotations: map[string]string{"service.beta.kubernetes.io/aws-load-balancer-type": "external", "plain": strings.Repeat("x", 4096),
				// The longest key the API server takes: a 253-character prefix and a 63-character name.
				strings.Repeat("a.", 126) + "a/" + strings.Repeat("n", 63): "x"}},
	} {
		cn := withService("valid-service", svc)
		// With hostNetwork too: the Service's endpoints are then the nodes' addresses.
		cn.Spec.HostNetwork = true
		if err := dryRunCreate(cn); err != nil {
			t.Errorf("%s refused: %v", svc.Type, err)
		}
	}
}

// TestLoadBalancerClassCannotChange: Kubernetes refuses a changed loadBalancerClass; the
// schema says so when the CacheNode changes, not later when the Service is applied.
func TestLoadBalancerClassCannotChange(t *testing.T) {
	ctx := context.Background()
	cn := withService("lb-class", v1alpha1.CacheNodeService{Type: v1alpha1.ServiceTypeLoadBalancer, LoadBalancerClass: "example.com/a"})
	if err := k8s.Create(ctx, cn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(ctx, cn) })
	cn.Spec.Service.LoadBalancerClass = "example.com/b"
	err := k8s.Update(ctx, cn)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.service.loadBalancerClass") ||
		!strings.Contains(err.Error(), "loadBalancerClass cannot change once set") {
		t.Fatalf("want the change refused, naming the field; got %v", err)
	}
}
