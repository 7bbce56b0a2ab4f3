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

package hottier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/test/cachefile"
)

const key = "cbb9de32f238951eaa667a0a98afba57"

func TestLeftover(t *testing.T) {
	for name, want := range map[string]bool{
		key + ".0000000038":                  true,
		key + ".4294967295":                  true,
		key:                                  false, // a copy nginx knows
		key + ".000000003":                   false,
		key + ".00000000381":                 false,
		key + ".000000003x":                  false,
		key + "-0000000038":                  false,
		strings.ToUpper(key) + ".0000000038": false, // nginx writes lower case
		key[:31] + "g.0000000038":            false,
		".edgepool-disk.0000000038":          false,
	} {
		if got := Leftover(name); got != want {
			t.Errorf("Leftover(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestLeftoverOnlyNamesNginxsCopies: over random names of the right length, Leftover
// holds exactly for 32 lower-case hexadecimal digits, a dot and 10 decimal digits.
func TestLeftoverOnlyNamesNginxsCopies(t *testing.T) {
	const alphabet = "0123456789abcdefABCDEFg.-_/ "
	r := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		b := []byte(key + ".0000000038")
		for range 1 + r.IntN(3) {
			b[r.IntN(len(b))] = alphabet[r.IntN(len(alphabet))]
		}
		name := string(b)
		want := true
		for i, c := range name {
			switch {
			case i < 32:
				want = want && strings.ContainsRune("0123456789abcdef", c)
			case i == 32:
				want = want && c == '.'
			default:
				want = want && c >= '0' && c <= '9'
			}
		}
		if Leftover(name) != want {
			t.Fatalf("Leftover(%q) = %v, want %v", name, !want, want)
		}
	}
}

// TestSweepRemovesOnlyOldLeftovers: a sweep removes the leftovers older than its bound
// in the level directories, and nothing else: not a copy under way, not nginx's copies,
// not a file outside the levels, not what a link points to.
func TestSweepRemovesOnlyOldLeftovers(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	old := time.Now().Add(-time.Minute)
	write := func(rel string, size int, mtime time.Time) {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	write("7/a5/"+key+".0000000038", 4096, old)
	write("7/a5/"+key+".0000000040", 0, old)
	write("0/01/8fb59d4deb1ea79a734895081cb13010.0000000070", 100, old)
	kept := []string{
		"7/a5/" + key + ".0000000041",                   // under way
		"7/a5/" + key,                                   // nginx's copy
		key + ".0000000038",                             // not in a level directory
		"7/" + key + ".0000000038",                      // one level only
		"7/a5/x/" + key + ".0000000038",                 // too deep
		"7/A5/" + key + ".0000000038",                   // not a level directory
		"7/a5/" + key + ".0000000038.edgepool-not-ours", // another name
	}
	for _, rel := range kept {
		mtime := old
		if strings.HasSuffix(rel, "41") {
			mtime = time.Now()
		}
		write(rel, 10, mtime)
	}
	target := filepath.Join(outside, key+".0000000039")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "7/a5", key+".0000000039")); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, "7/a5/"+key+".0000000039")

	files, bytes, err := Sweep(context.Background(), dir, time.Now().Add(-time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if files != 3 || bytes != 4196 {
		t.Errorf("Sweep removed %d files, %d bytes; want 3, 4196", files, bytes)
	}
	checkLeft(t, dir, kept)
	if _, err := os.Stat(target); err != nil {
		t.Errorf("the link's target: %v", err)
	}
}

// TestSweepStaleRemovesOnlyCopiesPastTheirBound: a stale sweep removes the cache files
// whose validity ended before its bound, and nothing else: not a copy still valid or
// valid until just after the bound, not one written since the bound (whatever its
// header says), not a file it cannot read as a cache file, not a leftover, not what a
// link points to.
func TestSweepStaleRemovesOnlyCopiesPastTheirBound(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	now := time.Now().Truncate(time.Second)
	bound := now.Add(-5 * time.Second)
	written := now.Add(-time.Minute)
	write := func(rel string, data []byte, mtime time.Time) string {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		return rel
	}
	name := func(i int) string { return fmt.Sprintf("%032x", i) }
	level := func(i int) string { n := name(i); return n[31:] + "/" + n[29:31] + "/" + n }
	stale := cachefile.With("127.0.0.1/stale", bound.Add(-time.Second))
	for i := range 3 {
		write(level(i), stale, written)
	}
	removed := 3 * int64(len(stale))
	kept := []string{
		write(level(10), cachefile.With("127.0.0.1/fresh", now.Add(time.Hour)), written),
		write(level(11), cachefile.With("127.0.0.1/at-the-bound", bound), written),
		write(level(12), stale, now),                          // written since the bound
		write(level(13), []byte("not a cache file"), written), // unreadable
		write(level(14)+".0000000038", stale, written),        // a leftover
		write(name(15), stale, written),                       // not in a level directory
	}
	target := filepath.Join(outside, name(16))
	if err := os.WriteFile(target, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	link := level(16)
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, link)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, link)

	files, bytes, err := SweepStale(context.Background(), dir, bound)
	if err == nil || !strings.Contains(err.Error(), "not a cache file header") {
		t.Errorf("SweepStale error %v, want the unreadable file named", err)
	}
	if files != 3 || bytes != removed {
		t.Errorf("SweepStale removed %d files, %d bytes; want 3, %d", files, bytes, removed)
	}
	checkLeft(t, dir, kept)
	if _, err := os.Stat(target); err != nil {
		t.Errorf("the link's target: %v", err)
	}
}

// checkLeft checks that the files under dir are kept, in any order.
func checkLeft(t *testing.T, dir string, kept []string) {
	t.Helper()
	var left []string
	if err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(dir, path)
			left = append(left, rel)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(left)
	slices.Sort(kept)
	if !slices.Equal(left, kept) {
		t.Errorf("left %q, want %q", left, kept)
	}
}
