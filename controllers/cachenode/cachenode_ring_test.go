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
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/render"
)

// members are ring members named n<i> at each address of s.
func members(s ...string) []render.Member {
	m := make([]render.Member, len(s))
	for i, v := range s {
		m[i] = render.Member{Name: fmt.Sprintf("n%d", i), Addr: netip.MustParseAddr(v)}
	}
	return m
}

// TestRingMembers: the ready pods that are not being deleted, named by their nodes,
// sorted by name; of two on one node, the newer.
func TestRingMembers(t *testing.T) {
	pod := func(name, node, ip string, ready bool, deleting bool, created int64) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Unix(created, 0)},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{PodIP: ip}}
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
		}
		return p
	}
	got := ringMembers([]corev1.Pod{
		pod("a", "node-c", "10.0.0.30", true, false, 1), pod("b", "node-a", "10.0.0.4", true, false, 1),
		pod("c", "node-b", "10.0.0.5", false, false, 1), pod("d", "node-d", "10.0.0.6", true, true, 1),
		pod("e", "node-e", "", true, false, 1), pod("f", "", "10.0.0.8", true, false, 1),
		pod("g", "node-b", "::ffff:10.0.0.7", true, false, 1),
		// A surge on node-a: the newer pod is the member, whatever the list's order.
		pod("h", "node-a", "10.0.0.9", true, false, 2), pod("i", "node-a", "10.0.0.10", true, false, 1),
	}, v1alpha1.IPv4)
	want := []render.Member{
		{Name: "node-a", Addr: netip.MustParseAddr("10.0.0.9")},
		{Name: "node-b", Addr: netip.MustParseAddr("10.0.0.7")},
		{Name: "node-c", Addr: netip.MustParseAddr("10.0.0.30")},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ring %v, want %v", got, want)
	}
}

// TestRingMembersOfAFamily: a member is reached at its address of the ring's family,
// whichever of its addresses comes first; a ready pod with none is left out.
func TestRingMembersOfAFamily(t *testing.T) {
	pod := func(name, node string, ips ...string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		if len(ips) > 0 {
			p.Status.PodIP = ips[0]
		}
		return p
	}
	pods := []corev1.Pod{
		pod("a", "node-a", "10.0.0.4", "fd00::4"), pod("b", "node-b", "fd00::5", "10.0.0.5"),
		pod("c", "node-c", "10.0.0.6"), pod("d", "node-d", "fd00::7"), pod("e", "node-e", "::ffff:10.0.0.8", "fd00::8"),
	}
	for _, tc := range []struct {
		family v1alpha1.IPFamily
		want   []string
	}{
		{v1alpha1.IPv4, []string{"10.0.0.4", "10.0.0.5", "10.0.0.6", "10.0.0.8"}},
		{v1alpha1.IPv6, []string{"fd00::4", "fd00::5", "fd00::7", "fd00::8"}},
	} {
		got := ringMembers(pods, tc.family)
		var addrs []string
		for _, m := range got {
			addrs = append(addrs, m.Addr.String())
		}
		if !slices.Equal(addrs, tc.want) {
			t.Errorf("%s ring at %v, want %v", tc.family, addrs, tc.want)
		}
		if names := ringPods(pods, got); len(names) != len(tc.want) {
			t.Errorf("%s ring pods %v, want %d of them", tc.family, names, len(tc.want))
		}
	}
}

// TestRingPods: the pods at the ring's addresses, by name, sorted and bounded; an address
// no pod holds has no name.
func TestRingPods(t *testing.T) {
	pod := func(name, ip string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{PodIP: ip}}
	}
	got := ringPods([]corev1.Pod{pod("c", "10.0.0.30"), pod("a", "::ffff:10.0.0.4"), pod("b", "10.0.0.5"), pod("d", "")},
		members("10.0.0.4", "10.0.0.9", "10.0.0.30"))
	if want := []string{"a", "c"}; !slices.Equal(got, want) {
		t.Errorf("ring pods %v, want %v", got, want)
	}

	var many []corev1.Pod
	var ring []render.Member
	for i := range v1alpha1.MaxMemberPodsListed + 10 {
		a := netip.AddrFrom4([4]byte{10, 1, byte(i / 256), byte(i % 256)})
		many = append(many, pod(fmt.Sprintf("pod-%03d", i), a.String()))
		ring = append(ring, render.Member{Name: fmt.Sprintf("node-%03d", i), Addr: a})
	}
	got = ringPods(many, ring)
	if len(got) != v1alpha1.MaxMemberPodsListed || got[0] != "pod-000" || !slices.IsSorted(got) {
		t.Errorf("%d ring pods (from %s), want the first %d by name", len(got), got[0], v1alpha1.MaxMemberPodsListed)
	}
}

// TestRingChangesAreSpaced: a change of members is rendered at once after a quiet
// interval, and otherwise held (the last members rendered) until the interval is up;
// the same members never wait.
func TestRingChangesAreSpaced(t *testing.T) {
	var r rings
	key := types.NamespacedName{Namespace: "edge", Name: "fleet"}
	t0 := time.Unix(1000, 0)
	const interval = 2 * time.Second
	step := func(at time.Duration, current, want []render.Member, wantWait time.Duration) {
		t.Helper()
		got, wait := r.render(key, current, interval, t0.Add(at))
		if !slices.Equal(got, want) || wait != wantWait {
			t.Errorf("at %v with %v: rendered %v and wait %v, want %v and %v", at, current, got, wait, want, wantWait)
		}
	}
	a, ab, abc := members("10.0.0.1"), members("10.0.0.1", "10.0.0.2"), members("10.0.0.1", "10.0.0.2", "10.0.0.3")
	step(0, a, a, 0)                                          // the first ring: at once
	step(500*time.Millisecond, a, a, 0)                       // unchanged: no wait
	step(time.Second, ab, a, time.Second)                     // too soon: held
	step(1500*time.Millisecond, abc, a, 500*time.Millisecond) // still held, whatever came since
	step(2*time.Second, abc, abc, 0)                          // the interval is up: the newest members
	step(10*time.Second, ab, ab, 0)                           // a quiet interval: at once
	r.forget(key)
	step(10500*time.Millisecond, abc, abc, 0) // forgotten: as the first ring
	var none *rings
	if got, wait := none.render(key, abc, interval, t0); !slices.Equal(got, abc) || wait != 0 {
		t.Errorf("a nil rings held the ring: %v, %v", got, wait)
	}
}
