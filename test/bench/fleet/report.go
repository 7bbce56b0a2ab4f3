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

package fleet

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Markdown renders the result as a table of measures, values and targets.
func (r *Result) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "C3 (a fleet): a kwok cluster of %d fake nodes in %d regions, %d CacheNodes (per region an edge one on its edge nodes with two NVMe disks, and a region one on all its nodes, eligible with two HDDs) selecting %d nodes, %d of them eligible (one cache pod each); the operator as a process; every pod's agent answered from one process on the pods' loopback addresses, %.0f%% of them slow, %.0f%% hung and %.0f%% dead.\n\n",
		r.Nodes, r.CacheNodes/2, r.CacheNodes, r.Selected, r.Eligible, 100*r.Unhealthy, 100*r.Unhealthy, 100*r.Unhealthy)
	b.WriteString("| Measure | Measured | Target | Met |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| CacheNodes created → every DaemonSet applied and every status observed with its selected and eligible nodes | %.1f s | - | (no target) |\n", r.AppliedMs/1000)
	fmt.Fprintf(&b, "| CacheNodes created → every DaemonSet's pods running and ready (the DaemonSet controller, scheduler and kwok on this machine) | %.1f s | - | (no target) |\n", r.PodsReadyMs/1000)
	fmt.Fprintf(&b, "| CacheNodes created → converged: %d pods ready (kwok), statuses counting them, ConfigApplied, every live agent asked | %.1f s | ≤ 30 s | %s |\n",
		r.Eligible, r.ConvergedMs/1000, met(r.ConvergedMs <= 30000))
	fmt.Fprintf(&b, "| operator CPU over that | %.1f s | - | (no target) |\n", r.OperatorCPUSeconds)
	fmt.Fprintf(&b, "| operator memory, VmRSS (VmHWM) | %.0f MiB (%.0f MiB) | ≤ 200 MiB | %s |\n", r.OperatorRSSMiB, r.OperatorHWMMiB, met(r.OperatorHWMMiB <= 200))
	fmt.Fprintf(&b, "| operator API writes over that | %d | - | (no target) |\n", r.ConvergeWrites)
	n := r.NoOp
	fmt.Fprintf(&b, "| a poll interval with nothing changed (%d agents asked again, %.1f s): operator writes / apiserver writes / reconciles | %d / %d / %d | 0 | %s |\n",
		n.AgentsAsked, n.WindowMs/1000, n.OperatorWrites, n.APIWrites, n.Reconciles, met(n.OperatorWrites+n.APIWrites+n.Reconciles == 0))
	s := r.Sweep
	fmt.Fprintf(&b, "| a new operator's first sweep of %d agents (%d healthy, %d slow, %d hung; %d dead refuse at once): first ask → healthy ones answered / all over | %.1f s / %.1f s | ≤ 30 s | %s |\n",
		s.Healthy+s.Slow+s.Hung+s.Dead, s.Healthy, s.Slow, s.Hung, s.Dead, s.HealthyMs/1000, s.AllMs/1000, met(s.AllMs <= 30000))
	for _, c := range r.Churn {
		var names []string
		total := 0
		for name, k := range c.Reconciled {
			names = append(names, fmt.Sprintf("%s×%d", name, k))
			total += k
		}
		sort.Strings(names)
		only := true
		for name := range c.Reconciled {
			only = only && slices.Contains(c.Affected, name)
		}
		fmt.Fprintf(&b, "| %d nodes, %s: CacheNodes reconciled (of %d; %d select the node before or after) | %d: %s | only those %d | %s |\n",
			c.Nodes, c.Event, r.CacheNodes, len(c.Affected), len(c.Reconciled), strings.Join(names, ", "), len(c.Affected), met(only))
		fmt.Fprintf(&b, "| … its %d reconciles, p50 / max; change → statuses counting the nodes anew / converged (a pod started or removed) | %.1f / %.1f ms; %.1f / %.1f s | - | (no target) |\n",
			total, percentile(c.ReconcileMs, 50), slices.Max(append([]float64{0}, c.ReconcileMs...)), c.ObservedMs/1000, c.ConvergedMs/1000)
	}
	return b.String()
}

// percentile of ms (nearest rank); 0 when empty.
func percentile(ms []float64, p float64) float64 {
	if len(ms) == 0 {
		return 0
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	i := int(p / 100 * float64(len(s)-1))
	return s[i]
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}
