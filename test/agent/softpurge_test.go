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

package agent_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// validatingOrigin serves each path as its current version, with an ETag, and answers a
// request whose If-None-Match names that ETag with 304. It counts per path the full
// responses and the conditional requests.
type validatingOrigin struct {
	srv          *httptest.Server
	mu           sync.Mutex
	version      map[string]int
	cacheControl map[string]string
	full, cond   map[string]int
}

func newValidatingOrigin(t testing.TB) *validatingOrigin {
	t.Helper()
	o := &validatingOrigin{version: map[string]int{}, cacheControl: map[string]string{}, full: map[string]int{}, cond: map[string]int{}}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		path := r.URL.Path
		v := max(o.version[path], 1)
		etag := fmt.Sprintf(`"v%d"`, v)
		w.Header().Set("Cache-Control", o.cacheControl[path])
		w.Header().Set("ETag", etag)
		inm := r.Header.Get("If-None-Match")
		if inm != "" {
			o.cond[path]++
		}
		if inm == etag {
			o.mu.Unlock()
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if inm == "" {
			o.full[path]++
		}
		o.mu.Unlock()
		fmt.Fprintf(w, "version %d", v)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *validatingOrigin) serve(path, cacheControl string, version int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.cacheControl[path], o.version[path] = cacheControl, version
}

// counts are the full responses and conditional requests path had.
func (o *validatingOrigin) counts(path string) (full, cond int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.full[path], o.cond[path]
}

// getBody fetches path and returns its status, X-Cache-Status and body.
func getBody(t testing.TB, c *http.Client, port int32, path string) (int, string, string) {
	t.Helper()
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		return 0, err.Error(), ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err.Error(), ""
	}
	return resp.StatusCode, resp.Header.Get("X-Cache-Status"), string(body)
}

// TestSoftPurgeRevalidates: on real nginx, through the agent's purge endpoint, a soft
// purge keeps the objects it names but never lets them be served as fresh again: the
// next request asks the origin with If-None-Match; an object that did not change is
// served REVALIDATED from the cache after a 304 (the origin sends no body), a changed one
// is replaced, and one whose origin allowed stale-while-revalidate is served STALE at
// once while a 304 renews it behind. What the purge does not name stays a HIT. A soft
// purge by prefix, which reads each file's key, does the same.
func TestSoftPurgeRevalidates(t *testing.T) {
	o := newValidatingOrigin(t)
	n := startCacheNode(t, originAddr(o.srv), "64M")
	c := &http.Client{Timeout: 5 * time.Second}
	const fresh, swr = "public, max-age=3600", "public, max-age=3600, stale-while-revalidate=600"
	for path, cc := range map[string]string{"/same/1": fresh, "/changed/1": fresh, "/swr/1": swr, "/other/1": fresh} {
		o.serve(path, cc, 1)
		n.want(t, c, path, "MISS")
		n.want(t, c, path, "HIT")
	}
	o.serve("/changed/1", fresh, 2)

	res := n.purgeByAgent(t, "0b3f0a5e-51b9-4d39-9d5c-1f6a2a4c5e01", agentapi.PurgeSpec{Scope: agentapi.PurgeScopeURLs, Soft: true,
		URLs: []string{"http://127.0.0.1/same/1", "http://127.0.0.1/changed/1", "http://127.0.0.1/swr/1", "http://127.0.0.1/never-cached"}})
	if res.Removed != 3 {
		t.Errorf("the soft purge counted %d objects, want 3 marked stale", res.Removed)
	}
	for _, tc := range []struct {
		path, cache, body string
		full              int // unconditional requests: the fill
	}{
		{"/same/1", "REVALIDATED", "version 1", 1},
		{"/changed/1", "EXPIRED", "version 2", 1}, // its conditional request got version 2
		{"/swr/1", "STALE", "version 1", 1},
		{"/other/1", "HIT", "version 1", 1},
	} {
		code, cache, body := getBody(t, c, n.spec.Listener.Port, tc.path)
		if code != http.StatusOK || cache != tc.cache || body != tc.body {
			t.Errorf("GET %s after the soft purge: %d %s %q, want 200 %s %q", tc.path, code, cache, body, tc.cache, tc.body)
		}
		want := 1
		switch tc.path {
		case "/other/1":
			want = 0
		case "/swr/1":
			eventually(t, 10*time.Second, "the background revalidation", func() bool {
				_, cond := o.counts(tc.path)
				return cond == 1
			})
		}
		if full, cond := o.counts(tc.path); full != tc.full || cond != want {
			t.Errorf("%s: the origin had %d full and %d conditional requests, want %d and %d", tc.path, full, cond, tc.full, want)
		}
		eventually(t, 10*time.Second, tc.path+" a HIT again", func() bool {
			code, cache, body := getBody(t, c, n.spec.Listener.Port, tc.path)
			return code == http.StatusOK && cache == "HIT" && body == tc.body
		})
	}

	res = n.purgeByAgent(t, "0b3f0a5e-51b9-4d39-9d5c-1f6a2a4c5e02", agentapi.PurgeSpec{Scope: agentapi.PurgeScopePrefixes, Soft: true,
		Prefixes: []agentapi.PurgeHost{{Host: "127.0.0.1", Paths: []string{"/same/"}}}})
	if res.Removed != 1 {
		t.Errorf("the soft prefix purge counted %d objects, want 1", res.Removed)
	}
	n.want(t, c, "/same/1", "REVALIDATED")
	n.want(t, c, "/other/1", "HIT")
	if full, cond := o.counts("/same/1"); full != 1 || cond != 2 {
		t.Errorf("/same/1: the origin had %d full and %d conditional requests, want 1 and 2", full, cond)
	}
	if v := n.agent.metric("edgepool_disk_errors_total", nil); v > 0 {
		t.Errorf("edgepool_disk_errors_total = %v after soft purges, want none", v)
	}
}

// TestSoftPurgeOfAHotObjectUnderLoad: clients keep asking for one hot object while it is
// soft-purged. No client ever gets a MISS or an error, the origin never sends the object
// again (it only answers conditional requests with 304), and where the origin allowed
// stale-while-revalidate it is asked exactly once. The conditional requests without it
// (one per request that arrives while the first revalidation is on its way) are logged.
func TestSoftPurgeOfAHotObjectUnderLoad(t *testing.T) {
	o := newValidatingOrigin(t)
	n := startCacheNode(t, originAddr(o.srv), "64M")
	for i, tc := range []struct {
		name, cacheControl string
	}{
		{"stale-while-revalidate", "public, max-age=3600, stale-while-revalidate=600"},
		{"no stale allowed", "public, max-age=3600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := fmt.Sprintf("/hot/%d", i)
			o.serve(path, tc.cacheControl, 1)
			c := &http.Client{Timeout: 5 * time.Second}
			n.want(t, c, path, "MISS")
			n.want(t, c, path, "HIT")

			var mu sync.Mutex
			statuses := map[string]int{}
			var stop atomic.Bool
			var wg sync.WaitGroup
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := &http.Client{Timeout: 5 * time.Second}
					for !stop.Load() {
						code, cache, body := getBody(t, c, n.spec.Listener.Port, path)
						if code != http.StatusOK || body != "version 1" {
							cache = fmt.Sprintf("failed (%d %s %q)", code, cache, body)
						}
						mu.Lock()
						statuses[cache]++
						mu.Unlock()
					}
				}()
			}
			time.Sleep(500 * time.Millisecond)
			n.purgeByAgent(t, fmt.Sprintf("5e1f0c3a-7a2d-4c8e-9b1a-3d2f6e8a9c0%d", i), agentapi.PurgeSpec{Scope: agentapi.PurgeScopeURLs, Soft: true,
				URLs: []string{"http://127.0.0.1" + path}})
			time.Sleep(time.Second)
			stop.Store(true)
			wg.Wait()

			full, cond := o.counts(path)
			t.Logf("%s: clients saw %v; the origin had %d conditional requests, %d full responses (the fill)", path, statuses, cond, full)
			for status, count := range statuses {
				if status != "HIT" && status != "STALE" && status != "UPDATING" && status != "REVALIDATED" {
					t.Errorf("%d responses %s, want only HIT, STALE, UPDATING or REVALIDATED", count, status)
				}
			}
			if full != 1 || cond < 1 {
				t.Errorf("the origin had %d full responses and %d conditional requests, want only the fill and at least one conditional", full, cond)
			}
			if tc.cacheControl != "public, max-age=3600" && cond != 1 {
				t.Errorf("with stale-while-revalidate the origin had %d conditional requests, want 1", cond)
			}
		})
	}
}
