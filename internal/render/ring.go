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
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"slices"
)

// Where the ring places keys. nginx's own consistent hash (`hash ... consistent`) places a
// member by its server string, the pod's address, so a pod recreated at another address
// (a rolling update, a node's reboot) would be a new member and its disks' objects lost to
// the ring. The renderer places the members itself instead, on the 10,000 slots of
// split_clients (0.01% of the key space each, by nginx's murmurhash2 of the key): each
// member has ringPoints points placed by its name (its node's), and a slot belongs to the
// first point at or after it, going round. So:
//   - a pod back at another address keeps every slot, and its disks' objects;
//   - a member that leaves gives each of its slots to the next other member round the
//     ring, the slot's successor; adding one takes slots only for itself;
//   - pods send a slot to its successor while its owner does not answer, so they agree on
//     the second owner too, and it is the owner the slot gets if the first one leaves.

const (
	// ringSlots is split_clients' resolution: 0.01% of the key space.
	ringSlots = 10000
	// ringPoints are a member's points, as nginx's consistent hash gives a server.
	ringPoints = 160
)

// ringPoint is one of a member's points: its slot, and its hash to order points sharing
// a slot.
type ringPoint struct {
	slot   int
	hash   uint64
	member int
}

// placeSlots gives, for members named names (unique), each slot's owner and successor
// (indexes into names; the successor is -1 with fewer than two members). It depends only
// on the set of names: the order of names changes the indexes, never a slot's owner.
func placeSlots(names []string) (owner, successor []int) {
	if len(names) == 0 {
		return nil, nil
	}
	points := make([]ringPoint, 0, len(names)*ringPoints)
	for m, name := range names {
		for i := range ringPoints {
			h := pointHash(name, i)
			points = append(points, ringPoint{slot: int(h % ringSlots), hash: h, member: m})
		}
	}
	slices.SortFunc(points, func(a, b ringPoint) int {
		return cmp.Or(cmp.Compare(a.slot, b.slot), cmp.Compare(a.hash, b.hash), cmp.Compare(names[a.member], names[b.member]))
	})
	// next[k]: the first point after point k, going round, of another member.
	next := make([]int, len(points))
	for k := range points {
		next[k] = -1
		if len(names) > 1 {
			for j := (k + 1) % len(points); ; j = (j + 1) % len(points) {
				if points[j].member != points[k].member {
					next[k] = points[j].member
					break
				}
			}
		}
	}
	owner, successor = make([]int, ringSlots), make([]int, ringSlots)
	k := 0
	for s := range ringSlots {
		for k < len(points) && points[k].slot < s {
			k++
		}
		at := k % len(points) // past the last point: the first, going round
		owner[s], successor[s] = points[at].member, next[at]
	}
	return owner, successor
}

// pointHash places a member's point i: FNV-1a of its name and i, mixed (splitmix64's
// finalizer) so that the names' shared prefixes do not cluster their points.
func pointHash(name string, i int) uint64 {
	f := fnv.New64a()
	f.Write([]byte(name))
	f.Write(binary.BigEndian.AppendUint32([]byte{0}, uint32(i)))
	h := f.Sum64()
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// slotRun is a run of consecutive slots with one member.
type slotRun struct {
	member, slots int
}

// slotRuns merges consecutive slots of the same member, skipping slots of none (-1
// never is a member with two members or more).
func slotRuns(of []int) []slotRun {
	var runs []slotRun
	for _, m := range of {
		if n := len(runs); n > 0 && runs[n-1].member == m {
			runs[n-1].slots++
			continue
		}
		runs = append(runs, slotRun{member: m, slots: 1})
	}
	return runs
}
