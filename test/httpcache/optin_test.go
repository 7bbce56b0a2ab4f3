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
	"net/http"
	"testing"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// sharing is a response, the two clients' request fields, and whether the cache may
// give the first client's response to the second.
type sharing struct {
	name          string
	status        int
	header        http.Header
	first, second []string
	shared        bool
}

func checkSharing(t *testing.T, policy func(*v1alpha1.CachePolicy), cases []sharing) {
	t.Helper()
	o := startOrigin(t)
	c := startCache(t, o, policy)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := pathFor(t)
			o.respond(path, tc.status, tc.header)
			e := c.twoClients(t, o, path, tc.first, tc.second)
			switch {
			case tc.shared && (!e.shared() || cacheStatus(e.second) != "HIT"):
				t.Errorf("not served from the cache: %s", e)
			case !tc.shared && e.shared():
				t.Errorf("shared: %s", e)
			}
		})
	}
}

// TestForcedFreshness: cache.valid (the opt-in) gives responses the origin left without
// a freshness lifetime the configured one, which RFC 9111 §4.2.2 calls heuristic
// freshness, and which for a 302 (not heuristically cacheable, §3) goes beyond the RFC.
// It never makes shareable what the origin or the request marks as one user's.
func TestForcedFreshness(t *testing.T) {
	checkSharing(t, func(c *v1alpha1.CachePolicy) {
		c.Valid = []v1alpha1.CacheValidity{{Codes: []string{"200", "302"}, Duration: "1h"}}
	}, []sharing{
		{name: "no caching headers: forced (RFC 9111 §4.2.2)", status: http.StatusOK, shared: true},
		{name: "302 without caching headers: forced (RFC 9111 §3)", status: http.StatusFound,
			header: header("Location", "/elsewhere"), shared: true},
		{name: "request with a Cookie, origin declared public (RFC 9111 §5.2.2.9)", status: http.StatusOK,
			header: header("Cache-Control", "public"), first: []string{"Cookie", "session=alice"}, shared: true},
		{name: "request with a Cookie, origin declared max-age (RFC 9111 §5.2.2.1)", status: http.StatusOK,
			header: header("Cache-Control", "max-age=60"), first: []string{"Cookie", "session=alice"}, shared: true},
		{name: "request with a Cookie, no caching headers: not forced (RFC 9111 §7.3)", status: http.StatusOK,
			first: []string{"Cookie", "session=alice"}},
		{name: "request with a Cookie, Cache-Control without a lifetime: not forced (RFC 9111 §7.3)", status: http.StatusOK,
			header: header("Cache-Control", "no-transform"), first: []string{"Cookie", "session=alice"}},
		{name: "Pragma: no-cache: not forced (RFC 9111 §5.4)", status: http.StatusOK, header: header("Pragma", "no-cache")},
		{name: "request with Authorization: still bypassed (RFC 9111 §3.5)", status: http.StatusOK,
			first: []string{"Authorization", "Bearer alice"}},
		{name: "private: still not stored (RFC 9111 §5.2.2.7)", status: http.StatusOK, header: header("Cache-Control", "private")},
		{name: "no-store: still not stored (RFC 9111 §5.2.2.5)", status: http.StatusOK, header: header("Cache-Control", "no-store")},
		{name: "Set-Cookie: still not stored (RFC 9111 §7.3)", status: http.StatusOK, header: header("Set-Cookie", "session=alice")},
	})
}

// TestForcedFreshnessYieldsToTheOrigin: an explicit freshness lifetime from the origin
// wins over cache.valid (RFC 9111 §4.2.1: max-age, then Expires; a heuristic only when
// there is none): a response with max-age=1 goes stale after a second, not an hour.
func TestForcedFreshnessYieldsToTheOrigin(t *testing.T) {
	o := startOrigin(t)
	c := startCache(t, o, func(c *v1alpha1.CachePolicy) {
		c.Valid = []v1alpha1.CacheValidity{{Codes: []string{"200"}, Duration: "1h"}}
	})
	path := pathFor(t)
	o.respond(path, http.StatusOK, header("Cache-Control", "max-age=1"))
	c.get(t, path)
	if r := c.untilNotHit(t, path); o.count(path) != 2 {
		t.Errorf("after max-age=1 the cache answered %s; the origin received %d requests, want 2", describe(r), o.count(path))
	}
}

// TestStaleOptIn: useStale (the opt-in) serves a stale response when the origin fails,
// which RFC 9111 §4.2.4 allows only "in accordance with an out-of-band contract"; the
// CacheNode is that contract. Its documented trade-off: nginx applies it to every
// response, so it also overrides must-revalidate (§5.2.2.2), which this test shows too.
func TestStaleOptIn(t *testing.T) {
	o := startOrigin(t)
	c := startCache(t, o, func(c *v1alpha1.CachePolicy) {
		c.UseStale = []v1alpha1.UseStaleCondition{"error", "timeout", "http_503"}
	})
	for _, tc := range []struct{ name, cacheControl string }{
		{"max-age (RFC 9111 §4.2.4)", "max-age=1"},
		{"must-revalidate, overridden: the documented trade-off (RFC 9111 §5.2.2.2)", "max-age=1, must-revalidate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := pathFor(t)
			o.respond(path, http.StatusOK, header("Cache-Control", tc.cacheControl))
			first := c.get(t, path)
			o.respond(path, http.StatusServiceUnavailable, nil)
			r := c.untilNotHit(t, path)
			if r.Code != http.StatusOK || cacheStatus(r) != "STALE" || string(r.Body) != string(first.Body) {
				t.Errorf("with useStale the cache answered %s", describe(r))
			}
			// Served after the origin failed, no update behind it: the connection stays open.
			if r := c.getOver(t, overOneConnection(), path); cacheStatus(r) != "STALE" || r.Closes {
				t.Errorf("with useStale, again: %s, asks to close: %v; want STALE, kept", describe(r), r.Closes)
			}
		})
	}
}

// TestAuthorizedRequestsCacheIfAllowed: with authorizedRequests: CacheIfAllowed (the
// opt-in), a response to a request with Authorization is stored, and served to others,
// exactly when RFC 9111 §3.5 allows it: it says public, s-maxage or must-revalidate.
// Cache directives are case-insensitive (§5.2).
func TestAuthorizedRequestsCacheIfAllowed(t *testing.T) {
	alice := []string{"Authorization", "Bearer alice"}
	allowed := func(cacheControl string, shared bool) sharing {
		return sharing{name: cacheControl, status: http.StatusOK, header: header("Cache-Control", cacheControl), first: alice, shared: shared}
	}
	checkSharing(t, func(c *v1alpha1.CachePolicy) {
		c.AuthorizedRequests = v1alpha1.AuthorizedRequestsCacheIfAllowed
	}, []sharing{
		allowed("public, max-age=60", true),
		allowed("max-age=60,public", true),
		allowed("PUBLIC, MAX-AGE=60", true),
		allowed("s-maxage=60", true),
		allowed("max-age=60, must-revalidate", true),
		allowed("max-age=60", false),
		allowed("max-age=60, proxy-revalidate", false),
		allowed("max-age=60, x-not-public", false),
		allowed("private, public, max-age=60", false),
		{name: "an authorized request answered from the cache", status: http.StatusOK,
			header: header("Cache-Control", "public, max-age=60"), second: alice, shared: true},
		// Several Cache-Control lines are one list (RFC 9110 §5.3): since nginx 1.23,
		// $upstream_http_cache_control joins them, so a directive counts on any line.
		{name: "public on a second Cache-Control line", status: http.StatusOK,
			header: header("Cache-Control", "max-age=60", "Cache-Control", "public"), first: alice, shared: true},
		{name: "public on the first Cache-Control line", status: http.StatusOK,
			header: header("Cache-Control", "public", "Cache-Control", "max-age=60"), first: alice, shared: true},
		{name: "private on a second Cache-Control line", status: http.StatusOK,
			header: header("Cache-Control", "public, max-age=60", "Cache-Control", "private"), first: alice},
	})
}
