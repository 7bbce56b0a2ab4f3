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

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/edgepool/edgepool/internal/test/testkit"
)

// Range requests for a 1 GiB object through the real cache pod, with 1 MiB slices: each
// answer is exactly the object's bytes, the origin is asked only for the slices the ranges
// cover (each once), and the same ranges again are HITs from the node's disks, which are
// far smaller than the object.
func TestRealNodeRangesOfALargeObject(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	const size, slice = 1 << 30, 1 << 20
	object := &testkit.RangeObject{Size: size}
	l, err := net.Listen("tcp", linkHost+":0")
	g.Expect(err).NotTo(HaveOccurred())
	srv := &http.Server{Handler: object}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	cn := realCacheNode(t, ns, "ranges", l.Addr().String())
	cn.Spec.Cache.SliceSize = ptr.To(resource.MustParse("1Mi"))
	_, base := runCache(t, g, cn)

	ranges := [][2]int64{{0, 4095}, {size/2 - 100, size/2 + 100}, {700 * slice, 708*slice - 1}, {size - 5000, size - 1}}
	fetchRange := func(first, last int64) string {
		req, err := http.NewRequest(http.MethodGet, base+"/movie.mkv", nil)
		g.Expect(err).NotTo(HaveOccurred())
		req.Host = siteHost
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", first, last))
		started := time.Now()
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.StatusCode).To(Equal(http.StatusPartialContent))
		g.Expect(resp.Header.Get("Content-Range")).To(Equal(fmt.Sprintf("bytes %d-%d/%d", first, last, size)))
		g.Expect(bytes.Equal(body, testkit.ObjectBytes(first, last))).To(BeTrue(), "bytes %d-%d differ from the object's", first, last)
		t.Logf("bytes %d-%d (%d KiB): %s in %s", first, last, len(body)>>10, resp.Header.Get("X-Cache-Status"), time.Since(started).Round(time.Millisecond))
		return resp.Header.Get("X-Cache-Status")
	}
	var covered []int64
	for _, r := range ranges {
		g.Expect(fetchRange(r[0], r[1])).To(Equal("MISS"))
		covered = append(covered, r[0], r[1])
	}
	want := testkit.SliceRanges(slice, size, covered...)
	g.Expect(object.Ranges()).To(Equal(want), "the origin is asked only for the slices used, once each")
	t.Logf("the origin was asked for %d slices of 1 MiB, of the object's 1024: %q", len(want), want)

	object.Reset()
	for _, r := range ranges {
		g.Expect(fetchRange(r[0], r[1])).To(Equal("HIT"))
	}
	g.Expect(object.Ranges()).To(BeEmpty())
	g.Expect(slices.Contains(want, "")).To(BeFalse())
}
