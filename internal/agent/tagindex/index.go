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

// Package tagindex keeps, per disk, an index of the tags of the responses nginx stores on
// it, so that a purge by tag reads the cache files that may carry a tag rather than every
// cache file.
//
// The index is a file on the disk, beside its marker (agentapi.DiskTagIndex): a first
// line naming the tag headers it was made with, then one line per tagged response, "<its
// file name> <tag> <tag>...", appended as nginx renames each new cache file into place
// (inotify tells), a batch at a time: the file is never held open, which would keep the
// disk from being unmounted or remounted read-only. Memory holds none of it: a purge reads the file whole, and checks each
// file it names against the tags in its header before it purges it, so a line of a file
// evicted or stored again since costs a read, never a wrong purge. The file only names
// more files than carry a tag, never fewer, while it is ready: it was read whole from the
// cache (a rebuild), or kept since a clean stop, and every rename since was seen. Anything
// else (a crash, the kernel dropping events, other tag headers) makes it rebuild: a paced
// walk of the cache, during which purges walk the cache themselves. When it holds twice
// the lines it held after its last rebuild or compaction (and at least compactAfter more),
// it is compacted: rewritten with the files that still exist, once each.
//
// Costs: a line takes the file name (32 bytes), its tags and their separators: about 60
// bytes with two tags of a dozen characters, 60 MB per million tagged responses. The
// watch takes one inotify watch per level directory (4,113 per disk with levels=1:2).
package tagindex

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/edgepool/edgepool/internal/agent/atomicfile"
	"github.com/edgepool/edgepool/internal/agent/purge"
	"github.com/edgepool/edgepool/internal/agentapi"
)

const (
	headerPrefix = "# edgepool tag index 1 headers="
	cleanLine    = "# clean\n"
	// defaultCompactAfter is the fewest lines appended since the last rebuild or
	// compaction that make a compaction.
	defaultCompactAfter = 10000
)

// Options configure an index.
type Options struct {
	// DiskPath is the disk; the index file is File under it, the cache CacheDir.
	DiskPath, File, CacheDir string
	// Headers are the tag headers, in their canonical case.
	Headers []string
	// Rate bounds a rebuild's reads of cache files, per second (0: none).
	Rate int
	// CompactAfter is the fewest lines appended since the last rebuild or compaction that
	// make a compaction (default 10000), once they are as many as the lines before.
	CompactAfter int
	// Watcher follows the disk (one per agent, for all its disks).
	Watcher *Watcher
	Log     *slog.Logger
}

// Index is one disk's tag index.
type Index struct {
	opts Options
	path string

	mu sync.Mutex
	// pending are lines not yet appended to the file: the file is opened for each batch of
	// lines and closed after it, never held open (an open file would keep the disk from
	// being unmounted, or remounted read-only).
	pending []byte
	exists  bool // the file was started (kept or rebuilt)
	lines   int  // in the file and pending
	base    int  // lines after the last rebuild or compaction
	ready   bool
	ended   bool // the watch ended: Reopen
	gen     int  // of the latest rebuild; an older one stops
	busy    bool // compacting
	closed  bool
	// syncs wait for their sync file's event, by its name: true once it came, false if
	// the watch ended first.
	syncs   map[string]chan bool
	syncSeq int

	// queue holds the events the watcher handed over, which handleQueue indexes in order:
	// each disk's on its own goroutine, so that a disk that hangs holds up only its own.
	qmu       sync.Mutex
	qcond     *sync.Cond
	queue     []event
	qclosed   bool
	qfinished chan struct{}

	w      *Watcher
	ctx    context.Context // of the rebuilds and compactions, which done waits for
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// Open starts indexing a disk: it watches the cache directory, and keeps the index file
// if the last stop was clean and the tag headers are the same, or rebuilds it in the
// background. Start it before nginx writes to the disk.
func Open(opts Options) (*Index, error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	opts.CompactAfter = cmp.Or(opts.CompactAfter, defaultCompactAfter)
	x := &Index{opts: opts, path: filepath.Join(opts.DiskPath, opts.File), syncs: map[string]chan bool{}, w: opts.Watcher}
	x.ctx, x.cancel = context.WithCancel(context.Background())
	x.qcond, x.qfinished = sync.NewCond(&x.qmu), make(chan struct{})
	go x.handleQueue()
	// The cache directory is the disk's (Claim made it): one missing is not made here,
	// where it could land on whatever is mounted now.
	if err := x.w.watch(x); err != nil {
		x.w.unwatch(x)
		x.closeQueue()
		return nil, err
	}
	kept, err := x.keep()
	if err != nil {
		x.w.unwatch(x)
		x.closeQueue()
		return nil, err
	}
	if !kept {
		x.rebuild("no index of a clean stop with these tag headers")
	}
	return x, nil
}

// keep opens the index file of a clean stop with the same headers, without its clean
// line, and says whether it did.
func (x *Index) keep() (bool, error) {
	data, err := os.ReadFile(x.path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	first, _, _ := bytes.Cut(data, []byte("\n"))
	if string(first) != x.headerLine() || !bytes.HasSuffix(data, []byte("\n"+cleanLine)) {
		return false, nil
	}
	if err := os.Truncate(x.path, int64(len(data)-len(cleanLine))); err != nil {
		return false, err
	}
	x.exists, x.ready = true, true
	x.lines = bytes.Count(data, []byte("\n")) - 2
	x.base = x.lines
	return true, nil
}

func (x *Index) headerLine() string { return headerPrefix + strings.Join(x.opts.Headers, ",") }

// Ready says whether the index names every tagged file.
func (x *Index) Ready() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ready
}

// Ended says whether the watch ended (the disk was unmounted): the index must be opened
// again, on what is mounted now.
func (x *Index) Ended() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.ended
}

// Headers are the tag headers the index reads.
func (x *Index) Headers() []string { return x.opts.Headers }

// syncTimeout bounds the wait for the index to catch up with the renames before a purge:
// one that cannot is not ready, and the purge walks.
const syncTimeout = 30 * time.Second

// Files returns the names of the cache files (their paths under the cache directory) that
// may carry one of tags, and false when the index is not ready: the caller walks. Every
// file renamed into place before the call is indexed first.
func (x *Index) Files(tags []string) ([]string, bool) {
	if !x.sync(syncTimeout) {
		return nil, false
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.ready || !x.flush() {
		return nil, false
	}
	r, err := os.Open(x.path)
	if err != nil {
		x.opts.Log.Error("Read the tag index", "path", x.path, "err", err)
		return nil, false
	}
	defer r.Close()
	seen := map[string]bool{}
	var files []string
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		name, rest, ok := strings.Cut(s.Text(), " ")
		if !ok || !purge.IsHex(name, 32) || seen[name] {
			continue
		}
		for _, t := range strings.Fields(rest) {
			if slices.Contains(tags, t) {
				seen[name] = true
				files = append(files, agentapi.CacheFileNamed(name))
				break
			}
		}
	}
	if err := s.Err(); err != nil {
		x.opts.Log.Error("Read the tag index", "path", x.path, "err", err)
		return nil, false
	}
	return files, true
}

// sync waits until the events queued before it have been indexed: it creates a file in the
// disk's root, whose event comes after them on the same queue, and waits for the follower
// to reach it. It says whether it did within timeout.
func (x *Index) sync(timeout time.Duration) bool {
	x.mu.Lock()
	if x.ended {
		x.mu.Unlock()
		return false
	}
	x.syncSeq++
	name := fmt.Sprintf("%s%d", syncPrefix, x.syncSeq)
	reached := make(chan bool, 1)
	x.syncs[name] = reached
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		delete(x.syncs, name)
		x.mu.Unlock()
	}()
	path := filepath.Join(x.opts.DiskPath, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		x.opts.Log.Error("Sync the tag index", "path", path, "err", err)
		return false
	}
	_ = f.Close()
	_ = os.Remove(path)
	select {
	case ok := <-reached:
		return ok
	case <-time.After(timeout):
		return false
	}
}

// closeSyncTimeout bounds the wait for the renames queued at Close: an index that cannot
// catch up in time is not marked clean, and the next Open rebuilds it.
const closeSyncTimeout = 5 * time.Second

// Close indexes the renames queued, stops watching and, if the index is ready, marks it
// clean: the next Open keeps it. Call it once nginx no longer writes to the disk.
func (x *Index) Close() error {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return nil
	}
	x.closed = true
	x.mu.Unlock()
	synced := x.sync(closeSyncTimeout)
	x.w.unwatch(x)
	x.closeQueue()
	var err error
	select {
	case <-x.qfinished:
	case <-time.After(closeSyncTimeout):
		err = errors.New("the tag index is held up reading its disk (does it hang?)")
	}
	x.cancel()
	x.done.Wait()
	x.mu.Lock()
	defer x.mu.Unlock()
	x.gen++ // a rebuild under way stops
	ended := x.ended
	x.ended = true // nothing follows the disk any more
	if !synced || !x.ready || ended || !x.flush() {
		return err
	}
	// The lines reach the disk before the mark that vouches for them.
	f, ferr := os.OpenFile(x.path, os.O_WRONLY|os.O_APPEND, 0)
	if ferr != nil {
		return errors.Join(err, ferr)
	}
	err = errors.Join(err, f.Sync())
	_, werr := f.WriteString(cleanLine)
	return errors.Join(err, werr, f.Sync(), f.Close())
}

// handle indexes what an event of its watch says.
func (x *Index) handle(e event) {
	switch {
	case e.ended != nil:
		x.stop(e.ended.Error())
	case e.lost != nil:
		x.rebuild(e.lost.Error())
	case e.file != "":
		x.add(e.file)
	case len(e.newDirs) > 0:
		for _, dir := range e.newDirs {
			x.addDir(dir)
		}
	case e.synced != "":
		x.mu.Lock()
		x.flush()
		if reached, ok := x.syncs[e.synced]; ok {
			select {
			case reached <- true:
			default:
			}
		}
		x.mu.Unlock()
	}
}

// enqueue hands events over to handleQueue.
func (x *Index) enqueue(events ...event) {
	x.qmu.Lock()
	x.queue = append(x.queue, events...)
	x.qmu.Unlock()
	x.qcond.Signal()
}

// handleQueue indexes the events handed over, in order, a batch at a time, until the queue
// is closed and empty.
func (x *Index) handleQueue() {
	defer close(x.qfinished)
	for {
		x.qmu.Lock()
		for len(x.queue) == 0 && !x.qclosed {
			x.qcond.Wait()
		}
		batch := x.queue
		x.queue = nil
		closed := x.qclosed
		x.qmu.Unlock()
		if len(batch) == 0 && closed {
			return
		}
		for _, e := range batch {
			x.handle(e)
		}
		x.mu.Lock()
		x.flush()
		x.mu.Unlock()
	}
}

// closeQueue ends handleQueue once it has indexed what was handed over.
func (x *Index) closeQueue() {
	x.qmu.Lock()
	x.qclosed = true
	x.qmu.Unlock()
	x.qcond.Broadcast()
}

// stop marks the index not ready after its watch ended for good.
func (x *Index) stop(reason string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.ready, x.ended = false, true
	x.gen++ // a rebuild under way stops
	for _, reached := range x.syncs {
		select {
		case reached <- false:
		default:
		}
	}
	x.opts.Log.Error("The tag index stopped: purges by tag read every cache file until it is opened again", "disk", x.opts.DiskPath, "reason", reason)
}

// add indexes a cache file, if it carries tags.
func (x *Index) add(rel string) {
	tags, err := purge.ReadTags(filepath.Join(x.opts.CacheDir, rel), x.opts.Headers)
	if err != nil || len(tags) == 0 {
		return // gone already, or not a response this agent can read: a walk finds those
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.appendLine(filepath.Base(rel), tags)
}

// maxPending bounds the bytes of lines held before they are appended.
const maxPending = 64 << 10

// appendLine appends a line to the index; the caller holds mu.
func (x *Index) appendLine(name string, tags []string) {
	if !x.exists {
		return
	}
	x.pending = append(x.pending, name+" "+strings.Join(tags, " ")+"\n"...)
	if len(x.pending) >= maxPending {
		x.flush()
	}
	x.lines++
	if !x.busy && x.ready && x.lines >= 2*x.base && x.lines-x.base >= x.opts.CompactAfter {
		x.busy = true
		x.done.Add(1)
		go x.compact(x.gen)
	}
}

// flush appends the pending lines to the file, and says whether it could; one it could not
// leaves the index not ready. The caller holds mu.
func (x *Index) flush() bool {
	if len(x.pending) == 0 || !x.exists {
		return x.exists
	}
	f, err := os.OpenFile(x.path, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.Write(x.pending)
		err = errors.Join(err, f.Close())
	}
	x.pending = x.pending[:0]
	if err != nil {
		x.ready, x.exists = false, false
		x.gen++ // a rebuild under way stops: it could not write either
		x.opts.Log.Error("Write the tag index: purges by tag read every cache file", "path", x.path, "err", err)
		return false
	}
	return true
}

// addDir indexes the files of a directory that may have come before its watch.
func (x *Index) addDir(rel string) {
	entries, err := os.ReadDir(filepath.Join(x.opts.CacheDir, rel))
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type().IsRegular() && purge.IsHex(e.Name(), 32) {
			x.add(filepath.Join(rel, e.Name()))
		}
	}
}

// rebuild starts the index afresh and reads every cache file into it, in the background;
// until it is done the index is not ready.
func (x *Index) rebuild(reason string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.gen++
	x.ready, x.pending = false, x.pending[:0]
	x.exists = false
	if err := atomicfile.Write(x.path, []byte(x.headerLine()+"\n"), 0o600); err != nil {
		x.opts.Log.Error("Start the tag index: purges by tag read every cache file", "path", x.path, "err", err)
		return
	}
	x.exists, x.lines, x.base = true, 0, 0
	x.opts.Log.Info("Rebuilding the tag index", "disk", x.opts.DiskPath, "reason", reason)
	x.done.Add(1)
	go x.walk(x.gen)
}

// walk reads every cache file into the index for rebuild gen.
func (x *Index) walk(gen int) {
	defer x.done.Done()
	start := time.Now()
	every := time.Duration(0)
	if x.opts.Rate > 0 {
		every = time.Second / time.Duration(x.opts.Rate)
	}
	files := 0
	err := purge.WalkCacheFiles(x.ctx, x.opts.CacheDir, func(rel string) error {
		if x.stale(gen) {
			return errRebuildStopped
		}
		files++
		if every > 0 && files%16 == 0 {
			if ahead := time.Until(start.Add(time.Duration(files) * every)); ahead > 0 {
				select {
				case <-x.ctx.Done():
					return x.ctx.Err()
				case <-time.After(ahead):
				}
			}
		}
		x.add(rel)
		return nil
	})
	x.mu.Lock()
	defer x.mu.Unlock()
	if gen != x.gen {
		return
	}
	if err == nil && !x.flush() {
		return
	}
	if err != nil {
		x.opts.Log.Error("Rebuild the tag index: purges by tag read every cache file", "disk", x.opts.DiskPath, "err", err)
		return
	}
	x.ready, x.base = true, x.lines
	x.opts.Log.Info("Rebuilt the tag index", "disk", x.opts.DiskPath, "files", files, "tagged", x.lines,
		"took", time.Since(start).Round(time.Millisecond).String())
}

var errRebuildStopped = errors.New("a newer rebuild started")

func (x *Index) stale(gen int) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return gen != x.gen
}

// compact rewrites the index with the files that still exist, each once (its latest
// line), then the lines appended meanwhile.
func (x *Index) compact(gen int) {
	defer x.done.Done()
	err := x.compactOnce(gen)
	x.mu.Lock()
	defer x.mu.Unlock()
	x.busy = false
	if err != nil && gen == x.gen {
		x.opts.Log.Error("Compact the tag index", "path", x.path, "err", err)
	}
}

func (x *Index) compactOnce(gen int) error {
	x.mu.Lock()
	x.flush()
	st, err := os.Stat(x.path)
	x.mu.Unlock()
	if err != nil {
		return err
	}
	size := st.Size()
	data := make([]byte, size)
	r, err := os.Open(x.path)
	if err != nil {
		return err
	}
	_, err = io.ReadFull(r, data)
	r.Close()
	if err != nil {
		return err
	}
	header, body, _ := bytes.Cut(data, []byte("\n"))
	lines := strings.Split(string(body), "\n")
	kept := map[string]int{} // name -> its latest line
	for i, line := range lines {
		name, _, ok := strings.Cut(line, " ")
		if !ok || !purge.IsHex(name, 32) {
			continue
		}
		if _, err := os.Lstat(filepath.Join(x.opts.CacheDir, agentapi.CacheFileNamed(name))); err == nil {
			kept[name] = i
		} else {
			delete(kept, name)
		}
	}
	var b bytes.Buffer
	b.Write(header)
	b.WriteByte('\n')
	n := 0
	for i, line := range lines {
		name, _, _ := strings.Cut(line, " ")
		if j, ok := kept[name]; ok && j == i {
			b.WriteString(line)
			b.WriteByte('\n')
			n++
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if gen != x.gen {
		return nil // rebuilt meanwhile
	}
	// The lines appended since the snapshot follow, under the lock that holds appends.
	if !x.flush() {
		return nil
	}
	st, err = os.Stat(x.path)
	if err != nil {
		return err
	}
	tail := make([]byte, st.Size()-size)
	if r, err := os.Open(x.path); err != nil {
		return err
	} else {
		_, err = r.ReadAt(tail, size)
		r.Close()
		if err != nil {
			return err
		}
	}
	b.Write(tail)
	if err := atomicfile.Write(x.path, b.Bytes(), 0o600); err != nil {
		return err
	}
	x.lines = n + bytes.Count(tail, []byte("\n"))
	x.base = x.lines
	x.opts.Log.Info("Compacted the tag index", "disk", x.opts.DiskPath, "lines", x.lines, "dropped", len(lines)-1-n)
	return nil
}
