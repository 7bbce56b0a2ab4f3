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
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// getRange asks the cache for bytes [first, last] of path (last < 0: the suffix of
// -last bytes) and checks the answer is exactly those bytes of the object.
func getRange(t testing.TB, c *http.Client, port int32, path string, first, last, objectSize int64) (cache string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
	spec := fmt.Sprintf("bytes=%d-%d", first, last)
	if last < 0 {
		spec, first, last = fmt.Sprintf("bytes=%d", last), objectSize+last, objectSize-1
	}
	req.Header.Set("Range", spec)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s %s: %v", path, spec, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s %s: %v", path, spec, err)
	}
	wantRange := fmt.Sprintf("bytes %d-%d/%d", first, last, objectSize)
	if resp.StatusCode != http.StatusPartialContent || resp.Header.Get("Content-Range") != wantRange {
		t.Fatalf("GET %s %s: %d Content-Range %q, want 206 %q", path, spec, resp.StatusCode, resp.Header.Get("Content-Range"), wantRange)
	}
	if !bytes.Equal(body, testkit.ObjectBytes(first, last)) {
		t.Fatalf("GET %s %s: %d bytes that are not the object's", path, spec, len(body))
	}
	return resp.Header.Get("X-Cache-Status")
}

// A 1 GiB object is served by ranges from 1 MiB slices: every answer is the object's exact
// bytes, the origin is asked only for the slices the ranges cover, each once, and the
// cache keeps only those (a few MiB on disks far smaller than the object). An exact purge
// of the object's URL removes every slice it has cached: the next range is a MISS again.
func TestRangesOfALargeObjectFillOnlyTheirSlices(t *testing.T) {
	const size, slice = 1 << 30, 1 << 20
	object, small := &testkit.RangeObject{Size: size}, &testkit.RangeObject{Size: 3000}
	mux := http.NewServeMux()
	mux.Handle("/video.mp4", object)
	mux.Handle("/small", small)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	n := startCacheNodeWith(t, originAddr(srv), "64M", func(s *v1alpha1.CacheNodeSpec) {
		s.Cache.SliceSize = ptr.To(resource.MustParse("1Mi"))
	})
	c := &http.Client{Timeout: 30 * time.Second}
	port := n.spec.Listener.Port

	ranges := [][2]int64{
		{0, 99},                         // the start
		{size/2 - 10, size/2 + 10},      // across a slice boundary
		{300 * slice, 303*slice + 4095}, // four slices
		{0, -1000},                      // the last 1000 bytes
	}
	var covered []int64
	for _, r := range ranges {
		if r[1] < 0 {
			covered = append(covered, size+r[1], size-1)
		} else {
			covered = append(covered, r[0], r[1])
		}
		// A suffix range's start needs the object's size, which nginx reads from the
		// first slice, cached by then: its answer counts as that slice's HIT.
		if got := getRange(t, c, port, "/video.mp4", r[0], r[1], size); got != "MISS" && r[1] >= 0 {
			t.Errorf("first GET of bytes %d-%d: %s, want MISS", r[0], r[1], got)
		}
	}
	want := testkit.SliceRanges(slice, size, covered...)
	if got := object.Ranges(); !slices.Equal(got, want) {
		t.Fatalf("the origin was asked for\n%q\nwant only the slices used, once each:\n%q", got, want)
	}
	t.Logf("%d ranges of a %d MiB object filled %d slices: %q", len(ranges), size>>20, len(want), want)

	object.Reset()
	for _, r := range ranges {
		if got := getRange(t, c, port, "/video.mp4", r[0], r[1], size); got != "HIT" {
			t.Errorf("second GET of bytes %d-%d: %s, want HIT", r[0], r[1], got)
		}
	}
	if got := object.Ranges(); len(got) > 0 {
		t.Errorf("cached slices were asked from the origin again: %q", got)
	}

	removed := n.purge(t, agentapi.PurgeSpec{Scope: "URLs", URLs: []string{"http://127.0.0.1/video.mp4"}}, 0)
	if removed != int64(len(want)) {
		t.Errorf("the exact purge removed %d files, want the %d slices", removed, len(want))
	}
	if got := getRange(t, c, port, "/video.mp4", 0, 99, size); got != "MISS" {
		t.Errorf("GET after the purge: %s, want MISS", got)
	}
	if got := object.Ranges(); !slices.Equal(got, []string{fmt.Sprintf("bytes=0-%d", slice-1)}) {
		t.Errorf("after the purge the origin was asked for %q, want the first slice", got)
	}

	// An object smaller than a slice, asked whole, is one slice: a 200 of its bytes.
	for _, want := range []string{"MISS", "HIT"} {
		resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d/small", port))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(body, testkit.ObjectBytes(0, 2999)) || resp.Header.Get("X-Cache-Status") != want {
			t.Errorf("GET /small: %d %s, %d bytes (%v), want 200 %s and the object's 3000 bytes", resp.StatusCode, resp.Header.Get("X-Cache-Status"), len(body), err, want)
		}
	}
	if got := small.Ranges(); !slices.Equal(got, []string{fmt.Sprintf("bytes=0-%d", slice-1)}) {
		t.Errorf("for the small object the origin was asked for %q, want one slice", got)
	}
}
