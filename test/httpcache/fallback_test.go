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
	"os"
	"testing"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// TestCacheSideFailureFallsBackToOrigin: when the cache fails on its own side before the
// response starts (here the cached file cannot be read: a directory stands where it was,
// as a disk's corruption or an I/O error would leave it), the origin answers, uncached,
// once: the client gets the origin's status, headers and body, marked FALLBACK, and the
// agent counts a fallback. The origin's own 5xx is passed on, never retried.
func TestCacheSideFailureFallsBackToOrigin(t *testing.T) {
	o := startOrigin(t)
	var disk string
	c := startCacheSpec(t, o, func(spec *v1alpha1.CacheNodeSpec) { disk = spec.Disks[0].Path })
	o.respond("/fb", http.StatusOK, header("Cache-Control", "public, max-age=600", "X-Origin", "yes"))
	o.respond("/err", http.StatusInternalServerError, header("Cache-Control", "no-store"))

	for _, want := range []string{"MISS", "HIT"} {
		if r := c.get(t, "/fb"); r.Code != http.StatusOK || cacheStatus(r) != want {
			t.Fatalf("GET /fb: %s, want 200 %s", describe(r), want)
		}
	}
	file := storedFile(disk, "127.0.0.1/fb")
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(file, 0o755); err != nil {
		t.Fatal(err)
	}
	r := c.get(t, "/fb")
	if r.Code != http.StatusOK || cacheStatus(r) != "FALLBACK" || r.Header.Get("X-Origin") != "yes" ||
		string(r.Body) != `/fb response 2 for "" ""` {
		t.Errorf("GET /fb with its cache file unreadable: %s (X-Origin %q), want the origin's second response, FALLBACK",
			describe(r), r.Header.Get("X-Origin"))
	}
	if n := o.count("/fb"); n != 2 {
		t.Errorf("the origin received %d requests for /fb, want 2: the fill and the fallback", n)
	}

	r = c.get(t, "/err")
	if r.Code != http.StatusInternalServerError || cacheStatus(r) != "MISS" {
		t.Errorf("GET /err: %s, want the origin's own 500, a MISS", describe(r))
	}
	if n := o.count("/err"); n != 1 {
		t.Errorf("the origin received %d requests for /err, want 1: its own 500 is not the cache's failure", n)
	}
	c.waitCounts(t, "edgepool_fallbacks_total", "reason", map[string]float64{"cache_error": 1})
}
