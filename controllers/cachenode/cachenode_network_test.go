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
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/cachepod"
	"github.com/edgepool/edgepool/internal/render"
)

// chartAccess is what the Helm chart passes with a release "edgepool" in edgepool-system
// and one scraper.
var chartAccess = AgentAccess{
	OperatorNamespace: "edgepool-system",
	OperatorPodLabels: map[string]string{
		"app.kubernetes.io/name": "edgepool", "app.kubernetes.io/instance": "edgepool", "app.kubernetes.io/component": "manager",
	},
	Scrapers: []Peer{{
		NamespaceLabels: map[string]string{NamespaceNameLabel: "monitoring"},
		PodLabels:       map[string]string{"app.kubernetes.io/name": "prometheus"},
	}},
}

func TestParseLabels(t *testing.T) {
	g := NewWithT(t)
	got, err := ParseLabels("app.kubernetes.io/name=edgepool,tier=")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(map[string]string{"app.kubernetes.io/name": "edgepool", "tier": ""}))
	got, err = ParseLabels("")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeEmpty())
	for _, bad := range []string{"a", "a=b,a=c", "a b=c", "a=b c", "a=b,", "-a=b", "a=" + string(make([]byte, 64))} {
		_, err := ParseLabels(bad)
		g.Expect(err).To(HaveOccurred(), "%q", bad)
	}
}

func TestParsePeer(t *testing.T) {
	g := NewWithT(t)
	const s = "namespace:kubernetes.io/metadata.name=monitoring,pod:app.kubernetes.io/name=prometheus,pod:team=obs"
	p, err := ParsePeer(s)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p).To(Equal(Peer{
		NamespaceLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"},
		PodLabels:       map[string]string{"app.kubernetes.io/name": "prometheus", "team": "obs"},
	}))
	g.Expect(p.String()).To(Equal(s))
	for _, bad := range []string{
		"", "pod:app=prometheus", // no namespace labels: pods of every namespace
		"kubernetes.io/metadata.name=monitoring", "node:a=b", "namespace:a", "namespace:a=b,namespace:a=c", "namespace:a=b;c",
	} {
		_, err := ParsePeer(bad)
		g.Expect(err).To(HaveOccurred(), "%q", bad)
	}
}

// agentPortOpenToAll reports whether some rule admits every source to the agent port.
func agentPortOpenToAll(np *networkingv1.NetworkPolicy, agentPort int32) bool {
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if (p.Port == nil || p.Port.IntVal == agentPort) && len(rule.From) == 0 {
				return true
			}
		}
		if len(rule.Ports) == 0 && len(rule.From) == 0 {
			return true
		}
	}
	return false
}

// TestDesiredNetworkPolicy: the policy selects exactly the CacheNode's pods, admits the
// listener port from the clientCIDRs or from anywhere, and the agent port only from the
// operator's pods and the named scrapers: never from everywhere.
func TestDesiredNetworkPolicy(t *testing.T) {
	base := defaulted(newCacheNode("edge-ns", "edge", "g"))
	operator := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{NamespaceNameLabel: "edgepool-system"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: chartAccess.OperatorPodLabels},
	}
	prometheus := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{NamespaceNameLabel: "monitoring"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
	}
	allOfNamespace := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"scrape": "true"}},
		PodSelector:       &metav1.LabelSelector{},
	}
	for _, tc := range []struct {
		name       string
		mutate     func(*v1alpha1.CacheNodeSpec)
		access     AgentAccess
		clients    []networkingv1.NetworkPolicyPeer // nil: from anywhere
		agentPeers []networkingv1.NetworkPolicyPeer // nil: no rule for the agent port
		listener   int32
		tls        int32 // 0: no TLS port
		agent      int32
	}{
		{name: "defaults: clients from anywhere, the agent from the operator and the scraper",
			access: chartAccess, agentPeers: []networkingv1.NetworkPolicyPeer{operator, prometheus}, listener: 8080, agent: 9145},
		{name: "clientCIDRs restrict the listener port",
			mutate: func(s *v1alpha1.CacheNodeSpec) { s.Listener.ClientCIDRs = []string{"10.0.0.0/8", "2001:db8::/32"} },
			access: chartAccess,
			clients: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}, {IPBlock: &networkingv1.IPBlock{CIDR: "2001:db8::/32"}},
			},
			agentPeers: []networkingv1.NetworkPolicyPeer{operator, prometheus}, listener: 8080, agent: 9145},
		{name: "the ports follow the listener",
			mutate: func(s *v1alpha1.CacheNodeSpec) { s.Listener.Port, s.Listener.AgentPort = 80, 9200 },
			access: chartAccess, agentPeers: []networkingv1.NetworkPolicyPeer{operator, prometheus}, listener: 80, agent: 9200},
		{name: "a scraper without pod labels: all pods of its namespaces",
			access:     AgentAccess{Scrapers: []Peer{{NamespaceLabels: map[string]string{"scrape": "true"}}}},
			agentPeers: []networkingv1.NetworkPolicyPeer{allOfNamespace}, listener: 8080, agent: 9145},
		{name: "operator outside the cluster and no scraper: no one on the agent port",
			access: AgentAccess{}, listener: 8080, agent: 9145},
		{name: "a scraper without namespace labels is never turned into every namespace",
			access: AgentAccess{Scrapers: []Peer{{PodLabels: map[string]string{"app": "x"}}}}, listener: 8080, agent: 9145},
		{name: "a site with tls: clients reach tlsPort like port",
			mutate: func(s *v1alpha1.CacheNodeSpec) {
				s.Listener.ClientCIDRs = []string{"10.0.0.0/8"}
				s.Sites = []v1alpha1.Site{{Name: "a", Hostnames: []string{"a.example"}, Origin: s.Origin, TLS: &v1alpha1.SiteTLS{SecretName: "a"}}}
				s.Origin = v1alpha1.Origin{}
			},
			access:  chartAccess,
			clients: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}},
			tls:     8443, agentPeers: []networkingv1.NetworkPolicyPeer{operator, prometheus}, listener: 8080, agent: 9145},
		{name: "hostNetwork: written all the same",
			mutate: func(s *v1alpha1.CacheNodeSpec) { s.HostNetwork = true },
			access: chartAccess, agentPeers: []networkingv1.NetworkPolicyPeer{operator, prometheus}, listener: 8080, agent: 9145},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cn := base.DeepCopy()
			if tc.mutate != nil {
				tc.mutate(&cn.Spec)
			}
			np := desiredNetworkPolicy(cn, tc.access)
			g.Expect(np.Namespace).To(Equal("edge-ns"))
			g.Expect(np.Labels).To(Equal(cachepod.ObjectLabels(cn)))
			g.Expect(np.Spec.PolicyTypes).To(Equal([]networkingv1.PolicyType{networkingv1.PolicyTypeIngress}))
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(sel.Matches(labels.Set(desiredDaemonSet(cn, render.DefaultDiskPrefixes, DefaultCacheImage).Spec.Template.Labels))).To(BeTrue(), "selects the cache pods")
			g.Expect(sel.Matches(labels.Set{cachepod.LabelName: cachepod.AppName, cachepod.LabelInstance: "other"})).To(BeFalse(), "selects no other CacheNode's pods")

			tcp := "TCP"
			if tc.tls == 0 {
				g.Expect(np.Spec.Ingress[0].Ports).To(HaveLen(1))
			} else {
				g.Expect(np.Spec.Ingress[0].Ports).To(HaveLen(2))
				g.Expect(string(*np.Spec.Ingress[0].Ports[1].Protocol)).To(Equal(tcp))
				g.Expect(*np.Spec.Ingress[0].Ports[1].Port).To(Equal(intstr.FromInt32(tc.tls)))
			}
			g.Expect(string(*np.Spec.Ingress[0].Ports[0].Protocol)).To(Equal(tcp))
			g.Expect(*np.Spec.Ingress[0].Ports[0].Port).To(Equal(intstr.FromInt32(tc.listener)))
			g.Expect(np.Spec.Ingress[0].From).To(Equal(tc.clients))
			if tc.agentPeers == nil {
				g.Expect(np.Spec.Ingress).To(HaveLen(1))
			} else {
				g.Expect(np.Spec.Ingress).To(HaveLen(2))
				g.Expect(*np.Spec.Ingress[1].Ports[0].Port).To(Equal(intstr.FromInt32(tc.agent)))
				g.Expect(np.Spec.Ingress[1].From).To(Equal(tc.agentPeers))
			}
			g.Expect(agentPortOpenToAll(np, tc.agent)).To(BeFalse())
		})
	}
}

// TestDesiredNetworkPolicyGolden pins the NetworkPolicy of the sample CacheNode with the
// chart's flags (go test -update refreshes it).
func TestDesiredNetworkPolicyGolden(t *testing.T) {
	for name, sample := range map[string]string{"sample": "cache_v1alpha1_cachenode.yaml", "sites": "cache_v1alpha1_cachenode_sites.yaml", "sharded": "cache_v1alpha1_cachenode_sharded.yaml"} {
		t.Run(name, func(t *testing.T) { networkPolicyGolden(t, name, sample) })
	}
}

func networkPolicyGolden(t *testing.T, name, sample string) {
	data, err := os.ReadFile("../../config/samples/" + sample)
	if err != nil {
		t.Fatal(err)
	}
	cn, err := render.DecodeCacheNode(data)
	if err != nil {
		t.Fatal(err)
	}
	cn.Namespace = "edge-system"
	got, err := yaml.Marshal(desiredNetworkPolicy(cn, chartAccess))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "networkpolicy-"+name+".golden.yaml")
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
		t.Errorf("desiredNetworkPolicy differs from %s (go test -update refreshes it):\n%s", golden, got)
	}
}
