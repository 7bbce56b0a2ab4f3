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

// Package hottier removes what nginx leaves in a full hot tier.
//
// A sharded pod's hot tier is a memory volume of bounded size, and nginx trims its copies
// only at its cache manager's passes, up to 10 s apart. So that a copy that finds the
// volume full costs the copy and not the client's response, a fill is written in the
// pod's run directory and copied into the volume once complete (use_temp_path). nginx
// copies into "<name>.<10 digits>" and renames; when the copy fails it leaves that file
// behind, unknown to its cache manager, until its next start. Sweep removes them.
//
// A copy past its seconds answers while one request asks its owner again in the
// background (proxy_cache_use_stale updating). When the owner does not confirm it (it
// refused its answer: the response is no longer one it stores; or it failed), nginx
// keeps the copy and answers with it for as long as it is asked. SweepStale removes such
// copies, so that the next request asks the owner.
package hottier

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/agent/purge"
)

// cacheFileName is the length of a cache file's name: its key's MD5, in hexadecimal.
const cacheFileName = 32

// NearlyFull says whether the filesystem at dir has less than a tenth of its space free:
// the operator sizes the volume a quarter above the copies' max_size, so only fills
// beyond it between two passes of the cache manager get there.
func NearlyFull(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, err
	}
	return st.Bavail*10 < st.Blocks, nil
}

// Leftover says whether name is a copy nginx left behind: a cache file's name (32
// hexadecimal digits) and a dot and 10 digits.
func Leftover(name string) bool {
	const key, suffix = cacheFileName, 11
	if len(name) != key+suffix || name[key] != '.' || !purge.IsHex(name[:key], key) {
		return false
	}
	for _, c := range name[key+1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Sweep removes the leftovers last written before olderThan (a copy under way is newer)
// from the hot tier at dir, whose levels are nginx's 1:2. It follows no link and touches
// no other file. It returns the files and bytes it removed.
func Sweep(ctx context.Context, dir string, olderThan time.Time) (files int, bytes int64, err error) {
	return removeFiles(ctx, dir, olderThan, func(f fs.DirEntry) bool { return Leftover(f.Name()) }, nil)
}

// SweepStale removes the copies in the hot tier at dir whose validity ended before
// staleBefore. Files written since staleBefore are not read: a copy is stored fresh, and
// one written since may be looked at by the next sweep. It follows no link and touches
// only cache files (32 hexadecimal digits) with a header it can read. It returns the
// files and bytes it removed.
func SweepStale(ctx context.Context, dir string, staleBefore time.Time) (files int, bytes int64, err error) {
	cacheFile := func(f fs.DirEntry) bool { return f.Type().IsRegular() && purge.IsHex(f.Name(), cacheFileName) }
	return removeFiles(ctx, dir, staleBefore, cacheFile, func(path string) (bool, error) {
		until, err := purge.ValidUntil(path)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil && until.Before(staleBefore), err
	})
}

// removeFiles removes the files of the hot tier at dir that name picks, written before
// writtenBefore, and of those the ones remove says to (all, if it is nil). It returns
// the files and bytes it removed; a file gone meanwhile is not an error.
func removeFiles(ctx context.Context, dir string, writtenBefore time.Time, name func(fs.DirEntry) bool,
	remove func(path string) (bool, error)) (files int, bytes int64, err error) {
	var errs []error
	err = purge.WalkLevelFiles(ctx, dir, func(rel string, f fs.DirEntry) error {
		if !name(f) {
			return nil
		}
		info, err := f.Info()
		if err != nil || !info.ModTime().Before(writtenBefore) {
			return nil // gone meanwhile, or written since
		}
		path := filepath.Join(dir, rel)
		if remove != nil {
			ok, err := remove(path)
			if err != nil {
				errs = append(errs, err)
			}
			if !ok {
				return nil
			}
		}
		if err := os.Remove(path); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
			return nil
		}
		files++
		bytes += info.Size()
		return nil
	})
	return files, bytes, errors.Join(append(errs, err)...)
}
