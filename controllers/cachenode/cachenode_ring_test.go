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
)

func addrs(s ...string) []netip.Addr {
	a := make([]netip.Addr, len(s))
	for i, v := range s {
		a[i] = netip.MustParseAddr(v)
	}
	return a
}

// TestRingMembers: the ready pods that are not being deleted, by address, once each.
func TestRingMembers(t *testing.T) {
	pod := func(ip string, ready bool, deleting bool) corev1.Pod {
		p := corev1.Pod{Status: corev1.PodStatus{PodIP: ip}}
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
		pod("10.0.0.30", true, false), pod("10.0.0.4", true, false), pod("10.0.0.5", false, false),
		pod("10.0.0.6", true, true), pod("", true, false), pod("10.0.0.4", true, false), pod("::ffff:10.0.0.7", true, false),
	})
	if want := addrs("10.0.0.4", "10.0.0.7", "10.0.0.30"); !slices.Equal(got, want) {
		t.Errorf("ring %v, want %v", got, want)
	}
}

// TestRingPods: the pods at the ring's addresses, by name, sorted and bounded; an address
// no pod holds has no name.
func TestRingPods(t *testing.T) {
	pod := func(name, ip string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{PodIP: ip}}
	}
	got := ringPods([]corev1.Pod{pod("c", "10.0.0.30"), pod("a", "::ffff:10.0.0.4"), pod("b", "10.0.0.5"), pod("d", "")},
		addrs("10.0.0.4", "10.0.0.9", "10.0.0.30"))
	if want := []string{"a", "c"}; !slices.Equal(got, want) {
		t.Errorf("ring pods %v, want %v", got, want)
	}

	var many []corev1.Pod
	var members []netip.Addr
	for i := range v1alpha1.MaxMemberPodsListed + 10 {
		a := netip.AddrFrom4([4]byte{10, 1, byte(i / 256), byte(i % 256)})
		many = append(many, pod(fmt.Sprintf("pod-%03d", i), a.String()))
		members = append(members, a)
	}
	got = ringPods(many, members)
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
	step := func(at time.Duration, current []netip.Addr, want []netip.Addr, wantWait time.Duration) {
		t.Helper()
		got, wait := r.render(key, current, interval, t0.Add(at))
		if !slices.Equal(got, want) || wait != wantWait {
			t.Errorf("at %v with %v: rendered %v and wait %v, want %v and %v", at, current, got, wait, want, wantWait)
		}
	}
	a, ab, abc := addrs("10.0.0.1"), addrs("10.0.0.1", "10.0.0.2"), addrs("10.0.0.1", "10.0.0.2", "10.0.0.3")
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
