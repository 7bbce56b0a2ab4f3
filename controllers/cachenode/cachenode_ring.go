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
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/render"
)

// DefaultRingInterval spaces a sharded CacheNode's ring changes. Each change reloads every
// pod (and patches each one to hasten its kubelet): 1,000 pods turning ready one by one
// would otherwise cost a million pod writes and reloads, and with the spacing about one
// change per interval. A member that left meanwhile costs its keys a retry on the next
// owner, not an error.
const DefaultRingInterval = 2 * time.Second

// ringMembers are a sharded CacheNode's ring, sorted by name: its ready cache pods that
// are not being deleted, each named by its node, so that a pod recreated on its node
// keeps its keys. A pod leaves the ring as soon as it turns unready or its deletion
// starts, while its nginx still finishes what the others sent it. Of two ready pods on
// one node (a rolling update that surges), the newer one is the member. A member is
// reached at its address of family, the ring's; a pod with none is left out.
func ringMembers(pods []corev1.Pod, family v1alpha1.IPFamily) []render.Member {
	newest := map[string]*corev1.Pod{}
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || pod.Spec.HostNetwork || pod.Spec.NodeName == "" || !podReady(pod) {
			continue
		}
		if _, ok := podAddr(pod, family); !ok {
			continue
		}
		if other := newest[pod.Spec.NodeName]; other == nil || newer(pod, other) {
			newest[pod.Spec.NodeName] = pod
		}
	}
	members := make([]render.Member, 0, len(newest))
	for node, pod := range newest {
		addr, _ := podAddr(pod, family)
		members = append(members, render.Member{Name: node, Addr: addr})
	}
	slices.SortFunc(members, func(a, b render.Member) int { return strings.Compare(a.Name, b.Name) })
	return members
}

// newer says whether a was created after b (by name when at the same second).
func newer(a, b *corev1.Pod) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return b.CreationTimestamp.Before(&a.CreationTimestamp)
	}
	return a.Name > b.Name
}

// ringPods names the pods at the addresses of a rendered ring, sorted, at most
// v1alpha1.MaxMemberPodsListed of them. A ring held back by the spacing below may name an
// address no listed pod holds any more: that member has no name.
func ringPods(pods []corev1.Pod, members []render.Member) []string {
	at := make(map[netip.Addr]bool, len(members))
	for _, m := range members {
		at[m.Addr] = true
	}
	var names []string
	for i := range pods {
		if pods[i].Spec.HostNetwork {
			continue
		}
		for _, a := range podAddrs(&pods[i]) {
			if at[a] {
				names = append(names, pods[i].Name)
				break
			}
		}
	}
	slices.Sort(names)
	return names[:min(len(names), v1alpha1.MaxMemberPodsListed)]
}

// podAddrs are pod's addresses (status.podIPs, or status.podIP alone), IPv4-mapped ones
// unmapped; what does not parse is left out.
func podAddrs(pod *corev1.Pod) []netip.Addr {
	ips := []string{pod.Status.PodIP}
	if len(pod.Status.PodIPs) > 0 {
		ips = ips[:0]
		for _, ip := range pod.Status.PodIPs {
			ips = append(ips, ip.IP)
		}
	}
	var addrs []netip.Addr
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip); err == nil {
			addrs = append(addrs, a.Unmap())
		}
	}
	return addrs
}

// podAddr is pod's first address of family.
func podAddr(pod *corev1.Pod, family v1alpha1.IPFamily) (netip.Addr, bool) {
	for _, a := range podAddrs(pod) {
		if a.Is4() == (family == v1alpha1.IPv4) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// podReady says whether pod's Ready condition is True.
func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// rings remembers, per sharded CacheNode, the members last rendered and when. A nil one
// remembers nothing: every change is rendered at once.
type rings struct {
	mu   sync.Mutex
	last map[types.NamespacedName]ring
}

type ring struct {
	members []render.Member
	at      time.Time
}

// render says which members to render for key now: the current ones, unless the last
// change was less than interval ago; then the last ones, and how long until the current
// ones may be rendered.
func (r *rings) render(key types.NamespacedName, current []render.Member, interval time.Duration, now time.Time) ([]render.Member, time.Duration) {
	if r == nil {
		return current, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.last[key]
	switch {
	case ok && slices.Equal(last.members, current):
		return current, 0
	case ok && now.Sub(last.at) < interval:
		return last.members, last.at.Add(interval).Sub(now)
	}
	if r.last == nil {
		r.last = map[types.NamespacedName]ring{}
	}
	r.last[key] = ring{members: slices.Clone(current), at: now}
	return current, 0
}

// forget drops key's ring: its CacheNode is gone.
func (r *rings) forget(key types.NamespacedName) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.last, key)
}
