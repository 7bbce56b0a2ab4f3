//go:build bench

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
	"bufio"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Pure helpers: Prometheus text samples, percentiles, /proc/PID/status.

// sample is one line of the Prometheus text exposition format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// parseSamples reads the samples of a /metrics document; comments and lines it cannot
// read are skipped.
func parseSamples(text string) []sample {
	var out []sample
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		if s, ok := parseSample(sc.Text()); ok {
			out = append(out, s)
		}
	}
	return out
}

// parseSample reads `name{k="v",...} value [timestamp]`.
func parseSample(line string) (sample, bool) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return sample{}, false
	}
	s := sample{labels: map[string]string{}}
	end := strings.IndexAny(line, "{ ")
	if end <= 0 {
		return sample{}, false
	}
	s.name, line = line[:end], line[end:]
	if line[0] == '{' {
		rest, ok := parseLabels(line[1:], s.labels)
		if !ok {
			return sample{}, false
		}
		line = rest
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return sample{}, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return sample{}, false
	}
	s.value = v
	return s, true
}

// parseLabels reads `k="v",...}` into labels and returns what follows the brace.
func parseLabels(in string, labels map[string]string) (string, bool) {
	for {
		in = strings.TrimLeft(in, " ,")
		if strings.HasPrefix(in, "}") {
			return in[1:], true
		}
		eq := strings.Index(in, `="`)
		if eq <= 0 {
			return "", false
		}
		key := in[:eq]
		in = in[eq+2:]
		var val strings.Builder
		for {
			if in == "" {
				return "", false
			}
			c := in[0]
			in = in[1:]
			if c == '"' {
				break
			}
			if c == '\\' && in != "" {
				switch in[0] {
				case 'n':
					c = '\n'
				default:
					c = in[0]
				}
				in = in[1:]
			}
			val.WriteByte(c)
		}
		labels[key] = val.String()
	}
}

// sum adds the values of the samples named name whose labels include match.
func sum(samples []sample, name string, match map[string]string) float64 {
	total := 0.0
	for _, s := range samples {
		if s.name == name && hasLabels(s, match) {
			total += s.value
		}
	}
	return total
}

func hasLabels(s sample, match map[string]string) bool {
	for k, v := range match {
		if s.labels[k] != v {
			return false
		}
	}
	return true
}

// mutatingVerbs are the apiserver_request_total verbs that write. Server-side apply is
// counted as APPLY, not PATCH.
var mutatingVerbs = map[string]bool{
	"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true,
}

// writesByResource counts apiserver_request_total's mutating requests per
// "VERB resource[/subresource]".
func writesByResource(samples []sample) map[string]int {
	out := map[string]int{}
	for _, s := range samples {
		if s.name != "apiserver_request_total" || !mutatingVerbs[s.labels["verb"]] {
			continue
		}
		res := s.labels["resource"]
		if sub := s.labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		out[s.labels["verb"]+" "+res] += int(s.value)
	}
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
	res := key[strings.IndexByte(key, ' ')+1:]
	return res == "leases" || res == "events"
}

// percentile is the nearest-rank p-th percentile (0 < p <= 100) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// quantiles returns the p50 and p99 of ds in milliseconds.
func quantiles(ds []time.Duration) (p50, p99 float64) {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return ms(percentile(sorted, 50)), ms(percentile(sorted, 99))
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

// procMemory reads VmRSS and VmHWM, in MiB, from a /proc/PID/status document.
func procMemory(status string) (rss, hwm float64, err error) {
	found := 0
	for _, line := range strings.Split(status, "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		var kib float64
		if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%g kB", &kib); err != nil {
			return 0, 0, fmt.Errorf("parse %s: %w", key, err)
		}
		mib := math.Round(kib/1024*10) / 10
		if key == "VmRSS" {
			rss = mib
		} else {
			hwm = mib
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("VmRSS or VmHWM missing")
	}
	return rss, hwm, nil
}
