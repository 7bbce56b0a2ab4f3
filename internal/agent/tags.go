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

package agent

import (
	"errors"
	"path/filepath"
	"slices"
	"sync"

	"github.com/edgepool/edgepool/internal/agent/disks"
	"github.com/edgepool/edgepool/internal/agent/purge"
	"github.com/edgepool/edgepool/internal/agent/tagindex"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// tagIndexes are the disks' tag indexes (tagindex), by disk name. Each disk's opens before
// nginx starts on it, so that one kept from a clean stop misses nothing; one opened later
// (a disk that joined, other tag headers, a disk mounted again) rebuilds from the disk.
type tagIndexes struct {
	mu      sync.Mutex
	watcher *tagindex.Watcher // one inotify instance for every disk
	byDisk  map[string]*tagindex.Index
}

// tagIndex returns disk d's index for the tag headers, opening it (again) when there is
// none, it reads other headers or its watch ended; nil when it cannot be opened (a purge
// by tag then reads every cache file).
func (a *Agent) tagIndex(d disks.Disk, headers []string) *tagindex.Index {
	if len(headers) == 0 {
		return nil
	}
	t := &a.tags
	t.mu.Lock()
	defer t.mu.Unlock()
	if x := t.byDisk[d.Name]; x != nil {
		if !x.Ended() && slices.Equal(x.Headers(), headers) {
			return x
		}
		_ = x.Close()
		delete(t.byDisk, d.Name)
	}
	if t.watcher == nil {
		w, err := tagindex.NewWatcher()
		if err != nil {
			a.opts.Log.Error("Could not index the disks' tags: purges by tag read every cache file", "err", err)
			return nil
		}
		t.watcher = w
	}
	x, err := tagindex.Open(tagindex.Options{DiskPath: d.Path, File: agentapi.DiskTagIndex,
		CacheDir: filepath.Join(d.Path, agentapi.DiskCacheDir), Headers: headers, Rate: a.opts.PurgeRate, Watcher: t.watcher, Log: a.opts.Log})
	if err != nil {
		a.opts.Log.Error("Could not index the disk's tags: purges by tag read every cache file", "disk", d.Name, "err", err)
		return nil
	}
	if t.byDisk == nil {
		t.byDisk = map[string]*tagindex.Index{}
	}
	t.byDisk[d.Name] = x
	return x
}

// tagFiles is disk d's index for a batch of purges, if one of them is by tag.
func (a *Agent) tagFiles(d disks.Disk, keys []agentapi.PurgeKeys) purge.TagFiles {
	for _, k := range keys {
		if len(k.Tags) > 0 {
			if x := a.tagIndex(d, k.TagHeaders); x != nil {
				return x
			}
			return nil
		}
	}
	return nil
}

// tagIndexesReady says, per disk with an index, whether it is ready.
func (a *Agent) tagIndexesReady() map[string]bool {
	t := &a.tags
	t.mu.Lock()
	defer t.mu.Unlock()
	ready := map[string]bool{}
	for name, x := range t.byDisk {
		ready[name] = x.Ready()
	}
	return ready
}

// closeTagIndexes closes the indexes once nginx has stopped: each marks itself clean.
func (a *Agent) closeTagIndexes() {
	t := &a.tags
	t.mu.Lock()
	defer t.mu.Unlock()
	errs := make(chan error, len(t.byDisk))
	for name, x := range t.byDisk {
		go func() { errs <- x.Close() }() // each waits for its disk's last renames
		delete(t.byDisk, name)
	}
	var all []error
	for range cap(errs) {
		all = append(all, <-errs)
	}
	if t.watcher != nil {
		all = append(all, t.watcher.Close())
		t.watcher = nil
	}
	if err := errors.Join(all...); err != nil {
		a.opts.Log.Error("Closing the tag indexes", "err", err)
	}
}
