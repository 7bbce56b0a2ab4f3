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

package fanout

import (
	"fmt"
	"strings"
)

// Markdown renders the result as a table of measures, values and targets.
func (r *Result) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "P1 (a CachePurge fanned out): a kwok cluster, %d fake nodes each with a cache pod, the operator as a process, and %[1]d real agents with their nginx as processes on the pods' loopback addresses (a tmpfs disk each); %d purges of one URL and %[2]d of one tag, in turn, one at a time, each object cached on every node just before.\n\n",
		r.Agents, r.Purges)
	b.WriteString("| Measure | Measured | Target | Met |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| CachePurge of a URL created → Complete on all %d nodes, p50 / p99 (max) | %.0f / %.0f ms (%.0f ms) | p99 ≤ 2 s | %s |\n",
		r.Agents, r.P50Ms, r.P99Ms, r.MaxMs, met(r.P99Ms <= 2000))
	fmt.Fprintf(&b, "| CachePurge of a tag created → Complete on all %d nodes, p50 / p99 (max) | %.0f / %.0f ms (%.0f ms) | p99 ≤ 2 s | %s |\n",
		r.Agents, r.TagP50Ms, r.TagP99Ms, r.TagMaxMs, met(r.TagP99Ms <= 2000))
	fmt.Fprintf(&b, "| objects removed, all purges | %d | %d (one per node and purge) | %s |\n", r.ObjectsRemoved, 2*r.Agents*r.Purges, met(r.ObjectsRemoved == int64(2*r.Agents*r.Purges)))
	fmt.Fprintf(&b, "| agents started → all ready | %.1f s | - | (no target) |\n", r.StartupMs/1000)
	fmt.Fprintf(&b, "| agents and nginx, VmRSS summed | %.0f MiB (%.1f MiB each) | - | (no target) |\n", r.AgentsRSSMiB, r.AgentsRSSMiB/float64(max(r.Agents, 1)))
	return b.String()
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}
