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
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/render"
)

// sampleWithService is the sample CacheNode with a LoadBalancer Service, defaulted as
// the API server would.
func sampleWithService(t *testing.T, svc v1alpha1.CacheNodeService) *v1alpha1.CacheNode {
	t.Helper()
	data, err := os.ReadFile("../../config/samples/cache_v1alpha1_cachenode.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cn, err := render.DecodeCacheNode(data)
	if err != nil {
		t.Fatal(err)
	}
	cn.Namespace = "edge-system"
	cn.Spec.Service = &svc
	cn.Spec.Default()
	return cn
}

// TestDesiredServiceGolden pins the Service a LoadBalancer service gets: the selector of
// the cache pods, the ports to the listener, Local traffic policy by default, the zone
// preference, the cloud's annotations and source ranges. go test -update refreshes
// testdata/service-sample.golden.yaml.
func TestDesiredServiceGolden(t *testing.T) {
	cn := sampleWithService(t, v1alpha1.CacheNodeService{
		Type:                     v1alpha1.ServiceTypeLoadBalancer,
		Ports:                    v1alpha1.ServicePorts{HTTPNodePort: 30080},
		Annotations:              map[string]string{"service.beta.kubernetes.io/aws-load-balancer-type": "external"},
		LoadBalancerSourceRanges: []string{"203.0.113.0/24"},
		LoadBalancerClass:        "service.k8s.aws/nlb",
	})
	got, err := yaml.Marshal(desiredService(cn))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "service-sample.golden.yaml")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("desiredService differs from %s (go test -update refreshes it):\n%s", golden, got)
	}
}

func TestDesiredService(t *testing.T) {
	g := NewWithT(t)
	g.Expect(desiredService(sampleWithService(t, v1alpha1.CacheNodeService{}))).NotTo(BeNil())
	noService := sampleWithService(t, v1alpha1.CacheNodeService{})
	noService.Spec.Service = nil
	g.Expect(desiredService(noService)).To(BeNil())

	// ClusterIP: no external traffic policy (the API server refuses it) and no node ports.
	cn := sampleWithService(t, v1alpha1.CacheNodeService{})
	svc := desiredService(cn)
	g.Expect(svc.Spec.Type).To(Equal(corev1.ServiceTypeClusterIP))
	g.Expect(svc.Spec.ExternalTrafficPolicy).To(BeEmpty())
	g.Expect(svc.Spec.TrafficDistribution).To(HaveValue(Equal("PreferSameZone")))
	g.Expect(svc.Spec.PublishNotReadyAddresses).To(BeFalse())
	g.Expect(svc.Spec.Selector).To(Equal(desiredDaemonSet(cn, render.DefaultDiskPrefixes, DefaultCacheImage).Spec.Selector.MatchLabels))
	g.Expect(svc.Spec.Ports).To(Equal([]corev1.ServicePort{
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)},
	}), "no https port without a site with tls")

	// IP families: the cluster's default unless listener.ipFamilies names them.
	g.Expect(svc.Spec.IPFamilies).To(BeEmpty())
	g.Expect(svc.Spec.IPFamilyPolicy).To(BeNil())
	cn.Spec.Listener.IPFamilies = []v1alpha1.IPFamily{v1alpha1.IPv6}
	g.Expect(desiredService(cn).Spec.IPFamilies).To(Equal([]corev1.IPFamily{corev1.IPv6Protocol}))
	g.Expect(desiredService(cn).Spec.IPFamilyPolicy).To(HaveValue(Equal(corev1.IPFamilyPolicySingleStack)))
	cn.Spec.Listener.IPFamilies = []v1alpha1.IPFamily{v1alpha1.IPv6, v1alpha1.IPv4}
	g.Expect(desiredService(cn).Spec.IPFamilies).To(Equal([]corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}))
	g.Expect(desiredService(cn).Spec.IPFamilyPolicy).To(HaveValue(Equal(corev1.IPFamilyPolicyRequireDualStack)))

	// NodePort: Local unless told otherwise.
	cn = sampleWithService(t, v1alpha1.CacheNodeService{Type: v1alpha1.ServiceTypeNodePort})
	g.Expect(desiredService(cn).Spec.ExternalTrafficPolicy).To(Equal(corev1.ServiceExternalTrafficPolicyLocal))
	cn.Spec.Service.ExternalTrafficPolicy = v1alpha1.ExternalTrafficPolicyCluster
	g.Expect(desiredService(cn).Spec.ExternalTrafficPolicy).To(Equal(corev1.ServiceExternalTrafficPolicyCluster))

	// A site with tls adds https, to listener.tlsPort.
	cn = sampleWithService(t, v1alpha1.CacheNodeService{Type: v1alpha1.ServiceTypeNodePort,
		Ports: v1alpha1.ServicePorts{HTTP: 8080, HTTPS: 8443, HTTPNodePort: 30080, HTTPSNodePort: 30443}})
	cn.Spec.Origin = v1alpha1.Origin{}
	cn.Spec.Sites = []v1alpha1.Site{
		{Name: "plain", Hostnames: []string{"plain.example"}, Origin: v1alpha1.Origin{Servers: []string{"origin:80"}}},
		{Name: "secure", Hostnames: []string{"www.example"}, Origin: v1alpha1.Origin{Servers: []string{"origin:80"}},
			TLS: &v1alpha1.SiteTLS{SecretName: "www-tls"}},
	}
	cn.Spec.Listener.Port, cn.Spec.Listener.TLSPort = 8081, 9443
	g.Expect(desiredService(cn).Spec.Ports).To(Equal([]corev1.ServicePort{
		{Name: "http", Protocol: corev1.ProtocolTCP, Port: 8080, TargetPort: intstr.FromInt32(8081), NodePort: 30080},
		{Name: "https", Protocol: corev1.ProtocolTCP, Port: 8443, TargetPort: intstr.FromInt32(9443), NodePort: 30443},
	}))
}

func TestServiceStatus(t *testing.T) {
	g := NewWithT(t)
	g.Expect(serviceStatus(nil)).To(BeZero())
	svc := &corev1.Service{}
	svc.Name = "edge"
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.10"}, {Hostname: "edge.elb.example"}, {}}
	g.Expect(serviceStatus(svc)).To(Equal(v1alpha1.CacheNodeServiceStatus{Name: "edge",
		LoadBalancerAddresses: []string{"203.0.113.10", "edge.elb.example"}}))
}

// TestHTTP3OpensUDP: a site with http3 On opens UDP tlsPort in the pod, the Service (on
// the https port's numbers) and the NetworkPolicy (to the same clients as TCP); a site
// with tls alone opens none of them.
func TestHTTP3OpensUDP(t *testing.T) {
	g := NewWithT(t)
	cn := sampleWithService(t, v1alpha1.CacheNodeService{Type: v1alpha1.ServiceTypeNodePort,
		Ports: v1alpha1.ServicePorts{HTTP: 80, HTTPS: 443, HTTPSNodePort: 30443}})
	cn.Spec.Origin = v1alpha1.Origin{}
	cn.Spec.Listener.TLSPort, cn.Spec.Listener.ClientCIDRs = 9443, []string{"10.0.0.0/8"}
	cn.Spec.Sites = []v1alpha1.Site{{Name: "www", Hostnames: []string{"www.example"}, Origin: v1alpha1.Origin{Servers: []string{"origin:80"}},
		TLS: &v1alpha1.SiteTLS{SecretName: "www-tls", HTTP3: v1alpha1.HTTP3Off}}}
	udpPorts := func() (pod, svc, policy []int32) {
		for _, p := range desiredDaemonSet(cn, render.DefaultDiskPrefixes, DefaultCacheImage).Spec.Template.Spec.Containers[0].Ports {
			if p.Protocol == corev1.ProtocolUDP {
				pod = append(pod, p.ContainerPort)
			}
		}
		for _, p := range desiredService(cn).Spec.Ports {
			if p.Protocol == corev1.ProtocolUDP {
				g.Expect(p.Port).To(Equal(int32(443)))
				g.Expect(p.NodePort).To(Equal(int32(30443)))
				svc = append(svc, p.TargetPort.IntVal)
			}
		}
		clients := desiredNetworkPolicy(cn, AgentAccess{}).Spec.Ingress[0]
		g.Expect(clients.From).To(HaveLen(1))
		for _, p := range clients.Ports {
			if *p.Protocol == corev1.ProtocolUDP {
				policy = append(policy, p.Port.IntVal)
			}
		}
		return pod, svc, policy
	}
	pod, svc, policy := udpPorts()
	g.Expect(append(append(pod, svc...), policy...)).To(BeEmpty(), "no UDP without http3")
	cn.Spec.Sites[0].TLS.HTTP3 = v1alpha1.HTTP3On
	pod, svc, policy = udpPorts()
	g.Expect(pod).To(Equal([]int32{9443}))
	g.Expect(svc).To(Equal([]int32{9443}))
	g.Expect(policy).To(Equal([]int32{9443}))
}
