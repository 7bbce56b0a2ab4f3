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
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
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
	"github.com/edgepool/edgepool/internal/agent/purge"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

var (
	purgeObjects = flag.Int("purge-objects", 10000, "Cached objects of TestPurgesUnderLoad, a tenth of them tagged (e.g. 100000).")
	purgeRate    = flag.Int("purge-rate", 5000, "Files per second and disk the purges of TestPurgesUnderLoad read.")
)

// smallOrigin serves every path as 512 bytes the cache may keep for an hour, and counts
// the requests per path. It labels every tenth object of /cold/ (/cold/0, /cold/10, ...)
// with the tag tenth.
func smallOrigin(t testing.TB) (*httptest.Server, *sync.Map) {
	t.Helper()
	var hits sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := hits.LoadOrStore(r.URL.RequestURI(), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		if strings.HasPrefix(r.URL.Path, "/cold/") && strings.HasSuffix(r.URL.Path, "0") {
			w.Header().Set("Surrogate-Key", "tenth")
		}
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

// testPod is the pod the agents of these tests are.
const testPod = "edge/edge-abcde"

// cacheNode is a running agent and nginx on two ext4 loop disks, and the operator's key.
type cacheNode struct {
	spec     *v1alpha1.CacheNodeSpec
	conf     string
	cfg      configDir
	agent    *agentProc
	key      string // the cache key expression
	disks    []*testkit.FaultDisk
	operator ed25519.PrivateKey
	// list is the ConfigMap's list of purges, if the operator wrote one.
	list *agentapi.ActivePurges
	// pod is the agent's --pod, testPod unless set.
	pod string
	// extra are the agent's other arguments.
	extra []string
}

// newOperatorKey makes a key as the operator does when it starts.
func newOperatorKey(testing.TB) ed25519.PrivateKey {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	must(err) // crypto/rand does not fail
	return key
}

// publish writes the CacheNode's ConfigMap with the given operator keys.
func (n *cacheNode) publish(t testing.TB, keys ...ed25519.PrivateKey) {
	t.Helper()
	var pubs []ed25519.PublicKey
	for _, k := range keys {
		pubs = append(pubs, k.Public().(ed25519.PublicKey))
	}
	pem, err := agentapi.EncodeOperatorKeys(pubs)
	if err != nil {
		t.Fatal(err)
	}
	facts, err := json.Marshal(render.Facts(n.spec, n.conf))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{agentapi.ConfigKey: []byte(n.conf), agentapi.FactsKey: facts, agentapi.OperatorKeysKey: pem}
	if n.list != nil {
		if files[agentapi.ActivePurgesKey], err = json.Marshal(n.list); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.cfg.Write(files); err != nil {
		t.Fatal(err)
	}
}

func startCacheNode(t *testing.T, origin string, diskSize string, extra ...string) *cacheNode {
	t.Helper()
	return startCacheNodeWith(t, origin, diskSize, func(*v1alpha1.CacheNodeSpec) {}, extra...)
}

// startCacheNodeWith is startCacheNode with spec changed by change before it is rendered.
func startCacheNodeWith(t *testing.T, origin string, diskSize string, change func(*v1alpha1.CacheNodeSpec), extra ...string) *cacheNode {
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
	spec.DiskFailover.CooldownSeconds = 1 // a disk out comes back within the tests' waits
	change(spec)
	n := &cacheNode{spec: spec, conf: renderConf(t, spec), cfg: newConfigDir(t), disks: faultDisks, operator: newOperatorKey(t), extra: extra}
	n.key = render.Facts(spec, n.conf).Split.Key
	n.publish(t, n.operator)
	n.agent = startAgent(t, n.cfg, spec, append([]string{"--pod", testPod}, extra...)...)
	n.agent.waitReady(t)
	return n
}

// post sends a purge request body to the agent and decodes its answer.
func (n *cacheNode) post(t testing.TB, body []byte) (int, agentapi.PurgeResult, string) {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d%s", n.spec.Listener.AgentPort, agentapi.PurgePath)
	resp, err := http.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var res agentapi.PurgeResult
	_ = json.Unmarshal(data, &res)
	return resp.StatusCode, res, string(data)
}

// signed is a purge request for the test pod, signed by key.
func signed(t testing.TB, key ed25519.PrivateKey, uid string, issued time.Time, spec agentapi.PurgeSpec) []byte {
	t.Helper()
	sp, err := agentapi.SignPurge(key, agentapi.PurgeRequest{UID: uid, Audience: testPod, IssuedAt: issued.Unix(), Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(sp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// purgeByAgent has the agent purge, as the operator would: the same request until it is
// no longer running.
func (n *cacheNode) purgeByAgent(t testing.TB, uid string, spec agentapi.PurgeSpec) agentapi.PurgeResult {
	t.Helper()
	body := signed(t, n.operator, uid, time.Now(), spec)
	var res agentapi.PurgeResult
	eventually(t, 5*time.Minute, "the purge to finish", func() bool {
		code, r, raw := n.post(t, body)
		if code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", agentapi.PurgePath, code, raw)
		}
		res = r
		return r.State != agentapi.PurgeRunning
	})
	if res.State != agentapi.PurgeDone {
		t.Fatalf("purge %s: %+v", uid, res)
	}
	return res
}

// purge runs a purge on every disk, as the agent does, from the test process.
func (n *cacheNode) purge(t testing.TB, spec agentapi.PurgeSpec, rate int) int64 {
	t.Helper()
	facts := render.Facts(n.spec, n.conf)
	keys, err := facts.PurgeKeys(spec)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, d := range n.spec.Disks {
		removed, err := purge.CacheDir(context.Background(), filepath.Join(d.Path, agentapi.DiskCacheDir), keys, rate)
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

// TestPurgeRemovesEveryEncoding: a compressing cache stores a response per encoding;
// the agent's purge of a URL, exact or by prefix, removes them all (the next request in
// either encoding is a MISS), soft or hard.
func TestPurgeRemovesEveryEncoding(t *testing.T) {
	srv, hits := smallOrigin(t)
	n := startCacheNodeWith(t, originAddr(srv), "64M", func(spec *v1alpha1.CacheNodeSpec) {
		spec.Compression = &v1alpha1.Compression{}
		spec.Default()
	})
	gzipClient := &http.Client{Timeout: 5 * time.Second} // Go asks for gzip, and decodes it
	identityClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	clients := []*http.Client{gzipClient, identityClient}
	for i, spec := range []agentapi.PurgeSpec{
		{Scope: "URLs", URLs: []string{"http://127.0.0.1/enc/0"}},
		{Scope: "URLs", URLs: []string{"http://127.0.0.1/enc/1"}, Soft: true},
		{Scope: "Prefixes", Prefixes: []agentapi.PurgeHost{{Host: "127.0.0.1", Paths: []string{"/enc/2"}}}},
	} {
		path := fmt.Sprintf("/enc/%d", i)
		for _, c := range clients {
			n.want(t, c, path, "MISS")
			n.want(t, c, path, "HIT")
		}
		if got := originHits(hits, path); got != 2 {
			t.Fatalf("%s: the origin received %d requests, want one per encoding", path, got)
		}
		res := n.purgeByAgent(t, newUID(), spec)
		if res.Removed != 2 {
			t.Errorf("purge %d: %+v, want both encodings' files", i, res)
		}
		want := "MISS"
		if spec.Soft {
			want = "EXPIRED" // stale: fetched again (smallOrigin sends no validators)
		}
		for _, c := range clients {
			n.want(t, c, path, want)
		}
	}
}

// TestPurgesUnderLoad caches -purge-objects objects under /cold/ and one hot object, then,
// while clients keep asking for the hot object, purges the tenth of them the origin
// labelled with the tag tenth (the tag indexes name their files), then /cold/ by prefix
// (every cache file read), at -purge-rate files per second and disk: each purge removes
// what it names, every cold file is gone, and the hot object is served as a HIT
// throughout. Times and latencies are logged (go test -v), not asserted: the machine is
// shared.
func TestPurgesUnderLoad(t *testing.T) {
	srv, _ := smallOrigin(t)
	size := "256M"
	if *purgeObjects > 20000 {
		size = fmt.Sprintf("%dM", 64+*purgeObjects/40) // ext4 makes an inode per 16 KiB
	}
	n := startCacheNode(t, originAddr(srv), size, "--purge-rate", fmt.Sprint(*purgeRate))
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
	tagged := int64((*purgeObjects + 9) / 10)
	n.tagIndexesRebuilt(t, tagged)
	// Restarted, nginx knows no key until its cache loader runs (a minute in): concurrent
	// first requests for one key race in ngx_http_file_cache_exists, and all but one may
	// be a MISS. One request first.
	n.want(t, c, "/hot", "HIT")

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
	for _, d := range n.spec.Disks {
		if n.agent.metric("edgepool_tag_index_ready", map[string]string{"disk": d.Name}) != 1 {
			t.Fatalf("disk %s's tag index is not ready", d.Name)
		}
	}

	type result struct {
		lat  []time.Duration
		errs []string
	}
	// purge runs spec while the hot object is asked for.
	purge := func(spec agentapi.PurgeSpec) (removed int64, took time.Duration, busy result) {
		n.dropCaches(t) // the purge reads each header from the disk, as it would on a node
		stop := make(chan struct{})
		during := make(chan result, 1)
		go func() { l, e := hot(stop); during <- result{l, e} }()
		start := time.Now()
		removed = n.purgeByAgent(t, newUID(), spec).Removed
		took = time.Since(start)
		close(stop)
		return removed, took, <-during
	}
	tagRemoved, tagTook, tagBusy := purge(agentapi.PurgeSpec{Scope: agentapi.PurgeScopeTags, Tags: []string{"tenth"}})
	if tagRemoved != tagged {
		t.Errorf("the purge by tag removed %d files, want %d", tagRemoved, tagged)
	}
	n.want(t, c, "/cold/10", "MISS")
	n.want(t, c, "/cold/11", "HIT")
	removed, took, busy := purge(agentapi.PurgeSpec{Scope: "Prefixes", Prefixes: []agentapi.PurgeHost{{Host: "127.0.0.1", Paths: []string{"/cold/"}}}})
	if want := int64(*purgeObjects) - tagged + 1; removed != want { // and /cold/10 again
		t.Errorf("the prefix purge removed %d files, want %d", removed, want)
	}
	for _, errs := range [][]string{idleErrs, tagBusy.errs, busy.errs} {
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
	t.Logf("purge by tag of %d objects among %d, the tag indexes naming them: %v", tagRemoved, *purgeObjects, tagTook.Round(time.Millisecond))
	t.Logf("prefix purge of %d objects on 2 disks at %d files/s per disk: %v (%.0f files/s)",
		removed, *purgeRate, took.Round(time.Millisecond), float64(removed)/took.Seconds())
	for _, m := range []struct {
		name string
		lat  []time.Duration
	}{{"before the purges", idle}, {"during the purge by tag", tagBusy.lat}, {"during the prefix purge", busy.lat}} {
		t.Logf("hot object %s: %d requests, p50 %.2fms, p99 %.2fms, max %.2fms", m.name, len(m.lat),
			testkit.Millis(testkit.Percentile(m.lat, 50)), testkit.Millis(testkit.Percentile(m.lat, 99)), testkit.Millis(slicesMax(m.lat)))
	}
}

// tagIndexesRebuilt measures the disks' tag indexes, which name tagged files: their size
// once the agent stopped, and, after a restart that finds them not marked clean (as after
// a crash), the time until they are rebuilt from the cache files, at --purge-rate.
func (n *cacheNode) tagIndexesRebuilt(t *testing.T, tagged int64) {
	t.Helper()
	var bytes int64
	var start time.Time
	n.restart(t, func() {
		for _, d := range n.spec.Disks {
			path := filepath.Join(d.Path, agentapi.DiskTagIndex)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			clean := strings.HasSuffix(string(data), "\n# clean\n")
			if clean {
				data = data[:len(data)-len("# clean\n")]
			} else { // the index could not catch up with the fill in time: fine, it is rebuilt
				t.Logf("disk %s's tag index was not marked clean at the stop", d.Name)
			}
			bytes += int64(len(data))
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		start = time.Now()
	})
	eventually(t, 10*time.Minute, "the tag indexes to be rebuilt", func() bool {
		for _, d := range n.spec.Disks {
			if n.agent.metric("edgepool_tag_index_ready", map[string]string{"disk": d.Name}) != 1 {
				return false
			}
		}
		return true
	})
	took := time.Since(start)
	if !strings.Contains(n.agent.log.String(), "Rebuilt the tag index") {
		t.Error("the agent kept tag indexes that were not marked clean")
	}
	t.Logf("tag indexes: %d bytes for %d tagged objects (%.0f bytes each, %.0f MB per million); rebuilt from the cache files after an unclean stop in %v (agent start included)",
		bytes, tagged, float64(bytes)/float64(tagged), float64(bytes)/float64(tagged), took.Round(time.Millisecond))
}

// TestPrefixPurgesThatArriveTogetherShareAWalk: prefix purges that arrive while a walk
// runs wait for it and then walk the cache once, all of them together: 10 purges, 2
// walks. Each purge removes exactly its own objects and counts them, and what none of
// them names stays cached.
func TestPrefixPurgesThatArriveTogetherShareAWalk(t *testing.T) {
	srv, _ := smallOrigin(t)
	// 400 objects at 100 files a second and disk: the first walk takes about 2 s, past
	// the second its request waits for the answer.
	n := startCacheNode(t, originAddr(srv), "64M", "--purge-rate", "100")
	const groups, perGroup = 10, 40
	c := &http.Client{Timeout: 5 * time.Second}
	for g := range groups {
		for i := range perGroup {
			if code, _ := fetch(c, n.spec.Listener.Port, fmt.Sprintf("/g%d/%d", g, i)); code != http.StatusOK {
				t.Fatalf("GET /g%d/%d: %d", g, i, code)
			}
		}
	}
	n.want(t, c, "/kept", "MISS")
	prefix := func(g int) agentapi.PurgeSpec {
		return agentapi.PurgeSpec{Scope: "Prefixes", Prefixes: []agentapi.PurgeHost{{Host: "127.0.0.1", Paths: []string{fmt.Sprintf("/g%d/", g)}}}}
	}
	first := signed(t, n.operator, newUID(), time.Now(), prefix(0))
	if code, res, raw := n.post(t, first); code != http.StatusOK || res.State != agentapi.PurgeRunning {
		t.Fatalf("the first purge: %d %s, want it still running (a walk of about 2 s)", code, raw)
	}
	results := make([]agentapi.PurgeResult, groups)
	var wg sync.WaitGroup
	for g := 1; g < groups; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[g] = n.purgeByAgent(t, newUID(), prefix(g))
		}()
	}
	wg.Wait()
	eventually(t, time.Minute, "the first purge to finish", func() bool {
		_, res, _ := n.post(t, first)
		results[0] = res
		return res.State != agentapi.PurgeRunning
	})
	for g, res := range results {
		if res.State != agentapi.PurgeDone || res.Removed != perGroup {
			t.Errorf("purge of /g%d/: %s, removed %d, want Done and %d", g, res.State, res.Removed, perGroup)
		}
	}
	if walks := n.agent.metric("edgepool_purge_walks_total", nil); walks != 2 {
		t.Errorf("edgepool_purge_walks_total = %v, want 2: the first purge's walk, then one for the nine that waited", walks)
	}
	for _, d := range n.spec.Disks {
		if left := countFiles(t, filepath.Join(d.Path, agentapi.DiskCacheDir)); left > 1 {
			t.Errorf("disk %s holds %d cache files after the purges, want at most /kept's", d.Name, left)
		}
	}
	n.want(t, c, "/kept", "HIT")
	n.want(t, c, "/g3/1", "MISS")
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

// newUID is a random UID, as the API server gives a CachePurge.
func newUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// TestPurgeEndpoint: the real agent purges what the operator signed for its pod, once:
// a purged object is a MISS, then a HIT; the same request again, or the same purge issued
// again, answers from the record and removes nothing; a purge signed by the previous
// operator's key is taken while both are published, and publishing keys reloads nothing.
// Whatever is not the operator's signed purge for this pod, now, is refused, with a reason.
func TestPurgeEndpoint(t *testing.T) {
	srv, hits := smallOrigin(t)
	n := startCacheNode(t, originAddr(srv), "64M")
	c := &http.Client{Timeout: 5 * time.Second}
	for i := range 10 {
		n.want(t, c, fmt.Sprintf("/obj/%d", i), "MISS")
		n.want(t, c, fmt.Sprintf("/obj/%d", i), "HIT")
	}
	obj3 := agentapi.PurgeSpec{Scope: "URLs", URLs: []string{"http://127.0.0.1/obj/3"}}
	uid := newUID()
	first := signed(t, n.operator, uid, time.Now(), obj3)
	var res agentapi.PurgeResult
	eventually(t, 10*time.Second, "the purge to finish", func() bool {
		code, r, raw := n.post(t, first)
		if code != http.StatusOK {
			t.Fatalf("%d %s", code, raw)
		}
		res = r
		return r.State != agentapi.PurgeRunning
	})
	if res.State != agentapi.PurgeDone || res.Removed != 1 || res.UID != uid || res.Finished.IsZero() {
		t.Fatalf("purge: %+v", res)
	}
	n.want(t, c, "/obj/3", "MISS")
	n.want(t, c, "/obj/3", "HIT")
	n.want(t, c, "/obj/4", "HIT")

	// A replay, and the operator asking again: the record answers, nothing is removed.
	for what, body := range map[string][]byte{"replayed": first, "issued again": signed(t, n.operator, uid, time.Now().Add(time.Second), obj3)} {
		code, again, raw := n.post(t, body)
		if code != http.StatusOK || again != res {
			t.Errorf("%s: %d %s, want the first result %+v", what, code, raw, res)
		}
		n.want(t, c, "/obj/3", "HIT")
	}
	if got := originHits(hits, "/obj/3"); got != 2 {
		t.Errorf("/obj/3 reached the origin %d times, want twice (before and after the one purge)", got)
	}

	// A new operator publishes its key before the old one's: both are taken meanwhile.
	reloads := n.agent.metric("edgepool_config_reloads_total", nil)
	next := newOperatorKey(t)
	n.publish(t, next, n.operator)
	eventually(t, 10*time.Second, "the new operator's key to be taken", func() bool {
		code, _, _ := n.post(t, signed(t, next, newUID(), time.Now(), agentapi.PurgeSpec{Scope: "URLs", URLs: []string{"http://127.0.0.1/obj/5"}}))
		return code == http.StatusOK
	})
	if code, _, raw := n.post(t, signed(t, n.operator, newUID(), time.Now(), agentapi.PurgeSpec{Scope: "URLs", URLs: []string{"http://127.0.0.1/obj/6"}})); code != http.StatusOK {
		t.Errorf("the previous operator's key: %d %s", code, raw)
	}
	time.Sleep(500 * time.Millisecond) // past the agent's debounce: a reload would have happened
	if got := n.agent.metric("edgepool_config_reloads_total", nil); got != reloads {
		t.Errorf("publishing keys reloaded nginx: edgepool_config_reloads_total %v -> %v", reloads, got)
	}
	if got := n.agent.metric("edgepool_failover_reloads_total", nil); got != 0 {
		t.Errorf("edgepool_failover_reloads_total = %v", got)
	}
	if st := n.agent.status(t); st.ConfigHash != agentapi.Hash([]byte(n.conf)) || st.ConfigError != "" {
		t.Errorf("/status after publishing keys: hash %.12s, error %q", st.ConfigHash, st.ConfigError)
	}

	stranger := newOperatorKey(t)
	tampered := signed(t, n.operator, newUID(), time.Now(), obj3)
	tampered = bytes.Replace(tampered, []byte(`"payload":"`), []byte(`"payload":"x`), 1)
	for _, tc := range []struct {
		name string
		body []byte
		code int
		msg  string
	}{
		{"a stranger's key", signed(t, stranger, newUID(), time.Now(), obj3), http.StatusForbidden, "not signed by a key the operator published"},
		{"a tampered body", tampered, http.StatusBadRequest, "malformed"},
		{"another pod", func() []byte {
			sp, _ := agentapi.SignPurge(n.operator, agentapi.PurgeRequest{UID: newUID(), Audience: "edge/edge-other", IssuedAt: time.Now().Unix(), Spec: obj3})
			b, _ := json.Marshal(sp)
			return b
		}(), http.StatusForbidden, "meant for another pod"},
		{"issued ten minutes ago", signed(t, n.operator, newUID(), time.Now().Add(-10*time.Minute), obj3), http.StatusForbidden, "issued too long ago"},
		{"a file path", signed(t, n.operator, newUID(), time.Now(), agentapi.PurgeSpec{Scope: "URLs", URLs: []string{"file:///etc/passwd"}}), http.StatusBadRequest, "urls[0]"},
		{"the same UID for another purge", signed(t, n.operator, uid, time.Now(), agentapi.PurgeSpec{Scope: "All"}), http.StatusConflict, "UID was used for another purge"},
		{"too big", bytes.Repeat([]byte(" "), agentapi.MaxSignedPurgeBytes+1), http.StatusRequestEntityTooLarge, "at most"},
	} {
		code, _, raw := n.post(t, tc.body)
		if code != tc.code || !strings.Contains(raw, tc.msg) {
			t.Errorf("%s: %d %s, want %d naming %q", tc.name, code, raw, tc.code, tc.msg)
		}
	}
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", n.spec.Listener.AgentPort, agentapi.PurgePath))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: %d", agentapi.PurgePath, resp.StatusCode)
	}
	for i := range 10 {
		if i != 5 && i != 6 {
			n.want(t, c, fmt.Sprintf("/obj/%d", i), "HIT") // no refused request removed anything
		}
	}
	if v := n.agent.metric("edgepool_purges_total", map[string]string{"result": "Done"}); v != 3 {
		t.Errorf("edgepool_purges_total{result=Done} = %v, want 3", v)
	}
}

// restart stops the agent (nginx shuts down), lets change run while it is away, and starts
// it again on the same disks and ConfigMap.
func (n *cacheNode) restart(t *testing.T, change func()) {
	t.Helper()
	if err := n.agent.Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	change()
	pod := testPod
	if n.pod != "" {
		pod = n.pod
	}
	n.agent = startAgent(t, n.cfg, n.spec, append([]string{"--pod", pod}, n.extra...)...)
	n.agent.waitReady(t)
}

// TestRestartAppliesPurgesMadeWhileAway: purges listed in the ConfigMap while a node was
// down are applied before nginx serves again, and are Done for the operator's request; a
// node whose disks' record is older than the list reaches back empties its cache.
func TestRestartAppliesPurgesMadeWhileAway(t *testing.T) {
	srv, _ := smallOrigin(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	n := startCacheNode(t, originAddr(srv), "64M")
	n.list = &agentapi.ActivePurges{Generated: t0, Since: t0.Add(-time.Hour)}
	n.publish(t, n.operator)
	c := &http.Client{Timeout: 5 * time.Second}
	for i := range 10 {
		n.want(t, c, fmt.Sprintf("/obj/%d", i), "MISS")
		n.want(t, c, fmt.Sprintf("/obj/%d", i), "HIT")
	}
	eventually(t, 10*time.Second, "the disks to record the list", func() bool {
		for _, d := range n.spec.Disks {
			data, err := os.ReadFile(filepath.Join(d.Path, agentapi.DiskPurgeRecord))
			if err != nil || !strings.Contains(string(data), t0.Format(time.RFC3339)) {
				return false
			}
		}
		return true
	})

	exact := agentapi.ActivePurge{UID: newUID(), Spec: agentapi.PurgeSpec{Scope: "URLs", URLs: []string{"http://127.0.0.1/obj/3"}}}
	prefix := agentapi.ActivePurge{UID: newUID(), Spec: agentapi.PurgeSpec{Scope: "Prefixes", Prefixes: []agentapi.PurgeHost{{Host: "127.0.0.1", Paths: []string{"/obj/5"}}}}}
	t1 := t0.Add(time.Minute)
	n.restart(t, func() {
		n.list = &agentapi.ActivePurges{Generated: t1, Since: t0.Add(-time.Hour), Purges: []agentapi.ActivePurge{exact, prefix}}
		n.publish(t, n.operator)
	})
	for i := range 10 {
		want := "HIT"
		if i == 3 || i == 5 {
			want = "MISS"
		}
		n.want(t, c, fmt.Sprintf("/obj/%d", i), want)
	}
	code, res, raw := n.post(t, signed(t, n.operator, exact.UID, time.Now(), exact.Spec))
	if code != http.StatusOK || res.State != agentapi.PurgeDone || res.Removed != 1 {
		t.Errorf("the operator asking for the purge applied at start: %d %s", code, raw)
	}
	n.want(t, c, "/obj/3", "HIT") // not purged again

	// Away for longer than the list reaches back: the disks may have missed a purge no
	// longer listed, so they start empty.
	t2 := t1.Add(time.Hour)
	n.restart(t, func() {
		n.list = &agentapi.ActivePurges{Generated: t2, Since: t2.Add(-time.Minute)}
		n.publish(t, n.operator)
	})
	for i := range 10 {
		n.want(t, c, fmt.Sprintf("/obj/%d", i), "MISS")
	}
	if !strings.Contains(n.agent.log.String(), "Emptied the cache of a disk") {
		t.Error("the agent did not say why it emptied the disks")
	}
}

// TestDiskOutDuringAPurgeCatchesUp: a purge that finds one disk read-only (out of the
// split) fails, and says so; once the ConfigMap lists it and the disk is writable again,
// the disk returns to the split only after it applied the purge (here a slow prefix walk,
// longer than the cool-down), so what it kept of the purged objects is never served.
func TestDiskOutDuringAPurgeCatchesUp(t *testing.T) {
	srv, _ := smallOrigin(t)
	n := startCacheNode(t, originAddr(srv), "64M", "--purge-rate", "8")
	n.list = &agentapi.ActivePurges{Generated: time.Now().UTC().Truncate(time.Second)}
	n.publish(t, n.operator)
	c := &http.Client{Timeout: 5 * time.Second}
	var onD1 []string
	for i := range 60 {
		p := fmt.Sprintf("/obj/%d", i)
		n.want(t, c, p, "MISS")
		if _, err := os.Stat(cacheFile(n.spec.Disks[1].Path, p)); err == nil {
			onD1 = append(onD1, p)
		}
	}
	must(n.disks[1].ReadOnly())
	eventually(t, 10*time.Second, "d1 to be out", func() bool { return n.agent.status(t).Disks[1].Out })

	purge := agentapi.ActivePurge{UID: newUID(), Spec: agentapi.PurgeSpec{Scope: "Prefixes",
		Prefixes: []agentapi.PurgeHost{{Host: "127.0.0.1", Paths: []string{"/obj/"}}}}}
	var res agentapi.PurgeResult
	eventually(t, 60*time.Second, "the purge to finish", func() bool {
		_, res, _ = n.post(t, signed(t, n.operator, purge.UID, time.Now(), purge.Spec))
		return res.State != agentapi.PurgeRunning
	})
	if res.State != agentapi.PurgeFailed || !strings.Contains(res.Message, "disk d1") {
		t.Fatalf("a purge that could not remove from d1: %+v", res)
	}

	// The operator lists it; the disk becomes writable.
	n.list = &agentapi.ActivePurges{Generated: time.Now().UTC().Truncate(time.Second).Add(time.Second), Purges: []agentapi.ActivePurge{purge}}
	n.publish(t, n.operator)
	must(n.disks[1].ReadWrite())
	start := time.Now()
	eventually(t, 60*time.Second, "d1 to be back", func() bool { return !n.agent.status(t).Disks[1].Out })
	data, err := os.ReadFile(filepath.Join(n.spec.Disks[1].Path, agentapi.DiskPurgeRecord))
	if err != nil || !strings.Contains(string(data), purge.UID) {
		t.Fatalf("d1 came back after %v without the purge: its record %s, %v", time.Since(start).Round(time.Millisecond), data, err)
	}
	for _, p := range onD1 {
		n.want(t, c, p, "MISS")
	}
	t.Logf("d1 held %d objects; it came back %v after it was writable, with the purge applied", len(onD1), time.Since(start).Round(time.Millisecond))
}
