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

package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/netutil"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// TestSlowPurgeBodiesStayBounded: 500 connections each send a purge request's headers and
// all but the last byte of a 1 MiB body, then stall, as a client of a hostNetwork pod's
// agent port may. At most maxPurgeReads bodies are read at once (the others are refused
// at once with 503), so the agent's heap grows by a few MiB, not 500 MiB; it still
// answers /healthz meanwhile; the stalled connections are cut after ReadTimeout; and the
// refusals are logged once, with a count, not 496 times.
func TestSlowPurgeBodiesStayBounded(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	a := New(Options{Log: slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, nil)),
		ServerLimits: ServerLimits{MaxConns: 1024, ReadTimeout: 8 * time.Second, IdleTimeout: 8 * time.Second}}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.ServeListener(ctx, ln) }()
	addr := ln.Addr().String()

	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	before := heap()
	const clients = 500
	request := fmt.Appendf(nil, "POST %s HTTP/1.1\r\nHost: agent\r\nContent-Length: %d\r\n\r\n%s",
		agentapi.PurgePath, agentapi.MaxSignedPurgeBytes, strings.Repeat("x", agentapi.MaxSignedPurgeBytes-1))
	conns := make([]net.Conn, clients)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	var wg sync.WaitGroup
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		// A refused request is answered, and its connection closed, before its body is
		// read; a stalled one keeps all of it but the last byte with the agent.
		_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		wg.Go(func() { _, _ = c.Write(request) })
	}
	wg.Wait()
	refused := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			if resp.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("a purge beyond the readers got %d, want 503", resp.StatusCode)
			}
			refused++
		}
	}
	grown := int64(heap()) - int64(before)
	t.Logf("%d stalled purge bodies: %d refused at once, heap grew by %.1f MiB", clients, refused, float64(grown)/(1<<20))
	if refused < clients-maxPurgeReads {
		t.Errorf("%d of %d requests refused at once, want all but %d", refused, clients, maxPurgeReads)
	}
	if limit := int64(64 << 20); grown > limit {
		t.Errorf("the heap grew by %d MiB with %d stalled purge bodies, want under %d MiB", grown>>20, clients, limit>>20)
	}

	resp, err := (&http.Client{Timeout: 2 * time.Second}).Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatalf("/healthz while bodies stall: %v", err)
	}
	_ = resp.Body.Close()

	// The stalled ones are cut after ReadTimeout: answered (400, the read timed out) or
	// closed, like the refused ones.
	ended := 0
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(12 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || !isTimeout(err) {
			ended++
		}
	}
	if ended < clients {
		t.Errorf("%d of %d connections were ended by the agent within ReadTimeout", ended, clients)
	}
	logMu.Lock()
	lines := strings.Count(logs.String(), "Refused a purge request")
	logMu.Unlock()
	if lines == 0 || lines > 10 {
		t.Errorf("%d refusal lines logged for %d refusals, want a few (one a second, with a count)", lines, refused)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestLimitListenerHoldsTheRest: what the agent relies on from netutil.LimitListener:
// beyond MaxConns a connection waits in the backlog until one closes, and closing the
// listener ends a waiting Accept.
func TestLimitListenerHoldsTheRest(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := netutil.LimitListener(inner, 2)
	accepted := make(chan net.Conn, 3)
	done := make(chan error, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				done <- err
				return
			}
			accepted <- c
		}
	}()
	for range 3 {
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first, second := <-accepted, <-accepted
	select {
	case <-accepted:
		t.Fatal("a third connection was accepted while two were open")
	case <-time.After(200 * time.Millisecond):
	}
	_ = first.Close()
	select {
	case third := <-accepted:
		_ = third.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("the third connection was not accepted after one closed")
	}
	_ = second.Close()
	_ = ln.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Accept did not end when the listener closed")
	}
}

func TestLogLimiter(t *testing.T) {
	now := time.Unix(0, 0)
	l := newLogLimiter(time.Second, func() time.Time { return now })
	var got []string
	for i := range 25 {
		if n, ok := l.allow(); ok {
			got = append(got, fmt.Sprintf("%d:%d", i, n))
		}
		now = now.Add(100 * time.Millisecond)
	}
	if want := "0:0 10:9 20:9"; strings.Join(got, " ") != want {
		t.Errorf("logged %v, want %s (one a second, with the count held back)", got, want)
	}
}
