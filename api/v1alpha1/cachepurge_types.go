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

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PurgeScope says what a CachePurge removes from the cache.
// +kubebuilder:validation:Enum=URLs;Prefixes;Tags;All
type PurgeScope string

const (
	// PurgeURLs removes the cached responses to the listed URLs.
	PurgeURLs PurgeScope = "URLs"
	// PurgePrefixes removes the cached responses whose path (with its query) starts with
	// one of the listed prefixes, per host.
	PurgePrefixes PurgeScope = "Prefixes"
	// PurgeTags removes the cached responses the origin labelled with one of the listed
	// tags (in a header of the site's cache.tagHeaders).
	PurgeTags PurgeScope = "Tags"
	// PurgeAll removes every cached response.
	PurgeAll PurgeScope = "All"
)

// PurgePhase is how far a purge got on one node.
// +kubebuilder:validation:Enum=Pending;Done;Failed
type PurgePhase string

const (
	// PurgePending: the node has not confirmed the purge yet (unreachable, not running, or
	// not asked yet); it is asked again until the purge's deadline.
	PurgePending PurgePhase = "Pending"
	// PurgeDone: the node's agent removed what the purge names.
	PurgeDone PurgePhase = "Done"
	// PurgeFailed: the node refused the purge, or did not confirm it before the deadline.
	PurgeFailed PurgePhase = "Failed"
)

// MaxPurgeCharacters bounds the URLs, hosts and paths of one purge together (as many as
// 100 URLs of 2,048 characters), the CEL rule on CachePurgeSpec: what the purge list in
// every CacheNode's ConfigMap, which restarted cache pods read, carries.
const MaxPurgeCharacters = 204800

// PurgeHost names the path prefixes to purge on one host.
type PurgeHost struct {
	// host is the host name as the cache key holds it: lower case, without a port or a
	// trailing dot, e.g. www.example.com, 192.0.2.10 or [2001:db8::1].
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*|\[[0-9a-f:.]{2,45}\])$`
	Host string `json:"host,omitempty"`

	// paths are prefixes of the request URI (path and query, as the client sent it):
	// /img/ purges /img/a.png and /img/b/c.jpg?v=2. Each starts with a slash; the
	// characters of a URI only (RFC 3986), with a percent sign only before two hex digits.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=1024
	// +kubebuilder:validation:items:Pattern=`^/([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*$`
	Paths []string `json:"paths,omitempty"`
}

// CachePurgeSpec says which cache and what to purge. It cannot be changed: create
// another CachePurge.
// +kubebuilder:validation:XValidation:rule="self.scope == 'URLs' ? has(self.urls) : !has(self.urls)",message="urls must be set when scope is URLs, and only then",fieldPath=".urls"
// +kubebuilder:validation:XValidation:rule="self.scope == 'Prefixes' ? has(self.prefixes) : !has(self.prefixes)",message="prefixes must be set when scope is Prefixes, and only then",fieldPath=".prefixes"
// +kubebuilder:validation:XValidation:rule="self.scope == 'Tags' ? has(self.tags) : !has(self.tags)",message="tags must be set when scope is Tags, and only then",fieldPath=".tags"
// +kubebuilder:validation:XValidation:rule="(has(self.urls) ? self.urls.map(u, size(u)).sum() : 0) + (has(self.prefixes) ? self.prefixes.map(h, size(h.host) + (has(h.paths) ? h.paths.map(p, size(p)).sum() : 0)).sum() : 0) <= 204800",message="a purge lists at most 204800 characters of URLs, hosts and paths, what every cache pod's purge list (which restarted pods read) can carry: split it into several CachePurges"
type CachePurgeSpec struct {
	// cacheNode is the name of the CacheNode, in this namespace, whose cache pods purge.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=52
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	CacheNode string `json:"cacheNode,omitempty"`

	// scope is what is purged: URLs (the responses to exact URLs), Prefixes (every
	// response whose request URI starts with a prefix, per host; each node reads the key
	// of every cached file, at a bounded rate), Tags (every response the origin labelled
	// with one of the tags) or All (the whole cache).
	// +required
	Scope PurgeScope `json:"scope,omitempty"`

	// urls are the URLs whose cached responses are purged, as clients request them:
	// scheme, host as the cache key holds it (lower case, no port) and request URI (path
	// and query), e.g. https://www.example.com/index.html?lang=en. With the cache key
	// HostURI the scheme makes no difference. Only with scope URLs.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MinLength=9
	// +kubebuilder:validation:items:MaxLength=2048
	// +kubebuilder:validation:items:Pattern=`^https?://([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*|\[[0-9a-f:.]{2,45}\])/([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*$`
	URLs []string `json:"urls,omitempty"`

	// prefixes are the path prefixes purged on each host. Only with scope Prefixes.
	// +optional
	// +listType=map
	// +listMapKey=host
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Prefixes []PurgeHost `json:"prefixes,omitempty"`

	// tags are the tags whose responses are purged: the origin labels a response with
	// tags in a header of the site's cache.tagHeaders (Surrogate-Key, Cache-Tag), and a
	// response carrying any of these is purged. Matched exactly, case included. Only with
	// scope Tags.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[A-Za-z0-9._~:/@!$&'()*+;=-]+$`
	Tags []string `json:"tags,omitempty"`

	// soft marks what the purge names stale instead of removing it (a soft purge): the
	// next request for it revalidates with the origin (If-None-Match, If-Modified-Since),
	// so an object that did not change costs the origin a 304, not a full response, and,
	// where the origin allowed stale-while-revalidate, the stale copy is served meanwhile
	// (one request to the origin per node). A soft-purged object is never served as fresh
	// again without the origin's answer. Default false: the objects are removed.
	// +optional
	Soft bool `json:"soft,omitempty"` //nolint:kubeapilinter // unset and false mean the same: the objects are removed

	// activeDeadlineSeconds is how long the operator keeps asking the nodes that have not
	// confirmed the purge (unreachable, or not running): after it, they are Failed. A node
	// that restarts within it purges before it serves again.
	// +optional
	// +kubebuilder:default=3600
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=604800
	ActiveDeadlineSeconds int32 `json:"activeDeadlineSeconds,omitempty"`

	// ttlSecondsAfterFinished is how long the CachePurge is kept once it is Complete or
	// Failed; then the operator deletes it. 0 deletes it as soon as it finishes.
	// +optional
	// +kubebuilder:default=86400
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2592000
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`
}

// PurgeNode is how far a purge got on one node.
type PurgeNode struct {
	// node is the name of the node.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node,omitempty"`

	// pod is the cache pod on the node that was asked.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pod string `json:"pod,omitempty"`

	// phase is Pending, Done or Failed.
	// +required
	Phase PurgePhase `json:"phase,omitempty"` //nolint:kubeapilinter // one entry of a per-node list, not the object's state (that is the conditions): conditions per node would multiply the status by the node count

	// objectsRemoved is the number of cached files the node removed (a soft purge: marked
	// stale).
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObjectsRemoved int64 `json:"objectsRemoved"`

	// lastUpdateTime is when the phase was set: when the node finished, or its latest
	// attempt while it is pending.
	// +optional
	LastUpdateTime metav1.Time `json:"lastUpdateTime,omitzero"`

	// message says why a node is pending or failed.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// Condition types of a CachePurge. Complete is True when every node is done; Failed is
// True when a node refused the purge or the deadline passed before every node confirmed
// it. Like a CacheNode's, the status also carries kstatus's Reconciling (True while nodes
// are pending) and Stalled (True once Failed), so Flux, Argo CD and kpt can wait on it.
const (
	ConditionComplete = "Complete"
	ConditionFailed   = "Failed"
)

// Reasons of the CachePurge conditions.
const (
	ReasonCacheNodeNotFound = "CacheNodeNotFound"
	ReasonNodesPending      = "NodesPending"
	ReasonNodesFailed       = "NodesFailed"
	ReasonPurged            = "Purged"
)

// CachePurgeStatus is how far a purge got.
type CachePurgeStatus struct {
	// conditions are Complete, Failed, Reconciling and Stalled.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation last reconciled successfully.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// nodes are the nodes the purge went to, by node name.
	// +optional
	// +listType=map
	// +listMapKey=node
	// +kubebuilder:validation:MaxItems=1000
	Nodes []PurgeNode `json:"nodes,omitempty"`

	// pendingNodes is the number of nodes that have not confirmed the purge.
	// +optional
	// +kubebuilder:validation:Minimum=0
	PendingNodes int32 `json:"pendingNodes"`

	// doneNodes is the number of nodes that purged.
	// +optional
	// +kubebuilder:validation:Minimum=0
	DoneNodes int32 `json:"doneNodes"`

	// failedNodes is the number of nodes that refused the purge or missed the deadline.
	// +optional
	// +kubebuilder:validation:Minimum=0
	FailedNodes int32 `json:"failedNodes"`

	// objectsRemoved is the number of cached files removed (a soft purge: marked stale) on
	// every node together.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObjectsRemoved int64 `json:"objectsRemoved"`

	// completionTime is when the purge became Complete or Failed.
	// +optional
	CompletionTime metav1.Time `json:"completionTime,omitzero"`
}

// CachePurge removes cached responses from every cache pod of a CacheNode, and reports
// per node how far it got. Who may purge is RBAC on cachepurges (the chart's
// edgepool-cachepurge-editor ClusterRole aggregates into edit and admin).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cpurge
// +kubebuilder:printcolumn:name="CacheNode",type=string,JSONPath=`.spec.cacheNode`
// +kubebuilder:printcolumn:name="Scope",type=string,JSONPath=`.spec.scope`
// +kubebuilder:printcolumn:name="Soft",type=boolean,JSONPath=`.spec.soft`,priority=1
// +kubebuilder:printcolumn:name="Complete",type=string,JSONPath=`.status.conditions[?(@.type=="Complete")].status`
// +kubebuilder:printcolumn:name="Done",type=integer,JSONPath=`.status.doneNodes`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pendingNodes`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.failedNodes`
// +kubebuilder:printcolumn:name="Removed",type=integer,JSONPath=`.status.objectsRemoved`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CachePurge struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says which cache and what to purge. It cannot be changed.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: create another CachePurge"
	Spec CachePurgeSpec `json:"spec,omitzero"`

	// status is how far the purge got, per node.
	// +optional
	Status CachePurgeStatus `json:"status,omitempty"` //nolint:kubeapilinter // the zero status is "nothing observed yet", as the CacheNode's
}

// CachePurgeList contains a list of CachePurge.
// +kubebuilder:object:root=true
type CachePurgeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CachePurge `json:"items"`
}
