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

package purge

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/cachefile"
)

// realCacheFile is a file nginx 1.22.1 wrote for the key 127.0.0.1/a/b?c=1.
func realCacheFile(testing.TB) []byte { return cachefile.Real() }

// freshFor is how long the responses of cacheFileFor stay fresh.
const freshFor = time.Hour

// cacheFileFor is realCacheFile with its key replaced, as nginx would write it, fresh
// for freshFor, with the tags of tagsOf(key) in a Surrogate-Key header.
func cacheFileFor(t testing.TB, key string) []byte {
	t.Helper()
	return cacheFileWith(t, key, "Surrogate-Key: "+strings.Join(tagsOf(key), " "))
}

// tagsOf are the tags cacheFileFor gives key: its host, and its first path segment.
func tagsOf(key string) []string {
	host, path, _ := strings.Cut(agentapi.ObjectKey(key), "/")
	segment, _, _ := strings.Cut(path, "/")
	return []string{host, "seg:" + segment}
}

// cacheFileWith is realCacheFile with its key replaced and headers added after the
// status line, fresh for freshFor.
func cacheFileWith(_ testing.TB, key string, headers ...string) []byte {
	return cachefile.With(key, time.Now().Add(freshFor), headers...)
}

func TestParseCacheKey(t *testing.T) {
	real := realCacheFile(t)
	if key, need, err := parseCacheKey(real); err != nil || need != 0 || key != "127.0.0.1/a/b?c=1" {
		t.Fatalf("nginx's own file: key %q, need %d, err %v", key, need, err)
	}
	long := "h.example/" + strings.Repeat("x", 6000)
	b := cacheFileFor(t, long)
	if _, need, err := parseCacheKey(b[:cacheHeaderFirstRead]); err != nil || need != cacheKeyAt+len(long)+1 {
		t.Errorf("a key past the first read: need %d, err %v; want %d", need, err, cacheKeyAt+len(long)+1)
	}
	if key, _, err := parseCacheKey(b); err != nil || key != long {
		t.Errorf("a long key: %v", err)
	}
	for name, mutate := range map[string]func([]byte) []byte{
		"short":          func(b []byte) []byte { return b[:cacheKeyAt-1] },
		"other version":  func(b []byte) []byte { b[0] = 4; return b },
		"no key marker":  func(b []byte) []byte { b[cacheHeaderSize+1] = 'X'; return b },
		"header_start 0": func(b []byte) []byte { binary.LittleEndian.PutUint16(b[cacheHeaderStartAt:], 0); return b },
		"no newline": func(b []byte) []byte {
			binary.LittleEndian.PutUint16(b[cacheHeaderStartAt:], uint16(cacheKeyAt+3))
			return b
		},
		"newline in key":  func(b []byte) []byte { b[cacheKeyAt+2] = '\n'; return b },
		"empty file":      func([]byte) []byte { return nil },
		"text, not cache": func([]byte) []byte { return bytes.Repeat([]byte("KEY: a\n"), 100) },
	} {
		if key, _, err := parseCacheKey(mutate(append([]byte{}, real...))); !errors.Is(err, errUnknownCacheFile) {
			t.Errorf("%s: key %q, err %v; want errUnknownCacheFile", name, key, err)
		}
	}
}

// FuzzParseCacheKey: any bytes give a key without a newline, a larger read, or an error;
// never a panic.
func FuzzParseCacheKey(f *testing.F) {
	f.Add(realCacheFile(f))
	f.Add(cacheFileFor(f, "x/"+strings.Repeat("y", 5000)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		key, need, err := parseCacheKey(b)
		switch {
		case err != nil:
		case need > 0:
			if need <= len(b) || need > 65536 {
				t.Errorf("need %d with %d bytes", need, len(b))
			}
		case strings.Contains(key, "\n"):
			t.Errorf("key %q holds a newline", key)
		}
	})
}

// cacheTree is a cache directory holding files for keys, as nginx lays them out, and
// things that are not nginx's cache files, which no purge may touch.
func cacheTree(t *testing.T, keys []string) (dir string, foreign []string) {
	t.Helper()
	root := t.TempDir()
	dir = filepath.Join(root, agentapi.DiskCacheDir)
	for _, k := range keys {
		path := filepath.Join(dir, agentapi.CacheFile(k))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, cacheFileFor(t, k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	outside := filepath.Join(root, "precious")
	if err := os.WriteFile(outside, cacheFileFor(t, "a.example/"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A symbolic link named as the cache file of a.example/link, pointing out of the cache.
	link := filepath.Join(dir, agentapi.CacheFile("a.example/link"))
	must(t, os.MkdirAll(filepath.Dir(link), 0o755))
	must(t, os.Symlink(outside, link))
	foreign = []string{outside, link}
	for _, name := range []string{
		"README",                                    // not a level directory
		"0/00/0000000012",                           // a fill in progress (use_temp_path=off)
		"0/00/ffffffffffffffffffffffffffffff00",     // a 32-hex name in the wrong directories
		"0/zz/00000000000000000000000000000zz0",     // a level directory that is not hex
		"x/00/0000000000000000000000000000000x",     // idem
		"0/00/00000000000000000000000000000000.bak", // not a cache file name
	} {
		path := filepath.Join(dir, name)
		must(t, os.MkdirAll(filepath.Dir(path), 0o755))
		must(t, os.WriteFile(path, cacheFileFor(t, "a.example/"), 0o644))
		foreign = append(foreign, path)
	}
	return dir, foreign
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func TestPurgeCacheDir(t *testing.T) {
	keys := []string{"a.example/", "a.example/img/1.png", "a.example/img/2.png?v=2", "a.example/imgs", "b.example/img/1.png",
		"a.example/" + strings.Repeat("long", 2000), "gzip:a.example/img/3.svg", "identity:a.example/img/3.svg", "gzip:b.example/img/1.png", "br:a.example/img/4.svg"}
	for _, tc := range []struct {
		name string
		keys agentapi.PurgeKeys
		gone []string
	}{
		{"exact", agentapi.PurgeKeys{Exact: []string{"a.example/img/1.png", "a.example/missing", "a.example/link"}},
			[]string{"a.example/img/1.png"}},
		{"prefix", agentapi.PurgeKeys{Prefixes: []string{"a.example/img/", "b.example/nothing"}},
			[]string{"a.example/img/1.png", "a.example/img/2.png?v=2", "gzip:a.example/img/3.svg", "identity:a.example/img/3.svg", "br:a.example/img/4.svg"}},
		{"prefix of an encoding's name", agentapi.PurgeKeys{Prefixes: []string{"gzip:"}}, nil},
		{"prefix of a long key", agentapi.PurgeKeys{Prefixes: []string{"a.example/long"}}, []string{keys[5]}},
		{"tags", agentapi.PurgeKeys{Tags: []string{"seg:img", "b.example", "seg:none"}, TagHeaders: []string{"Cache-Tag", "surrogate-key"}},
			[]string{"a.example/img/1.png", "a.example/img/2.png?v=2", "b.example/img/1.png", "gzip:a.example/img/3.svg", "identity:a.example/img/3.svg", "gzip:b.example/img/1.png", "br:a.example/img/4.svg"}},
		{"tags of another header", agentapi.PurgeKeys{Tags: []string{"seg:img"}, TagHeaders: []string{"Cache-Tag"}}, nil},
		{"everything", agentapi.PurgeKeys{All: true}, keys},
		{"nothing", agentapi.PurgeKeys{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, foreign := cacheTree(t, keys)
			removed, err := CacheDir(context.Background(), dir, tc.keys, 0)
			if tc.name == "exact" {
				// The symbolic link has the name of a.example/link's file: refused, not followed.
				if err == nil || !strings.Contains(err.Error(), "not a regular file") {
					t.Errorf("want the symbolic link refused, got %v", err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if removed != int64(len(tc.gone)) {
				t.Errorf("removed %d, want %d", removed, len(tc.gone))
			}
			for _, k := range keys {
				if want := !slices.Contains(tc.gone, k); exists(filepath.Join(dir, agentapi.CacheFile(k))) != want {
					t.Errorf("%.40s: there %v, want %v", k, !want, want)
				}
			}
			for _, f := range foreign {
				if !exists(f) {
					t.Errorf("%s was removed: not a cache file", f)
				}
			}
		})
	}
}

// TestPurgeCacheDirAllIsEachPurgeAtOnce: a batch of random purges over random caches
// removes exactly what the purges remove one after the other, and counts for each at
// most what it removes alone: all of it when no purge of the batch names exact keys.
func TestPurgeCacheDirAllIsEachPurgeAtOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := []string{"a.example/", "a.example/img/1.png", "a.example/img/2.png", "a.example/img/3.png", "a.example/css/x.css",
		"b.example/", "b.example/img/1.png", "b.example/js/app.js", "c.example/z"}
	pick := func() []string {
		var out []string
		for _, k := range pool {
			if rng.IntN(3) == 0 {
				out = append(out, k)
			}
		}
		return out
	}
	randomKeys := func() (k agentapi.PurgeKeys) {
		switch rng.IntN(5) {
		case 0:
			k = agentapi.PurgeKeys{Exact: pick()}
		case 1:
			var prefixes []string
			for _, k := range pick() {
				prefixes = append(prefixes, k[:1+rng.IntN(len(k))])
			}
			k = agentapi.PurgeKeys{Prefixes: prefixes}
		case 2:
			k = agentapi.PurgeKeys{Exact: pick(), Prefixes: []string{"b.example/img/"}}
		case 3:
			for _, key := range pick() {
				k.Tags = append(k.Tags, tagsOf(key)[rng.IntN(2)])
			}
			k.TagHeaders = []string{"surrogate-KEY"}
		default:
			k = agentapi.PurgeKeys{All: rng.IntN(4) == 0}
		}
		k.Soft = rng.IntN(3) == 0
		return k
	}
	present := func(dir string) []string {
		var out []string
		for _, k := range pool {
			out = append(out, k+": "+cacheState(t, dir, k))
		}
		return out
	}
	for range 200 {
		cached := pick()
		batch := make([]agentapi.PurgeKeys, 1+rng.IntN(5))
		for i := range batch {
			batch[i] = randomKeys()
		}
		oneByOne, _ := cacheTree(t, cached)
		alone := make([]int64, len(batch))
		for i, k := range batch {
			single, _ := cacheTree(t, cached)
			n, err := CacheDir(context.Background(), single, k, 0)
			must(t, err)
			alone[i] = n
			_, err = CacheDir(context.Background(), oneByOne, k, 0)
			must(t, err)
		}
		atOnce, _ := cacheTree(t, cached)
		removed, err := CacheDirAll(context.Background(), atOnce, batch, 0, nil)
		must(t, err)
		if got, want := present(atOnce), present(oneByOne); !slices.Equal(got, want) {
			t.Fatalf("cached %q, purges %+v: left %q, one by one %q", cached, batch, got, want)
		}
		walksOnly := !slices.ContainsFunc(batch, func(k agentapi.PurgeKeys) bool { return len(k.Exact) > 0 })
		for i := range batch {
			if removed[i] > alone[i] || (walksOnly && removed[i] != alone[i]) {
				t.Fatalf("cached %q, purges %+v: counted %v, alone %v", cached, batch, removed, alone)
			}
		}
	}
}

// fixedIndex names files, or cannot.
type fixedIndex struct {
	files []string
	ok    bool
	asked []string
}

func (f *fixedIndex) Files(tags []string) ([]string, bool) {
	f.asked = append(f.asked, tags...)
	return f.files, f.ok
}

// TestTagPurgeReadsWhatTheIndexNames: a batch of tag purges reads only the files the
// index names, and purges those whose header carries a tag (a stale name costs a read, not
// a wrong purge); without a ready index, or with a purge that is not by tag in the batch,
// it reads every file.
func TestTagPurgeReadsWhatTheIndexNames(t *testing.T) {
	keys := []string{"a.example/img/1.png", "a.example/img/2.png", "b.example/img/3.png", "a.example/css/x.css"}
	byTag := agentapi.PurgeKeys{Tags: []string{"seg:img"}, TagHeaders: []string{"Surrogate-Key"}}
	for _, tc := range []struct {
		name  string
		index *fixedIndex
		batch []agentapi.PurgeKeys
		gone  []string
	}{
		{"the index names some", &fixedIndex{ok: true, files: []string{agentapi.CacheFile(keys[0]), agentapi.CacheFile(keys[3]), agentapi.CacheFile("gone/")}},
			[]agentapi.PurgeKeys{byTag}, keys[:1]},
		{"the index names none", &fixedIndex{ok: true}, []agentapi.PurgeKeys{byTag}, nil},
		{"the index is not ready", &fixedIndex{}, []agentapi.PurgeKeys{byTag}, keys[:3]},
		{"a prefix purge beside", &fixedIndex{ok: true}, []agentapi.PurgeKeys{byTag, {Prefixes: []string{"a.example/css/"}}}, keys},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, _ := cacheTree(t, keys)
			_, err := CacheDirAll(context.Background(), dir, tc.batch, 0, tc.index)
			must(t, err)
			for _, k := range keys {
				if want := !slices.Contains(tc.gone, k); exists(filepath.Join(dir, agentapi.CacheFile(k))) != want {
					t.Errorf("%s: there %v, want %v", k, !want, want)
				}
			}
		})
	}
}

func TestResponseTags(t *testing.T) {
	block := func(lines ...string) []byte { return []byte(strings.Join(lines, "\r\n") + "\r\n\r\n") }
	many := make([]string, 70)
	for i := range many {
		many[i] = fmt.Sprintf("t%d", i)
	}
	for _, tc := range []struct {
		name  string
		block []byte
		want  []string
	}{
		{"spaces and commas, two headers, any case", block("HTTP/1.1 200 OK", "surrogate-key:  a b\tc", "Server: x", "CACHE-TAG: d,e, f ,,"),
			[]string{"a", "b", "c", "d", "e", "f"}},
		{"the header twice", block("HTTP/1.1 200 OK", "Surrogate-Key: a", "Surrogate-Key: b"), []string{"a", "b"}},
		{"invalid tags are skipped", block("HTTP/1.1 200 OK", `Surrogate-Key: ok "quoted" x<y `+strings.Repeat("l", 129)+" also-ok"), []string{"ok", "also-ok"}},
		{"at most 64", block("HTTP/1.1 200 OK", "Surrogate-Key: "+strings.Join(many, " ")), many[:64]},
		{"other headers only", block("HTTP/1.1 200 OK", "X-Surrogate-Key: a", "Surrogate-Keys: b"), nil},
		{"not past the headers", []byte("HTTP/1.1 200 OK\r\nServer: x\r\n\r\nSurrogate-Key: body\r\n"), nil},
		{"a status line is not a header", block("Surrogate-Key: a"), nil},
		{"nothing", nil, nil},
	} {
		if got := responseTags(tc.block, []string{"Surrogate-Key", "Cache-Tag"}); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// FuzzReadCacheEntry: any file gives a key and valid tags, or an error; never a panic.
func FuzzReadCacheEntry(f *testing.F) {
	f.Add(cacheFileFor(f, "a.example/img/1.png"))
	f.Add(realCacheFile(f))
	f.Add(cacheFileWith(f, "a.example/"+strings.Repeat("x", 5000), "Cache-Tag: a,b"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "file")
		must(t, os.WriteFile(path, b, 0o644))
		key, tags, err := readCacheEntry(path, []string{"Surrogate-Key", "Cache-Tag"})
		if err != nil {
			return
		}
		if strings.Contains(key, "\n") || len(tags) > agentapi.MaxResponseTags {
			t.Errorf("key %q, %d tags", key, len(tags))
		}
		for _, tag := range tags {
			if !agentapi.ValidTag(tag) {
				t.Errorf("tag %q", tag)
			}
		}
	})
}

// cacheState says whether key's file under dir is gone, stale or fresh, by its header.
func cacheState(t testing.TB, dir, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, agentapi.CacheFile(key)))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "gone"
	case err != nil:
		t.Fatal(err)
	}
	if int64(binary.LittleEndian.Uint64(b[cacheValidSecAt:])) < time.Now().Unix() {
		return "stale"
	}
	return "fresh"
}

// TestSoftPurgeMarksStale: a soft purge keeps the files it names and changes nothing in
// them but valid_sec, now before the purge by staleMargin; a response stale already keeps
// its older time; what the purge does not name, foreign files and symbolic links are left
// as they were.
func TestSoftPurgeMarksStale(t *testing.T) {
	keys := []string{"a.example/", "a.example/img/1.png", "a.example/img/2.png?v=2", "b.example/img/1.png"}
	for _, tc := range []struct {
		name  string
		keys  agentapi.PurgeKeys
		stale []string
	}{
		{"exact", agentapi.PurgeKeys{Soft: true, Exact: []string{"a.example/img/1.png", "a.example/missing"}}, keys[1:2]},
		{"prefix", agentapi.PurgeKeys{Soft: true, Prefixes: []string{"a.example/img/"}}, keys[1:3]},
		{"everything", agentapi.PurgeKeys{Soft: true, All: true}, keys},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, foreign := cacheTree(t, keys)
			before := map[string][]byte{}
			for _, f := range foreign {
				b, err := os.ReadFile(f)
				must(t, err)
				before[f] = b
			}
			for _, k := range keys {
				b, err := os.ReadFile(filepath.Join(dir, agentapi.CacheFile(k)))
				must(t, err)
				before[k] = b
			}
			long := time.Now().Add(-time.Hour).Unix() // stale already, since long before
			if slices.Contains(tc.stale, keys[0]) {
				binary.LittleEndian.PutUint64(before[keys[0]][cacheValidSecAt:], uint64(long))
				must(t, os.WriteFile(filepath.Join(dir, agentapi.CacheFile(keys[0])), before[keys[0]], 0o644))
			}
			start := time.Now()
			marked, err := CacheDir(context.Background(), dir, tc.keys, 0)
			must(t, err)
			if marked != int64(len(tc.stale)) {
				t.Errorf("marked %d, want %d", marked, len(tc.stale))
			}
			for _, k := range keys {
				after, err := os.ReadFile(filepath.Join(dir, agentapi.CacheFile(k)))
				must(t, err)
				if !slices.Contains(tc.stale, k) {
					if !bytes.Equal(after, before[k]) {
						t.Errorf("%s changed, but the purge does not name it", k)
					}
					continue
				}
				valid := int64(binary.LittleEndian.Uint64(after[cacheValidSecAt:]))
				want := start.Add(-staleMargin).Unix()
				if k == keys[0] {
					want = long
				}
				if valid != want && valid != want+1 { // the purge may start in the next second
					t.Errorf("%s: valid_sec %d, want %d", k, valid, want)
				}
				copy(after[cacheValidSecAt:], before[k][cacheValidSecAt:cacheValidSecAt+8])
				if !bytes.Equal(after, before[k]) {
					t.Errorf("%s: more than valid_sec changed", k)
				}
			}
			for _, f := range foreign {
				if b, err := os.ReadFile(f); err != nil || !bytes.Equal(b, before[f]) {
					t.Errorf("%s was written: not a cache file (%v)", f, err)
				}
			}
		})
	}
}

func TestSoftPurgeLeavesWhatItCannotRead(t *testing.T) {
	dir, foreign := cacheTree(t, []string{"a.example/x"})
	other := filepath.Join(dir, agentapi.CacheFile("a.example/y"))
	must(t, os.MkdirAll(filepath.Dir(other), 0o755))
	content := []byte("a file of another nginx version, longer than a header of nginx 1.26" + strings.Repeat(".", 400))
	must(t, os.WriteFile(other, content, 0o644))
	outside, err := os.ReadFile(foreign[0]) // what cacheTree's symbolic link a.example/link points to
	must(t, err)
	for _, keys := range []agentapi.PurgeKeys{
		{Soft: true, Exact: []string{"a.example/y"}},
		{Soft: true, Exact: []string{"a.example/link"}},
		{Soft: true, All: true},
	} {
		_, err := CacheDir(context.Background(), dir, keys, 0)
		if err == nil {
			t.Errorf("%+v: no error for a file it could not read", keys)
		}
	}
	if b, _ := os.ReadFile(other); !bytes.Equal(b, content) {
		t.Error("a file whose header could not be read was written")
	}
	if b, _ := os.ReadFile(foreign[0]); !bytes.Equal(b, outside) {
		t.Error("the file a symbolic link points to was written")
	}
}

func TestPurgeRefusesUnreadableHeaders(t *testing.T) {
	dir, _ := cacheTree(t, []string{"a.example/x"})
	other := filepath.Join(dir, agentapi.CacheFile("a.example/y"))
	must(t, os.MkdirAll(filepath.Dir(other), 0o755))
	must(t, os.WriteFile(other, []byte("a file of another nginx version"), 0o644))
	removed, err := CacheDir(context.Background(), dir, agentapi.PurgeKeys{Prefixes: []string{"a.example/"}}, 0)
	if removed != 1 || err == nil || !strings.Contains(err.Error(), "1 cache files") {
		t.Errorf("removed %d, err %v; want 1 and the unreadable file named as an error", removed, err)
	}
	if !exists(other) {
		t.Error("a file whose key could not be read was removed")
	}
}

func TestPurgeIsPaced(t *testing.T) {
	var keys []string
	for i := range 200 {
		keys = append(keys, "a.example/"+strings.Repeat("x", i%7)+string(rune('a'+i%26))+time.Duration(i).String())
	}
	dir, _ := cacheTree(t, keys)
	start := time.Now()
	removed, err := CacheDir(context.Background(), dir, agentapi.PurgeKeys{All: true}, 1000)
	if err != nil || removed != 200 {
		t.Fatalf("removed %d, %v", removed, err)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("200 files at 1000/s took %v, want about 200ms", took)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir, _ = cacheTree(t, keys)
	if _, err := CacheDir(ctx, dir, agentapi.PurgeKeys{All: true}, 1000); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled purge: %v", err)
	}
}

// TestCopiesRemovesEveryVariantOfWhatPurgesName: the hot tier keeps the variants of a
// response that varies (Vary) under names of their own, which no key names; Copies reads
// every file's key, so what a purge names goes with all its variants. It removes, soft or
// not, and counts each file for every purge that names it.
func TestCopiesRemovesEveryVariantOfWhatPurgesName(t *testing.T) {
	keys := []string{"a.example/", "a.example/img/1.png", "a.example/img/2.png?v=2", "a.example/imgs", "b.example/img/1.png"}
	// variant is where a variant of key's response is kept: a name of its own, in the
	// directories of its name, as nginx names them.
	variant := func(key string) string {
		sum := md5.Sum([]byte("a variant of " + key))
		return agentapi.CacheFileNamed(hex.EncodeToString(sum[:]))
	}
	for _, tc := range []struct {
		name    string
		purges  []agentapi.PurgeKeys
		gone    []string
		removed []int64
	}{
		{"exact, soft", []agentapi.PurgeKeys{{Exact: []string{"a.example/img/1.png", "gzip:a.example/img/1.png", "a.example/missing"}, Soft: true}},
			[]string{"a.example/img/1.png"}, []int64{2}},
		{"prefix", []agentapi.PurgeKeys{{Prefixes: []string{"a.example/img/"}}},
			[]string{"a.example/img/1.png", "a.example/img/2.png?v=2"}, []int64{4}},
		{"tags", []agentapi.PurgeKeys{{Tags: []string{"seg:img"}, TagHeaders: []string{"surrogate-key"}}},
			[]string{"a.example/img/1.png", "a.example/img/2.png?v=2", "b.example/img/1.png"}, []int64{6}},
		{"everything", []agentapi.PurgeKeys{{All: true}}, keys, []int64{10}},
		{"two at once", []agentapi.PurgeKeys{{Exact: []string{"a.example/"}}, {Prefixes: []string{"a.example/"}}},
			keys[:4], []int64{2, 8}},
		{"nothing", []agentapi.PurgeKeys{{}}, nil, []int64{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, foreign := cacheTree(t, keys)
			for _, k := range keys {
				path := filepath.Join(dir, variant(k))
				must(t, os.MkdirAll(filepath.Dir(path), 0o755))
				must(t, os.WriteFile(path, cacheFileFor(t, k), 0o644))
			}
			removed, err := Copies(context.Background(), dir, tc.purges)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(removed, tc.removed) {
				t.Errorf("removed %v, want %v", removed, tc.removed)
			}
			for _, k := range keys {
				want := !slices.Contains(tc.gone, k)
				for _, f := range []string{agentapi.CacheFile(k), variant(k)} {
					if exists(filepath.Join(dir, f)) != want {
						t.Errorf("%s (%s): there %v, want %v", k, f, !want, want)
					}
				}
				if want && cacheState(t, dir, k) != "fresh" {
					t.Errorf("%s: %s, want it left fresh", k, cacheState(t, dir, k))
				}
			}
			for _, f := range foreign {
				if !exists(f) {
					t.Errorf("%s was removed: not a cache file", f)
				}
			}
		})
	}
}
