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

// Package requestlog receives the lines nginx sends the agent about each request (a unix
// datagram socket, syslog-framed), parses them, and counts them in metrics whose labels
// each have a bounded set of values.
package requestlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/nginxconf"
)

// Label values of the per-request metrics. Every label has a bounded set of values:
// whatever a line says outside them counts in a bucket of its own.
const (
	// cacheStatusNone is a request the cache was not asked about ($upstream_cache_status
	// empty, logged as "-").
	cacheStatusNone = "NONE"
	// labelOther is any value outside a label's set.
	labelOther = "other"
)

// cacheStatuses are the values of $upstream_cache_status (nginx 1.22 to 1.26).
var cacheStatuses = map[string]bool{
	"HIT": true, "MISS": true, "EXPIRED": true, "STALE": true, "UPDATING": true, "REVALIDATED": true, "BYPASS": true,
}

// maxOriginTries bounds the origin tries read from one line (nginx tries each origin
// server at most once per request; a CacheNode has at most 16).
const maxOriginTries = 16

// Line is one request, as nginx described it in a RequestLogFormat line.
type Line struct {
	// CacheStatus is one of cacheStatuses, cacheStatusNone or labelOther.
	CacheStatus string
	// Disk is the disk that served, as nginx named it (not yet bounded).
	Disk string
	// StatusClass is the response's status class (2xx, ...) or labelOther.
	StatusClass string
	BytesSent   int64
	Seconds     float64
	// Origin are the tries of the origin, in order; none for a request served without it.
	Origin []OriginTry
}

// OriginTry is one request to the origin.
type OriginTry struct {
	// StatusClass is the origin's status class, empty when it sent no response.
	StatusClass string
	// Seconds is its response time, negative when nginx gave none.
	Seconds float64
}

// Parse reads one datagram nginx sent: its syslog tag and message
// ("<190>Nov 23 02:47:41 edgepool_req1: HIT|..."; nohostname leaves the host out).
func Parse(datagram []byte) (tag string, msg []byte, ok bool) {
	end := bytes.IndexByte(datagram, '>')
	if len(datagram) == 0 || datagram[0] != '<' || end < 2 || end > 4 {
		return "", nil, false
	}
	rest := datagram[end+1:]
	// The timestamp holds colons but no ": ": the first one ends the tag.
	colon := bytes.Index(rest, []byte(": "))
	if colon < 0 {
		return "", nil, false
	}
	head := rest[:colon]
	space := bytes.LastIndexByte(head, ' ')
	if space < 0 {
		return "", nil, false
	}
	return string(head[space+1:]), rest[colon+2:], true
}

// ParseLine reads the message of a RequestLogTag line.
func ParseLine(msg []byte) (Line, bool) {
	fields := strings.Split(string(msg), nginxconf.RequestLogSeparator)
	if len(fields) != len(nginxconf.RequestLogFields) {
		return Line{}, false
	}
	l := Line{CacheStatus: cacheStatus(fields[0]), Disk: fields[1]}
	status, err := strconv.Atoi(fields[2])
	if err != nil {
		return Line{}, false
	}
	l.StatusClass = statusClass(status)
	if l.BytesSent, err = strconv.ParseInt(fields[3], 10, 64); err != nil || l.BytesSent < 0 {
		return Line{}, false
	}
	if l.Seconds, err = strconv.ParseFloat(fields[4], 64); err != nil || l.Seconds < 0 {
		return Line{}, false
	}
	if l.Origin, err = originTries(fields[5], fields[6]); err != nil {
		return Line{}, false
	}
	return l, true
}

// ParseOwnerLine reads an OwnerLogFormat line: a request line, then who asked.
func ParseOwnerLine(msg []byte) (Line, string, bool) {
	i := bytes.LastIndexByte(msg, nginxconf.RequestLogSeparator[0])
	if i < 0 {
		return Line{}, "", false
	}
	by := string(msg[i+1:])
	if by != nginxconf.AskedBySelf && by != nginxconf.AskedByPeer {
		return Line{}, "", false
	}
	l, ok := ParseLine(msg[:i])
	return l, by, ok
}

// RingLine is a sharded cache's client-facing line.
type RingLine struct {
	// ServedBy is one of the nginxconf.ServedBy values.
	ServedBy    string
	StatusClass string
	BytesSent   int64
}

var servedBy = []string{nginxconf.ServedByHot, nginxconf.ServedByOwn, nginxconf.ServedByPeer, nginxconf.ServedByOrigin, nginxconf.ServedByNone}

// ParseRingLine reads a RingLogFormat line; a value outside the formats' is refused.
func ParseRingLine(msg []byte) (RingLine, bool) {
	fields := strings.Split(string(msg), nginxconf.RequestLogSeparator)
	if len(fields) != len(nginxconf.RingLogFields) || !slices.Contains(servedBy, fields[0]) {
		return RingLine{}, false
	}
	status, err := strconv.Atoi(fields[1])
	if err != nil {
		return RingLine{}, false
	}
	l := RingLine{ServedBy: fields[0], StatusClass: statusClass(status)}
	if l.BytesSent, err = strconv.ParseInt(fields[2], 10, 64); err != nil || l.BytesSent < 0 {
		return RingLine{}, false
	}
	return l, true
}

// The limits a refused request's line names.
const (
	LimitRate       = "rate"
	LimitConcurrent = "concurrent"
)

// siteNameRE is a site's name, or empty (no sites).
var siteNameRE = regexp.MustCompile(`^(` + nginxconf.SitePattern + `)?$`)

// ParseLimitedLine reads the line of a request a client limit refused
// (nginxconf.LimitedLogTag): its site, and which limit refused it.
func ParseLimitedLine(msg []byte) (site, limit string, ok bool) {
	fields := strings.Split(string(msg), nginxconf.RequestLogSeparator)
	if len(fields) != 3 || !siteNameRE.MatchString(fields[0]) {
		return "", "", false
	}
	switch {
	case fields[1] == "REJECTED":
		return fields[0], LimitRate, true
	case fields[2] == "REJECTED":
		return fields[0], LimitConcurrent, true
	}
	return "", "", false
}

func cacheStatus(s string) string {
	switch {
	case cacheStatuses[s]:
		return s
	case s == "-":
		return cacheStatusNone
	}
	return labelOther
}

func statusClass(status int) string {
	if status < 100 || status > 599 {
		return labelOther
	}
	return strconv.Itoa(status/100) + "xx"
}

// originTries pairs the lists of $upstream_status and $upstream_response_time: one
// entry per try, separated by ", " (or " : " across an internal redirect), "-" for a
// value nginx does not have.
func originTries(statuses, times string) ([]OriginTry, error) {
	if statuses == "-" && times == "-" {
		return nil, nil
	}
	s, t := originList(statuses), originList(times)
	if len(s) != len(t) || len(s) > maxOriginTries {
		return nil, errors.New("origin lists do not pair")
	}
	tries := make([]OriginTry, len(s))
	for i := range s {
		tries[i].Seconds = -1
		if s[i] != "-" {
			status, err := strconv.Atoi(s[i])
			if err != nil {
				return nil, err
			}
			tries[i].StatusClass = statusClass(status)
		}
		if t[i] != "-" {
			v, err := strconv.ParseFloat(t[i], 64)
			if err != nil || v < 0 {
				return nil, errors.New("bad origin time")
			}
			tries[i].Seconds = v
		}
	}
	return tries, nil
}

func originList(s string) []string {
	return strings.Split(strings.ReplaceAll(s, " : ", ", "), ", ")
}

// Why a per-request line was not counted.
const (
	// DropQueueFull: the agent's queue was full, its parser behind.
	DropQueueFull = "queue_full"
	// DropSendFailed: nginx could not send the line (the socket's queue was full, or the
	// socket missing) and said so in its error stream.
	DropSendFailed = "send_failed"
	// dropUnreadable: the datagram is not a line of a format this agent reads.
	dropUnreadable = "unreadable"
)

// Metrics count the per-request lines.
type Metrics struct {
	disks          map[string]bool // the disks a line may name; others count as labelOther
	requests       *prometheus.CounterVec
	bytes          *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	origin         *prometheus.CounterVec
	originDuration prometheus.Histogram
	dropped        *prometheus.CounterVec
	// sharded and shardedBytes count a sharded cache's client-facing lines.
	sharded      *prometheus.CounterVec
	shardedBytes *prometheus.CounterVec
	// fallbacks counts the requests the origin answered for a cache-side failure.
	fallbacks *prometheus.CounterVec
	// owner and ownerBytes count its owner-facing lines by who asked.
	owner      *prometheus.CounterVec
	ownerBytes *prometheus.CounterVec
	// limited counts the requests a client limit refused, by site and limit.
	limited *prometheus.CounterVec

	mu     sync.Mutex
	series map[requestKey]requestSeries // resolved once per label set: a line costs no hashing
}

type requestKey struct{ cacheStatus, disk, statusClass string }

type requestSeries struct {
	requests, bytes prometheus.Counter
	duration        prometheus.Observer
}

// Request durations from a page-cache hit (under a millisecond) to a slow origin.
var durationBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// NewMetrics counts lines that name the given disks; any other disk counts as
// "other".
func NewMetrics(diskNames []string) *Metrics {
	m := &Metrics{disks: map[string]bool{}, series: map[requestKey]requestSeries{}}
	for _, name := range diskNames {
		m.disks[name] = true
	}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_requests_total",
		Help: "Client requests by cache status (HIT, MISS, EXPIRED, STALE, UPDATING, REVALIDATED, BYPASS, FALLBACK, NONE), disk and response status class.",
	}, []string{"cache_status", "disk", "status_class"})
	m.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_response_bytes_total", Help: "Bytes sent to clients (headers and body) by cache status and disk.",
	}, []string{"cache_status", "disk"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "edgepool_request_duration_seconds",
		Help:    "Time from a request's first byte read to its last byte sent, by cache status and disk.",
		Buckets: durationBuckets,
	}, []string{"cache_status", "disk"})
	m.origin = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_origin_responses_total", Help: "Responses of the origin by status class, one per try.",
	}, []string{"status_class"})
	m.originDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "edgepool_origin_response_duration_seconds",
		Help:    "Time the origin took to respond in full, one per try.",
		Buckets: durationBuckets,
	})
	m.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_request_lines_dropped_total",
		Help: "Per-request lines not counted: queue_full (the agent's parser was behind), send_failed (nginx could not send, as its error stream said), unreadable.",
	}, []string{"reason"})
	m.sharded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_sharded_requests_total",
		Help: "A sharded cache's client requests by who served them (hot: the pod's hot tier, own: the pod as the key's owner, peer: another pod, origin: the origin after the owners failed, none) and response status class.",
	}, []string{"served_by", "status_class"})
	m.shardedBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_sharded_response_bytes_total",
		Help: "Bytes a sharded cache sent to its clients (headers and body) by who served them.",
	}, []string{"served_by"})
	m.fallbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_fallbacks_total",
		Help: "Requests the origin answered, uncached, because the cache failed on its own side before the response started (cache_error: a thread-pool queue overflow, an I/O error, a full keys zone).",
	}, []string{"reason"})
	m.fallbacks.WithLabelValues(nginxconf.FallbackCacheError)
	m.owner = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_owner_requests_total",
		Help: "Requests a sharded cache's pod served as the owner of their keys, by who asked (self: the pod, for its own clients; peer: another pod) and response status class.",
	}, []string{"asked_by", "status_class"})
	m.ownerBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_owner_response_bytes_total",
		Help: "Bytes a sharded cache's pod sent as the owner of their keys (headers and body), by who asked.",
	}, []string{"asked_by"})
	m.limited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_client_limited_total",
		Help: "Requests refused (429) because their client was over a limit of the site (empty without sites): rate (requestsPerSecond and burst) or concurrent (concurrentRequests).",
	}, []string{"site", "limit"})
	for _, reason := range []string{DropQueueFull, DropSendFailed, dropUnreadable} {
		m.dropped.WithLabelValues(reason)
	}
	for _, by := range servedBy { // from zero, as the origin's classes below
		m.sharded.WithLabelValues(by, statusClass(200))
		m.shardedBytes.WithLabelValues(by)
	}
	for _, by := range []string{nginxconf.AskedBySelf, nginxconf.AskedByPeer} {
		m.owner.WithLabelValues(by, statusClass(200))
		m.ownerBytes.WithLabelValues(by)
	}
	for class := 1; class <= 5; class++ { // from zero: the first 5xx shows in rate()
		m.origin.WithLabelValues(statusClass(class * 100))
	}
	return m
}

// Collectors are the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.bytes, m.duration, m.origin, m.originDuration, m.dropped, m.fallbacks, m.sharded, m.shardedBytes, m.owner, m.ownerBytes, m.limited}
}

// observe counts one request.
func (m *Metrics) observe(l Line) {
	disk := l.Disk
	if !m.disks[disk] {
		disk = labelOther
	}
	s := m.seriesOf(requestKey{l.CacheStatus, disk, l.StatusClass})
	s.requests.Inc()
	s.bytes.Add(float64(l.BytesSent))
	s.duration.Observe(l.Seconds)
	for _, try := range l.Origin {
		if try.StatusClass != "" {
			m.origin.WithLabelValues(try.StatusClass).Inc()
		}
		if try.Seconds >= 0 {
			m.originDuration.Observe(try.Seconds)
		}
	}
}

func (m *Metrics) seriesOf(k requestKey) requestSeries {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.series[k]
	if !ok {
		s = requestSeries{
			requests: m.requests.WithLabelValues(k.cacheStatus, k.disk, k.statusClass),
			bytes:    m.bytes.WithLabelValues(k.cacheStatus, k.disk),
			duration: m.duration.WithLabelValues(k.cacheStatus, k.disk),
		}
		m.series[k] = s
	}
	return s
}

// Handle counts one datagram from nginx.
func (m *Metrics) Handle(datagram []byte) {
	tag, msg, ok := Parse(datagram)
	switch {
	case ok && tag == nginxconf.RequestLogTag:
		if l, ok := ParseLine(msg); ok {
			m.observe(l)
			return
		}
	case ok && tag == nginxconf.FallbackLogTag:
		if l, ok := ParseLine(msg); ok {
			l.CacheStatus = nginxconf.FallbackCacheStatus
			m.observe(l)
			m.fallbacks.WithLabelValues(nginxconf.FallbackCacheError).Inc()
			return
		}
	case ok && tag == nginxconf.OwnerLogTag:
		if l, by, ok := ParseOwnerLine(msg); ok {
			m.observe(l)
			m.owner.WithLabelValues(by, l.StatusClass).Inc()
			m.ownerBytes.WithLabelValues(by).Add(float64(l.BytesSent))
			return
		}
	case ok && tag == nginxconf.LimitedLogTag:
		if site, limit, ok := ParseLimitedLine(msg); ok {
			m.limited.WithLabelValues(site, limit).Inc()
			return
		}
	case ok && tag == nginxconf.RingLogTag:
		if l, ok := ParseRingLine(msg); ok {
			m.sharded.WithLabelValues(l.ServedBy, l.StatusClass).Inc()
			m.shardedBytes.WithLabelValues(l.ServedBy).Add(float64(l.BytesSent))
			return
		}
	}
	m.dropped.WithLabelValues(dropUnreadable).Inc()
}

// Dropped is the counter of lines dropped for reason.
func (m *Metrics) Dropped(reason string) prometheus.Counter {
	return m.dropped.WithLabelValues(reason)
}

// maxDatagram is the longest line read whole; a longer one is dropped. nginx's lines are
// far shorter: the longest, a JSON access log line, holds a few request headers of at
// most 8 KiB each.
const maxDatagram = 64 << 10

// Listener receives nginx's per-request lines on a unix datagram socket and hands them
// to a handler through a bounded queue: the reader only moves datagrams, and drops them
// (counting each) when the handler is behind. The socket queues only 11 datagrams
// (net.unix.max_dgram_qlen) before nginx drops lines, so the reader is a thread of its
// own blocked in recvfrom, which the kernel wakes, rather than a goroutine waiting for
// Go's network poller and then for a processor.
type Listener struct {
	fd      int
	path    string
	queue   chan []byte
	dropped prometheus.Counter
	closed  atomic.Bool
	done    chan struct{}
}

// Listen binds the socket at path (replacing one a previous agent left behind)
// with a queue of the given length; Serve reads it.
func Listen(path string, queue int, dropped prometheus.Counter) (*Listener, error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale request log socket: %w", err)
	}
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("listen for request lines: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: path}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("listen for request lines: %w", err)
	}
	return &Listener{fd: fd, path: path, queue: make(chan []byte, queue), dropped: dropped, done: make(chan struct{})}, nil
}

// Serve reads datagrams and has handle count them, one at a time, until Close.
func (l *Listener) Serve(handle func([]byte)) {
	go func() {
		defer close(l.done)
		for d := range l.queue {
			handle(d)
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, maxDatagram+1)
	for {
		n, _, err := unix.Recvfrom(l.fd, buf, 0)
		switch {
		case err == unix.EINTR || (err == nil && n == 0 && !l.closed.Load()): // an empty datagram
			continue
		case err != nil || n == 0: // shut down by Close
			close(l.queue)
			return
		}
		l.enqueue(buf[:n])
		// Take what else waits without sleeping again: the handler is woken once for the lot.
		for range 64 {
			n, _, err := unix.Recvfrom(l.fd, buf, unix.MSG_DONTWAIT)
			if err != nil || n == 0 {
				break
			}
			l.enqueue(buf[:n])
		}
	}
}

// enqueue hands a copy of a datagram to the handler, or drops it if the queue is full or
// the datagram was longer than maxDatagram (the buffer holds one byte more, to tell).
func (l *Listener) enqueue(d []byte) {
	if len(d) > maxDatagram {
		l.dropped.Inc()
		return
	}
	select {
	case l.queue <- append([]byte(nil), d...):
	default:
		l.dropped.Inc()
	}
}

// Close stops reading, lets the handler finish the queue, and removes the socket.
func (l *Listener) Close() error {
	l.closed.Store(true)
	err := unix.Shutdown(l.fd, unix.SHUT_RDWR) // wakes the reader: it reads 0 bytes
	<-l.done
	_ = unix.Close(l.fd)
	_ = os.Remove(l.path)
	return err
}
