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
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agent"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/testkit"
)

var (
	purgeObjects = flag.Int("purge-objects", 10000, "Cached objects the prefix purge of TestPrefixPurgeUnderLoad removes (e.g. 100000).")
	purgeRate    = flag.Int("purge-rate", 5000, "Files per second and disk the prefix purge of TestPrefixPurgeUnderLoad reads.")
)

// smallOrigin serves every path as 512 bytes the cache may keep for an hour, and counts
// the requests per path.
func smallOrigin(t testing.TB) (*httptest.Server, *sync.Map) {
	t.Helper()
	var hits sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := hits.LoadOrStore(r.URL.RequestURI(), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = io.WriteString(w, strings.Repeat(r.URL.Path[len(r.URL.Path)-1:], 512))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func originHits(hits *sync.Map, uri string) int64 {
	n, ok := hits.Load(uri)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

// cacheNode is a running agent and nginx on two ext4 loop disks.
type cacheNode struct {
	spec  *v1alpha1.CacheNodeSpec
	agent *agentProc
	key   string // the cache key expression
	disks []*testkit.FaultDisk
}

func startCacheNode(t *testing.T, origin string, diskSize string) *cacheNode {
	t.Helper()
	var disks []v1alpha1.Disk
	var faultDisks []*testkit.FaultDisk
	for _, name := range []string{"d0", "d1"} {
		d, err := testkit.NewFaultDisk(diskDir(t, name), filepath.Join(sharedDir(t), name+".img"), diskSize)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := d.Close(); err != nil {
				t.Errorf("clean up %s: %v", name, err)
			}
		})
		disks = append(disks, disk(name, d.Dir, mediaOf(t, d.Dir)))
		faultDisks = append(faultDisks, d)
	}
	spec := testSpec(t, origin, disks...)
	cfg := newConfigDir(t)
	conf := renderConf(t, spec)
	cfg.write(t, spec, conf)
	a := startAgent(t, cfg, spec)
	a.waitReady(t)
	return &cacheNode{spec: spec, agent: a, key: render.Facts(spec, conf).Split.Key, disks: faultDisks}
}

// purge runs a purge on every disk, as the agent does, from the test process.
func (n *cacheNode) purge(t testing.TB, spec agentapi.PurgeSpec, rate int) int64 {
	t.Helper()
	keys, err := spec.Keys(n.key)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, d := range n.spec.Disks {
		removed, err := agent.PurgeCacheDir(context.Background(), filepath.Join(d.Path, agentapi.DiskCacheDir), keys, rate)
		if err != nil {
			t.Fatalf("purge %s: %v", d.Name, err)
		}
		total += removed
	}
	return total
}

// want fetches path and checks its status and cache status.
func (n *cacheNode) want(t testing.TB, c *http.Client, path, cache string) {
	t.Helper()
	code, got := fetch(c, n.spec.Listener.Port, path)
	if code != http.StatusOK || got != cache {
		t.Errorf("GET %s: %d %s, want 200 %s", path, code, got, cache)
	}
}

// TestPurgeIsAMissNotAnError: on real nginx, a purged object is a MISS filled again from
// the origin, then a HIT; what the purge does not name stays a HIT; nothing fails, and
// the purge's files gone from under nginx's keys zone count as no disk error.
func TestPurgeIsAMissNotAnError(t *testing.T) {
	srv, hits := smallOrigin(t)
	n := startCacheNode(t, originAddr(srv), "64M")
	c := &http.Client{Timeout: 5 * time.Second}
	const objects = 40
	for i := range objects {
		n.want(t, c, fmt.Sprintf("/obj/%d", i), "MISS")
		n.want(t, c, fmt.Sprintf("/obj/%d", i), "HIT")
	}
	n.want(t, c, "/obj/1?v=2", "MISS")

	for _, step := range []struct {
		name   string
		spec   agentapi.PurgeSpec
		purged func(i int) bool
	}{
		{"exact", agentapi.PurgeSpec{Scope: "URLs", URLs: []string{"http://127.0.0.1/obj/7", "https://127.0.0.1/obj/8", "http://127.0.0.1/never-cached"}},
			func(i int) bool { return i == 7 || i == 8 }},
		{"prefix", agentapi.PurgeSpec{Scope: "Prefixes", Prefixes: []agentapi.PurgeHost{{Host: "127.0.0.1", Paths: []string{"/obj/1"}}, {Host: "other.example", Paths: []string{"/"}}}},
			func(i int) bool { return i == 1 || i/10 == 1 }},
		{"everything", agentapi.PurgeSpec{Scope: "All"}, func(int) bool { return true }},
	} {
		t.Run(step.name, func(t *testing.T) {
			want := 0
			for i := range objects {
				if step.purged(i) {
					want++
				}
			}
			if step.name != "exact" {
				want++ // /obj/1?v=2
			}
			if removed := n.purge(t, step.spec, 0); removed != int64(want) {
				t.Errorf("removed %d files, want %d", removed, want)
			}
			for i := range objects {
				path := fmt.Sprintf("/obj/%d", i)
				before := originHits(hits, path)
				if step.purged(i) {
					n.want(t, c, path, "MISS")
					if got := originHits(hits, path); got != before+1 {
						t.Errorf("%s reached the origin %d times after the purge, want once", path, got-before)
					}
				}
				n.want(t, c, path, "HIT")
			}
			if step.name != "exact" {
				n.want(t, c, "/obj/1?v=2", "MISS")
			}
		})
	}
	st := n.agent.status(t)
	for _, d := range st.Disks {
		if !d.Ready || d.Out {
			t.Errorf("disk %s after the purges: ready %v, out %v (%s %s)", d.Name, d.Ready, d.Out, d.Reason, d.OutReason)
		}
	}
	if v := n.agent.metric("edgepool_disk_errors_total", nil); v > 0 {
		t.Errorf("edgepool_disk_errors_total = %v after purges, want none", v)
	}
}

// TestPrefixPurgeUnderLoad caches -purge-objects objects under /cold/ and one hot object,
// then purges /cold/ at -purge-rate files per second and disk while clients keep asking
// for the hot object: every cold file is gone, and the hot object is served as a HIT
// throughout. The latencies are logged (go test -v), not asserted: the machine is shared.
func TestPrefixPurgeUnderLoad(t *testing.T) {
	srv, _ := smallOrigin(t)
	size := "256M"
	if *purgeObjects > 20000 {
		size = fmt.Sprintf("%dM", 64+*purgeObjects/40) // ext4 makes an inode per 16 KiB
	}
	n := startCacheNode(t, originAddr(srv), size)
	port := n.spec.Listener.Port

	fill := time.Now()
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 10 * time.Second}
			for i := next.Add(1) - 1; i < int64(*purgeObjects); i = next.Add(1) - 1 {
				if code, _ := fetch(c, port, fmt.Sprintf("/cold/%d", i)); code != http.StatusOK {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d requests failed while filling the cache", failed.Load())
	}
	c := &http.Client{Timeout: 5 * time.Second}
	n.want(t, c, "/hot", "MISS")
	n.want(t, c, "/hot", "HIT")
	t.Logf("cached %d objects in %v", *purgeObjects, time.Since(fill).Round(time.Millisecond))

	hot := func(stop <-chan struct{}) (lat []time.Duration, errs []string) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := &http.Client{Timeout: 5 * time.Second}
				for {
					select {
					case <-stop:
						return
					default:
					}
					start := time.Now()
					code, cache := fetch(c, port, "/hot")
					d := time.Since(start)
					mu.Lock()
					lat = append(lat, d)
					if code != http.StatusOK || cache != "HIT" {
						errs = append(errs, fmt.Sprintf("%d %s", code, cache))
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return lat, errs
	}
	measure := func(d time.Duration) ([]time.Duration, []string) {
		stop := make(chan struct{})
		time.AfterFunc(d, func() { close(stop) })
		return hot(stop)
	}
	idle, idleErrs := measure(2 * time.Second)
	n.dropCaches(t) // the purge reads each header from the disk, as it would on a node

	stop := make(chan struct{})
	type result struct {
		lat  []time.Duration
		errs []string
	}
	during := make(chan result, 1)
	go func() { l, e := hot(stop); during <- result{l, e} }()
	start := time.Now()
	removed := n.purge(t, agentapi.PurgeSpec{Scope: "Prefixes", Prefixes: []agentapi.PurgeHost{{Host: "127.0.0.1", Paths: []string{"/cold/"}}}}, *purgeRate)
	took := time.Since(start)
	close(stop)
	busy := <-during

	if removed != int64(*purgeObjects) {
		t.Errorf("removed %d files, want %d", removed, *purgeObjects)
	}
	for _, errs := range [][]string{idleErrs, busy.errs} {
		if len(errs) > 0 {
			t.Errorf("%d hot requests were not 200 HITs, first: %s", len(errs), errs[0])
		}
	}
	for _, d := range n.spec.Disks {
		if left := countFiles(t, filepath.Join(d.Path, agentapi.DiskCacheDir)); left > 1 {
			t.Errorf("disk %s holds %d cache files after the purge, want at most the hot one", d.Name, left)
		}
	}
	n.want(t, c, "/cold/1", "MISS")
	t.Logf("prefix purge of %d objects on 2 disks at %d files/s per disk: %v (%.0f files/s)",
		removed, *purgeRate, took.Round(time.Millisecond), float64(removed)/took.Seconds())
	for _, m := range []struct {
		name string
		lat  []time.Duration
	}{{"before", idle}, {"during", busy.lat}} {
		t.Logf("hot object %s the purge: %d requests, p50 %.2fms, p99 %.2fms, max %.2fms", m.name, len(m.lat),
			testkit.Millis(testkit.Percentile(m.lat, 50)), testkit.Millis(testkit.Percentile(m.lat, 99)), testkit.Millis(slicesMax(m.lat)))
	}
}

// dropCaches drops the disks' pages from the page cache: the cache files', the loop
// devices' (the filesystems' metadata) and their images' on the machine's disk. Only
// these files' pages: the machine is shared.
func (n *cacheNode) dropCaches(t testing.TB) {
	t.Helper()
	drop := func(path string) {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatalf("fadvise %s: %v", path, err)
		}
	}
	for _, d := range n.disks {
		err := filepath.WalkDir(filepath.Join(d.Dir, agentapi.DiskCacheDir), func(path string, e os.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				drop(path)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		unix.Sync()
		drop(d.Dev)
		drop(d.Image)
	}
}

func slicesMax(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1]
}

// countFiles counts the regular files under dir.
func countFiles(t testing.TB, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
