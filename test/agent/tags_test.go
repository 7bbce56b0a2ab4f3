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
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// taggedOrigin labels /p/<n>/... with the tags product-<n> and, for n < 2, sale, in
// Surrogate-Key, and /c/<n>/... with the tag category-<n> in Cache-Tag, comma-separated
// beside an invalid one; /plain/... has no tags. Every response has the ETag "1", and a
// request with If-None-Match "1" gets a 304. It counts the requests per path.
func taggedOrigin(t testing.TB) (*httptest.Server, func(string) int) {
	t.Helper()
	var mu sync.Mutex
	hits := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.URL.Path]++
		mu.Unlock()
		parts := strings.Split(r.URL.Path, "/")
		switch parts[1] {
		case "p":
			tags := "product-" + parts[2]
			if parts[2] < "2" {
				tags += " sale"
			}
			w.Header().Set("Surrogate-Key", tags)
		case "c":
			w.Header().Set("Cache-Tag", "category-"+parts[2]+`, "not a tag"`)
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("ETag", `"1"`)
		if r.Header.Get("If-None-Match") == `"1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprint(w, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv, func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return hits[path]
	}
}

// TestPurgeByTag: on real nginx, through the agent's purge endpoint, a purge by tags
// removes exactly the cached responses the origin labelled with one of them, in either
// tag header, on every disk; a soft one marks them stale. Clients never see the tag
// headers, unless the CacheNode passes them.
func TestPurgeByTag(t *testing.T) {
	srv, hits := taggedOrigin(t)
	n := startCacheNode(t, originAddr(srv), "64M")
	c := &http.Client{Timeout: 5 * time.Second}
	var paths []string
	for i := range 4 {
		for j := range 5 {
			paths = append(paths, fmt.Sprintf("/p/%d/%d", i, j), fmt.Sprintf("/c/%d/%d", i, j))
		}
		paths = append(paths, fmt.Sprintf("/plain/%d", i))
	}
	for _, p := range paths {
		n.want(t, c, p, "MISS")
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", n.spec.Listener.Port, p))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Header.Get("X-Cache-Status") != "HIT" || resp.Header.Get("Surrogate-Key") != "" || resp.Header.Get("Cache-Tag") != "" {
			t.Errorf("GET %s: %s, Surrogate-Key %q, Cache-Tag %q; want a HIT without tag headers", p,
				resp.Header.Get("X-Cache-Status"), resp.Header.Get("Surrogate-Key"), resp.Header.Get("Cache-Tag"))
		}
	}
	purged := func(p string) bool {
		return strings.HasPrefix(p, "/p/0/") || strings.HasPrefix(p, "/p/1/") || strings.HasPrefix(p, "/p/3/") || strings.HasPrefix(p, "/c/2/")
	}
	res := n.purgeByAgent(t, "7a0c2f1e-4b3d-4e5f-8a9b-0c1d2e3f4a51", agentapi.PurgeSpec{Scope: agentapi.PurgeScopeTags,
		Tags: []string{"sale", "product-3", "category-2", "not", "product-9"}})
	if res.Removed != 20 {
		t.Errorf("the purge removed %d objects, want 20", res.Removed)
	}
	for _, p := range paths {
		if purged(p) {
			n.want(t, c, p, "MISS")
			if hits(p) != 2 {
				t.Errorf("%s reached the origin %d times, want twice", p, hits(p))
			}
		}
		n.want(t, c, p, "HIT")
	}

	res = n.purgeByAgent(t, "7a0c2f1e-4b3d-4e5f-8a9b-0c1d2e3f4a52", agentapi.PurgeSpec{Scope: agentapi.PurgeScopeTags, Soft: true,
		Tags: []string{"product-2"}})
	if res.Removed != 5 {
		t.Errorf("the soft purge marked %d objects, want 5", res.Removed)
	}
	for j := range 5 {
		n.want(t, c, fmt.Sprintf("/p/2/%d", j), "REVALIDATED")
	}
	n.want(t, c, "/p/3/0", "HIT")
}

// TestTagHeadersCanPass: a CacheNode with tagHeadersToClients Pass shows them to clients,
// from the origin and from the cache.
func TestTagHeadersCanPass(t *testing.T) {
	srv, _ := taggedOrigin(t)
	n := startCacheNodeWith(t, originAddr(srv), "64M", func(s *v1alpha1.CacheNodeSpec) {
		s.Cache.TagHeadersToClients = v1alpha1.TagHeadersPass
	})
	c := &http.Client{Timeout: 5 * time.Second}
	for _, want := range []string{"MISS", "HIT"} {
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/p/1/x", n.spec.Listener.Port))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := resp.Header.Get("X-Cache-Status"); got != want || resp.Header.Get("Surrogate-Key") != "product-1 sale" {
			t.Errorf("%s, Surrogate-Key %q; want %s and the origin's tags", got, resp.Header.Get("Surrogate-Key"), want)
		}
	}
}

// TestTagIndexAcrossRestarts: on real nginx, each disk's tag index is ready once the agent
// started; an agent stopped cleanly leaves it marked clean, and the next one keeps it
// (ready at once, no rebuild) and goes on indexing: a purge by tag then removes what was
// stored before the restart and after it.
func TestTagIndexAcrossRestarts(t *testing.T) {
	srv, hits := taggedOrigin(t)
	n := startCacheNode(t, originAddr(srv), "64M")
	c := &http.Client{Timeout: 5 * time.Second}
	indexReady := func(what string) {
		t.Helper()
		eventually(t, 10*time.Second, what, func() bool {
			for _, d := range n.spec.Disks {
				if n.agent.metric("edgepool_tag_index_ready", map[string]string{"disk": d.Name}) != 1 {
					return false
				}
			}
			return true
		})
	}
	indexReady("the tag indexes to be ready")
	for j := range 10 {
		n.want(t, c, fmt.Sprintf("/p/0/%d", j), "MISS")
	}
	n.restart(t, func() {
		for _, d := range n.spec.Disks {
			data, err := os.ReadFile(filepath.Join(d.Path, agentapi.DiskTagIndex))
			if err != nil || !strings.HasSuffix(string(data), "\n# clean\n") {
				t.Errorf("disk %s's tag index after a clean stop: %v\n%s", d.Name, err, data)
			}
		}
	})
	indexReady("the kept tag indexes to be ready")
	if log := n.agent.log.String(); strings.Contains(log, "Rebuilding the tag index") {
		t.Errorf("the agent rebuilt a tag index it could keep:\n%s", log)
	}
	for j := range 10 {
		n.want(t, c, fmt.Sprintf("/p/1/%d", j), "MISS")
	}
	res := n.purgeByAgent(t, newUID(), agentapi.PurgeSpec{Scope: agentapi.PurgeScopeTags, Tags: []string{"sale"}})
	if res.Removed != 20 {
		t.Errorf("the purge removed %d objects, want 20: those stored before the restart and after", res.Removed)
	}
	for _, p := range []string{"/p/0/3", "/p/1/7"} {
		n.want(t, c, p, "MISS")
		if hits(p) != 2 {
			t.Errorf("%s reached the origin %d times, want twice", p, hits(p))
		}
	}
}
