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

// Package purge removes purged objects from a disk's cache, or marks them stale (a soft
// purge): by exact key, by prefix or all of them, reading each cache file's key from its
// header, at a bounded pace. It also keeps each disk's record of the purges applied to it.
package purge

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// How a purge removes responses from nginx's cache, on one cache directory (a disk's
// <path>/cache, levels=1:2). nginx names a response's file by the MD5 of its key, so an
// exact purge removes the files its keys name, without reading anything. A prefix purge
// reads the key each cache file stores in its header; a purge of everything only looks at
// names. Either walks the directory at a bounded rate, one file at a time, so the disk
// never sees more than one of the purge's operations at once beside nginx's own.
//
// Only what has the shape of nginx's cache is touched: directories named by one, then two
// hex digits, and regular files named by 32 hex digits that end in their directories'
// names. Symbolic links are never followed, temporary files (nginx's fills in progress,
// named by a number) are left, and every path is made here from the cache directory and
// names read from it: a purge names keys, never a file.
//
// nginx keeps serving: a request whose file is gone is a MISS, filled again from the
// origin (ngx_http_file_cache_open treats ENOENT as a miss). When nginx's cache manager
// later evicts the key of a purged file, it logs that unlink() failed with ENOENT, which
// the agent does not count against the disk.
//
// A soft purge rewrites one field of the file's header in place: valid_sec, the time the
// response stops being fresh, set to before the purge. nginx reads the header at every
// request (ngx_http_file_cache_read) and judges freshness by it alone, so the next
// request finds the response stale and revalidates it with the origin (proxy_cache_
// revalidate), or serves it stale within the origin's stale-while-revalidate, counted
// from the purge; a 304 rewrites the header with the new validity, as nginx always does.

// The header nginx (1.22 to 1.26 at least) writes at the start of a cache file on a 64-bit machine
// (ngx_http_file_cache_header_t, NGX_HTTP_CACHE_VERSION 5), then "\nKEY: ", the key, and a
// newline at header_start - 1. A file with any other header is not read as a cache file.
const (
	cacheFileVersion     = 5
	cacheValidSecAt      = 8  // valid_sec, a little-endian time_t
	cacheHeaderStartAt   = 54 // header_start, a little-endian u_short
	cacheBodyStartAt     = 56 // body_start, a little-endian u_short
	cacheHeaderSize      = 336
	cacheKeyMarker       = "\nKEY: "
	cacheKeyAt           = cacheHeaderSize + len(cacheKeyMarker)
	cacheHeaderFirstRead = 4096
)

// errUnknownCacheFile: a file named like a cache file whose header is not one this agent
// can read (another nginx version): it is never removed on the strength of its key.
var errUnknownCacheFile = errors.New("not a cache file header this agent can read")

// parseCacheKey reads the key from the start of a cache file. It returns need > len(b)
// when the key runs past b: read that many bytes and call it again.
func parseCacheKey(b []byte) (key string, need int, err error) {
	if !knownHeader(b) {
		return "", 0, errUnknownCacheFile
	}
	end := int(binary.LittleEndian.Uint16(b[cacheHeaderStartAt:])) - 1 // the newline after the key
	switch {
	case end < cacheKeyAt:
		return "", 0, errUnknownCacheFile
	case end >= len(b):
		return "", end + 1, nil
	case b[end] != '\n' || bytes.IndexByte(b[cacheKeyAt:end], '\n') >= 0:
		return "", 0, errUnknownCacheFile
	}
	return string(b[cacheKeyAt:end]), 0, nil
}

// knownHeader says whether b starts with a cache file header this agent can read.
func knownHeader(b []byte) bool {
	return len(b) >= cacheKeyAt && binary.LittleEndian.Uint64(b) == cacheFileVersion &&
		string(b[cacheHeaderSize:cacheKeyAt]) == cacheKeyMarker
}

// readCacheEntry reads the key a cache file stores and, with tagHeaders, the tags its
// response carries in those headers (nginx stores the origin's response headers as they
// came, between the key and body_start).
func readCacheEntry(path string, tagHeaders []string) (key string, tags []string, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	b := make([]byte, cacheHeaderFirstRead)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", nil, err
	}
	b = b[:n]
	key, need, err := parseCacheKey(b)
	if err != nil {
		return "", nil, err
	}
	if need > 0 && n < cacheHeaderFirstRead { // the file ended before its key did
		return "", nil, errUnknownCacheFile
	}
	bodyStart := int(binary.LittleEndian.Uint16(b[cacheBodyStartAt:]))
	if len(tagHeaders) > 0 {
		need = max(need, bodyStart)
	}
	if need > len(b) {
		more := make([]byte, need-len(b))
		if _, err := io.ReadFull(f, more); err != nil {
			return "", nil, fmt.Errorf("%w: %w", errUnknownCacheFile, err)
		}
		b = append(b, more...)
		if key, _, err = parseCacheKey(b); err != nil {
			return "", nil, err
		}
	}
	if len(tagHeaders) == 0 {
		return key, nil, nil
	}
	headerStart := int(binary.LittleEndian.Uint16(b[cacheHeaderStartAt:]))
	if bodyStart < headerStart {
		return "", nil, errUnknownCacheFile
	}
	return key, responseTags(b[headerStart:bodyStart], tagHeaders), nil
}

// responseTags reads the tags of a response's header block (a status line, then header
// lines) from its tag headers, matched whatever their case.
func responseTags(block []byte, tagHeaders []string) []string {
	var tags []string
	lines := strings.Split(string(block), "\n")
	for _, line := range lines[1:] {
		line = strings.TrimSuffix(line, "\r")
		if line == "" {
			break
		}
		name, value, ok := strings.Cut(line, ":")
		if ok && slices.ContainsFunc(tagHeaders, func(h string) bool { return strings.EqualFold(h, name) }) {
			tags = agentapi.ResponseTags(value, tags)
		}
	}
	return tags
}

// TagFiles names the cache files (paths under the cache directory) that may carry one of
// tags, or says it cannot (false): a purge by tag then reads every cache file.
type TagFiles interface {
	Files(tags []string) ([]string, bool)
}

// CacheDir removes from the cache directory dir the cached responses keys name (or marks
// them stale, keys.Soft), and returns how many files it removed (or marked). A walk (prefixes, everything) goes through at most
// filesPerSecond files a second (0: no bound). It returns an error, after finishing
// what it can, when a file could not be judged or removed: the purge is then incomplete.
func CacheDir(ctx context.Context, dir string, keys agentapi.PurgeKeys, filesPerSecond int) (int64, error) {
	removed, err := CacheDirAll(ctx, dir, []agentapi.PurgeKeys{keys}, filesPerSecond, nil)
	return removed[0], err
}

// CacheDirAll is CacheDir for several purges at once: the files each one names, then one
// walk for all of those that walk, so that a burst of prefix purges reads every cache file
// once rather than once per purge. Whatever any of them names is gone, or stale when only
// soft purges name it; each one's count is the files removed or marked for it (a file the
// walk reaches counts for every purge it matches, one an exact key reached first only for
// that purge). The error, if any, is the batch's.
func CacheDirAll(ctx context.Context, dir string, keys []agentapi.PurgeKeys, filesPerSecond int, index TagFiles) ([]int64, error) {
	removed := make([]int64, len(keys))
	var errs []error
	var walking []int
	now := time.Now()
	for i, k := range keys {
		n, err := purgeExact(dir, k.Exact, k.Soft, now)
		removed[i] += n
		errs = append(errs, err)
		if k.Walks() {
			walking = append(walking, i)
		}
	}
	if len(walking) == 0 {
		return removed, errors.Join(errs...)
	}
	match := matcher(keys, walking, false)
	var files []string // nil: every file
	if index != nil {
		var tags []string
		for _, i := range walking {
			if keys[i].All || len(keys[i].Prefixes) > 0 || len(keys[i].Sliced) > 0 {
				tags = nil
				break
			}
			tags = append(tags, keys[i].Tags...)
		}
		if len(tags) > 0 {
			if named, ok := index.Files(tags); ok {
				files = append([]string{}, named...) // none: no file to read
			}
		}
	}
	walked, err := walkCache(ctx, dir, files, newPacer(filesPerSecond), len(keys), now, match)
	for i := range removed {
		removed[i] += walked[i]
	}
	return removed, errors.Join(append(errs, err)...)
}

// Copies removes from dir, a sharded pod's hot tier, every copy that one of keys names,
// and returns how many files it removed for each. It reads every file's key (and tags):
// the hot tier keeps the variants of a response that varies (Vary) under names of their
// own, which an exact key does not name, and it is small and in memory. A copy is
// removed, never marked stale, whatever keys.Soft says: the next request goes to the
// owner, which applies the purge to its own response.
func Copies(ctx context.Context, dir string, keys []agentapi.PurgeKeys) ([]int64, error) {
	all := make([]int, len(keys))
	for i := range keys {
		all[i] = i
	}
	match := matcher(keys, all, true)
	removeAll := func(path string) ([]int, bool, error) {
		hits, _, err := match(path)
		return hits, false, err // named, whatever else the file holds
	}
	return walkCache(ctx, dir, nil, newPacer(0), len(keys), time.Now(), removeAll)
}

// matcher judges a cache file for the purges of keys at indices which: the ones that name
// it (hits), and soft when only soft ones do. It reads the file's key and tags once, and
// only if a purge of something less than everything asks; withExact matches the file's
// key against exact keys too (a file nginx named otherwise: a Vary variant).
func matcher(keys []agentapi.PurgeKeys, which []int, withExact bool) func(path string) (hits []int, soft bool, err error) {
	var tagHeaders []string // the same for every purge of a configuration
	for _, i := range which {
		if len(keys[i].Tags) > 0 {
			tagHeaders = keys[i].TagHeaders
		}
	}
	return func(path string) (hits []int, soft bool, err error) {
		var key string
		var tags []string
		read := false
		soft = true
		for _, i := range which {
			k := keys[i]
			if !k.All && !read {
				key, tags, err = readCacheEntry(path, tagHeaders)
				read = true
			}
			if k.All || err == nil && (withExact && slices.Contains(k.Exact, key) || walkMatches(k, key, tags)) {
				hits, soft = append(hits, i), soft && k.Soft
			}
		}
		if len(hits) > 0 {
			return hits, soft, nil // everything, whatever the file's key
		}
		return nil, false, err
	}
}

// walkMatches says whether the walk of k removes the file of key, which carries tags.
func walkMatches(k agentapi.PurgeKeys, key string, tags []string) bool {
	for _, t := range k.Tags {
		if slices.Contains(tags, t) {
			return true
		}
	}
	key = agentapi.ObjectKey(key)
	for _, p := range k.Prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	for _, object := range k.Sliced {
		if agentapi.IsSliceOf(key, object) {
			return true
		}
	}
	return false
}

// purgeExact removes the files of keys, or marks them stale.
func purgeExact(dir string, keys []string, soft bool, now time.Time) (int64, error) {
	var removed int64
	var errs []error
	for _, key := range keys {
		ok, err := invalidate(filepath.Join(dir, agentapi.CacheFile(key)), soft, now)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// invalidate removes a cache file, or with soft marks the response it holds stale as of
// now, and says whether there was one.
func invalidate(path string, soft bool, now time.Time) (bool, error) {
	if soft {
		return markStale(path, now)
	}
	return removeCacheFile(path)
}

// staleMargin: a soft purge sets valid_sec this long before the purge. An nginx worker
// judges freshness by its cached clock (ngx_time, updated at each turn of its event
// loop), which may lag the agent's by a turn: with valid_sec a second before the purge it
// could read a header rewritten just now as fresh until the end of that second.
const staleMargin = 2 * time.Second

// markStale sets the valid_sec of a cache file's header to staleMargin before now, unless
// it is earlier already, and says whether there was a file. Only a regular file with a
// header this agent can read is written, and only those eight bytes of it.
func markStale(path string, now time.Time) (bool, error) {
	f, b, err := openCacheHeader(path, os.O_RDWR)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	}
	defer f.Close()
	stale := now.Add(-staleMargin).Unix()
	if int64(binary.LittleEndian.Uint64(b[cacheValidSecAt:])) <= stale {
		return true, nil
	}
	binary.LittleEndian.PutUint64(b[cacheValidSecAt:], uint64(stale))
	if _, err := f.WriteAt(b[cacheValidSecAt:cacheValidSecAt+8], cacheValidSecAt); err != nil {
		return false, err
	}
	return true, nil
}

// ValidUntil is when the response a cache file holds stops being fresh: its header's
// valid_sec. Only a regular file with a header this agent can read is read.
func ValidUntil(path string) (time.Time, error) {
	f, b, err := openCacheHeader(path, os.O_RDONLY)
	if err != nil {
		return time.Time{}, err
	}
	f.Close()
	return time.Unix(int64(binary.LittleEndian.Uint64(b[cacheValidSecAt:])), 0), nil
}

// openCacheHeader opens a cache file with flag, never through a symbolic link and only a
// regular file (a FIFO would block), and reads its fixed header, which must be one this
// agent can read. The caller closes the file.
func openCacheHeader(path string, flag int) (*os.File, []byte, error) {
	f, err := os.OpenFile(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, nil, fmt.Errorf("%s is a symbolic link: left alone", path)
	case err != nil:
		return nil, nil, err
	}
	b := make([]byte, cacheKeyAt)
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, errors.Join(err, fmt.Errorf("%s is not a regular file: left alone", path))
	}
	if _, err := io.ReadFull(f, b); err != nil || !knownHeader(b) {
		f.Close()
		return nil, nil, fmt.Errorf("%s: %w", path, errUnknownCacheFile)
	}
	return f, b, nil
}

// removeCacheFile removes a regular file, never what a symbolic link points to. A file
// that is gone already (purged, or evicted by nginx's cache manager) is not an error.
func removeCacheFile(path string) (bool, error) {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case !st.Mode().IsRegular():
		return false, fmt.Errorf("%s is not a regular file: left alone", path)
	}
	if err := os.Remove(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// walkCache removes the cache files under dir that match names purges for (of n), or marks
// them stale when it says soft, pacing each file, and counts each for every purge named.
// It goes through files (paths under dir) when they are given, else every cache file.
func walkCache(ctx context.Context, dir string, files []string, pace *pacer, n int, now time.Time, match func(path string) ([]int, bool, error)) ([]int64, error) {
	removed := make([]int64, n)
	var unreadable int64
	var firstErr error
	fail := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	visit := func(rel string) error {
		if err := pace.wait(ctx); err != nil {
			return err
		}
		path := filepath.Join(dir, rel)
		hits, soft, err := match(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil // evicted meanwhile
		case errors.Is(err, errUnknownCacheFile):
			unreadable++
			return nil
		case err != nil:
			fail(err)
			return nil
		case len(hits) == 0:
			return nil
		}
		done, err := invalidate(path, soft, now)
		switch {
		case errors.Is(err, errUnknownCacheFile):
			unreadable++
		case err != nil:
			fail(err)
		}
		if done {
			for _, i := range hits {
				removed[i]++
			}
		}
		return nil
	}
	if files == nil {
		if err := WalkCacheFiles(ctx, dir, visit); err != nil {
			fail(err)
		}
	} else {
		for _, rel := range files {
			if err := visit(rel); err != nil {
				fail(err)
				break
			}
		}
	}
	if unreadable > 0 {
		fail(fmt.Errorf("%d cache files in %s have a header this agent cannot read (another nginx version?): not removed", unreadable, dir))
	}
	return removed, firstErr
}

// WalkCacheFiles calls visit with the path under dir of every file with the shape of
// nginx's cache files (see above), and stops at its first error. A level directory it
// cannot read is left, and the first such error returned at the end.
func WalkCacheFiles(ctx context.Context, dir string, visit func(rel string) error) error {
	return WalkLevelFiles(ctx, dir, func(rel string, f fs.DirEntry) error {
		name, level2 := f.Name(), filepath.Dir(rel)
		if !IsHex(name, 32) || name[31:] != filepath.Dir(level2) || name[29:31] != filepath.Base(level2) {
			return nil
		}
		return visit(rel)
	})
}

// WalkLevelFiles calls visit with the path under dir of every regular file in the
// directories of nginx's levels=1:2 (one, then two hexadecimal digits), and stops at its
// first error. A level directory it cannot read is left, and the first such error
// returned at the end.
func WalkLevelFiles(ctx context.Context, dir string, visit func(rel string, f fs.DirEntry) error) error {
	var firstErr error
	level1, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e1 := range level1 {
		if !e1.IsDir() || !IsHex(e1.Name(), 1) {
			continue
		}
		level2, err := os.ReadDir(filepath.Join(dir, e1.Name()))
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			continue
		}
		for _, e2 := range level2 {
			if !e2.IsDir() || !IsHex(e2.Name(), 2) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			rel := filepath.Join(e1.Name(), e2.Name())
			files, err := os.ReadDir(filepath.Join(dir, rel))
			if err != nil {
				firstErr = cmp.Or(firstErr, err)
				continue
			}
			for _, f := range files {
				if !f.Type().IsRegular() {
					continue
				}
				if err := visit(filepath.Join(rel, f.Name()), f); err != nil {
					return err
				}
			}
		}
	}
	return firstErr
}

// ReadTags reads the tags a cache file's response carries in tagHeaders.
func ReadTags(path string, tagHeaders []string) ([]string, error) {
	_, tags, err := readCacheEntry(path, tagHeaders)
	return tags, err
}

// IsHex says whether s is n lower-case hex digits, as nginx names its cache files and
// level directories.
func IsHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < n; i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// pacer spaces out a walk's files: at most perSecond a second, sleeping every few files
// rather than after each.
type pacer struct {
	every time.Duration
	start time.Time
	n     int
}

const paceBatch = 16

func newPacer(perSecond int) *pacer {
	p := &pacer{start: time.Now()}
	if perSecond > 0 {
		p.every = time.Second / time.Duration(perSecond)
	}
	return p
}

func (p *pacer) wait(ctx context.Context) error {
	p.n++
	if p.n%paceBatch != 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.every == 0 {
		return nil
	}
	ahead := time.Until(p.start.Add(time.Duration(p.n) * p.every))
	if ahead <= 0 {
		return nil
	}
	t := time.NewTimer(ahead)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
