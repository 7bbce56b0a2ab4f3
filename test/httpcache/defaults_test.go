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

package httpcache_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/test/testkit"
)

// notShared is a response that a shared cache must not give a second client, with the
// RFC section that says so.
type notShared struct {
	name          string
	status        int
	header        http.Header
	first, second []string // the clients' request header fields
}

// The responses that the default CacheNode must not share between clients.
var defaultNotShared = []notShared{
	// RFC 9111 section 3: a response without explicit freshness (max-age, s-maxage,
	// Expires) may be stored only by a cache that guesses a lifetime (section 4.2.2, "MAY").
	// edgepool does not guess unless cache.valid says so: the origin decides.
	{name: "no caching headers (RFC 9111 §3, §4.2.2)", status: http.StatusOK},
	// RFC 9111 section 3 and RFC 9110 section 15.4.3: a 302 is not heuristically
	// cacheable, so without explicit freshness it must not be stored at all.
	{name: "302 without caching headers (RFC 9111 §3, RFC 9110 §15.4.3)", status: http.StatusFound,
		header: header("Location", "/elsewhere")},
	// A response to a request with a Cookie, which the origin sent without caching
	// headers, is typically that user's page (RFC 9111 §7.3, caching of sensitive information).
	{name: "request with a Cookie, no caching headers (RFC 9111 §3, §7.3)", status: http.StatusOK,
		first: []string{"Cookie", "session=alice"}, second: []string{"Cookie", "session=bob"}},
	// RFC 9111 section 5.4: HTTP/1.0's Pragma: no-cache, with no Cache-Control.
	{name: "Pragma: no-cache (RFC 9111 §5.4)", status: http.StatusOK, header: header("Pragma", "no-cache")},
	// RFC 9111 section 3.5: a response to a request with Authorization may be reused for
	// other requests only if it says public, s-maxage or must-revalidate; max-age is not enough.
	{name: "request with Authorization, max-age (RFC 9111 §3.5)", status: http.StatusOK,
		header: header("Cache-Control", "max-age=60"), first: []string{"Authorization", "Bearer alice"}},
	{name: "request with Authorization, max-age, to a client with other credentials (RFC 9111 §3.5)", status: http.StatusOK,
		header: header("Cache-Control", "max-age=60"),
		first:  []string{"Authorization", "Bearer alice"}, second: []string{"Authorization", "Bearer bob"}},
	// RFC 9111 section 5.2.2.7: a shared cache must not store a response marked private.
	{name: "Cache-Control: private (RFC 9111 §5.2.2.7)", status: http.StatusOK,
		header: header("Cache-Control", "private, max-age=60")},
	// RFC 9111 section 5.2.2.5: no-store.
	{name: "Cache-Control: no-store (RFC 9111 §5.2.2.5)", status: http.StatusOK,
		header: header("Cache-Control", "no-store, max-age=60")},
	// RFC 9111 section 5.2.2.4: no-cache forbids reuse without a successful validation;
	// nginx does not store such responses at all.
	{name: "Cache-Control: no-cache (RFC 9111 §5.2.2.4)", status: http.StatusOK,
		header: header("Cache-Control", "no-cache, max-age=60")},
	// RFC 9111 section 7.3 leaves a response with Set-Cookie to its Cache-Control, but a
	// cookie is meant for one client: nginx never stores a response that sets one.
	{name: "Set-Cookie, max-age (RFC 9111 §7.3)", status: http.StatusOK,
		header: header("Cache-Control", "max-age=60", "Set-Cookie", "session=alice")},
	// RFC 9111 section 4.1: a stored response with Vary: * never matches.
	{name: "Vary: * (RFC 9111 §4.1)", status: http.StatusOK, header: header("Cache-Control", "max-age=60", "Vary", "*")},
	// RFC 9111 section 4.1: Vary: Cookie keeps one response per cookie.
	{name: "Vary: Cookie, other cookie (RFC 9111 §4.1)", status: http.StatusOK,
		header: header("Cache-Control", "max-age=60", "Vary", "Cookie"),
		first:  []string{"Cookie", "session=alice"}, second: []string{"Cookie", "session=bob"}},
}

// TestDefaultsDoNotShare checks, with the default CacheNode, each response that RFC 9111
// (or the leak it would be) forbids a shared cache to give to a second client.
func TestDefaultsDoNotShare(t *testing.T) {
	o := startOrigin(t)
	c := startCache(t, o, nil)
	for _, tc := range defaultNotShared {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := pathFor(t)
			o.respond(path, tc.status, tc.header)
			if e := c.twoClients(t, o, path, tc.first, tc.second); e.shared() {
				t.Errorf("shared: %s", e)
			}
		})
	}
}

// TestDefaultsShareWhatTheOriginAllows is the counterpart: what the origin declared fresh
// and shareable is served from the cache (RFC 9111 §4.2.1: max-age, s-maxage, Expires).
func TestDefaultsShareWhatTheOriginAllows(t *testing.T) {
	o := startOrigin(t)
	c := startCache(t, o, nil)
	for _, tc := range []struct {
		name   string
		header http.Header
	}{
		{"max-age (RFC 9111 §5.2.2.1)", header("Cache-Control", "max-age=60")},
		{"s-maxage (RFC 9111 §5.2.2.10)", header("Cache-Control", "s-maxage=60")},
		{"public, max-age (RFC 9111 §5.2.2.9)", header("Cache-Control", "public, max-age=60")},
		{"Expires (RFC 9111 §5.3)", header("Expires", time.Now().Add(time.Hour).UTC().Format(http.TimeFormat))},
		{"Vary: Cookie, same cookie (RFC 9111 §4.1)", header("Cache-Control", "max-age=60", "Vary", "Cookie")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := pathFor(t)
			o.respond(path, http.StatusOK, tc.header)
			var clients []string
			if tc.header.Get("Vary") == "Cookie" {
				clients = []string{"Cookie", "session=alice"}
			}
			e := c.twoClients(t, o, path, clients, clients)
			if !e.shared() || cacheStatus(e.second) != "HIT" {
				t.Errorf("not served from the cache: %s", e)
			}
		})
	}
}

// TestAuthorizationIsNotAnsweredFromTheCache: by default a request with Authorization
// always reaches the origin, even when the cache holds a public response for its URL
// (stored for a request without credentials): what the origin answers a user is the
// origin's to say. RFC 9111 §3.5 governs storing such responses; answering them from
// the cache is the authorizedRequests: CacheIfAllowed opt-in.
func TestAuthorizationIsNotAnsweredFromTheCache(t *testing.T) {
	o := startOrigin(t)
	c := startCache(t, o, nil)
	path := pathFor(t)
	o.respond(path, http.StatusOK, header("Cache-Control", "public, max-age=60"))
	anonymous := c.get(t, path)
	if r := c.get(t, path); cacheStatus(r) != "HIT" {
		t.Fatalf("the anonymous response was not cached: %s", describe(r))
	}
	r := c.get(t, path, "Authorization", "Bearer alice")
	if o.count(path) != 2 || string(r.Body) == string(anonymous.Body) {
		t.Errorf("a request with Authorization was answered from the cache: %s", describe(r))
	}
	if o.last(path).Get("Authorization") != "Bearer alice" {
		t.Errorf("the origin did not get the credentials: %v", o.last(path))
	}
}

// TestNoStaleWithoutTheOriginsLeave: once a stored response is stale and the origin
// fails, the default CacheNode passes the failure on rather than the stale response.
// RFC 9111 §4.2.4: "A cache MUST NOT generate a stale response unless it is disconnected
// or doing so is explicitly permitted by the client or origin server"; and never when
// must-revalidate (§5.2.2.2), proxy-revalidate (§5.2.2.8) or s-maxage (§5.2.2.10) forbid it.
// The origin's own leave (stale-if-error, RFC 5861 §4) is honoured.
func TestNoStaleWithoutTheOriginsLeave(t *testing.T) {
	o := startOrigin(t)
	c := startCache(t, o, nil)
	for _, tc := range []struct {
		name         string
		cacheControl string
		closeConn    bool // the origin fails by closing the connection, not with a 503
		stale        bool // the origin allowed a stale response
	}{
		{name: "max-age, origin answers 503 (RFC 9111 §4.2.4)", cacheControl: "max-age=1"},
		{name: "max-age, origin closes the connection (RFC 9111 §4.2.4)", cacheControl: "max-age=1", closeConn: true},
		{name: "must-revalidate (RFC 9111 §5.2.2.2)", cacheControl: "max-age=1, must-revalidate"},
		{name: "must-revalidate, origin closes the connection (RFC 9111 §5.2.2.2)", cacheControl: "max-age=1, must-revalidate", closeConn: true},
		{name: "proxy-revalidate (RFC 9111 §5.2.2.8)", cacheControl: "max-age=1, proxy-revalidate"},
		{name: "s-maxage (RFC 9111 §5.2.2.10)", cacheControl: "s-maxage=1"},
		// nginx honours stale-if-error only when the origin cannot be reached (an error or
		// a timeout), not for the origin's own 5xx answers, which RFC 5861 §4 also covers:
		// it serves less stale than the origin allowed.
		{name: "stale-if-error allows it, origin closes the connection (RFC 5861 §4)", cacheControl: "max-age=1, stale-if-error=600",
			closeConn: true, stale: true},
		{name: "stale-if-error, origin answers 503: nginx passes the 503 on", cacheControl: "max-age=1, stale-if-error=600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := pathFor(t)
			o.respond(path, http.StatusOK, header("Cache-Control", tc.cacheControl))
			first := c.get(t, path)
			if r := c.get(t, path); cacheStatus(r) != "HIT" {
				t.Fatalf("not cached: %s", describe(r))
			}
			o.handle(path, func(w http.ResponseWriter, _ *http.Request) {
				if tc.closeConn {
					if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
						conn.Close()
						return
					}
				}
				w.WriteHeader(http.StatusServiceUnavailable)
			})
			r := c.untilNotHit(t, path)
			switch {
			case tc.stale && (r.Code != http.StatusOK || string(r.Body) != string(first.Body)):
				t.Errorf("the origin allowed the stale response, the cache answered %s", describe(r))
			case !tc.stale && (r.Code < 500 || string(r.Body) == string(first.Body)):
				t.Errorf("a stale response was served without the origin's leave: %s", describe(r))
			}
		})
	}
}

// TestRevalidation: a stale response with a validator is revalidated with a conditional
// request (RFC 9111 §4.3.1: If-None-Match from ETag, If-Modified-Since from
// Last-Modified), and the origin's 304 freshens it (§4.3.3, §4.3.4): the client gets the
// stored 200, and the body never crosses the origin link again.
func TestRevalidation(t *testing.T) {
	o := startOrigin(t)
	c := startCache(t, o, nil)
	lastModified := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	for _, tc := range []struct {
		name             string
		validator, value string
		condition        string
		matches          func(r *http.Request) bool
	}{
		{"ETag (RFC 9111 §4.3.1, RFC 9110 §13.1.2)", "ETag", `"v1"`, "If-None-Match",
			func(r *http.Request) bool { return r.Header.Get("If-None-Match") == `"v1"` }},
		{"Last-Modified (RFC 9111 §4.3.1, RFC 9110 §13.1.3)", "Last-Modified", lastModified, "If-Modified-Since",
			func(r *http.Request) bool { return r.Header.Get("If-Modified-Since") == lastModified }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := pathFor(t)
			var full, notModified int
			o.handle(path, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=1")
				w.Header().Set(tc.validator, tc.value)
				if tc.matches(r) {
					notModified++
					w.WriteHeader(http.StatusNotModified)
					return
				}
				full++
				_, _ = w.Write([]byte("the representation"))
			})
			c.get(t, path)
			r := c.untilNotHit(t, path)
			if r.Code != http.StatusOK || string(r.Body) != "the representation" || cacheStatus(r) != "REVALIDATED" {
				t.Errorf("after the stored response went stale the cache answered %s", describe(r))
			}
			if sent := o.last(path).Get(tc.condition); full != 1 || notModified != 1 {
				t.Errorf("the origin sent %d full responses and %d 304s (want 1 and 1); the cache's last request had %s: %q",
					full, notModified, tc.condition, sent)
			}
		})
	}
}

// TestStaleWhileRevalidate: within the window the origin allowed with
// stale-while-revalidate (RFC 5861 §3), a stale response is served at once, STALE, while
// the cache revalidates it behind it; the next request gets the update, and never waits
// for it on the connection the update holds (the response asks to close it). Past the window
// the request waits for the origin, as for any stale response (RFC 9111 §4.2.4).
func TestStaleWhileRevalidate(t *testing.T) {
	o := startOrigin(t)
	c := startCache(t, o, nil)
	// versions serves a path of its own in versions with cacheControl, every request after
	// the first held at the origin until release (at the test's end if not before).
	versions := func(t *testing.T, cacheControl string) (path string, release func()) {
		path = pathFor(t)
		hold, release := holdUntilReleased(t)
		var n atomic.Int32
		o.handle(path, func(w http.ResponseWriter, _ *http.Request) {
			v := n.Add(1)
			if v > 1 {
				<-hold
			}
			w.Header().Set("Cache-Control", cacheControl)
			fmt.Fprintf(w, "version %d", v)
		})
		return path, release
	}
	t.Run("within the window (RFC 5861 §3)", func(t *testing.T) {
		t.Parallel()
		path, release := versions(t, "max-age=1, stale-while-revalidate=600")
		c.get(t, path)
		// The update is held at the origin until the client has its answer: a cache that
		// waited for it would time the client out.
		r := c.untilNotHit(t, path)
		if r.Code != http.StatusOK || cacheStatus(r) != "STALE" || string(r.Body) != "version 1" {
			t.Errorf("a stale response within stale-while-revalidate: %s, want version 1, STALE", describe(r))
		}
		release()
		ctx, cancel := testkit.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := testkit.Eventually(ctx, 100*time.Millisecond, "the update to be served", func() error {
			if r := c.get(t, path); cacheStatus(r) != "HIT" || string(r.Body) != "version 2" {
				return fmt.Errorf("got %s", describe(r))
			}
			return nil
		}); err != nil {
			t.Error(err)
		}
		if n := o.count(path); n != 2 {
			t.Errorf("the origin received %d requests, want 2: the fill and one update", n)
		}
	})
	t.Run("the update holds no client's next request", func(t *testing.T) {
		t.Parallel()
		path, _ := versions(t, "max-age=1, stale-while-revalidate=600")
		client := overOneConnection()
		c.get(t, path)
		var r *testkit.Response
		eventually(t, 15*time.Second, path+" to go stale", func() bool {
			r = c.getOver(t, client, path)
			return cacheStatus(r) != "HIT"
		})
		// nginx reads the next request on this connection only when the update has ended:
		// the response asks the client to close it.
		if cacheStatus(r) != "STALE" || !r.Closes {
			t.Errorf("the response that started the update: %s, asks to close: %v; want STALE, close", describe(r), r.Closes)
		}
		// Over a new connection, then: the held one would wait for the origin (5s, failed).
		if r := c.getOver(t, client, path); cacheStatus(r) != "UPDATING" || string(r.Body) != "version 1" || r.Closes {
			t.Errorf("the next request while the update is held: %s, asks to close: %v; want version 1, UPDATING, kept", describe(r), r.Closes)
		}
	})
	t.Run("past the window (RFC 9111 §4.2.4)", func(t *testing.T) {
		t.Parallel()
		path, release := versions(t, "max-age=1, stale-while-revalidate=1")
		release()
		c.get(t, path)
		time.Sleep(3500 * time.Millisecond) // fresh for 1 s, then stale-while-revalidate for 1 s
		if r := c.get(t, path); r.Code != http.StatusOK || cacheStatus(r) != "EXPIRED" || string(r.Body) != "version 2" {
			t.Errorf("a stale response past stale-while-revalidate: %s, want version 2 from the origin, EXPIRED", describe(r))
		}
	})
}

// TestHitKeepsTheOriginsDate: a response from the cache carries the Date the origin
// gave it (RFC 9110 §6.6.1), not the time the cache served it, so that a cache
// downstream counts the time it spent here in its age (RFC 9111 §4.2.3,
// apparent_age = response_time - date_value) instead of granting max-age afresh.
// nginx cannot generate the Age header (RFC 9111 §5.1) the RFC also asks for: it has no
// arithmetic on times in its configuration language.
func TestHitKeepsTheOriginsDate(t *testing.T) {
	o := startOrigin(t)
	c := startCache(t, o, nil)
	path := pathFor(t)
	o.respond(path, http.StatusOK, header("Cache-Control", "max-age=600"))
	first := c.get(t, path)
	date, err := http.ParseTime(first.Header.Get("Date"))
	if err != nil {
		t.Fatalf("Date %q: %v", first.Header.Get("Date"), err)
	}
	if sent := o.last(path); sent == nil {
		t.Fatal("the origin got no request")
	}
	// Until the cache's clock is past the second of the origin's Date.
	time.Sleep(time.Until(date.Add(2 * time.Second)))
	r := c.get(t, path)
	if cacheStatus(r) != "HIT" {
		t.Fatalf("not a HIT: %s", describe(r))
	}
	if r.Header.Get("Date") != first.Header.Get("Date") {
		t.Errorf("a HIT %s after the origin's response says Date %q, the origin said %q",
			time.Since(date).Round(time.Second), r.Header.Get("Date"), first.Header.Get("Date"))
	}
}

// TestKeyIncludesTheHost: the cache answers every hostname, and the default key
// ($host$request_uri) keeps one host's responses from another's. RFC 9111 §2: the cache
// key is the request method and target URI, whose authority is the host.
func TestKeyIncludesTheHost(t *testing.T) {
	o := startOrigin(t)
	c := startCache(t, o, nil)
	path := pathFor(t)
	o.handle(path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		_, _ = w.Write([]byte("the page of " + r.Host))
	})
	a := c.get(t, path, "Host", "a.example")
	b := c.get(t, path, "Host", "b.example")
	if string(a.Body) != "the page of a.example" || string(b.Body) != "the page of b.example" {
		t.Errorf("a.example got %s; b.example got %s", describe(a), describe(b))
	}
}
