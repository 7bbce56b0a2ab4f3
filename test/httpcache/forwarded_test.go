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
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// forgeable are request headers an origin may take as the truth about the request (its
// client, scheme, host, path or method), each with a value a poisoning client would send.
var forgeable = []string{
	"X-Forwarded-For", "203.0.113.66",
	"X-Real-IP", "203.0.113.66",
	"X-Forwarded-Proto", "http",
	"X-Forwarded-Host", "evil.example",
	"X-Forwarded-Port", "8443",
	"X-Forwarded-Prefix", "/evil",
	"Forwarded", "for=203.0.113.66;host=evil.example;proto=http",
	"X-Original-URL", "/admin",
	"X-Rewrite-URL", "/admin",
	"X-HTTP-Method-Override", "DELETE",
	"X-Host", "evil.example",
}

// reflect serves path as an origin that believes every forgeable header: it writes them
// into a response every client may share (public, max-age) and, for X-Forwarded-Proto
// http, redirects to https, as origins behind a TLS proxy do.
func reflect(o *origin, path string) {
	o.handle(path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=60")
		if r.Header.Get("X-Forwarded-Proto") == "http" {
			w.Header().Set("Location", "https://"+r.Host+r.URL.Path)
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		var b strings.Builder
		for i := 0; i < len(forgeable); i += 2 {
			if v := r.Header.Get(forgeable[i]); v != "" {
				fmt.Fprintf(&b, "%s=%s\n", forgeable[i], v)
			}
		}
		_, _ = w.Write([]byte(b.String()))
	})
}

// TestClientHeadersDoNotPoisonTheCache: a client's X-Forwarded-*, Forwarded and
// override headers never reach the origin, so a response the origin built from them is
// never stored for the next client (RFC 9111 section 4.1: a cache that served one
// request's response to another must know they are equivalent; these headers are not in
// the key). The origin hears the client's address from the connection.
func TestClientHeadersDoNotPoisonTheCache(t *testing.T) {
	o := startOrigin(t)
	c := startCache(t, o, nil)
	path := pathFor(t)
	reflect(o, path)

	poisoned := c.get(t, path, forgeable...)
	clean := c.get(t, path)
	want := "X-Forwarded-For=127.0.0.1\nX-Real-IP=127.0.0.1\n"
	if poisoned.Code != http.StatusOK || string(poisoned.Body) != want {
		t.Errorf("the forging client got %s; want the origin to have heard only %q", describe(poisoned), want)
	}
	if string(clean.Body) != want || cacheStatus(clean) != "HIT" {
		t.Errorf("the next client got %s, want the clean response from the cache", describe(clean))
	}
	heard := o.last(path)
	for i := 0; i < len(forgeable); i += 2 {
		if k := forgeable[i]; k != "X-Forwarded-For" && k != "X-Real-IP" && heard.Get(k) != "" {
			t.Errorf("the origin heard the client's %s: %q", k, heard.Get(k))
		}
	}
}

// TestSchemeReachesTheOriginOnlyWhenKeyed: with cache.key SchemeHostURI the origin is told
// the scheme (X-Forwarded-Proto), and a response that depends on it is stored under that
// scheme's key alone; with the default key the origin is not told, so no response can
// differ by scheme.
func TestSchemeReachesTheOriginOnlyWhenKeyed(t *testing.T) {
	o := startOrigin(t)
	c := startCache(t, o, func(p *v1alpha1.CachePolicy) { p.Key = v1alpha1.CacheKeySchemeHostURI })
	path := pathFor(t)
	reflect(o, path)
	r := c.get(t, path, "X-Forwarded-Proto", "https")
	if r.Code != http.StatusMovedPermanently || o.last(path).Get("X-Forwarded-Proto") != "http" {
		t.Errorf("over plain HTTP the origin heard X-Forwarded-Proto %q and answered %s; want http (the connection's scheme) and its redirect",
			o.last(path).Get("X-Forwarded-Proto"), describe(r))
	}

	o2 := startOrigin(t)
	c2 := startCache(t, o2, nil)
	reflect(o2, path)
	if r := c2.get(t, path, "X-Forwarded-Proto", "http"); r.Code != http.StatusOK || o2.last(path).Get("X-Forwarded-Proto") != "" {
		t.Errorf("with the default key the origin heard X-Forwarded-Proto %q and answered %s; want none",
			o2.last(path).Get("X-Forwarded-Proto"), describe(r))
	}
}

// TestTrustedProxiesNameTheClient: behind listener.trustedProxies the client is the last
// address of their X-Forwarded-For that is not theirs (nginx's realip), and the origin
// hears that address alone; without them a client's X-Forwarded-For is discarded.
func TestTrustedProxiesNameTheClient(t *testing.T) {
	o := startOrigin(t)
	c := startCacheSpec(t, o, func(s *v1alpha1.CacheNodeSpec) {
		s.Listener.TrustedProxies = []string{"127.0.0.0/8", "10.0.0.0/8"}
	})
	for i, tc := range []struct{ xff, want string }{
		{"", "127.0.0.1"},
		{"203.0.113.7", "203.0.113.7"},
		{"198.51.100.1, 203.0.113.7", "203.0.113.7"},  // the client's own claim is left behind
		{"203.0.113.7, 10.1.2.3", "203.0.113.7"},      // a trusted proxy in between
		{"203.0.113.7, 198.51.100.9", "198.51.100.9"}, // an untrusted hop is the client
	} {
		path := fmt.Sprintf("%s-%d", pathFor(t), i)
		reflect(o, path)
		var header []string
		if tc.xff != "" {
			header = []string{"X-Forwarded-For", tc.xff}
		}
		c.get(t, path, header...)
		if got := o.last(path); got.Get("X-Forwarded-For") != tc.want || got.Get("X-Real-IP") != tc.want {
			t.Errorf("X-Forwarded-For %q from a trusted proxy: the origin heard X-Forwarded-For %q, X-Real-IP %q; want %s",
				tc.xff, got.Get("X-Forwarded-For"), got.Get("X-Real-IP"), tc.want)
		}
	}
}
