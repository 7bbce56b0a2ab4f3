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
	"strings"

	"github.com/edgepool/edgepool/internal/test/testkit"
)

// mutatingVerbs are the apiserver_request_total verbs that write. Server-side apply is
// counted as APPLY, not PATCH.
var mutatingVerbs = map[string]bool{
	"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true,
}

// writesByResource counts apiserver_request_total's mutating requests per
// "VERB resource[/subresource]".
func writesByResource(m testkit.Metrics) map[string]int {
	out := map[string]int{}
	m.Each("apiserver_request_total", func(l map[string]string, v float64) {
		if !mutatingVerbs[l["verb"]] {
			return
		}
		res := l["resource"]
		if sub := l["subresource"]; sub != "" {
			res += "/" + sub
		}
		out[l["verb"]+" "+res] += int(v)
	})
	return out
}

// writeDelta is after minus before, without the keys that did not change.
func writeDelta(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// excludedResource reports whether writes to a resource are left out of the no-op resync
// count: leases (with leader election off, only the apiserver's own identity heartbeat
// writes them) and events.
func excludedResource(key string) bool {
	_, res, _ := strings.Cut(key, " ")
	return res == "leases" || res == "events"
}
