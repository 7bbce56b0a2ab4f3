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
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDivCarriesBounds(t *testing.T) {
	for _, c := range []struct {
		name string
		a, b Value
		want Value
	}{
		{"exact", exact(10), exact(4), exact(2.5)},
		{"over a starved rate", exact(10), Value{V: 2, Bound: AtMost}, Value{V: 5, Bound: AtLeast}},
		{"a starved latency over an exact one", Value{V: 8, Bound: AtLeast}, exact(2), Value{V: 4, Bound: AtLeast}},
		{"a starved rate over an exact one", Value{V: 1, Bound: AtMost}, exact(4), Value{V: 0.25, Bound: AtMost}},
		{"two starved rates", Value{V: 1, Bound: AtMost}, Value{V: 1, Bound: AtMost}, unknown},
		{"a starved latency over a starved rate", Value{V: 8, Bound: AtLeast}, Value{V: 2, Bound: AtMost}, Value{V: 4, Bound: AtLeast}},
		{"over zero", exact(1), exact(0), unknown},
		{"zero over zero", exact(0), exact(0), unknown},
		{"overflowing", exact(1e308), exact(1e-308), unknown},
		{"of unknown", unknown, exact(1), unknown},
	} {
		if got := div(c.a, c.b); got != c.want {
			t.Errorf("%s: div(%v, %v) = %v, want %v", c.name, c.a, c.b, got, c.want)
		}
	}
}

func TestMedianAndTargetWithBounds(t *testing.T) {
	for _, c := range []struct {
		values []Value
		median Value
		met    string // against a target of 10
	}{
		{[]Value{exact(30), exact(10), exact(20)}, exact(20), "yes"},
		{[]Value{exact(30), exact(9)}, exact(19.5), "no"},
		{[]Value{exact(30), {V: 12, Bound: AtLeast}}, Value{V: 21, Bound: AtLeast}, "yes"},
		{[]Value{exact(30), {V: 8, Bound: AtLeast}}, Value{V: 19, Bound: AtLeast}, "unknown"},
		{[]Value{exact(30), {V: 8, Bound: AtMost}}, Value{V: 19, Bound: AtMost}, "no"},
		{[]Value{{V: 30, Bound: AtLeast}, {V: 8, Bound: AtMost}}, unknown, "no"},
		{[]Value{{V: 30, Bound: AtLeast}, {V: 12, Bound: AtMost}}, unknown, "unknown"},
		{[]Value{exact(30), unknown}, unknown, "unknown"},
	} {
		r := &Ratio{Values: c.values, atLeast: 10}
		if got := r.Median(); got != c.median {
			t.Errorf("median of %v = %v, want %v", c.values, got, c.median)
		}
		if got := r.Met(); got != c.met {
			t.Errorf("met(%v) = %q, want %q", c.values, got, c.met)
		}
	}
}

// TestSumWithAStarvedClient: one of D2's per-disk clients may be starved while the
// others complete requests; the sum's figures become bounds and stay finite.
func TestSumWithAStarvedClient(t *testing.T) {
	served := &clientResult{Requests: 100, Seconds: 10, LatMeanUs: 5000, LatStdevUs: 100, LatP99Us: 9000}
	starved := &clientResult{Seconds: 10, Starved: 1}
	sum := served.add(starved)
	for _, c := range []struct {
		what      string
		got, want Value
	}{
		{"rate", sum.rate(), Value{V: 10.1, Bound: AtMost}},
		{"mean latency", sum.meanLatency(), Value{V: 5000, Bound: AtLeast}},
		{"p99", sum.p99(), Value{V: 9000, Bound: AtLeast}},
		{"stdev", sum.latencyStdev(), unknown},
		{"mean latency of two starved", starved.add(starved).meanLatency(), Value{V: 10e6, Bound: AtLeast}},
		{"rate of nothing measured", (&clientResult{}).rate(), unknown},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if both := starved.add(starved); math.IsNaN(both.LatMeanUs) {
		t.Error("the mean latency of two starved clients is NaN")
	}
}

// TestStarvedClientIsAMeasurement: a client none of whose requests completes in its
// window is reported, as a bound, not taken for a broken run. This is what the
// thread-less baseline does under heavy load in a short window; the ratios against
// it are lower bounds, and the results still encode as JSON.
func TestStarvedClientIsAMeasurement(t *testing.T) {
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		t.Fatal("wrk not found: run `make test`, which installs it")
	}
	release := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(release)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addr := strings.TrimPrefix(slow.URL, "http://")
	starved, err := runWrk(ctx, wrk, addr, wrkLoad{conns: 4, count: 1, seed: 1}, time.Second)
	if err != nil {
		t.Fatalf("a starved client is a measurement, got %v", err)
	}
	if starved.Requests != 0 || starved.Errors != 0 || !starved.starved() {
		t.Fatalf("starved client: %d requests, %d errors, starved %d; want 0, 0 and 1", starved.Requests, starved.Errors, starved.Starved)
	}
	if r := starved.rate(); r.Bound != AtMost || r.V <= 0 {
		t.Errorf("starved rate = %v, want an upper bound of one request per window", r)
	}

	served := &clientResult{Requests: 400, Seconds: 1, LatMeanUs: 2000}
	res := &Results{Runs: []*Run{{Scenario: "D1", Hot: starved}}}
	res.ratio("D1", "req/s", "≥ 31x", 31, div(served.rate(), starved.rate()))
	res.ratio("D1", "latency", "≥ 33x", 33, div(starved.meanLatency(), served.meanLatency()))
	for _, r := range res.Ratios {
		if v := r.Values[0]; v.Bound != AtLeast || v.meets(r.atLeast) != "yes" {
			t.Errorf("%s against a starved client = %v (%s), want a lower bound that meets %v", r.Name, v, v.meets(r.atLeast), r.atLeast)
		}
	}
	if _, err := json.Marshal(res); err != nil {
		t.Errorf("results with a starved client do not encode: %v", err)
	}
	if md := res.Markdown(); !strings.Contains(md, "| ≥ ") {
		t.Errorf("the table does not mark bounds:\n%s", md)
	}
}

// A disk scenario that fails is named in the error, and the ones after it still run.
func TestRunScenariosRunsOnPastAFailure(t *testing.T) {
	opts := Options{RepoRoot: "../..", HeavyLoad: 1, ColdCapMBps: 1}
	_, err := RunScenarios(context.Background(), opts, []string{"X1", "X2"})
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("RunScenarios returned %v, want the failures joined", err)
	}
	var got []string
	for _, e := range joined.Unwrap() {
		var failed *ScenarioError
		if !errors.As(e, &failed) {
			t.Fatalf("%v is not a ScenarioError", e)
		}
		got = append(got, failed.Scenario)
	}
	if !slices.Equal(got, []string{"X1", "X2"}) {
		t.Errorf("failed scenarios %v, want [X1 X2]: %v", got, err)
	}
}

// TestStealOf reads the steal time (the 8th figure, in hundredths of a second) off the
// summed line of /proc/stat, and refuses a text without it.
func TestStealOf(t *testing.T) {
	got, err := stealOf("cpu  357055 309 173982 566016 75176 0 27872 15600 0 0\ncpu0 178359 151 88019 282365 37566 0 13912 7743 0 0\n")
	if err != nil || got != 156*time.Second {
		t.Errorf("stealOf = %v, %v; want 156s", got, err)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8 9", "cpu 1 2 3 4 5 6 7", "cpu 1 2 3 4 5 6 7 -8", "cpu 1 2 3 4 5 6 7 x"} {
		if d, err := stealOf(bad); err == nil {
			t.Errorf("stealOf(%q) = %v, want an error", bad, d)
		}
	}
	if _, err := machineSteal(); err != nil {
		t.Errorf("this machine's steal time: %v", err)
	}
}
