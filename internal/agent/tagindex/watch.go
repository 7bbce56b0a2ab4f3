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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/agent/atomicfile"
	"github.com/edgepool/edgepool/internal/agent/purge"
)

// Watcher sees nginx store responses in the cache directories of an agent's disks, for
// their indexes, on one inotify instance (a user has 128 by default, shared by every
// container running as that user on the node). In a cache directory (levels=1:2) nginx
// writes a fill to a temporary file and renames it to its place, named by the MD5 of its
// key, in the directory of its last hex digit and, within it, of the two before. The cache
// directory and each first-level directory are watched for new directories, each
// second-level directory for files renamed into it, and nothing else: a fill's writes
// raise no event. Each disk's root is watched for the index's sync files.
type Watcher struct {
	file *os.File // the inotify descriptor, read through Go's poller so Close ends a Read
	done chan struct{}

	mu sync.Mutex
	// watched are the directories watched, by watch descriptor: their index, their path
	// under its cache directory and their depth (0: the cache directory, 2: a directory of
	// cache files, rootDepth: the disk's root).
	watched map[int32]watchedDir
}

type watchedDir struct {
	index *Index
	rel   string
	depth int
}

const rootDepth = -1

// event is what a watch reports to its index.
type event struct {
	// file is a cache file renamed into place: its path under the cache directory.
	file string
	// newDirs are second-level directories just watched, whose files may predate it.
	newDirs []string
	// lost: the kernel dropped events (its queue overflowed), or a new directory could
	// not be watched: files may have come unseen.
	lost error
	// ended: the cache directory's or the disk's watch ended (the filesystem was
	// unmounted, or the directory removed): nothing more will be seen.
	ended error
	// synced is a sync file's name: the events before it were all read.
	synced string
}

// syncPrefix starts the names of sync files: atomicfile's temporary prefix, which a
// disk's ownership check allows, should one be left behind.
const syncPrefix = atomicfile.TempPrefix + "tagindex-sync-"

const (
	// dirMask: new directories in a level directory, sync files in a disk's root.
	dirMask  = unix.IN_CREATE | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW
	leafMask = unix.IN_MOVED_TO | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW
)

// NewWatcher starts a watcher; Close it once its indexes are closed.
func NewWatcher() (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &Watcher{file: os.NewFile(uintptr(fd), "inotify"), done: make(chan struct{}), watched: map[int32]watchedDir{}}
	go w.run()
	return w, nil
}

// Close stops the watcher: the indexes still open end.
func (w *Watcher) Close() error {
	err := w.file.Close()
	<-w.done
	return err
}

// watch starts watching x's disk root and cache directory, with every level directory in
// it.
func (w *Watcher) watch(x *Index) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	wd, err := unix.InotifyAddWatch(int(w.file.Fd()), x.opts.DiskPath, dirMask)
	if err != nil {
		return fmt.Errorf("watch %s: %w", x.opts.DiskPath, err)
	}
	w.watched[int32(wd)] = watchedDir{index: x, depth: rootDepth}
	_, err = w.addLocked(x, "", 0)
	return err
}

// unwatch stops watching x's directories.
func (w *Watcher) unwatch(x *Index) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for wd, d := range w.watched {
		if d.index == x {
			delete(w.watched, wd)
			_, _ = unix.InotifyRmWatch(int(w.file.Fd()), uint32(wd))
		}
	}
}

// addLocked watches the directory rel of x's cache at depth, and the level directories
// under it, and returns the second-level directories it watched. The caller holds mu.
func (w *Watcher) addLocked(x *Index, rel string, depth int) ([]string, error) {
	mask := uint32(dirMask)
	if depth == 2 {
		mask = leafMask
	}
	path := filepath.Join(x.opts.CacheDir, rel)
	wd, err := unix.InotifyAddWatch(int(w.file.Fd()), path, mask)
	switch {
	case errors.Is(err, unix.ENOENT) && depth > 0:
		return nil, nil // removed meanwhile
	case errors.Is(err, unix.ENOSPC):
		return nil, fmt.Errorf("watch %s: the user's inotify watches are used up (fs.inotify.max_user_watches): %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("watch %s: %w", path, err)
	}
	w.watched[int32(wd)] = watchedDir{index: x, rel: rel, depth: depth}
	if depth == 2 {
		return []string{rel}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var leaves []string
	for _, e := range entries {
		if e.IsDir() && purge.IsHex(e.Name(), depth+1) {
			more, err := w.addLocked(x, filepath.Join(rel, e.Name()), depth+1)
			if err != nil {
				return leaves, err
			}
			leaves = append(leaves, more...)
		}
	}
	return leaves, nil
}

// run reads events and hands each to its index, until the watcher is closed; then the
// indexes still watched end.
func (w *Watcher) run() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			w.mu.Lock()
			ended := map[*Index]bool{}
			for _, d := range w.watched {
				ended[d.index] = true
			}
			w.mu.Unlock()
			for x := range ended {
				x.enqueue(event{ended: fmt.Errorf("the watch failed: %w", err)})
			}
			return
		}
		batches := map[*Index][]event{}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(raw.Len)]
			off += unix.SizeofInotifyEvent + int(raw.Len)
			for x, e := range w.events(raw, string(nameBytes[:clen(nameBytes)])) {
				batches[x] = append(batches[x], e)
			}
		}
		for x, events := range batches {
			x.enqueue(events...)
		}
	}
}

// events turns a raw event into the events of the indexes it concerns.
func (w *Watcher) events(raw *unix.InotifyEvent, name string) map[*Index]event {
	w.mu.Lock()
	defer w.mu.Unlock()
	if raw.Mask&unix.IN_Q_OVERFLOW != 0 { // every index may have missed renames
		all := map[*Index]event{}
		for _, d := range w.watched {
			all[d.index] = event{lost: errors.New("the kernel's inotify queue overflowed (fs.inotify.max_queued_events)")}
		}
		return all
	}
	d, known := w.watched[raw.Wd]
	if !known {
		return nil // an index closed, or its watch removed
	}
	one := func(e event) map[*Index]event { return map[*Index]event{d.index: e} }
	switch {
	case raw.Mask&unix.IN_IGNORED != 0:
		delete(w.watched, raw.Wd)
		if d.depth <= 0 {
			return one(event{ended: errors.New("the disk's or its cache directory's watch ended (unmounted or removed)")})
		}
	case d.depth == rootDepth:
		if raw.Mask&unix.IN_CREATE != 0 && strings.HasPrefix(name, syncPrefix) {
			return one(event{synced: name})
		}
	case d.depth < 2 && raw.Mask&unix.IN_CREATE != 0 && purge.IsHex(name, d.depth+1):
		leaves, err := w.addLocked(d.index, filepath.Join(d.rel, name), d.depth+1)
		if err != nil {
			return one(event{lost: err})
		}
		if len(leaves) > 0 {
			// Files may have come before the watches: the index reads them.
			return one(event{newDirs: leaves})
		}
	case d.depth == 2 && raw.Mask&unix.IN_MOVED_TO != 0 && purge.IsHex(name, 32):
		return one(event{file: filepath.Join(d.rel, name)})
	}
	return nil
}

// clen is the length of a NUL-padded name.
func clen(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}
