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

package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Bound says how a measured figure relates to the true value. A client starved by
// the load it measures (no request completed in its window) still tells something:
// it ran at under one request per window, and its requests took longer than the
// window. Those are bounds, and a ratio of a bound is a bound, or unknown.
type Bound string

const (
	Exact   Bound = ""
	AtLeast Bound = "at_least" // the true value is this or more
	AtMost  Bound = "at_most"  // the true value is this or less
	Unknown Bound = "unknown"  // nothing can be said
)

// Value is one measured figure. An unknown one holds 0: read Bound before V.
type Value struct {
	V     float64 `json:"value"`
	Bound Bound   `json:"bound,omitempty"`
}

func exact(v float64) Value { return Value{V: v} }

var unknown = Value{Bound: Unknown}

func (b Bound) flip() Bound {
	switch b {
	case AtLeast:
		return AtMost
	case AtMost:
		return AtLeast
	}
	return b
}

// join is the bound of a figure computed from figures bounded a and b, moving
// the same way (an upper bound on a numerator, a lower bound on a denominator).
func join(a, b Bound) Bound {
	switch {
	case a == b || b == Exact:
		return a
	case a == Exact:
		return b
	}
	return Unknown
}

// div is a ÷ b; unknown rather than infinite or NaN, which JSON cannot hold.
func div(a, b Value) Value {
	bound := join(a.Bound, b.Bound.flip())
	q := a.V / b.V
	if bound == Unknown || math.IsNaN(q) || math.IsInf(q, 0) {
		return unknown
	}
	return Value{V: q, Bound: bound}
}

// median of vs: a bound when any of them is one.
func median(vs []Value) Value {
	if len(vs) == 0 {
		return unknown
	}
	sorted := slices.Clone(vs)
	slices.SortFunc(sorted, func(a, b Value) int { return cmp.Compare(a.V, b.V) })
	bound := Exact
	for _, v := range sorted {
		bound = join(bound, v.Bound)
	}
	if bound == Unknown {
		return unknown
	}
	m := sorted[len(sorted)/2].V
	if len(sorted)%2 == 0 {
		m = (sorted[len(sorted)/2-1].V + m) / 2
	}
	return Value{V: m, Bound: bound}
}

// meets says whether v meets the lower bound target: "yes", "no", or "unknown"
// when v is a bound on the wrong side of it.
func (v Value) meets(target float64) string {
	switch {
	case v.Bound == Unknown:
		return "unknown"
	case v.V >= target && v.Bound != AtMost:
		return "yes"
	case v.V < target && v.Bound != AtLeast:
		return "no"
	}
	return "unknown"
}

// meetsAtMost says whether v meets the upper bound target, as meets does a lower one.
func (v Value) meetsAtMost(target float64) string {
	switch {
	case v.Bound == Unknown:
		return "unknown"
	case v.V <= target && v.Bound != AtLeast:
		return "yes"
	case v.V > target && v.Bound != AtMost:
		return "no"
	}
	return "unknown"
}

// format prints v with f, marked with its bound.
func (v Value) format(f func(float64) string) string {
	switch v.Bound {
	case AtLeast:
		return "≥ " + f(v.V)
	case AtMost:
		return "≤ " + f(v.V)
	case Unknown:
		return "n/a"
	}
	return f(v.V)
}

func (v Value) String() string { return v.format(func(f float64) string { return fmt.Sprint(f) }) }

// A starved client completed no request in its window; Starved counts those in a
// sum of clients. Their requests took longer than the window, longer than any that
// completed, so with them the figures below become bounds.
func (r *clientResult) starved() bool { return r.Starved > 0 }

// rate is req/s; a starved client ran at under one request per window.
func (r *clientResult) rate() Value {
	if r.Seconds <= 0 {
		return unknown
	}
	if r.starved() {
		return Value{V: float64(r.Requests+int64(r.Starved)) / r.Seconds, Bound: AtMost}
	}
	return exact(r.ReqPerSec())
}

// meanLatency is in µs.
func (r *clientResult) meanLatency() Value {
	switch {
	case r.Seconds <= 0:
		return unknown
	case r.Requests == 0 && !r.open():
		return Value{V: r.Seconds * 1e6, Bound: AtLeast}
	case r.latencyBounded():
		return Value{V: r.LatMeanUs, Bound: AtLeast}
	}
	return exact(r.LatMeanUs)
}

// p99 is the 99th percentile latency in µs.
func (r *clientResult) p99() Value { return r.percentile(r.LatP99Us) }

// percentile is one of r's latency percentiles (in µs) as a Value.
func (r *clientResult) percentile(us float64) Value {
	switch {
	case r.Requests == 0 && !r.open():
		return r.meanLatency()
	case r.latencyBounded():
		return Value{V: us, Bound: AtLeast}
	}
	return exact(us)
}

// latencyStdev is in µs; unknown with a starved client or bounded latencies.
func (r *clientResult) latencyStdev() Value {
	if r.latencyBounded() {
		return unknown
	}
	return exact(r.LatStdevUs)
}
