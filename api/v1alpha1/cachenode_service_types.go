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

package v1alpha1

// The Service in front of the cache pods (spec.service): a way in for clients that do not
// reach the pods' own addresses. Nothing of it reaches nginx.conf; the API server checks
// it again when the operator applies the Service. See docs/way-in.md for which to pick.

// ServiceType is the type of the cache pods' Service.
// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
type ServiceType string

const (
	// ServiceTypeClusterIP is reachable from inside the cluster only.
	ServiceTypeClusterIP ServiceType = "ClusterIP"
	// ServiceTypeNodePort also opens a port on every node.
	ServiceTypeNodePort ServiceType = "NodePort"
	// ServiceTypeLoadBalancer also asks the cloud (or the cluster's load-balancer
	// controller) for a load balancer in front of the node ports.
	ServiceTypeLoadBalancer ServiceType = "LoadBalancer"
)

// ExternalTrafficPolicy says where a node sends traffic that came to its node port or
// load balancer.
// +kubebuilder:validation:Enum=Local;Cluster
type ExternalTrafficPolicy string

const (
	// ExternalTrafficPolicyLocal: to the node's own ready cache pod only, with the
	// client's address kept. A node without one does not answer, and a load balancer's
	// health check takes it out.
	ExternalTrafficPolicyLocal ExternalTrafficPolicy = "Local"
	// ExternalTrafficPolicyCluster: to any ready cache pod, possibly on another node (a
	// second hop), with the client's address replaced by the node's.
	ExternalTrafficPolicyCluster ExternalTrafficPolicy = "Cluster"
)

// TrafficDistribution says which cache pods clients inside the cluster prefer.
// +kubebuilder:validation:Enum=PreferSameZone;PreferSameNode
type TrafficDistribution string

const (
	// TrafficDistributionPreferSameZone: the cache pods in the client's zone, when there
	// are any (Kubernetes' PreferClose, under its newer name).
	TrafficDistributionPreferSameZone TrafficDistribution = "PreferSameZone"
	// TrafficDistributionPreferSameNode: the cache pod on the client's own node, when it
	// has one; then the client's zone.
	TrafficDistributionPreferSameNode TrafficDistribution = "PreferSameNode"
)

// ServicePorts are the Service's ports.
// +kubebuilder:validation:XValidation:rule="!has(self.http) || !has(self.https) || self.http != self.https",message="http and https must differ",fieldPath=".https"
// +kubebuilder:validation:XValidation:rule="!has(self.httpNodePort) || !has(self.httpsNodePort) || self.httpNodePort != self.httpsNodePort",message="httpNodePort and httpsNodePort must differ",fieldPath=".httpsNodePort"
type ServicePorts struct {
	// http is the Service's port for plain HTTP, sent to the cache pods' listener.port.
	// +optional
	// +kubebuilder:default=80
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	HTTP int32 `json:"http,omitempty"`

	// https is the Service's port for HTTPS, sent to the cache pods' listener.tlsPort. The
	// Service has it only while a site has tls.
	// +optional
	// +kubebuilder:default=443
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	HTTPS int32 `json:"https,omitempty"`

	// httpNodePort is the node port of http, for NodePort and LoadBalancer Services. It
	// must lie in the cluster's node port range (30000-32767 unless the cluster admin
	// changed it). Unset, Kubernetes picks a free one, shown in the Service.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	HTTPNodePort int32 `json:"httpNodePort,omitempty"`

	// httpsNodePort is the node port of https, as httpNodePort.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	HTTPSNodePort int32 `json:"httpsNodePort,omitempty"`
}

// CacheNodeService is a Service the operator keeps in front of the cache pods. Its
// endpoints are the ready cache pods only: a pod whose disks are all out, or whose nginx
// does not answer, stops receiving new connections until it is ready again. With
// hostNetwork the Service works as well: its endpoints are then the nodes' addresses, at
// listener.port.
// +kubebuilder:validation:XValidation:rule="self.type != 'ClusterIP' || !has(self.externalTrafficPolicy)",message="externalTrafficPolicy applies to NodePort and LoadBalancer Services only",fieldPath=".externalTrafficPolicy"
// +kubebuilder:validation:XValidation:rule="self.type != 'ClusterIP' || !has(self.ports) || (!has(self.ports.httpNodePort) && !has(self.ports.httpsNodePort))",message="node ports apply to NodePort and LoadBalancer Services only",fieldPath=".ports"
// +kubebuilder:validation:XValidation:rule="self.type == 'LoadBalancer' || !has(self.loadBalancerSourceRanges)",message="loadBalancerSourceRanges applies to LoadBalancer Services only",fieldPath=".loadBalancerSourceRanges"
// +kubebuilder:validation:XValidation:rule="self.type == 'LoadBalancer' || !has(self.loadBalancerClass)",message="loadBalancerClass applies to LoadBalancer Services only",fieldPath=".loadBalancerClass"
type CacheNodeService struct {
	// type is ClusterIP (reachable inside the cluster only, as Kubernetes' own default),
	// NodePort (also a port on every node) or LoadBalancer (also a cloud load balancer in
	// front of the node ports).
	// +optional
	// +kubebuilder:default=ClusterIP
	Type ServiceType `json:"type,omitempty"`

	// ports are the Service's ports and, for NodePort and LoadBalancer, their node ports.
	// +optional
	// +kubebuilder:default={}
	Ports ServicePorts `json:"ports,omitzero"`

	// externalTrafficPolicy says where a NodePort or LoadBalancer Service's nodes send
	// what reaches their node port: Local (the default) to their own cache pod, with no
	// second hop, and the cache pods see the client's address, so listener.clientCIDRs
	// still applies to the clients; Cluster to any cache pod, and the cache pods see the
	// forwarding node's address instead of the client's.
	// +optional
	ExternalTrafficPolicy ExternalTrafficPolicy `json:"externalTrafficPolicy,omitempty"`

	// trafficDistribution says which cache pods clients inside the cluster prefer:
	// PreferSameZone (those in the client's zone, when there are any) or PreferSameNode
	// (the one on the client's own node, then the zone). Unequal numbers of clients and
	// cache pods per zone can overload a zone's caches.
	// +optional
	// +kubebuilder:default=PreferSameZone
	TrafficDistribution TrafficDistribution `json:"trafficDistribution,omitempty"`

	// annotations are set on the Service, for a cloud's load-balancer controller (its
	// type, health checks, proxy protocol ...). Keys under edgepool.io/ are the operator's.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && size(self[k]) <= 4096)",message="annotation keys must be at most 317 characters and values at most 4096"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="annotation keys must be qualified names: an optional DNS subdomain prefix and /, then a name of at most 63 letters, digits, - _ and ."
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.contains('/') || k.indexOf('/') <= 253)",message="an annotation key's prefix is at most 253 characters"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('edgepool.io/'))",message="annotation keys under edgepool.io/ are the operator's"
	Annotations map[string]string `json:"annotations,omitempty"`

	// loadBalancerSourceRanges are the client ranges a LoadBalancer Service's load
	// balancer admits, where the cloud supports it. Written with no host bits set, in
	// canonical form (203.0.113.0/24, 2001:db8::/32).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=4
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c) && string(cidr(c).masked()) == c)",message="loadBalancerSourceRanges must be CIDRs in canonical form with no host bits set, e.g. 203.0.113.0/24 or 2001:db8::/32"
	LoadBalancerSourceRanges []string `json:"loadBalancerSourceRanges,omitempty"`

	// loadBalancerClass names the load-balancer implementation of a LoadBalancer Service,
	// e.g. service.k8s.aws/nlb. Unset, the cluster's default one. Kubernetes does not let it
	// change once set: change it by removing the service and adding it again.
	// +optional
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=316
	// +kubebuilder:validation:XValidation:rule=`self.matches(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")`,message="loadBalancerClass is a domain-prefixed name, e.g. service.k8s.aws/nlb"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="loadBalancerClass cannot change once set; remove service and add it again"
	LoadBalancerClass string `json:"loadBalancerClass,omitempty"`
}

// CacheNodeServiceStatus is the observed state of the cache pods' Service.
type CacheNodeServiceStatus struct {
	// name is the Service's name, in the CacheNode's namespace.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`

	// loadBalancerAddresses are the IP addresses or host names of a LoadBalancer
	// Service's load balancer, once the cloud has made it.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	LoadBalancerAddresses []string `json:"loadBalancerAddresses,omitempty"`
}

func (s *CacheNodeService) defaults() {
	if s.Type == "" {
		s.Type = ServiceTypeClusterIP
	}
	if s.Ports.HTTP == 0 {
		s.Ports.HTTP = 80
	}
	if s.Ports.HTTPS == 0 {
		s.Ports.HTTPS = 443
	}
	if s.TrafficDistribution == "" {
		s.TrafficDistribution = TrafficDistributionPreferSameZone
	}
}

// TrafficPolicy is the Service's externalTrafficPolicy: none for ClusterIP, else
// externalTrafficPolicy, Local when unset. It has no schema default because the API server
// refuses the field on a ClusterIP Service.
func (s *CacheNodeService) TrafficPolicy() ExternalTrafficPolicy {
	switch {
	case s.Type == ServiceTypeClusterIP || s.Type == "":
		return ""
	case s.ExternalTrafficPolicy != "":
		return s.ExternalTrafficPolicy
	}
	return ExternalTrafficPolicyLocal
}
