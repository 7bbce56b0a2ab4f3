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
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// FaultDisk is an ext4 filesystem on a loop device, mounted at Dir, whose failures the
// kernel produces. It needs root.
//
// Device-mapper (dmsetup's error, flakey and delay targets) would be the natural tool, but
// this project's kernels are built without it (CONFIG_BLK_DEV_DM is not set: dmsetup finds
// no /dev/mapper/control driver), so the faults come from the filesystem and the mount:
//   - Shutdown is ext4's EXT4_IOC_SHUTDOWN, the path the kernel takes when the device under
//     a mounted ext4 dies: the filesystem aborts and every read and write fails with EIO,
//     also on files nginx holds open;
//   - ReadOnly remounts it read-only (EROFS), as the kernel does after errors with
//     errors=remount-ro;
//   - Fill takes every free block (ENOSPC);
//   - Remount unmounts it and mounts the same device again: the journal is recovered and
//     the files synced before the fault are back, on the same device number.
type FaultDisk struct {
	Dir   string
	Image string
	Dev   string // /dev/loopN
}

// NewFaultDisk makes an ext4 filesystem of size (truncate's syntax, e.g. 64M) in image
// on a free loop device and mounts it at dir, open to every user (the agent and nginx run
// unprivileged in the tests).
func NewFaultDisk(dir, image, size string) (*FaultDisk, error) {
	d := &FaultDisk{Dir: dir, Image: image}
	if _, err := run("truncate", "-s", size, image); err != nil {
		return nil, err
	}
	dev, err := run("losetup", "--find", "--show", image)
	if err != nil {
		return nil, err
	}
	d.Dev = dev
	if _, err := run("mkfs.ext4", "-q", dev); err != nil {
		return nil, errors.Join(err, d.Close())
	}
	if err := d.mount(); err != nil {
		return nil, errors.Join(err, d.Close())
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, errors.Join(err, d.Close())
	}
	return d, nil
}

func (d *FaultDisk) mount() error {
	_, err := run("mount", "-t", "ext4", d.Dev, d.Dir)
	return err
}

// Shutdown syncs the filesystem, then makes every further read and write of it fail
// with EIO, as when its device dies.
func (d *FaultDisk) Shutdown() error {
	f, err := os.Open(d.Dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", d.Dir, err)
	}
	const (
		ext4IocShutdown    = 0x8004587d // _IOR('X', 125, __u32)
		ext4GoingFlagsLogF = 1          // EXT4_GOING_FLAGS_LOGFLUSH: commit the journal, then stop
	)
	if err := unix.IoctlSetPointerInt(int(f.Fd()), ext4IocShutdown, ext4GoingFlagsLogF); err != nil {
		return fmt.Errorf("EXT4_IOC_SHUTDOWN %s: %w", d.Dir, err)
	}
	return nil
}

// Remount unmounts the filesystem (retrying while a process still holds a file of it)
// and mounts the same device again at the same place.
func (d *FaultDisk) Remount() error {
	if err := d.Unmount(); err != nil {
		return err
	}
	return d.mount()
}

// Unmount unmounts the filesystem, retrying while a process still holds a file of it:
// the mount point's own directory is what is left at Dir. Mount mounts it again.
func (d *FaultDisk) Unmount() error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err = run("umount", d.Dir); err == nil || time.Now().After(deadline) {
			return err
		}
	}
}

// Mount mounts the device again at Dir after Unmount.
func (d *FaultDisk) Mount() error { return d.mount() }

// ReadOnly remounts the filesystem read-only; ReadWrite makes it writable again. The
// kernel refuses while a file is open for writing (the agent's probe, a fill of nginx's):
// it retries, as an admin would.
func (d *FaultDisk) ReadOnly() error {
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err = run("mount", "-o", "remount,ro", d.Dir); err == nil || !strings.Contains(err.Error(), "busy") || time.Now().After(deadline) {
			return err
		}
	}
}

// ReadWrite makes a filesystem remounted read-only writable again.
func (d *FaultDisk) ReadWrite() error {
	_, err := run("mount", "-o", "remount,rw", d.Dir)
	return err
}

// Fill takes every free block with a file at the root of the filesystem, which nobody
// but root could write anyway (ext4 keeps blocks for root), and returns its path: removing
// it frees the space.
func (d *FaultDisk) Fill() (string, error) {
	path := filepath.Join(d.Dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var st unix.Statfs_t
	if err := unix.Statfs(d.Dir, &st); err != nil {
		return "", err
	}
	// Ask for all of it; ext4 takes what it has and says ENOSPC.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(st.Bfree)*st.Bsize); err != nil && !errors.Is(err, unix.ENOSPC) {
		return "", fmt.Errorf("fallocate: %w", err)
	}
	// What fallocate leaves (blocks for its own metadata) is written until the disk is full.
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				return path, f.Sync()
			}
			return "", err
		}
	}
}

// Close unmounts the filesystem (lazily: a test that failed may leave a process on it)
// and detaches the loop device. It never formats or deletes anything but the image.
func (d *FaultDisk) Close() error {
	var errs []error
	if d.Dir != "" {
		if mounted, _ := run("findmnt", "-n", "-o", "SOURCE", "--mountpoint", d.Dir); mounted != "" {
			if _, err := run("umount", "-l", d.Dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if d.Dev != "" {
		if _, err := run("losetup", "-d", d.Dev); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// DeviceMedia is HDD if the block device dev (e.g. /dev/loop3) is rotational, else SSD.
// A loop device inherits rotational from the disk holding its image.
func DeviceMedia(dev string) (string, error) {
	rotational, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "queue", "rotational"))
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(string(rotational)) == "1" {
		return "HDD", nil
	}
	return "SSD", nil
}
