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

package requestlog

import (
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func TestParseLine(t *testing.T) {
	for datagram, want := range map[string]*Line{
		"<190>Nov 23 02:47:41 edgepool_req1: HIT|nvme0|200|153|0.000|-|-": {
			CacheStatus: "HIT", Disk: "nvme0", StatusClass: "2xx", BytesSent: 153},
		"<190>Nov  3 02:47:41 edgepool_req1: MISS|hdd0|200|4194604|0.120|200|0.118": {
			CacheStatus: "MISS", Disk: "hdd0", StatusClass: "2xx", BytesSent: 4194604, Seconds: 0.12,
			Origin: []OriginTry{{StatusClass: "2xx", Seconds: 0.118}}},
		// Two origin servers tried, then an internal redirect; a try without a response.
		"<190>Nov 23 02:47:41 edgepool_req1: EXPIRED|hdd0|502|310|3.002|502, 504 : -|0.001, 3.000 : -": {
			CacheStatus: "EXPIRED", Disk: "hdd0", StatusClass: "5xx", BytesSent: 310, Seconds: 3.002,
			Origin: []OriginTry{{StatusClass: "5xx", Seconds: 0.001}, {StatusClass: "5xx", Seconds: 3}, {Seconds: -1}}},
		"<190>Nov 23 02:47:41 edgepool_req1: -|hdd0|499|0|0.000|-|-": {
			CacheStatus: "NONE", Disk: "hdd0", StatusClass: "4xx"},
		"<190>Nov 23 02:47:41 edgepool_req1: WEIRD|hdd0|999|0|0.000|-|-": {
			CacheStatus: "other", Disk: "hdd0", StatusClass: "other"},
		// Not lines of the format.
		"<190>Nov 23 02:47:41 edgepool_req1: HIT|nvme0|200|153|0.000|-":            nil,
		"<190>Nov 23 02:47:41 edgepool_req1: HIT|nvme0|2x0|153|0.000|-|-":          nil,
		"<190>Nov 23 02:47:41 edgepool_req1: HIT|nvme0|200|-1|0.000|-|-":           nil,
		"<190>Nov 23 02:47:41 edgepool_req1: HIT|nvme0|200|1|0.000|200, 200|0.001": nil,
		"<190>Nov 23 02:47:41 edgepool_req1: HIT|nvme0|200|1|0.000|200|-0.001":     nil,
		"<190>Nov 23 02:47:41 other_tag: HIT|nvme0|200|153|0.000|-|-":              nil,
		"Nov 23 02:47:41 edgepool_req1: HIT|nvme0|200|153|0.000|-|-":               nil,
		"<190>Nov 23 02:47:41": nil,
		"":                     nil,
	} {
		tag, msg, ok := Parse([]byte(datagram))
		var got Line
		if ok && tag == "edgepool_req1" {
			got, ok = ParseLine(msg)
		} else {
			ok = false
		}
		switch {
		case want == nil && ok:
			t.Errorf("%q: parsed as %+v", datagram, got)
		case want != nil && (!ok || !reflect.DeepEqual(got, *want)):
			t.Errorf("%q: got %+v, %v, want %+v", datagram, got, ok, *want)
		}
	}
}

// TestParseOwnerLine: an owner-facing line is a request line and who asked, self or peer.
func TestParseOwnerLine(t *testing.T) {
	for msg, want := range map[string]string{
		"HIT|nvme0|200|153|0.000|-|-|self":                  "self",
		"MISS|hdd0|200|4194604|0.120|200|0.118|peer":        "peer",
		"HIT|nvme0|200|153|0.000|-|-|client":                "",
		"HIT|nvme0|200|153|0.000|-|-":                       "", // a request line alone
		"HIT|nvme0|200|153|0.000|-|self":                    "",
		"HIT|nvme0|200|153|0.000|-|-|peer|peer":             "",
		"peer":                                              "",
		"EXPIRED|hdd0|502|310|3.002|502, 504|0.001, 3|self": "self",
	} {
		l, by, ok := ParseOwnerLine([]byte(msg))
		if want == "" {
			if ok {
				t.Errorf("%q: parsed as %+v asked by %q", msg, l, by)
			}
			continue
		}
		request, _ := ParseLine([]byte(msg[:strings.LastIndexByte(msg, '|')]))
		if !ok || by != want || !reflect.DeepEqual(l, request) {
			t.Errorf("%q: got %+v asked by %q (%v), want the request line %+v asked by %q", msg, l, by, ok, request, want)
		}
	}
}

func TestParseLimitedLine(t *testing.T) {
	type result struct{ site, limit string }
	for msg, want := range map[string]result{
		"www|REJECTED|-":                               {"www", LimitRate},
		"www|-|REJECTED":                               {"www", LimitConcurrent},
		"|REJECTED|PASSED":                             {"", LimitRate}, // the CacheNode without sites
		"media-2|PASSED|REJECTED":                      {"media-2", LimitConcurrent},
		"www|PASSED|PASSED":                            {}, // not refused
		"www|REJECTED_DRY_RUN|-":                       {},
		"www|REJECTED":                                 {},
		"www|REJECTED|-|-":                             {},
		"WWW|REJECTED|-":                               {}, // not a site's name
		"-www|REJECTED|-":                              {},
		"a-very-long-site-name-of-33-ch|REJECTED|-":    {"a-very-long-site-name-of-33-ch", LimitRate},
		"a-very-long-site-name-of-33-chars|REJECTED|-": {},
	} {
		site, limit, ok := ParseLimitedLine([]byte(msg))
		if ok != (want != result{}) || site != want.site || limit != want.limit {
			t.Errorf("%q: got %q %q (%v), want %+v", msg, site, limit, ok, want)
		}
	}
}

// TestRequestLabelsBounded feeds the metrics lines of every shape, garbage included: the
// label sets stay within the cache statuses, the agent's disks and the status classes.
// TestFallbackLines: a request the origin answered for a cache-side failure counts as a
// request of cache status FALLBACK, with its origin try, and as a fallback.
func TestFallbackLines(t *testing.T) {
	m := NewMetrics([]string{"nvme0"})
	m.Handle([]byte("<190>Nov 23 02:47:41 edgepool_fallback1: -|nvme0|200|5120|0.012|200|0.011"))
	m.Handle([]byte("<190>Nov 23 02:47:41 edgepool_req1: HIT|nvme0|200|5120|0.001|-|-"))
	if got := counterValue(t, m.fallbacks.WithLabelValues("cache_error")); got != 1 {
		t.Errorf("fallbacks %v, want 1", got)
	}
	if got := counterValue(t, m.requests.WithLabelValues("FALLBACK", "nvme0", "2xx")); got != 1 {
		t.Errorf("FALLBACK requests %v, want 1", got)
	}
	if got := counterValue(t, m.origin.WithLabelValues("2xx")); got != 1 {
		t.Errorf("origin responses %v, want the fallback's 1", got)
	}
	if got := counterValue(t, m.dropped.WithLabelValues(dropUnreadable)); got != 0 {
		t.Errorf("unreadable %v, want 0", got)
	}
}

func TestRequestLabelsBounded(t *testing.T) {
	m := NewMetrics([]string{"nvme0", "hdd0"})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return string(b)
	}
	pick := func(values ...string) string { return values[rng.IntN(len(values))] }
	for range 20000 {
		line := strings.Join([]string{
			pick("HIT", "MISS", "EXPIRED", "STALE", "UPDATING", "REVALIDATED", "BYPASS", "-", word()),
			pick("nvme0", "hdd0", word()),
			pick("200", "304", "404", "502", "999", "0", word()),
			pick("0", "1234", word()),
			pick("0.001", "12.5", word()),
			pick("-", "200", "502, 200", word()),
			pick("-", "0.010", "0.001, 0.020", word()),
		}, "|")
		m.Handle([]byte("<190>Nov 23 02:47:41 edgepool_req1: " + line))
		m.Handle([]byte(word() + line))
		ring := strings.Join([]string{
			pick("hot", "own", "peer", "origin", "none", word()),
			pick("200", "502", "999", word()),
			pick("0", "1234", word()),
		}, "|")
		m.Handle([]byte("<190>Nov 23 02:47:41 edgepool_ring1: " + ring))
		m.Handle([]byte("<190>Nov 23 02:47:41 edgepool_owner1: " + line + "|" + pick("self", "peer", word())))
		m.Handle([]byte("<190>Nov 23 02:47:41 edgepool_fallback1: " + line))
		limited := strings.Join([]string{
			pick("", "www", "W"+word()), // a name the API refuses
			pick("REJECTED", "PASSED", "-", word()),
			pick("REJECTED", "PASSED", "-", word()),
		}, "|")
		m.Handle([]byte("<190>Nov 23 02:47:41 edgepool_limit1: " + limited))
	}
	values := map[string]map[string]bool{}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if values[l.GetName()] == nil {
					values[l.GetName()] = map[string]bool{}
				}
				values[l.GetName()][l.GetValue()] = true
			}
		}
	}
	allowed := map[string][]string{
		"cache_status": {"HIT", "MISS", "EXPIRED", "STALE", "UPDATING", "REVALIDATED", "BYPASS", "FALLBACK", "NONE", "other"},
		"disk":         {"nvme0", "hdd0", "other"},
		"status_class": {"1xx", "2xx", "3xx", "4xx", "5xx", "other"},
		"reason":       {"queue_full", "send_failed", "unreadable", "cache_error"},
		"served_by":    {"hot", "own", "peer", "origin", "none"},
		"asked_by":     {"self", "peer"},
		"site":         {"", "www"},
		"limit":        {"rate", "concurrent"},
	}
	for name, seen := range values {
		for v := range seen {
			if !slices.Contains(allowed[name], v) {
				t.Errorf("label %s=%q is outside its set", name, v)
			}
		}
	}
	if got := counterValue(t, m.dropped.WithLabelValues(dropUnreadable)); got < 20000 {
		t.Errorf("%v unreadable lines counted, want at least the 20000 garbage datagrams", got)
	}
	if got := counterValue(t, m.sharded.WithLabelValues("own", "2xx")); got == 0 {
		t.Error("no sharded line was counted")
	}
	if got := counterValue(t, m.owner.WithLabelValues("peer", "2xx")); got == 0 {
		t.Error("no owner line was counted")
	}
	if got := counterValue(t, m.limited.WithLabelValues("www", LimitConcurrent)); got == 0 {
		t.Error("no limited line was counted")
	}
	if got := len(m.series); got > 9*3*6 {
		t.Errorf("%d request series", got)
	}
}

// TestRequestLogDropsWhenBehind stalls the handler: the reader keeps draining the socket
// into its queue and drops, counting each, what the queue cannot take.
func TestRequestLogDropsWhenBehind(t *testing.T) {
	const queue, sent = 4, 100
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})
	path := filepath.Join(t.TempDir(), "requests.sock")
	l, err := Listen(path, queue, dropped)
	if err != nil {
		t.Fatal(err)
	}
	stall, handling := make(chan struct{}), make(chan struct{}, sent)
	handled := 0
	go l.Serve(func(d []byte) {
		if len(d) == 0 {
			t.Error("handed an empty datagram")
		}
		handling <- struct{}{}
		<-stall
		handled++
	})
	conn, err := net.Dial("unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	send := func(i int) { // a blocking send: the socket's own queue never drops one here
		if _, err := fmt.Fprintf(conn, "line %d", i); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Write(nil); err != nil { // an empty datagram stops nothing
		t.Fatal(err)
	}
	send(0)
	<-handling // the handler holds the first line; the queue takes 4 more, the rest are dropped
	for i := 1; i < sent; i++ {
		send(i)
	}
	deadline := time.Now().Add(30 * time.Second)
	for counterValue(t, dropped) < sent-queue-1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := counterValue(t, dropped); got != sent-queue-1 {
		t.Fatalf("%v dropped, want %d", got, sent-queue-1)
	}
	close(stall)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if handled != queue+1 {
		t.Errorf("%d handled, want %d", handled, queue+1)
	}
}

// TestRequestLogDropsTooLong: a datagram longer than the reader's buffer is dropped, not
// handed on cut.
func TestRequestLogDropsTooLong(t *testing.T) {
	dropped := prometheus.NewCounter(prometheus.CounterOpts{Name: "dropped"})
	path := filepath.Join(t.TempDir(), "requests.sock")
	l, err := Listen(path, 4, dropped)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	go l.Serve(func(d []byte) { got = append(got, len(d)) })
	conn, err := net.Dial("unixgram", path)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, n := range []int{maxDatagram + 1, maxDatagram} {
		if _, err := conn.Write(make([]byte, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil { // the handler has seen all it will see
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []int{maxDatagram}) || counterValue(t, dropped) != 1 {
		t.Errorf("handled %v, dropped %v; want the one of %d bytes handled and the longer dropped", got, counterValue(t, dropped), maxDatagram)
	}
}

// BenchmarkRequestLine is the agent's cost of one per-request line, from nginx's send to
// the counters (the socket, the reader, the queue and the parser), with lines sent as
// fast as the socket takes them.
func BenchmarkRequestLine(b *testing.B) {
	m := NewMetrics([]string{"nvme0", "hdd0"})
	path := filepath.Join(b.TempDir(), "requests.sock")
	l, err := Listen(path, b.N+1, m.Dropped(DropQueueFull)) // no line dropped
	if err != nil {
		b.Fatal(err)
	}
	var handled sync.WaitGroup
	handled.Add(b.N)
	go l.Serve(func(d []byte) {
		m.Handle(d)
		handled.Done()
	})
	conn, err := net.Dial("unixgram", path)
	if err != nil {
		b.Fatal(err)
	}
	line := []byte("<190>Nov 23 02:47:41 edgepool_req1: HIT|nvme0|200|65836|0.001|-|-")
	b.ResetTimer()
	for range b.N {
		if _, err := conn.Write(line); err != nil { // blocks while the socket is full
			b.Fatal(err)
		}
	}
	handled.Wait()
	b.StopTimer()
	conn.Close()
	_ = l.Close()
}

// BenchmarkParseAndCount is the parser's share of a line.
func BenchmarkParseAndCount(b *testing.B) {
	m := NewMetrics([]string{"nvme0", "hdd0"})
	line := []byte("<190>Nov 23 02:47:41 edgepool_req1: MISS|hdd0|200|65836|0.012|200|0.011")
	for range b.N {
		m.Handle(line)
	}
}
