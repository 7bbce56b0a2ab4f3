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

// DefaultPeerPort is the port on which a sharded cache pod serves its peers.
const DefaultPeerPort = 8090

// Sharding makes the CacheNode's pods one cache: each key has one owner among the ready
// pods (nginx's consistent hash of the cache key over their addresses). A pod that gets
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
}

// ShardingStatus is the ring the operator last rendered.
type ShardingStatus struct {
	// members is the number of cache pods in the ring: the ready ones with an address.
	// +optional
	Members int32 `json:"members"`
}
