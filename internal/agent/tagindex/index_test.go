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

package tagindex

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/cachefile"
)

// disk is a disk's directory with its cache directory.
type disk struct{ path, cache string }

func newDisk(t *testing.T) disk {
	t.Helper()
	path := t.TempDir()
	d := disk{path: path, cache: filepath.Join(path, agentapi.DiskCacheDir)}
	if err := os.Mkdir(d.cache, 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

// newWatcher is a watcher closed when the test ends, after its indexes.
func newWatcher(t *testing.T) *Watcher {
	t.Helper()
	w, err := NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func (d disk) open(t *testing.T, w *Watcher, headers ...string) *Index {
	t.Helper()
	if len(headers) == 0 {
		headers = []string{"Cache-Tag", "Surrogate-Key"}
	}
	x, err := Open(Options{DiskPath: d.path, File: agentapi.DiskTagIndex, CacheDir: d.cache, Headers: headers, CompactAfter: 20, Watcher: w})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = x.Close() })
	return x
}

// store stores a response for key as nginx does: a temporary file in the cache directory's
// levels, renamed to its place (the directories made first when missing).
func (d disk) store(t *testing.T, key string, headers ...string) string {
	t.Helper()
	rel := agentapi.CacheFile(key)
	path := filepath.Join(d.cache, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(filepath.Dir(path), "0000000042")
	if err := os.WriteFile(tmp, cachefile.With(key, time.Now().Add(time.Hour), headers...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return rel
}

// files waits until the index is ready and names want for tags.
func waitFiles(t *testing.T, x *Index, tags []string, want []string) {
	t.Helper()
	slices.Sort(want)
	var got []string
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		files, ok := x.Files(tags)
		slices.Sort(files)
		if got = files; ok && slices.Equal(files, want) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the index names %q for %q (ready %v), want %q", got, tags, x.Ready(), want)
}

// TestIndexFollowsNginx: the responses stored after the index opened are indexed by their
// tags, in either header, in directories that existed and in ones made since; untagged
// ones are not; tags of other headers do not count.
func TestIndexFollowsNginx(t *testing.T) {
	d := newDisk(t)
	old := d.store(t, "a.example/old", "Surrogate-Key: product-1")
	x := d.open(t, newWatcher(t))
	waitFiles(t, x, []string{"product-1"}, []string{old}) // the rebuild read it

	var product1, sale []string
	for i := range 50 { // many new directories, each made just before its file
		rel := d.store(t, fmt.Sprintf("a.example/p/%d", i), fmt.Sprintf("Surrogate-Key: product-%d%s", i%3, map[bool]string{true: " sale"}[i%5 == 0]))
		if i%3 == 1 {
			product1 = append(product1, rel)
		}
		if i%5 == 0 {
			sale = append(sale, rel)
		}
	}
	category := d.store(t, "b.example/c", "Cache-Tag: category-7,sale")
	d.store(t, "b.example/plain")
	d.store(t, "b.example/other", "X-Tags: sale")
	waitFiles(t, x, []string{"product-1"}, append(product1, old))
	waitFiles(t, x, []string{"sale"}, append(sale, category))
	waitFiles(t, x, []string{"category-7", "nothing"}, []string{category})

	// A lookup right after renames names them: it waits for the index to catch up. The
	// index is held up meanwhile (its lock taken), as by a busy disk.
	var burst []string
	x.mu.Lock()
	for i := range 200 {
		burst = append(burst, d.store(t, fmt.Sprintf("c.example/%d", i), "Surrogate-Key: burst"))
	}
	x.mu.Unlock()
	files, ok := x.Files([]string{"burst"})
	slices.Sort(files)
	slices.Sort(burst)
	if !ok || !slices.Equal(files, burst) {
		t.Errorf("right after 200 renames the index named %d of them (ready %v)", len(files), ok)
	}

	// Nothing on the disk is held open once the index is idle: it can be unmounted, or
	// remounted read-only.
	var open []string
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		open = nil
		fds, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && strings.HasPrefix(target, d.path) {
				open = append(open, target)
			}
		}
		if len(open) == 0 {
			return
		}
	}
	t.Errorf("the index holds %q open", open)
}

// TestIndexKeptAfterACleanStop: a clean stop keeps the index (ready at once when opened
// again, without reading the cache); a stop without Close, or other tag headers, rebuild
// it from the cache files.
func TestIndexKeptAfterACleanStop(t *testing.T) {
	d := newDisk(t)
	w := newWatcher(t)
	x := d.open(t, w)
	a := d.store(t, "a.example/1", "Surrogate-Key: t")
	waitFiles(t, x, []string{"t"}, []string{a})
	last := d.store(t, "a.example/last", "Surrogate-Key: t") // queued as Close starts
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	// A file the index never saw, as if stored while the agent was away: a kept index
	// does not name it, a rebuilt one does.
	unseen := d.store(t, "a.example/2", "Surrogate-Key: t")

	crashing := newWatcher(t)
	x = d.open(t, crashing)
	if !x.Ready() {
		t.Fatal("the index of a clean stop is not ready at once")
	}
	waitFiles(t, x, []string{"t"}, []string{a, last})
	b := d.store(t, "a.example/3", "Surrogate-Key: t")
	waitFiles(t, x, []string{"t"}, []string{a, last, b})
	if err := crashing.Close(); err != nil { // a crash: the index is never closed
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !x.Ended(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("an index whose watcher closed has not ended")
		}
	}

	x = d.open(t, w)
	waitFiles(t, x, []string{"t"}, []string{a, last, unseen, b})
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	x = d.open(t, w, "X-Tags")
	waitFiles(t, x, []string{"t"}, nil)
}

// TestIndexCompacts: once the lines appended since the last rebuild double (and are at
// least CompactAfter), the index is rewritten with one line per file that still exists.
func TestIndexCompacts(t *testing.T) {
	d := newDisk(t)
	for i := range 20 { // directories made before: a new one is read whole, a file in it maybe twice
		dir := filepath.Dir(filepath.Join(d.cache, agentapi.CacheFile(fmt.Sprintf("a.example/%d", i))))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	x := d.open(t, newWatcher(t)) // CompactAfter 20
	waitFiles(t, x, []string{"t"}, nil)
	var first []string
	for i := range 10 {
		first = append(first, d.store(t, fmt.Sprintf("a.example/%d", i), "Surrogate-Key: t"))
	}
	waitFiles(t, x, []string{"t"}, first)
	for _, rel := range first[5:] {
		if err := os.Remove(filepath.Join(d.cache, rel)); err != nil { // evicted
			t.Fatal(err)
		}
	}
	want := slices.Clone(first[:5])
	for i := 10; i < 20; i++ { // the 20th line compacts
		want = append(want, d.store(t, fmt.Sprintf("a.example/%d", i), "Surrogate-Key: t"))
	}
	waitFiles(t, x, []string{"t"}, want)
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(filepath.Join(d.path, agentapi.DiskTagIndex))
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Count(string(data), "\n") - 1; lines == len(want) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the index holds %d lines for %d files: not compacted", lines, len(want))
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitFiles(t, x, []string{"t"}, want)
}

// TestIndexNeedsTheCacheDirectory: without the disk's cache directory (the disk is not
// mounted) the index does not open, and makes nothing.
func TestIndexNeedsTheCacheDirectory(t *testing.T) {
	path := t.TempDir()
	_, err := Open(Options{DiskPath: path, File: agentapi.DiskTagIndex, CacheDir: filepath.Join(path, agentapi.DiskCacheDir), Headers: []string{"Surrogate-Key"},
		Watcher: newWatcher(t)})
	if err == nil {
		t.Fatal("opened without a cache directory")
	}
	if entries, _ := os.ReadDir(path); len(entries) > 0 {
		t.Errorf("made %v", entries)
	}
}

// TestOneWatcherForSeveralDisks: the disks of an agent share one inotify instance; each
// index names its own disk's files; one held up (as by a disk that hangs) does not hold up
// the others; and one closed leaves the others indexing.
func TestOneWatcherForSeveralDisks(t *testing.T) {
	w := newWatcher(t)
	d1, d2 := newDisk(t), newDisk(t)
	x1, x2 := d1.open(t, w), d2.open(t, w)
	x1.mu.Lock() // held up
	a := d1.store(t, "a.example/1", "Surrogate-Key: t")
	b := d2.store(t, "a.example/2", "Surrogate-Key: t")
	waitFiles(t, x2, []string{"t"}, []string{b})
	x1.mu.Unlock()
	waitFiles(t, x1, []string{"t"}, []string{a})
	if err := x1.Close(); err != nil {
		t.Fatal(err)
	}
	c := d2.store(t, "a.example/3", "Surrogate-Key: t")
	waitFiles(t, x2, []string{"t"}, []string{b, c})
}
