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
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// page is a compressible body of a little over 2 KiB.
var page = strings.Repeat("<p>edgepool compresses text once, and serves it from its cache.</p>\n", 32)

// startCompressing runs a cache with spec.compression's defaults.
func startCompressing(t testing.TB, o *origin) *cacheNode {
	t.Helper()
	return startCacheSpec(t, o, func(spec *v1alpha1.CacheNodeSpec) {
		spec.Compression = &v1alpha1.Compression{}
		spec.Default()
	})
}

// serveBody serves path with body and the header fields.
func (o *origin) serveBody(path, body string, fields ...string) {
	o.handle(path, func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(fields); i += 2 {
			w.Header().Add(fields[i], fields[i+1])
		}
		_, _ = io.WriteString(w, body)
	})
}

// decoded is the body of r, decoded as its Content-Encoding (br or gzip) says; it fails
// the test on an encoding a client could not read.
func decoded(t testing.TB, r *testkit.Response) string {
	t.Helper()
	var z io.Reader
	switch ce := r.Header.Values("Content-Encoding"); {
	case len(ce) == 0:
		return string(r.Body)
	case len(ce) == 1 && ce[0] == "gzip":
		gz, err := gzip.NewReader(bytes.NewReader(r.Body))
		if err != nil {
			t.Fatalf("Content-Encoding: gzip, but %v", err)
		}
		z = gz
	case len(ce) == 1 && ce[0] == "br":
		z = brotli.NewReader(bytes.NewReader(r.Body))
	default:
		t.Fatalf("Content-Encoding %q", ce)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		t.Fatalf("Content-Encoding %q, but %v", r.Header.Get("Content-Encoding"), err)
	}
	return string(b)
}

// varies says whether r tells caches downstream it varies by Accept-Encoding.
func varies(r *testkit.Response) bool {
	for _, v := range r.Header.Values("Vary") {
		for _, name := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(name), "Accept-Encoding") {
				return true
			}
		}
	}
	return false
}

// TestCompressedOncePerEncoding: a client that accepts brotli gets the response in
// brotli, one that accepts gzip but not brotli in gzip, and later ones get that response
// from the cache whatever their Accept-Encoding says besides; a client that accepts
// neither (no field, q=0: RFC 9110 section 12.5.3) gets the origin's bytes, its own
// stored response. Every response says Vary: Accept-Encoding (RFC 9110 section 12.5.5),
// for caches downstream. With brotli off, the brotli client gets gzip.
func TestCompressedOncePerEncoding(t *testing.T) {
	o := startOrigin(t)
	path := pathFor(t)
	o.serveBody(path, page, "Content-Type", "text/html; charset=utf-8", "Cache-Control", "public, max-age=600", "ETag", `"v1"`)
	c := startCompressing(t, o)
	for i, tc := range []struct {
		acceptEncoding string
		encoding       string // the response's Content-Encoding
		status         string
		origin         int // requests the origin received after it
	}{
		{"gzip, deflate, br, zstd", "br", "MISS", 1},
		{"br", "br", "HIT", 1},
		{"BR;q=0.5, gzip", "br", "HIT", 1},
		{"gzip", "gzip", "MISS", 2},
		{"deflate, GZIP;q=0.5", "gzip", "HIT", 2},
		{"br;q=0, gzip", "gzip", "HIT", 2},
		{"x-gzip, br; q=0.000", "gzip", "HIT", 2},
		{"", "", "MISS", 3},
		{"deflate, zstd", "", "HIT", 3},
		{"gzip;q=0, br;q=0", "", "HIT", 3},
		{"gzip; q=0.000", "", "HIT", 3},
		{"gzip;q=0.001", "gzip", "HIT", 3},
		{"identity", "", "HIT", 3},
		{"brotli, xgzip", "", "HIT", 3},
	} {
		r := c.get(t, path, "Accept-Encoding", tc.acceptEncoding)
		encoding := r.Header.Get("Content-Encoding")
		switch {
		case r.Code != http.StatusOK || decoded(t, r) != page:
			t.Errorf("%d. Accept-Encoding %q: %d, not the page", i, tc.acceptEncoding, r.Code)
		case encoding != tc.encoding || cacheStatus(r) != tc.status || !varies(r):
			t.Errorf("%d. Accept-Encoding %q: Content-Encoding %q, %s, Vary %q; want %q, %s, Vary: Accept-Encoding",
				i, tc.acceptEncoding, encoding, cacheStatus(r), r.Header.Values("Vary"), tc.encoding, tc.status)
		case encoding != "" && len(r.Body) >= len(page)/4:
			t.Errorf("%d. %d bytes compressed to %d", i, len(page), len(r.Body))
		case encoding != "" && !strings.HasPrefix(r.Header.Get("ETag"), "W/"):
			t.Errorf("%d. the compressed response has the identity's strong ETag %q", i, r.Header.Get("ETag"))
		}
		if n := o.count(path); n != tc.origin {
			t.Errorf("%d. Accept-Encoding %q: the origin received %d requests, want %d", i, tc.acceptEncoding, n, tc.origin)
		}
	}
	// The origin is asked for exactly the encoding the cache stores.
	if got := o.last(path).Get("Accept-Encoding"); got != "identity" {
		t.Errorf("the identity response was asked for with Accept-Encoding %q", got)
	}
	// A 304 names no encoding: its validator (weak, W/"v1") may be another encoding's.
	for _, validator := range []string{`W/"v1"`, `"v1"`} {
		r := c.get(t, path, "Accept-Encoding", "gzip", "If-None-Match", validator)
		if r.Code != http.StatusNotModified || r.Header.Get("Content-Encoding") != "" || !varies(r) {
			t.Errorf("If-None-Match %s: %d, Content-Encoding %q, Vary %q; want 304 without an encoding", validator, r.Code,
				r.Header.Get("Content-Encoding"), r.Header.Values("Vary"))
		}
	}

	gzipOnly := startCacheSpec(t, o, func(spec *v1alpha1.CacheNodeSpec) {
		spec.Compression = &v1alpha1.Compression{Brotli: v1alpha1.CompressionOff}
		spec.Default()
	})
	if r := gzipOnly.get(t, path, "Accept-Encoding", "br, gzip"); r.Header.Get("Content-Encoding") != "gzip" || decoded(t, r) != page {
		t.Errorf("brotli off, a client accepting br and gzip: Content-Encoding %q", r.Header.Get("Content-Encoding"))
	}
	if r := gzipOnly.get(t, path, "Accept-Encoding", "br"); r.Header.Get("Content-Encoding") != "" || decoded(t, r) != page {
		t.Errorf("brotli off, a client accepting br only: Content-Encoding %q", r.Header.Get("Content-Encoding"))
	}
}

// TestLeftAsTheOriginSentIt: gzip leaves alone what it must not or need not compress:
// Cache-Control: no-transform (RFC 9110 section 7.7: no proxy changes the content), a
// type not listed, a response shorter than minLength, and a response the origin encoded
// itself (once compressed is enough). No client ever sees the marker's identity.
func TestLeftAsTheOriginSentIt(t *testing.T) {
	o := startOrigin(t)
	c := startCompressing(t, o)
	var encoded bytes.Buffer
	z := gzip.NewWriter(&encoded)
	_, _ = io.WriteString(z, page)
	z.Close()
	for _, tc := range []struct {
		name    string
		body    string
		fields  []string
		vary    bool
		want    string // the body a gzip client gets, undecoded
		encoded bool   // by the origin
	}{
		{"no-transform", page, []string{"Content-Type", "text/html", "Cache-Control", "public, max-age=600, no-transform"}, true, page, false},
		{"NO-TRANSFORM first", page, []string{"Content-Type", "text/css", "Cache-Control", "NO-TRANSFORM,max-age=600"}, true, page, false},
		{"an image", page, []string{"Content-Type", "image/png", "Cache-Control", "max-age=600"}, false, page, false},
		{"short", page[:100], []string{"Content-Type", "text/html", "Cache-Control", "max-age=600"}, true, page[:100], false},
		{"encoded by the origin", encoded.String(), []string{"Content-Type", "text/html", "Content-Encoding", "gzip", "Cache-Control", "max-age=600"}, true, encoded.String(), true},
		{"encoded by the origin, of a type not listed", encoded.String(), []string{"Content-Type", "application/x-tar", "Content-Encoding", "gzip", "Cache-Control", "max-age=600"}, true, encoded.String(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := pathFor(t)
			o.serveBody(path, tc.body, tc.fields...)
			for _, status := range []string{"MISS", "HIT"} {
				r := c.get(t, path, "Accept-Encoding", "gzip")
				if string(r.Body) != tc.want || cacheStatus(r) != status {
					t.Errorf("%s: %s, %d bytes with Content-Encoding %q, want the origin's %d bytes", status, cacheStatus(r), len(r.Body), r.Header.Get("Content-Encoding"), len(tc.want))
				}
				if ce := r.Header.Get("Content-Encoding"); tc.encoded != (ce == "gzip") || ce == "identity" {
					t.Errorf("%s: Content-Encoding %q", status, ce)
				}
				if varies(r) != tc.vary {
					t.Errorf("%s: Vary %q, want Accept-Encoding %t", status, r.Header.Values("Vary"), tc.vary)
				}
			}
		})
	}
}

// TestOriginsVaryKeepsItsOtherFields: the key holds the encoding, so the origin's Vary:
// Accept-Encoding is the cache's own business: two clients whose Accept-Encoding differ
// but both accept gzip share one response. Its other fields still select responses
// (RFC 9111 section 4.1), and clients are told them.
func TestOriginsVaryKeepsItsOtherFields(t *testing.T) {
	o := startOrigin(t)
	c := startCompressing(t, o)
	path := pathFor(t)
	o.handle(path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Vary", "Accept-Encoding, Accept-Language")
		_, _ = io.WriteString(w, r.Header.Get("Accept-Language")+": "+page)
	})
	for i, tc := range []struct {
		acceptEncoding, language, status string
		origin                           int
	}{
		{"gzip, deflate", "en", "MISS", 1},
		{"gzip", "en", "HIT", 1},
		{"gzip, zstd", "fr", "MISS", 2},
		{"deflate, gzip", "fr", "HIT", 2},
		{"gzip", "en", "HIT", 2},
	} {
		r := c.get(t, path, "Accept-Encoding", tc.acceptEncoding, "Accept-Language", tc.language)
		body := decoded(t, r)
		if !strings.HasPrefix(body, tc.language+": ") || cacheStatus(r) != tc.status || o.count(path) != tc.origin {
			t.Errorf("%d. %q in %s: %s for %.8q; the origin received %d requests; want %s, %d", i, tc.acceptEncoding, tc.language,
				cacheStatus(r), body, o.count(path), tc.status, tc.origin)
		}
		vary := strings.ToLower(strings.Join(r.Header.Values("Vary"), ","))
		if !strings.Contains(vary, "accept-language") || !varies(r) {
			t.Errorf("%d. Vary %q, want Accept-Language and Accept-Encoding", i, r.Header.Values("Vary"))
		}
	}
}

// TestCompressedResponseRevalidates: a stale compressed response is revalidated with the
// origin (RFC 9111 section 4.3) and stays compressed.
func TestCompressedResponseRevalidates(t *testing.T) {
	o := startOrigin(t)
	c := startCompressing(t, o)
	path := pathFor(t)
	o.handle(path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=1")
		w.Header().Set("ETag", `"v1"`)
		if strings.Contains(r.Header.Get("If-None-Match"), `"v1"`) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Content-Type", "text/css")
		_, _ = io.WriteString(w, page)
	})
	first := c.get(t, path, "Accept-Encoding", "gzip")
	r := c.untilNotHit(t, path, "Accept-Encoding", "gzip")
	if r.Header.Get("Content-Encoding") != "gzip" || cacheStatus(r) != "REVALIDATED" || !bytes.Equal(r.Body, first.Body) {
		t.Errorf("stale: %s with Content-Encoding %q, %d bytes; want REVALIDATED, the first response's %d gzip bytes",
			cacheStatus(r), r.Header.Get("Content-Encoding"), len(r.Body), len(first.Body))
	}
}

// TestCompressingCacheSeesTheOriginFail: an origin that fails (here: it closes the
// connection) is a connection error to a compressing cache as to any other, so that
// useStale's error serves the stale response (a 502 from its loopback servers would
// not), and the origin is asked as often as without compression (nginx asks again once
// when a kept-alive connection to it fails; a loopback hop that kept connections alive
// would multiply that). The origin's X-Accel-Expires still sets the freshness.
func TestCompressingCacheSeesTheOriginFail(t *testing.T) {
	asked := map[bool]int{}
	for _, compress := range []bool{false, true} {
		if compressAll && !compress {
			continue // the suite's second pass compresses every cache
		}
		o := startOrigin(t)
		c := startCacheSpec(t, o, func(spec *v1alpha1.CacheNodeSpec) {
			if compress {
				spec.Compression = &v1alpha1.Compression{}
			}
			spec.Cache.UseStale = []v1alpha1.UseStaleCondition{"error"}
			spec.Default()
		})
		path := pathFor(t)
		o.serveBody(path, page, "Content-Type", "text/html", "X-Accel-Expires", "1")
		first := c.get(t, path, "Accept-Encoding", "gzip")
		if cacheStatus(first) != "MISS" || first.Header.Get("X-Accel-Expires") != "" {
			t.Fatalf("first: %s, X-Accel-Expires %q", cacheStatus(first), first.Header.Get("X-Accel-Expires"))
		}
		if r := c.get(t, path, "Accept-Encoding", "gzip"); cacheStatus(r) != "HIT" {
			t.Errorf("X-Accel-Expires: 1 was not a freshness lifetime: %s", cacheStatus(r))
		}
		o.handle(path, func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		})
		before := o.count(path)
		r := c.untilNotHit(t, path, "Accept-Encoding", "gzip")
		if r.Code != http.StatusOK || cacheStatus(r) != "STALE" || !bytes.Equal(r.Body, first.Body) {
			t.Errorf("compression %t, the origin failing: %d %s, want the stale response", compress, r.Code, cacheStatus(r))
		}
		asked[compress] = o.count(path) - before
	}
	if !compressAll && (asked[true] != asked[false] || asked[true] == 0) {
		t.Errorf("the failing origin was asked %d times for one request through a compressing cache, %d without compression",
			asked[true], asked[false])
	}
}

// TestSiteOptsOutOfCompression: gzip Off on a site leaves its responses as the origin
// sends them while the CacheNode's other sites compress.
func TestSiteOptsOutOfCompression(t *testing.T) {
	o := startOrigin(t)
	c := startCacheSpec(t, o, func(spec *v1alpha1.CacheNodeSpec) {
		spec.Sites = []v1alpha1.Site{
			{Name: "on", Hostnames: []string{"on.example"}, Origin: spec.Origin},
			{Name: "off", Hostnames: []string{"off.example"}, Origin: spec.Origin, Compression: &v1alpha1.Compression{Gzip: v1alpha1.CompressionOff, Brotli: v1alpha1.CompressionOff}},
		}
		spec.Origin = v1alpha1.Origin{}
		spec.Compression = &v1alpha1.Compression{}
		spec.Default()
	})
	path := pathFor(t)
	o.serveBody(path, page, "Content-Type", "text/html", "Cache-Control", "max-age=600")
	on := c.get(t, path, "Host", "on.example", "Accept-Encoding", "gzip")
	off := c.get(t, path, "Host", "off.example", "Accept-Encoding", "gzip")
	if on.Header.Get("Content-Encoding") != "gzip" || decoded(t, on) != page {
		t.Errorf("site on: Content-Encoding %q", on.Header.Get("Content-Encoding"))
	}
	if off.Header.Get("Content-Encoding") != "" || string(off.Body) != page || varies(off) {
		t.Errorf("site off: Content-Encoding %q, Vary %q", off.Header.Get("Content-Encoding"), off.Header.Values("Vary"))
	}
}

// TestCompressingCacheHidesTheTagHeaders: the origin's tag headers (Surrogate-Key) stay
// hidden from the clients of a compressing cache, as from any other, and are stored with
// the response, for purges by tag.
func TestCompressingCacheHidesTheTagHeaders(t *testing.T) {
	o := startOrigin(t)
	var disk string
	c := startCacheSpec(t, o, func(spec *v1alpha1.CacheNodeSpec) {
		spec.Compression = &v1alpha1.Compression{}
		spec.Default()
		disk = spec.Disks[0].Path
	})
	path := pathFor(t)
	o.serveBody(path, page, "Content-Type", "text/html", "Cache-Control", "max-age=600", "Surrogate-Key", "product-7 sale", "Cache-Tag", "home")
	for _, status := range []string{"MISS", "HIT"} {
		r := c.get(t, path, "Accept-Encoding", "gzip")
		if cacheStatus(r) != status || r.Header.Get("Surrogate-Key") != "" || r.Header.Get("Cache-Tag") != "" {
			t.Errorf("%s: Surrogate-Key %q, Cache-Tag %q; want %s without the tags", cacheStatus(r), r.Header.Get("Surrogate-Key"), r.Header.Get("Cache-Tag"), status)
		}
	}
	stored, err := os.ReadFile(storedFile(disk, "127.0.0.1"+path))
	if err != nil || !bytes.Contains(stored, []byte("Surrogate-Key: product-7 sale")) {
		t.Errorf("the stored response lacks its tags (%v)", err)
	}
}

// TestPackedFormatsAreStoredOnce: a path whose extension names a format compressed
// already (an image here) is fetched and stored once for every client, whatever its
// Accept-Encoding, and served as the origin sent it; a page is stored per encoding.
func TestPackedFormatsAreStoredOnce(t *testing.T) {
	o := startOrigin(t)
	c := startCompressing(t, o)
	img := pathFor(t) + "/photo.JPG"
	o.serveBody(img, page, "Content-Type", "image/jpeg", "Cache-Control", "max-age=600")
	for i, ae := range []string{"br, gzip", "gzip", "", "br"} {
		r := c.get(t, img, "Accept-Encoding", ae)
		want := "HIT"
		if i == 0 {
			want = "MISS"
		}
		if cacheStatus(r) != want || string(r.Body) != page || r.Header.Get("Content-Encoding") != "" {
			t.Errorf("%s with Accept-Encoding %q: %s, Content-Encoding %q; want %s, the origin's bytes", img, ae, cacheStatus(r), r.Header.Get("Content-Encoding"), want)
		}
	}
	if n := o.count(img); n != 1 {
		t.Errorf("the origin was asked %d times for %s, want once", n, img)
	}
	// A type it compresses, at such a path, is served as the origin sent it: correct for
	// every client, only not compressed.
	odd := pathFor(t) + "/page.png"
	o.serveBody(odd, page, "Content-Type", "text/html", "Cache-Control", "max-age=600")
	if r := c.get(t, odd, "Accept-Encoding", "br, gzip"); r.Header.Get("Content-Encoding") != "" || string(r.Body) != page {
		t.Errorf("%s: Content-Encoding %q, want the origin's bytes", odd, r.Header.Get("Content-Encoding"))
	}
}
