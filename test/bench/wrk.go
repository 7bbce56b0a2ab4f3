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
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// objects.lua makes wrk request random objects of a range and report as JSON.
//
//go:embed objects.lua
var objectsLua []byte

// clientResult is what one wrk process measured.
type clientResult struct {
	Connections int     `json:"connections"`
	Requests    int64   `json:"requests"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"`
	Errors      int64   `json:"errors"` // connect, read, write, timeout and non-2xx/3xx
	LatMeanUs   float64 `json:"latency_mean_us"`
	LatStdevUs  float64 `json:"latency_stdev_us"`
	LatP50Us    float64 `json:"latency_p50_us"`
	LatP90Us    float64 `json:"latency_p90_us"`
	LatP99Us    float64 `json:"latency_p99_us"`
	LatP999Us   float64 `json:"latency_p999_us"`
	LatMaxUs    float64 `json:"latency_max_us"`
	Starved     int     `json:"starved_clients,omitempty"` // of those summed, how many completed no request

	// An open-loop client (Connections -1) sends at a fixed rate; its latencies run from
	// each request's intended send time. Requests are the ones that completed, Errors
	// those that failed; both, with Unfinished, are among Sent.
	OfferedPerSec float64 `json:"offered_per_s,omitempty"`
	Sent          int64   `json:"sent,omitempty"`
	Unfinished    int64   `json:"unfinished,omitempty"` // still waiting at the cutoff: their latency is a lower bound
	SentLate      int64   `json:"sent_late,omitempty"`  // sent over an interval after their intended time (the generator lagged)
	Unsent        int64   `json:"unsent,omitempty"`     // arrivals the generator never sent in its window
	FirstError    string  `json:"first_error,omitempty"`
}

// open says whether r is an open-loop client's.
func (r *clientResult) open() bool { return r.Connections < 0 }

// latencyBounded says whether r's latencies are lower bounds: some of an open-loop
// client's requests failed, did not finish or were never sent.
func (r *clientResult) latencyBounded() bool {
	return r.starved() || (r.open() && r.Errors+r.Unfinished+r.Unsent > 0)
}

// add sums two clients that ran at the same time (nil is none); latencies are
// request-weighted means, p99 and max the larger of the two.
func (r *clientResult) add(o *clientResult) *clientResult {
	if r == nil {
		return o
	}
	sum := &clientResult{
		Connections: r.Connections + o.Connections, Requests: r.Requests + o.Requests, Bytes: r.Bytes + o.Bytes,
		Seconds: max(r.Seconds, o.Seconds), Errors: r.Errors + o.Errors, Starved: r.Starved + o.Starved,
		LatStdevUs: max(r.LatStdevUs, o.LatStdevUs), LatP50Us: max(r.LatP50Us, o.LatP50Us), LatP90Us: max(r.LatP90Us, o.LatP90Us),
		LatP99Us: max(r.LatP99Us, o.LatP99Us), LatP999Us: max(r.LatP999Us, o.LatP999Us), LatMaxUs: max(r.LatMaxUs, o.LatMaxUs),
		OfferedPerSec: r.OfferedPerSec + o.OfferedPerSec, Sent: r.Sent + o.Sent, Unfinished: r.Unfinished + o.Unfinished,
		SentLate: r.SentLate + o.SentLate, Unsent: r.Unsent + o.Unsent, FirstError: cmp.Or(r.FirstError, o.FirstError),
	}
	if r.open() && o.open() {
		sum.Connections = -1
	}
	if sum.Requests > 0 {
		sum.LatMeanUs = (r.LatMeanUs*float64(r.Requests) + o.LatMeanUs*float64(o.Requests)) / float64(sum.Requests)
	}
	return sum
}

func (r *clientResult) ReqPerSec() float64   { return float64(r.Requests) / r.Seconds }
func (r *clientResult) BytesPerSec() float64 { return float64(r.Bytes) / r.Seconds }

// wrkLoad is one wrk process: conns connections asking for objects first..first+count-1.
type wrkLoad struct {
	threads             int // wrk threads; 1 if zero
	conns, first, count int
	ids                 []int // instead of first..first+count-1
	seed                int
	close               bool     // a new connection for every request
	https               bool     // addr is an HTTPS port
	headers             []string // header lines of every request ("Name: value")
}

func runWrk(ctx context.Context, bin, addr string, l wrkLoad, d time.Duration) (*clientResult, error) {
	dir, err := os.MkdirTemp("", "edgepool-bench-wrk-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "objects.lua")
	if err := os.WriteFile(script, objectsLua, 0o644); err != nil {
		return nil, err
	}
	args := []string{"-t", strconv.Itoa(max(1, l.threads)), "-c", strconv.Itoa(l.conns), "-d", fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds())),
		"--timeout", "60s", "-s", script}
	if l.close {
		args = append(args, "-H", "Connection: close")
	}
	for _, h := range l.headers {
		args = append(args, "-H", h)
	}
	scheme := "http://"
	if l.https {
		scheme = "https://"
	}
	args = append(args, scheme+addr+"/", "--", strconv.Itoa(l.first), strconv.Itoa(l.count), strconv.Itoa(l.seed))
	if l.ids != nil {
		if len(l.ids) == 0 {
			return nil, fmt.Errorf("wrk: no objects to request")
		}
		var list strings.Builder
		for _, id := range l.ids {
			fmt.Fprintln(&list, id)
		}
		ids := filepath.Join(dir, "ids")
		if err := os.WriteFile(ids, []byte(list.String()), 0o644); err != nil {
			return nil, err
		}
		args = append(args, ids)
	}
	ctx, cancel := context.WithTimeout(ctx, d+90*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("wrk: %v: %s", err, out)
	}
	const marker = "EDGEPOOL-WRK "
	i := strings.Index(string(out), marker)
	if i < 0 {
		return nil, fmt.Errorf("wrk printed no result: %s", out)
	}
	line, _, _ := strings.Cut(string(out[i+len(marker):]), "\n")
	r := &clientResult{Connections: l.conns}
	if err := json.Unmarshal([]byte(line), r); err != nil {
		return nil, fmt.Errorf("wrk result %q: %w", line, err)
	}
	if r.Requests == 0 && r.Errors > 0 {
		return nil, fmt.Errorf("wrk completed no request, with %d errors: %s", r.Errors, out)
	}
	// No request and no error: every request took longer than the window. The load
	// starved this client, which is a measurement (see clientResult.starved).
	if r.Requests == 0 {
		r.Starved = 1
	}
	return r, nil
}
