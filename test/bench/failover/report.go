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

package failover

import (
	"fmt"
	"strings"
)

// Markdown renders the result as a table per fault of measures, values and targets.
func (r *Result) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "F1 (a failing disk, agent + nginx): %d disks (ext4 on loop devices), the first one fails; %d objects of %d KiB, cached; %d keep-alive clients for the healthy disks' keys and %[4]d for the failing disk's.\n\n",
		r.Disks, r.Objects, r.ObjectSize>>10, r.Clients)
	b.WriteString("| Fault | Measure | Measured | Target | Met |\n|---|---|---|---|---|\n")
	for _, run := range r.Runs {
		row := func(measure, measured, target, met string) {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", run.Fault, measure, measured, target, met)
		}
		row("failure → the agent took the disk out", fmt.Sprintf("%.0f ms (%s)", run.DetectionMs, run.Reason), "≤ 10 s", met(run.DetectionMs <= 10000))
		row("failure → nginx serves without the disk (old workers gone)", fmt.Sprintf("%.0f ms", run.SwitchedMs), "-", "(no target)")
		for _, p := range []struct {
			name  string
			phase Phase
		}{{"before the failure", run.Before}, {"while detecting", run.Detecting}, {"while nginx switched", run.Switching}} {
			row("failed requests "+p.name, fmt.Sprintf("%d of %d (%d for healthy disks' keys)", p.phase.Failed, p.phase.Requests, p.phase.FailedHealthy), "-", "(no target)")
		}
		row("failed requests after nginx switched", fmt.Sprintf("%d of %d", run.After.Failed, run.After.Requests), "0", met(run.After.Failed == 0))
		row("healthy disks' keys, MB/s before → during → after", fmt.Sprintf("%.0f → %.0f → %.0f", run.Before.HealthyMBps,
			(run.DuringRatio())*run.Before.HealthyMBps, run.After.HealthyMBps), "-", "(no target)")
		row("healthy disks' throughput during / before", fmt.Sprintf("%.2f", run.DuringRatio()), "≥ 0.9", met(run.DuringRatio() >= 0.9))
		row("healthy disks' throughput after / before", fmt.Sprintf("%.2f", run.AfterRatio()), "≥ 0.9", met(run.AfterRatio() >= 0.9))
	}
	return b.String()
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}
