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

package controlplane

import (
	"fmt"
	"strings"
)

// RSSTargetMiB is the operator's memory budget at 1,000 CacheNodes.
const RSSTargetMiB = 100

// Markdown renders the result as a table of measures, values and targets.
func (r *Result) Markdown() string {
	total := 1 + r.Sequential + r.CacheNodes
	var b strings.Builder
	b.WriteString("| C1 (control plane, envtest) | Measured | Target | Met |\n|---|---|---|---|\n")
	row := func(measure, value, target string, met bool) {
		m := "yes"
		if target == "-" {
			m = "(no target)"
		} else if !met {
			m = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", measure, value, target, m)
	}
	row(fmt.Sprintf("create → ConfigMap and DaemonSet, %d one at a time", r.Sequential),
		fmt.Sprintf("p50 %.1f ms, p99 %.1f ms", r.CreateP50Ms, r.CreateP99Ms), "-", true)
	row(fmt.Sprintf("spec change → new ConfigMap, %d one at a time", r.Sequential),
		fmt.Sprintf("p50 %.1f ms, p99 %.1f ms", r.UpdateP50Ms, r.UpdateP99Ms), "-", true)
	row(fmt.Sprintf("%d CacheNodes created at once → all converged (ConfigMap, DaemonSet, status)", r.CacheNodes),
		fmt.Sprintf("%.1f s (creates sent in %.1f s); %d reconcile errors, %d conflicts", r.BurstConvergeMs/1000, r.BurstSubmitMs/1000, r.ReconcileErrors, r.Conflicts),
		fmt.Sprintf("all %d converge", r.CacheNodes), r.Converged == r.CacheNodes)
	keys := r.WriteBreakdown["APPLY configmaps"]
	row(fmt.Sprintf("API writes of a no-op resync (operator restarted on %d converged CacheNodes)", total),
		fmt.Sprintf("%d (apiserver's count; %d more to leases and events), %d (operator's client), of which %d ConfigMap applies; %d reconciles in %.1f s",
			r.WritesPerNoopResync, r.ExcludedWrites, r.OperatorWrites, keys, r.ResyncReconciles, r.ResyncMs/1000),
		"only the new leader's purge key: ≤ 1 ConfigMap apply per CacheNode",
		r.WritesPerNoopResync == keys && r.OperatorWrites == keys && keys <= total)
	row(fmt.Sprintf("operator RSS at %d CacheNodes, idle", total),
		fmt.Sprintf("%.1f MiB (peak %.1f MiB); after the restart %.1f MiB (peak %.1f MiB)", r.RSSMiB, r.HWMMiB, r.ResyncRSSMiB, r.ResyncHWMMiB),
		fmt.Sprintf("≤ %d MiB", RSSTargetMiB), max(r.RSSMiB, r.ResyncRSSMiB) <= RSSTargetMiB)
	return b.String()
}
