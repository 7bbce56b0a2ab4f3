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

package shard

import (
	"fmt"
	"strings"
)

// Markdown renders the result as a table: the two fleets side by side, then the ring's
// measures, each with the target.
func (r *Result) Markdown() string {
	o := r.Options
	var b strings.Builder
	fmt.Fprintf(&b, "S1 (one cache across the nodes): %d nginx on loopback addresses of their own, one %d MiB disk each, in front of one origin; %d requests drawn by a Zipf law (s = %.2f) from %d objects of 4-16 KiB, round robin over the nodes from %d clients; the same stream through %d independent caches, %[1]d sharded ones, and %[1]d sharded ones with a 4 MiB hot tier each.\n\n",
		o.Nodes, o.DiskBytes>>20, o.Requests, o.ZipfS, o.Objects, o.Clients, o.Nodes)
	b.WriteString("| Measure | Independent | Sharded | Sharded, hot tier | Target (sharded) | Met |\n|---|---|---|---|---|---|\n")
	i, s, h := r.Independent, r.Sharded, r.ShardedHot
	fmt.Fprintf(&b, "| origin requests per distinct object | %.2f | %.3f | %.3f | ≤ 1.05 | %s |\n", i.OriginPerObject, s.OriginPerObject, h.OriginPerObject, met(s.OriginPerObject <= 1.05))
	fmt.Fprintf(&b, "| hit ratio, requests (ideal %.3f) | %.3f (%.2f of ideal) | %.3f (%.2f of ideal) | %.3f (%.2f of ideal) | ≥ 0.95 of ideal | %s |\n",
		r.IdealHitRatio, i.HitRatio, i.HitRatio/r.IdealHitRatio, s.HitRatio, s.HitRatio/r.IdealHitRatio, h.HitRatio, h.HitRatio/r.IdealHitRatio, met(s.HitRatio >= 0.95*r.IdealHitRatio))
	fmt.Fprintf(&b, "| hit ratio, bytes (ideal %.3f) | %.3f (%.2f of ideal) | %.3f (%.2f of ideal) | %.3f (%.2f of ideal) | ≥ 0.95 of ideal | %s |\n",
		r.IdealByteHitRatio, i.ByteHitRatio, i.ByteHitRatio/r.IdealByteHitRatio, s.ByteHitRatio, s.ByteHitRatio/r.IdealByteHitRatio, h.ByteHitRatio, h.ByteHitRatio/r.IdealByteHitRatio, met(s.ByteHitRatio >= 0.95*r.IdealByteHitRatio))
	fmt.Fprintf(&b, "| failed requests | %d | %d | %d | 0 | %s |\n", i.Failed, s.Failed, h.Failed, met(s.Failed == 0 && h.Failed == 0))
	fmt.Fprintf(&b, "| requests answered by the hot tier (no peer hop) | - | - | %.3f | - | (no target) |\n", float64(h.HotHits)/float64(max(h.Requests, 1)))
	fmt.Fprintf(&b, "| requests/s (closed loop, all on one machine) | %.0f | %.0f | %.0f | - | (no target) |\n", i.RequestsPerSecond, s.RequestsPerSecond, h.RequestsPerSecond)
	fmt.Fprintf(&b, "| hit latency p50 / p99, sequential (the peer hop's cost) | %.0f / %.0f µs | %.0f / %.0f µs | %.0f / %.0f µs | - | (no target) |\n",
		r.IndependentHitP50Us, r.IndependentHitP99Us, r.ShardedHitP50Us, r.ShardedHitP99Us, r.ShardedHotHitP50Us, r.ShardedHotHitP99Us)
	n := float64(o.Nodes)
	fmt.Fprintf(&b, "| keys moved when 1 of %d nodes leaves (of %d) | - | %.3f | - | ≤ %.3f (1.2 / %d) | %s |\n", o.Nodes, o.MoveKeys, r.MovedOnLeave, 1.2/n, o.Nodes, met(r.MovedOnLeave <= 1.2/n))
	fmt.Fprintf(&b, "| keys moved when it joins again | - | %.3f | - | ≤ %.3f | %s |\n", r.MovedOnJoin, 1.2/n, met(r.MovedOnJoin <= 1.2/n))
	fmt.Fprintf(&b, "| failed requests while a node leaves and joins under load | - | %d of %d | - | 0 | %s |\n", r.ChurnFailed, r.ChurnRequests, met(r.ChurnFailed == 0))
	return b.String()
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}
