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

package render

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// ringNames draws n distinct node names of the shapes clusters give them.
func ringNames(rng *rand.Rand, n int) []string {
	shapes := []string{"edge-%d", "ip-10-0-%d.ec2.internal", "gke-pool-%08x", "node%d"}
	seen := map[string]bool{}
	var names []string
	for len(names) < n {
		name := fmt.Sprintf(shapes[rng.IntN(len(shapes))], rng.IntN(1<<20))
		if !seen[name] {
			seen[name] = true
			names = append(names, name)
		}
	}
	return names
}

// slotOwners names each slot's owner and successor ("" for none).
func slotOwners(names []string) (owner, successor []string) {
	o, s := placeSlots(names)
	owner, successor = make([]string, len(o)), make([]string, len(s))
	for i := range o {
		owner[i] = names[o[i]]
		if s[i] >= 0 {
			successor[i] = names[s[i]]
		}
	}
	return owner, successor
}

// TestRingPlacement, over random fleets: the slots' owners depend only on the set of
// names; a member leaving moves exactly its slots, each to its successor; a member
// joining takes slots only for itself; each member's share is near 1/N.
func TestRingPlacement(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 27))
	for range 40 {
		n := 2 + rng.IntN(30)
		names := ringNames(rng, n)
		owner, successor := slotOwners(names)

		shuffled := slices.Clone(names)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if o, s := slotOwners(shuffled); !slices.Equal(o, owner) || !slices.Equal(s, successor) {
			t.Fatalf("%d members: the slots' owners depend on the members' order", n)
		}

		share := map[string]int{}
		for s := range owner {
			share[owner[s]]++
			if successor[s] == owner[s] || successor[s] == "" {
				t.Fatalf("%d members: slot %d's successor is %q, its owner %q", n, s, successor[s], owner[s])
			}
		}
		for _, name := range names {
			if got, ideal := float64(share[name]), float64(ringSlots)/float64(n); got < 0.6*ideal || got > 1.5*ideal {
				t.Errorf("%d members: %s owns %.0f slots, %.2f of its share", n, name, got, got/ideal)
			}
		}

		gone := rng.IntN(n)
		left, _ := slotOwners(slices.Delete(slices.Clone(names), gone, gone+1))
		for s := range owner {
			switch {
			case owner[s] == names[gone] && left[s] != successor[s]:
				t.Fatalf("%d members, %s left: slot %d went to %s, not its successor %s", n, names[gone], s, left[s], successor[s])
			case owner[s] != names[gone] && left[s] != owner[s]:
				t.Fatalf("%d members, %s left: slot %d moved from %s to %s", n, names[gone], s, owner[s], left[s])
			}
		}

		joined, _ := slotOwners(append(slices.Clone(names), ringNames(rng, 1)[0]+"-new"))
		for s := range owner {
			if joined[s] != owner[s] && !strings.HasSuffix(joined[s], "-new") {
				t.Fatalf("%d members, one joined: slot %d moved from %s to %s", n, s, owner[s], joined[s])
			}
		}
	}
}

// TestRingOneMember: one member owns every slot and has no successor.
func TestRingOneMember(t *testing.T) {
	owner, successor := placeSlots([]string{"only"})
	for s := range owner {
		if owner[s] != 0 || successor[s] != -1 {
			t.Fatalf("slot %d: owner %d, successor %d", s, owner[s], successor[s])
		}
	}
}

// splitClients returns the split_clients blocks of conf.
func splitClients(conf string) []string {
	return regexp.MustCompile(`(?ms)^ *split_clients "ring:.*?^ *}`).FindAllString(conf, -1)
}

// TestRingMemberAtAnotherAddress: a member back at another address (its pod recreated)
// keeps every key: the split is the same, only its upstream's address changes.
func TestRingMemberAtAnotherAddress(t *testing.T) {
	spec := loadSpec(t, "../../config/samples/cache_v1alpha1_cachenode_sharded.yaml")
	before, err := NginxConfRing(spec, goldenRing)
	if err != nil {
		t.Fatal(err)
	}
	moved := slices.Clone(goldenRing)
	moved[1].Addr, moved[3].Addr = netip.MustParseAddr("10.244.0.77"), netip.MustParseAddr("10.244.0.77")
	after, err := NginxConfRing(spec, moved)
	if err != nil {
		t.Fatal(err)
	}
	if b, a := splitClients(before), splitClients(after); len(b) != 2 || !slices.Equal(a, b) {
		t.Errorf("the split changed when a member moved (%d blocks before)", len(b))
	}
	if !strings.Contains(after, "server 10.244.0.77:") || strings.Contains(after, "server 10.244.0.5:") {
		t.Error("the moved member's upstream does not name its new address")
	}
}

// TestRingRefusesAmbiguousMembers: one name at two addresses, or two names at one, is
// not a ring every pod would build alike.
func TestRingRefusesAmbiguousMembers(t *testing.T) {
	spec := loadSpec(t, "../../config/samples/cache_v1alpha1_cachenode_sharded.yaml")
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	for name, members := range map[string][]Member{
		"one name, two addresses": {{Name: "n1", Addr: a}, {Name: "n1", Addr: b}},
		"two names, one address":  {{Name: "n1", Addr: a}, {Name: "n2", Addr: a}},
		"no name":                 {{Addr: a}},
		"no address":              {{Name: "n1"}},
		"not the ring's family":   {{Name: "n1", Addr: a}, {Name: "n2", Addr: netip.MustParseAddr("fd00::2")}},
	} {
		if _, err := NginxConfRing(spec, members); err == nil {
			t.Errorf("%s: rendered", name)
		}
	}
}

// TestRingOfMaxMembers: the largest ring renders within what a ConfigMap holds beside
// the purge list, and passes nginx -t.
func TestRingOfMaxMembers(t *testing.T) {
	spec := loadSpec(t, "../../config/samples/cache_v1alpha1_cachenode_sharded.yaml")
	members := make([]Member, MaxRingMembers)
	for i := range members {
		members[i] = Member{Name: fmt.Sprintf("edge-%05d", i), Addr: netip.AddrFrom4([4]byte{10, 128 + byte(i>>16), byte(i >> 8), byte(i)})}
	}
	conf, err := NginxConfRing(spec, members)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 600 << 10
	t.Logf("%d members: nginx.conf is %d KiB", len(members), len(conf)>>10)
	if len(conf) > limit {
		t.Errorf("%d members: nginx.conf is %d KiB, more than %d", len(members), len(conf)>>10, limit>>10)
	}
	if err := nginxTest(t, nginxBinary(t), conf); err != nil {
		t.Error(err)
	}
}
