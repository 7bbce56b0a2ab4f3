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
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// An open-loop client sends requests at a fixed arrival rate whatever the server does,
// as real demand does: when the server slows down, requests pile up instead of the
// client slowing down with it. vegeta paces the requests; every latency is measured
// from the request's intended send time, so a request the generator itself sent late
// (a busy CPU) is not flattered (no coordinated omission).

// openLoad is one open-loop client: rate requests per second on random objects of ids.
type openLoad struct {
	rate float64
	ids  []int
	seed uint64
}

// maxInFlight bounds the requests one open-loop client keeps waiting (a connection
// each): far above what nginx serves in a window here, below nginx's worker_connections.
const maxInFlight = 3000

// contentCheckFailed marks the errors of a response that is not the object asked for.
const contentCheckFailed = "content check failed"

// runOpen sends l's requests to the cache at addr for warm and then a window of d, and
// waits up to grace after the last for their responses. Only the requests due in the
// window count. A request still waiting at the cutoff is cancelled and counted as
// unfinished, at the latency it had reached. A response that is not a cache HIT of
// exactly the object's bytes fails the run.
func runOpen(ctx context.Context, addr string, l openLoad, size int64, warm, d, grace time.Duration) (*clientResult, error) {
	if l.rate <= 0 || len(l.ids) == 0 {
		return nil, fmt.Errorf("open loop: rate %v on %d objects", l.rate, len(l.ids))
	}
	interval := time.Duration(float64(time.Second) / l.rate)
	cutoffCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var received atomic.Int64
	transport := &http.Transport{MaxIdleConnsPerHost: maxInFlight, DisableCompression: true}
	defer transport.CloseIdleConnections()
	// Request n (from 0) is due (n+1) intervals after the attack's start (vegeta's pacer).
	due := func(seq uint64) time.Duration { return time.Duration(seq+1) * interval }
	counted := func(seq uint64) bool { return due(seq) >= warm }
	client := &http.Client{Transport: &checkedTransport{base: transport, cutoff: cutoffCtx, size: size, received: &received, counted: counted}}
	attacker := vegeta.NewAttacker(vegeta.Client(client), vegeta.MaxBody(0), vegeta.MaxWorkers(maxInFlight))

	start := time.Now() // vegeta's own start is a little later: latencies err long
	results := attacker.Attack(objectTargeter("http://"+addr, l.ids, l.seed), vegeta.Rate{Freq: 1, Per: interval}, warm+d, "")
	cutoff := start.Add(warm + d + grace)
	timer := time.AfterFunc(time.Until(cutoff), cancel)
	defer timer.Stop()
	stop := context.AfterFunc(ctx, func() { attacker.Stop() })
	defer stop()

	var (
		lat                        []time.Duration
		ok, failed, late, unfinish int64
		firstErr, checkErr         string
	)
	for res := range results {
		intended := start.Add(due(res.Seq))
		end := res.End()
		switch {
		case strings.Contains(res.Error, contentCheckFailed):
			if checkErr == "" {
				checkErr = res.Error
				attacker.Stop()
				cancel()
			}
			continue
		case !counted(res.Seq):
			continue
		}
		lat = append(lat, end.Sub(intended))
		switch {
		case res.Error == "":
			ok++
		case !end.Before(cutoff):
			unfinish++
		default:
			failed++
			if firstErr == "" {
				firstErr = res.Error
			}
		}
		if res.Timestamp.Sub(intended) > interval {
			late++
		}
	}
	if checkErr != "" {
		return nil, fmt.Errorf("open loop: %s", checkErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := &clientResult{
		Connections: -1, Requests: ok, Bytes: received.Load(), Seconds: d.Seconds(), Errors: failed,
		OfferedPerSec: l.rate, Sent: int64(len(lat)), Unfinished: unfinish, SentLate: late,
		FirstError: firstErr,
	}
	// The arrivals due in the window the generator did not send (it fell behind).
	r.Unsent = max(0, int64((warm+d)/interval)-int64(warm/interval)-2-r.Sent)
	r.setLatencies(lat)
	return r, nil
}

// setLatencies fills r's latency figures from every request sent, in µs. A request
// that failed or did not finish contributes the latency it reached, a lower bound.
func (r *clientResult) setLatencies(lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	at := func(q float64) float64 {
		return us(lat[max(0, int(math.Ceil(q*float64(len(lat))))-1)])
	}
	var sum, sq float64
	for _, l := range lat {
		sum += us(l)
	}
	mean := sum / float64(len(lat))
	for _, l := range lat {
		sq += (us(l) - mean) * (us(l) - mean)
	}
	r.LatMeanUs, r.LatStdevUs = mean, math.Sqrt(sq/float64(len(lat)))
	r.LatP50Us, r.LatP90Us, r.LatP99Us, r.LatP999Us, r.LatMaxUs = at(0.50), at(0.90), at(0.99), at(0.999), us(lat[len(lat)-1])
}

// objectTargeter asks for random objects of ids.
func objectTargeter(base string, ids []int, seed uint64) vegeta.Targeter {
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(seed, 0x09e7))
	return func(t *vegeta.Target) error {
		mu.Lock()
		id := ids[rng.IntN(len(ids))]
		mu.Unlock()
		*t = vegeta.Target{Method: http.MethodGet, URL: base + ObjectPath(id)}
		return nil
	}
}

// checkedTransport gives every request the client's cutoff, and checks every response:
// a cache HIT of the object's size, whose bytes its body checks as they arrive.
type checkedTransport struct {
	base     http.RoundTripper
	cutoff   context.Context
	size     int64
	received *atomic.Int64         // body bytes of the requests counted
	counted  func(seq uint64) bool // whether vegeta's request seq is due in the window
}

func (t *checkedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	id, err := strconv.Atoi(strings.TrimPrefix(req.URL.Path, objectPrefix))
	if err != nil {
		return nil, fmt.Errorf("%s: %s is no object", contentCheckFailed, req.URL.Path)
	}
	resp, err := t.base.RoundTrip(req.WithContext(t.cutoff))
	if err != nil {
		return nil, err
	}
	if s := resp.Header.Get("X-Cache-Status"); resp.StatusCode != http.StatusOK || s != "HIT" || resp.ContentLength != t.size {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s: %s, cache status %q, %d bytes, want a HIT of %d", contentCheckFailed,
			req.URL.Path, resp.Status, s, resp.ContentLength, t.size)
	}
	body := &checkedBody{ReadCloser: resp.Body, id: id, size: t.size, received: new(atomic.Int64)}
	if seq, err := strconv.ParseUint(req.Header.Get("X-Vegeta-Seq"), 10, 64); err == nil && t.counted(seq) {
		body.received = t.received
	}
	resp.Body = body
	return resp, nil
}

// checkedBody checks each byte read against the object's content.
type checkedBody struct {
	io.ReadCloser
	id       int
	off      int64
	size     int64
	received *atomic.Int64
}

func (b *checkedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		if !matchesBody(b.id, p[:n], b.off) {
			return n, fmt.Errorf("%s: object %d: wrong bytes in %d at offset %d", contentCheckFailed, b.id, n, b.off)
		}
		b.off += int64(n)
		b.received.Add(int64(n))
	}
	if errors.Is(err, io.EOF) && b.off != b.size {
		return n, fmt.Errorf("%s: object %d: %d bytes, want %d", contentCheckFailed, b.id, b.off, b.size)
	}
	return n, err
}

var readBuffers = sync.Pool{New: func() any { return new([256 << 10]byte) }}

// WriteTo drains the body in large reads (vegeta discards it with io.Copy), so a 4 MB
// object costs a few read calls rather than hundreds.
func (b *checkedBody) WriteTo(w io.Writer) (int64, error) {
	buf := readBuffers.Get().(*[256 << 10]byte)
	defer readBuffers.Put(buf)
	var total int64
	for {
		n, err := b.Read(buf[:])
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return total, werr
			}
			total += int64(n)
		}
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
