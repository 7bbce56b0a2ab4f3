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

import "k8s.io/apimachinery/pkg/api/resource"

// DefaultPeerPort is the port on which a sharded cache pod serves its peers.
const DefaultPeerPort = 8090

// Sharding makes the CacheNode's pods one cache: each key has one owner among the ready
// pods (consistent hashing of the cache key over the pods' node names, so a pod recreated
// on its node keeps its keys; at most 1,000 nodes). A pod that gets
// a request passes it to the key's owner over the pod network; only the owner stores the
// response and fills it from the origin, so concurrent misses from every node meet in the
// owner's cache lock. A pod joining or leaving moves only its own share of the keys. The
// cost is one hop on the pod network for the keys a pod does not own; see
// docs/fleet.md for when to shard.
type Sharding struct {
	// peerPort is where each pod serves the keys it owns to the others. The CacheNode's
	// NetworkPolicy opens it to the CacheNode's own pods only.
	// +optional
	// +kubebuilder:default=8090
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	PeerPort int32 `json:"peerPort,omitempty"`

	// hotTier keeps, on every pod, copies of the objects it asks their owners for often,
	// in memory: served without the peer hop and without a disk pool, so that a popular
	// key does not funnel the fleet's traffic through its owner. Unset, there is none.
	// +optional
	HotTier *HotTier `json:"hotTier,omitempty"`
}

// HotTier is a small memory cache in front of the ring on every pod. It copies only what
// an owner served from its cache (HIT or REVALIDATED: what the CacheNode's cache policy let
// the owner store), after minUses requests, for seconds; then it asks the owner again
// (a conditional request when the copy has a validator). A hot copy may thus be served up
// to seconds + 1 s after the owner's copy went stale (nginx knows no Age): keep seconds
// short. Range requests,
// requests with Authorization and sites that cache in slices go to the owner, as without
// a hot tier.
type HotTier struct {
	// size bounds the copies (max_size of a memory-backed volume); the pod requests it,
	// and its keys zone, as memory.
	// +required
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="type(self) in [int] ? [int(self)].all(n, n >= 1048576 && n <= 17179869184) : isQuantity(self) && [quantity(self)].all(q, q.compareTo(quantity('1Mi')) >= 0 && q.compareTo(quantity('16Gi')) <= 0 && q.sub(int(q.asApproximateFloat())).compareTo(quantity('0')) == 0)",message="size must be a whole number of bytes from 1Mi to 16Gi"
	Size resource.Quantity `json:"size"` //nolint:kubeapilinter // the zero quantity is not valid: the rule above asks for 1Mi at least, which the linter cannot read in CEL

	// minUses is the number of requests for an object before a pod copies it.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	MinUses int32 `json:"minUses,omitempty"`

	// seconds a copy is served before the pod asks the owner again. The copy answers
	// while the owner is asked (in the background); one the owner does not confirm is
	// removed within 10 seconds of the end of its seconds.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=60
	Seconds int32 `json:"seconds,omitempty"`
}

// VolumeBytes is the size of the memory-backed volume that holds a hot tier's copies:
// its size and a quarter more, since nginx's cache manager trims the copies only after
// they exceed it.
func (h *HotTier) VolumeBytes() int64 {
	size := h.Size.Value()
	return size + size/4
}

// HotTierKeysZone is the keys zone of a hot tier: about 128,000 keys, the objects it
// copies and those it counts uses of.
const HotTierKeysZone = 16 << 20

// ShardingStatus is the ring the operator last rendered.
type ShardingStatus struct {
	// members is the number of cache pods in the ring: the ready ones with an address.
	// +optional
	Members int32 `json:"members"`

	// memberPods names the cache pods at the ring's addresses, sorted: the first
	// MaxMemberPodsListed of them (members counts them all).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	MemberPods []string `json:"memberPods,omitempty"`
}

// MaxMemberPodsListed is how many of the ring's pods its status names.
const MaxMemberPodsListed = 64
