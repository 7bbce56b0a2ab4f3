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

package testkit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FaultFS mounts a directory (on a real disk, e.g. a FaultDisk) through FUSE at Dir and
// fails or delays its data operations on demand: what device-mapper's flakey and delay
// targets would do below a filesystem, here above one, since this project's kernels have
// no device-mapper. Every read, write and fsync of a file reaches it (the kernel drops a
// FUSE file's pages when it is opened again), and the kernel hands its errors to the
// caller as they are. It needs root and /dev/fuse.
type FaultFS struct {
	Dir    string
	server *fuse.Server

	failPerMillion atomic.Int64 // chance of EIO per data operation
	delay          atomic.Int64 // time.Duration added to each data operation
	mu             sync.Mutex
	hung           chan struct{} // closed when not hung
	rngMu          sync.Mutex
	rng            *rand.Rand
	failed         atomic.Int64
	ops            atomic.Int64
}

// MountFaultFS mounts backing at dir (which must exist), open to every user.
func MountFaultFS(backing, dir string, seed uint64) (*FaultFS, error) {
	f := &FaultFS{Dir: dir, hung: make(chan struct{}), rng: rand.New(rand.NewPCG(seed, 0xfa17))}
	close(f.hung)
	root, err := fs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, err
	}
	wrapped := &faultNode{LoopbackNode: root.(*fs.LoopbackNode), fs: f}
	wrapped.RootData.RootNode = wrapped
	second := time.Second
	server, err := fs.Mount(dir, wrapped, &fs.Options{
		EntryTimeout: &second, AttrTimeout: &second,
		MountOptions: fuse.MountOptions{
			AllowOther: true, DirectMount: true, FsName: "faultfs", Name: "faultfs", DisableXAttrs: true,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("faultfs: mount %s: %w", dir, err)
	}
	f.server = server
	return f, nil
}

// Unmount releases a hang and unmounts the filesystem.
func (f *FaultFS) Unmount() error {
	f.Hang(false)
	return f.server.Unmount()
}

// FailRate makes each read, write and fsync fail with EIO with the given chance.
func (f *FaultFS) FailRate(p float64) { f.failPerMillion.Store(int64(p * 1e6)) }

// Delay adds d to each read, write and fsync.
func (f *FaultFS) Delay(d time.Duration) { f.delay.Store(int64(d)) }

// Hang makes every read, write and fsync wait until Hang(false), as on a disk that stopped
// answering.
func (f *FaultFS) Hang(hang bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.hung:
		if hang {
			f.hung = make(chan struct{})
		}
	default:
		if !hang {
			close(f.hung)
		}
	}
}

// Counts returns the data operations seen and those failed.
func (f *FaultFS) Counts() (ops, failed int64) { return f.ops.Load(), f.failed.Load() }

// fault applies the faults to one data operation: it waits and says whether it fails.
func (f *FaultFS) fault(ctx context.Context) syscall.Errno {
	f.ops.Add(1)
	f.mu.Lock()
	hung := f.hung
	f.mu.Unlock()
	select {
	case <-hung:
	case <-ctx.Done(): // the caller was interrupted
		return syscall.EINTR
	}
	if d := time.Duration(f.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	if p := f.failPerMillion.Load(); p > 0 {
		f.rngMu.Lock()
		fail := f.rng.Int64N(1e6) < p
		f.rngMu.Unlock()
		if fail {
			f.failed.Add(1)
			return syscall.EIO
		}
	}
	return 0
}

// faultNode is a loopback node whose files go through the faults.
type faultNode struct {
	*fs.LoopbackNode
	fs *FaultFS
}

var (
	_ fs.NodeWrapChilder = (*faultNode)(nil)
	_ fs.NodeOpener      = (*faultNode)(nil)
	_ fs.NodeCreater     = (*faultNode)(nil)
)

func (n *faultNode) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &faultNode{LoopbackNode: ops.(*fs.LoopbackNode), fs: n.fs}
}

func (n *faultNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fuseFlags, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &faultFile{f: fh.(*fs.LoopbackFile), fs: n.fs}, fuseFlags, 0
}

func (n *faultNode) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	inode, fh, fuseFlags, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return inode, &faultFile{f: fh.(*fs.LoopbackFile), fs: n.fs}, fuseFlags, 0
}

// faultFile is a loopback file whose reads, writes and fsyncs go through the faults. It
// names each operation it passes on, so that none reaches the backing file unfaulted (no
// passthrough).
type faultFile struct {
	f  *fs.LoopbackFile
	fs *FaultFS
}

var (
	_ fs.FileReader    = (*faultFile)(nil)
	_ fs.FileWriter    = (*faultFile)(nil)
	_ fs.FileFsyncer   = (*faultFile)(nil)
	_ fs.FileFlusher   = (*faultFile)(nil)
	_ fs.FileReleaser  = (*faultFile)(nil)
	_ fs.FileGetattrer = (*faultFile)(nil)
	_ fs.FileSetattrer = (*faultFile)(nil)
	_ fs.FileLseeker   = (*faultFile)(nil)
	_ fs.FileAllocater = (*faultFile)(nil)
)

func (h *faultFile) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := h.fs.fault(ctx); errno != 0 {
		return nil, errno
	}
	return h.f.Read(ctx, buf, off)
}

func (h *faultFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := h.fs.fault(ctx); errno != 0 {
		return 0, errno
	}
	return h.f.Write(ctx, data, off)
}

func (h *faultFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if errno := h.fs.fault(ctx); errno != 0 {
		return errno
	}
	return h.f.Fsync(ctx, flags)
}

func (h *faultFile) Flush(ctx context.Context) syscall.Errno   { return h.f.Flush(ctx) }
func (h *faultFile) Release(ctx context.Context) syscall.Errno { return h.f.Release(ctx) }
func (h *faultFile) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.f.Getattr(ctx, out)
}

func (h *faultFile) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return h.f.Setattr(ctx, in, out)
}

func (h *faultFile) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.f.Lseek(ctx, off, whence)
}

func (h *faultFile) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	return h.f.Allocate(ctx, off, size, mode)
}
