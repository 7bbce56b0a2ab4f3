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
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// DefaultRingInterval spaces a sharded CacheNode's ring changes. Each change reloads every
// pod (and patches each one to hasten its kubelet): 1,000 pods turning ready one by one
// would otherwise cost a million pod writes and reloads, and with the spacing about one
// change per interval. A member that left meanwhile costs its keys a retry on the next
// owner, not an error.
const DefaultRingInterval = 2 * time.Second

// ringMembers are the addresses of a sharded CacheNode's ring: its ready cache pods that
// are not being deleted. A pod leaves the ring as soon as it turns unready or its
// deletion starts, while its nginx still finishes what the others sent it.
func ringMembers(pods []corev1.Pod) []netip.Addr {
	var members []netip.Addr
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || pod.Spec.HostNetwork || !podReady(pod) {
			continue
		}
		if a, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
			members = append(members, a.Unmap())
		}
	}
	slices.SortFunc(members, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(members)
}

// ringPods names the pods at the addresses of a rendered ring, sorted, at most
// v1alpha1.MaxMemberPodsListed of them. A ring held back by the spacing below may name an
// address no listed pod holds any more: that member has no name.
func ringPods(pods []corev1.Pod, members []netip.Addr) []string {
	var names []string
	for i := range pods {
		a, err := netip.ParseAddr(pods[i].Status.PodIP)
		if err == nil && !pods[i].Spec.HostNetwork {
			if _, found := slices.BinarySearchFunc(members, a.Unmap(), netip.Addr.Compare); found {
				names = append(names, pods[i].Name)
			}
		}
	}
	slices.Sort(names)
	return names[:min(len(names), v1alpha1.MaxMemberPodsListed)]
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
	members []netip.Addr
	at      time.Time
}

// render says which members to render for key now: the current ones, unless the last
// change was less than interval ago; then the last ones, and how long until the current
// ones may be rendered.
func (r *rings) render(key types.NamespacedName, current []netip.Addr, interval time.Duration, now time.Time) ([]netip.Addr, time.Duration) {
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
