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
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/agent/atomicfile"
	"github.com/edgepool/edgepool/internal/agent/purge"
)

// watcher sees nginx store responses in a cache directory (levels=1:2): nginx writes a
// fill to a temporary file and renames it to its place, named by the MD5 of its key, in
// the directory of its last hex digit and, within it, of the two before. The cache
// directory and each first-level directory are watched for new directories, each
// second-level directory for files renamed into it, and nothing else: a fill's writes
// raise no event.
type watcher struct {
	file *os.File // the inotify descriptor, read through Go's poller so Close ends a Read
	dir  string
	// syncWD watches syncDir (the disk's root) for the files sync creates: their events
	// follow every event queued before them, on the one inotify queue.
	syncWD int32
	// watched are the directories watched, by watch descriptor: their path under dir and
	// their depth (0: dir itself, 2: a directory of cache files).
	watched map[int32]watchedDir
}

type watchedDir struct {
	rel   string
	depth int
}

// events a watcher reports.
type event struct {
	// file is a cache file renamed into place: its path under the cache directory.
	file string
	// newDir is a second-level directory just watched, whose files may predate its watch.
	newDir string
	// lost: the kernel dropped events (its queue overflowed), or a new directory could
	// not be watched: files may have come unseen.
	lost error
	// ended: the cache directory's watch ended (the filesystem was unmounted, or the
	// directory removed): nothing more will be seen.
	ended error
	// synced is a sync file's name: the events before it were all read.
	synced string
}

// syncPrefix starts the names of sync files: atomicfile's temporary prefix, which a
// disk's ownership check allows, should one be left behind.
const syncPrefix = atomicfile.TempPrefix + "tagindex-sync-"

const (
	levelMask = unix.IN_CREATE | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW
	leafMask  = unix.IN_MOVED_TO | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW
)

// watch starts watching the cache directory dir and every level directory in it, and
// syncDir for sync files.
func watch(dir, syncDir string) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &watcher{file: os.NewFile(uintptr(fd), "inotify"), dir: dir, watched: map[int32]watchedDir{}}
	wd, err := unix.InotifyAddWatch(fd, syncDir, unix.IN_CREATE|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW)
	if err == nil {
		w.syncWD = int32(wd)
		_, err = w.add("", 0)
	}
	if err != nil {
		_ = w.close()
		return nil, err
	}
	return w, nil
}

// add watches the directory rel at depth, and the level directories under it, and returns
// the second-level directories it watched.
func (w *watcher) add(rel string, depth int) ([]string, error) {
	mask := uint32(levelMask)
	if depth == 2 {
		mask = leafMask
	}
	wd, err := unix.InotifyAddWatch(int(w.file.Fd()), filepath.Join(w.dir, rel), mask)
	switch {
	case errors.Is(err, unix.ENOENT) && depth > 0:
		return nil, nil // removed meanwhile
	case errors.Is(err, unix.ENOSPC):
		return nil, fmt.Errorf("watch %s: the user's inotify watches are used up (fs.inotify.max_user_watches): %w", filepath.Join(w.dir, rel), err)
	case err != nil:
		return nil, fmt.Errorf("watch %s: %w", filepath.Join(w.dir, rel), err)
	}
	w.watched[int32(wd)] = watchedDir{rel: rel, depth: depth}
	if depth == 2 {
		return []string{rel}, nil
	}
	entries, err := os.ReadDir(filepath.Join(w.dir, rel))
	if err != nil {
		return nil, err
	}
	var leaves []string
	for _, e := range entries {
		if e.IsDir() && purge.IsHex(e.Name(), depth+1) {
			more, err := w.add(filepath.Join(rel, e.Name()), depth+1)
			if err != nil {
				return leaves, err
			}
			leaves = append(leaves, more...)
		}
	}
	return leaves, nil
}

// read waits for events and returns them; an error ends the watch (closed, or failed).
func (w *watcher) read(buf []byte) ([]event, error) {
	n, err := w.file.Read(buf)
	if err != nil {
		return nil, err
	}
	var events []event
	for off := 0; off+unix.SizeofInotifyEvent <= n; {
		raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(raw.Len)]
		off += unix.SizeofInotifyEvent + int(raw.Len)
		name := string(nameBytes[:clen(nameBytes)])
		d, known := w.watched[raw.Wd]
		switch {
		case raw.Wd == w.syncWD && raw.Mask&unix.IN_IGNORED != 0:
			events = append(events, event{ended: errors.New("the disk's watch ended (unmounted or removed)")})
		case raw.Wd == w.syncWD:
			if raw.Mask&unix.IN_CREATE != 0 && strings.HasPrefix(name, syncPrefix) {
				events = append(events, event{synced: name})
			}
		case raw.Mask&unix.IN_Q_OVERFLOW != 0:
			events = append(events, event{lost: errors.New("the kernel's inotify queue overflowed (fs.inotify.max_queued_events)")})
		case raw.Mask&unix.IN_IGNORED != 0:
			delete(w.watched, raw.Wd)
			if known && d.depth == 0 {
				events = append(events, event{ended: errors.New("the cache directory's watch ended (unmounted or removed)")})
			}
		case !known:
		case d.depth < 2 && raw.Mask&unix.IN_CREATE != 0 && purge.IsHex(name, d.depth+1):
			leaves, err := w.add(filepath.Join(d.rel, name), d.depth+1)
			if err != nil {
				events = append(events, event{lost: err})
			}
			for _, l := range leaves {
				events = append(events, event{newDir: l})
			}
		case d.depth == 2 && raw.Mask&unix.IN_MOVED_TO != 0 && purge.IsHex(name, 32):
			events = append(events, event{file: filepath.Join(d.rel, name)})
		}
	}
	return events, nil
}

func (w *watcher) close() error { return w.file.Close() }

// clen is the length of a NUL-padded name.
func clen(b []byte) int {
	for i, c := range b {
		if c == 0 {
			return i
		}
	}
	return len(b)
}
