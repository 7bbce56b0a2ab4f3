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
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agent/hottier"
	"github.com/edgepool/edgepool/internal/agent/purge"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// hotTierRunDir makes the agents' run directory (startAgent's) with a hot tier in it, as
// a sharded pod's volumes are, open to the agent, which runs as nobody.
func hotTierRunDir(t testing.TB) (run, hot string) {
	t.Helper()
	run = filepath.Join(sharedDir(t), "run")
	hot = filepath.Join(run, nginxconf.HotTierDir)
	if err := os.MkdirAll(hot, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{run, hot} {
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return run, hot
}

// TestHotTierFullNeverCutsAResponse: a sharded pod's hot tier is a memory volume of its
// size and a quarter, and nginx trims the copies only at its cache manager's passes,
// seconds apart. Copies that find the volume full between two passes cost the hot tier
// the copy, never the client its response; what the failed copies leave in the volume
// the agent removes, and copies are taken again once the manager has trimmed.
func TestHotTierFullNeverCutsAResponse(t *testing.T) {
	const objects, objectSize = 24, 192 << 10 // 4.5 MiB of copies in about a second
	body := bytes.Repeat([]byte("x"), objectSize)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=600")
		_, _ = w.Write(body)
	}))
	t.Cleanup(origin.Close)
	spec := testSpec(t, originAddr(origin), disk("ssd0", diskDir(t, "ssd0"), "SSD"))
	spec.Sharding = &v1alpha1.Sharding{PeerPort: freePort(t),
		HotTier: &v1alpha1.HotTier{Size: resource.MustParse("1Mi"), MinUses: 1, Seconds: 60}}
	spec.Default()
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)

	// The pod's volume: a tmpfs of the size the operator gives it (1.25 MiB).
	run, hot := hotTierRunDir(t)
	if err := unix.Mount("tmpfs", hot, "tmpfs", 0, "size=1280k,mode=0777"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(hot, unix.MNT_DETACH) })
	agent := startAgent(t, cfg, spec, "--allow-unmounted", "--run-dir", run)
	agent.waitReady(t)

	client := &http.Client{Timeout: 10 * time.Second}
	fetch := func(path string) (*testkit.Response, error) {
		return testkit.Fetch(context.Background(), client, fmt.Sprintf("http://127.0.0.1:%d%s", spec.Listener.Port, path), nil)
	}
	// The owner (this pod) stores each object at its first request; the hot tier copies
	// it at its second.
	var cut []string
	for round := range 2 {
		for i := range objects {
			path := fmt.Sprintf("/big/%d", i)
			switch r, err := fetch(path); {
			case err != nil:
				cut = append(cut, fmt.Sprintf("round %d %s: %v", round, path, err))
			case r.Code != http.StatusOK || len(r.Body) != objectSize:
				cut = append(cut, fmt.Sprintf("round %d %s: %d, %d bytes", round, path, r.Code, len(r.Body)))
			}
		}
	}
	if len(cut) > 0 {
		t.Fatalf("%d of %d responses failed or were cut:\n%s", len(cut), 2*objects, strings.Join(cut, "\n"))
	}

	leftovers := func() (n int) {
		_ = filepath.Walk(hot, func(_ string, info os.FileInfo, err error) error {
			if err == nil && hottier.Leftover(info.Name()) {
				n++
			}
			return nil
		})
		return n
	}
	if full, err := hottier.NearlyFull(hot); err != nil || !full {
		t.Fatalf("the hot tier is not nearly full after %d copies of %d KiB (%v): the test shows nothing", objects, objectSize>>10, err)
	}
	eventually(t, 10*time.Second, "the agent to remove the failed copies' leftovers", func() bool {
		return leftovers() == 0 && agent.metric("edgepool_hot_tier_leftovers_removed_total", nil) > 0
	})
	// nginx's cache manager trims the copies to 1 MiB within 10 s; then a copy is taken
	// again.
	eventually(t, 15*time.Second, "the hot tier to copy again", func() bool {
		path := fmt.Sprintf("/big/%d", objects)
		r, err := fetch(path)
		if err != nil || len(r.Body) != objectSize {
			t.Fatalf("GET %s: %v", path, err)
		}
		r, err = fetch(path)
		if err != nil || len(r.Body) != objectSize {
			t.Fatalf("GET %s: %v", path, err)
		}
		return r.Header.Get("X-Hot-Cache-Status") == "HIT"
	})
}

// TestHotTierDropsCopiesTheOwnerNoLongerConfirms: a copy past its seconds answers while
// its owner is asked again in the background; when the owner's answer is one the hot
// tier does not take (here the origin made the response private), nginx would answer
// with the old copy for as long as it is asked. The agent removes it within
// HotTierStaleBound of its end, and from then on the owner's answer is the client's.
func TestHotTierDropsCopiesTheOwnerNoLongerConfirms(t *testing.T) {
	var private atomic.Bool
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if private.Load() {
			w.Header().Set("Cache-Control", "private")
			_, _ = w.Write([]byte("private"))
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=1")
		_, _ = w.Write([]byte("public"))
	}))
	t.Cleanup(origin.Close)
	spec := testSpec(t, originAddr(origin), disk("ssd0", diskDir(t, "ssd0"), "SSD"))
	spec.Sharding = &v1alpha1.Sharding{PeerPort: freePort(t),
		HotTier: &v1alpha1.HotTier{Size: resource.MustParse("1Mi"), MinUses: 1, Seconds: 1}}
	spec.Default()
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	run, _ := hotTierRunDir(t)
	agent := startAgent(t, cfg, spec, "--allow-unmounted", "--run-dir", run)
	agent.waitReady(t)

	client := &http.Client{Timeout: 10 * time.Second}
	get := func() *testkit.Response {
		t.Helper()
		r, err := testkit.Fetch(context.Background(), client, fmt.Sprintf("http://127.0.0.1:%d/turns-private", spec.Listener.Port), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	get() // the owner stores it
	get() // the hot tier copies what the owner served from its cache
	if r := get(); r.Header.Get("X-Hot-Cache-Status") != "HIT" || string(r.Body) != "public" {
		t.Fatalf("the copy did not answer: %q (hot %q)", r.Body, r.Header.Get("X-Hot-Cache-Status"))
	}
	private.Store(true)
	copied := time.Now() // the copy's seconds end within 2 s of this (nginx counts whole seconds)
	var stale int
	for {
		r := get()
		if string(r.Body) == "private" {
			if s := r.Header.Get("X-Hot-Cache-Status"); s != "MISS" {
				t.Errorf("the owner's private answer came with hot tier status %q, want MISS", s)
			}
			break
		}
		if bound := 2*time.Second + nginxconf.HotTierStaleBound + time.Second; time.Since(copied) > bound {
			t.Fatalf("the old copy still answers %v after the owner stopped confirming it, want at most %v", time.Since(copied), bound)
		}
		stale++
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the old copy answered %d requests for %v after the origin made it private", stale, time.Since(copied).Round(100*time.Millisecond))
	if stale == 0 {
		t.Error("the old copy never answered after its seconds: the test shows nothing")
	}
	if got := agent.metric("edgepool_hot_tier_stale_removed_total", nil); got != 1 {
		t.Errorf("edgepool_hot_tier_stale_removed_total = %v, want 1", got)
	}
	for range 3 {
		if r := get(); string(r.Body) != "private" || r.Header.Get("X-Hot-Cache-Status") != "MISS" {
			t.Errorf("after the copy was removed: %q (hot %q), want the owner's private answer", r.Body, r.Header.Get("X-Hot-Cache-Status"))
		}
	}
}

// TestPurgeReachesTheHotTier: a purge removes the copies of what it names from the hot
// tier too (by URL, by prefix, by tag), at once, not when their seconds are up: the next
// request goes to the owner, which fills again from the origin; what the purge does not
// name still answers from its copy. A restarted agent starts nginx on an empty hot tier:
// its copies may predate purges made while it was away.
func TestPurgeReachesTheHotTier(t *testing.T) {
	origin, hits := smallOrigin(t) // /cold/10 carries the tag tenth
	run, hot := hotTierRunDir(t)
	n := startCacheNodeWith(t, originAddr(origin), "64M", func(s *v1alpha1.CacheNodeSpec) {
		s.Sharding = &v1alpha1.Sharding{PeerPort: freePort(t),
			HotTier: &v1alpha1.HotTier{Size: resource.MustParse("1Mi"), MinUses: 1, Seconds: 60}}
		s.Default()
	}, "--run-dir", run)
	client := &http.Client{Timeout: 10 * time.Second}
	want := func(path, hotStatus string, asked int64) {
		t.Helper()
		r, err := testkit.Fetch(context.Background(), client, fmt.Sprintf("http://127.0.0.1:%d%s", n.spec.Listener.Port, path), nil)
		switch {
		case err != nil:
			t.Fatalf("GET %s: %v", path, err)
		case r.Code != http.StatusOK || r.Header.Get("X-Hot-Cache-Status") != hotStatus:
			t.Errorf("GET %s: %d, hot tier %q, want 200 %s", path, r.Code, r.Header.Get("X-Hot-Cache-Status"), hotStatus)
		}
		if got := originHits(hits, path); got != asked {
			t.Errorf("GET %s: the origin was asked %d times, want %d", path, got, asked)
		}
	}
	paths := []string{"/hot/a", "/hot/b", "/pre/x", "/pre/y", "/cold/10", "/cold/11"}
	for _, p := range paths {
		want(p, "MISS", 1) // the owner (this pod) stores it from the origin
		want(p, "MISS", 1) // the hot tier copies what the owner served from its disk
		want(p, "HIT", 1)
	}

	n.purgeByAgent(t, "3c6d1f0a-9e2b-4f7a-8c5d-2b1e0f9a7d61", agentapi.PurgeSpec{Scope: agentapi.PurgeScopeURLs,
		URLs: []string{"http://127.0.0.1/hot/a"}})
	want("/hot/a", "MISS", 2)
	want("/hot/b", "HIT", 1)
	n.purgeByAgent(t, "3c6d1f0a-9e2b-4f7a-8c5d-2b1e0f9a7d62", agentapi.PurgeSpec{Scope: agentapi.PurgeScopePrefixes,
		Prefixes: []agentapi.PurgeHost{{Host: "127.0.0.1", Paths: []string{"/pre/"}}}})
	want("/pre/x", "MISS", 2)
	want("/pre/y", "MISS", 2)
	n.purgeByAgent(t, "3c6d1f0a-9e2b-4f7a-8c5d-2b1e0f9a7d63", agentapi.PurgeSpec{Scope: agentapi.PurgeScopeTags, Soft: true,
		Tags: []string{"tenth"}})
	want("/cold/10", "MISS", 2)
	want("/cold/11", "HIT", 1)
	if got := n.agent.metric("edgepool_hot_tier_purged_total", nil); got != 4 {
		t.Errorf("edgepool_hot_tier_purged_total = %v, want 4", got)
	}

	copies := func() (files int) {
		if err := purge.WalkCacheFiles(context.Background(), hot, func(string) error { files++; return nil }); err != nil {
			t.Fatal(err)
		}
		return files
	}
	if err := n.agent.Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	if copies() == 0 {
		t.Fatal("the stopped pod's hot tier holds no copy: the restart shows nothing")
	}
	n.agent = startAgent(t, n.cfg, n.spec, "--pod", testPod, "--run-dir", run)
	n.agent.waitReady(t)
	if left := copies(); left != 0 {
		t.Errorf("nginx started with %d copies in the hot tier, want none", left)
	}
	want("/hot/b", "MISS", 1) // the owner's disk still has it
}
