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

package reload

import (
	"fmt"
	"strings"
)

// Markdown renders the result as a table of measures, values and targets.
func (r *Result) Markdown() string {
	var b strings.Builder
	b.WriteString("| C2 (reload, agent + nginx) | Measured | Target | Met |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| configuration written → new configuration serving, %d reloads (agent debounce %.0f ms) | p50 %.1f ms, p99 %.1f ms, max %.1f ms | - | (no target) |\n",
		r.Reloads, r.DebounceMs, r.ReloadP50Ms, r.ReloadP99Ms, r.ReloadMaxMs)
	fmt.Fprintf(&b, "| configuration written → old workers stopped accepting | p50 %.1f ms, p99 %.1f ms, max %.1f ms; %d of %d probes answered by the old configuration after the new one served | - | (no target) |\n",
		r.SettledP50Ms, r.SettledP99Ms, r.SettledMaxMs, r.StaleResponses, r.Probes)
	fmt.Fprintf(&b, "| failed requests during the reloads, %d keep-alive clients | %d of %d in %.1f s | 0 | %s |\n",
		r.Clients, r.FailedRequests, r.Requests, r.LoadMs/1000, met(r.FailedRequests == 0))
	fmt.Fprintf(&b, "| agent's reloads, failed | %d, %d | %d, 0 | %s |\n", r.AgentReloads, r.AgentFailedReloads, r.Reloads,
		met(r.AgentReloads == r.Reloads && r.AgentFailedReloads == 0))
	return b.String()
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}
