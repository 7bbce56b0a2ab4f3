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

package disks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/agent/atomicfile"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// Disk is a disk the agent checks, as declared in the CacheNode.
type Disk struct {
	Name  string
	Path  string
	Media string // NVMe, SSD or HDD
	// TakeOverFrom names a CacheNode of the owner's namespace whose claim on the disk
	// this one takes over (see Checker.Claim); "" takes over nothing.
	TakeOverFrom string
}

// Parse reads a --disk flag value: name=nvme0,path=/mnt/nvme0,media=NVMe.
func Parse(s string) (Disk, error) {
	var d Disk
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return d, fmt.Errorf("disk %q: want name=NAME,path=PATH,media=NVMe|SSD|HDD", s)
		}
		switch k {
		case "name":
			d.Name = v
		case "path":
			d.Path = v
		case "media":
			d.Media = v
		case "takeOverFrom":
			d.TakeOverFrom = v
		default:
			return d, fmt.Errorf("disk %q: unknown key %q", s, k)
		}
	}
	if d.Name == "" || !filepath.IsAbs(d.Path) || (d.Media != "NVMe" && d.Media != "SSD" && d.Media != "HDD") {
		return d, fmt.Errorf("disk %q: want a name, an absolute path and media NVMe, SSD or HDD", s)
	}
	return d, nil
}

// String formats d as a --disk flag value.
func (d Disk) String() string {
	s := fmt.Sprintf("name=%s,path=%s,media=%s", d.Name, d.Path, d.Media)
	if d.TakeOverFrom != "" {
		s += ",takeOverFrom=" + d.TakeOverFrom
	}
	return s
}

// Checker checks that a declared disk is really there before nginx puts a cache on it.
type Checker struct {
	// MountInfo is the mount table to read, normally /proc/self/mountinfo.
	MountInfo string
	// SysRoot is where sysfs is mounted, normally /sys.
	SysRoot string
	// AllowUnmounted accepts a path that is not a mount point (development only).
	AllowUnmounted bool
	// Prefixes, when set, are where the cluster admin allows disk paths: a disk elsewhere
	// is refused.
	Prefixes []string
	// Owner names the CacheNode (namespace/name) whose disks these are; Claim writes it
	// into a disk's marker and refuses a disk another CacheNode claimed.
	Owner string
	// LeaseTimeout is how long after its last renewal a disk's lease (agentapi.DiskLease)
	// keeps a takeover away: the agent renews it at every check of a disk it uses.
	LeaseTimeout time.Duration
}

// DefaultLeaseTimeout: six of the agent's default disk rechecks (5s).
const DefaultLeaseTimeout = 30 * time.Second

// Check checks one disk: the path exists and is a directory; it is the root of a
// mounted filesystem (so a missing disk is never replaced by the root filesystem); it is
// empty or this CacheNode's (see Claim); it is writable; and its device's media matches
// the declaration where the kernel tells.
func (c Checker) Check(d Disk) agentapi.DiskStatus {
	st := agentapi.DiskStatus{Name: d.Name, Path: d.Path}
	fail := func(format string, args ...any) agentapi.DiskStatus {
		st.Reason = fmt.Sprintf(format, args...)
		return st
	}
	if c.Prefixes != nil && !underAny(d.Path, c.Prefixes) {
		return fail("not under a prefix the cluster admin allows (%s): refused", strings.Join(c.Prefixes, ", "))
	}
	info, err := os.Stat(d.Path)
	switch {
	case err != nil:
		return fail("path does not exist: %v", err)
	case !info.IsDir():
		return fail("path is not a directory")
	}

	mount, found, err := c.mountAt(d.Path)
	if err != nil {
		return fail("read mount table: %v", err)
	}
	if !found && !c.AllowUnmounted {
		return fail("not a mount point: no filesystem is mounted at %s, the cache would land on the root filesystem", d.Path)
	}
	if found && mount.root != "/" && !c.AllowUnmounted {
		return fail("not a disk: %s is a directory (%s) of another filesystem, not the root of a mounted disk", d.Path, mount.root)
	}
	if !c.AllowUnmounted && sameDevice(d.Path, "/") {
		return fail("on the root filesystem: %s is on the same device as /", d.Path)
	}

	// Read before anything is written: a disk holding what is not the cache's is left
	// exactly as it is.
	if o := c.ownership(d); o.reason != "" {
		return fail("%s", o.reason)
	}
	if err := probeWritable(d.Path); err != nil {
		return fail("not writable: %v", err)
	}

	if found {
		dev, rotational, known := c.blockDevice(mount.majorMinor)
		st.Device = dev
		if known {
			if reason := mediaMismatch(d.Media, dev, rotational); reason != "" {
				return fail("%s", reason)
			}
		}
	}
	st.Ready = true
	return st
}

// underAny reports whether path lies strictly under one of the prefixes.
func underAny(path string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// diskMarker is the content of a disk's marker.
type diskMarker struct {
	CacheNode string `json:"cacheNode"`
	Disk      string `json:"disk"`
}

// probePrefix names the agent's own short-lived write probes.
const probePrefix = ".edgepool-probe-"

// ownership is what a disk's root says of whose it is.
type ownership struct {
	// marked: the marker is there; takeOver: it names the CacheNode the disk is taken
	// over from (Disk.TakeOverFrom); released: a takeover's old cache is still there.
	marked, takeOver, released bool
	// reason says why the disk is not the cache's to use, "" when it is.
	reason string
	// foreign are the names at its root edgepool did not make.
	foreign []string
}

// ownership says whether a disk is the cache's to use: one marked as this CacheNode's
// is, one marked as the CacheNode it takes over from is, and so is an empty one (nothing
// but lost+found), which Claim marks.
func (c Checker) ownership(d Disk) ownership {
	var o ownership
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		o.reason = fmt.Sprintf("read %s: %v", d.Path, err)
		return o
	}
	for _, e := range entries {
		switch name := e.Name(); {
		case name == agentapi.DiskMarker:
			o.marked = true
		case name == "lost+found", name == agentapi.DiskLease,
			strings.HasPrefix(name, probePrefix), strings.HasPrefix(name, atomicfile.TempPrefix):
		default:
			o.foreign = append(o.foreign, name)
		}
	}
	if o.marked {
		// The cache, the purge record, the tag index and what a takeover renamed aside are
		// ours on a marked disk; unmarked, someone else's that looks like them.
		o.foreign = slices.DeleteFunc(o.foreign, func(name string) bool {
			released := strings.HasPrefix(name, agentapi.DiskReleasedPrefix)
			o.released = o.released || released
			return name == agentapi.DiskCacheDir || name == agentapi.DiskPurgeRecord || name == agentapi.DiskTagIndex || released
		})
		markerPath := filepath.Join(d.Path, agentapi.DiskMarker)
		var m diskMarker
		data, err := os.ReadFile(markerPath)
		if err == nil {
			err = json.Unmarshal(data, &m)
		}
		switch {
		case err != nil:
			o.reason = fmt.Sprintf("unreadable marker %s: %v: left alone", markerPath, err)
		case m.CacheNode == c.Owner:
		case d.TakeOverFrom != "" && m.CacheNode == c.namespace()+"/"+d.TakeOverFrom:
			o.takeOver = true
			if len(o.foreign) > 0 {
				o.reason = fmt.Sprintf("claimed by CacheNode %s, but also holds %s, which edgepool did not make: not taken over, since taking it over empties it; "+
					"empty it by hand", d.TakeOverFrom, nameFew(o.foreign))
			}
		default:
			o.reason = fmt.Sprintf("claimed by %s, per %s: left alone; once that CacheNode no longer lists the disk, "+
				"spec.disks[].takeOverFrom hands it over (its cache is emptied)", c.claimant(m), markerPath)
		}
		return o
	}
	if len(o.foreign) > 0 {
		o.reason = fmt.Sprintf("holds %s, which edgepool did not make: refused, since nginx's cache manager deletes what is not its cache; "+
			"empty %s or choose another path", nameFew(o.foreign), d.Path)
	}
	return o
}

func (c Checker) namespace() string {
	ns, _, _ := strings.Cut(c.Owner, "/")
	return ns
}

// Claim marks a disk that passed Check as this CacheNode's, if it is not yet, makes its
// cache directory, and renews its lease. A disk claimed by the CacheNode it takes over
// from is emptied first (its cache renamed aside and removed in the background, its purge
// record and tag index dropped), once its lease has lapsed: no pod of the previous owner
// uses it on this node any more.
func (c Checker) Claim(d Disk) error {
	// Read before anything is written: a disk that is not the cache's is left exactly
	// as it is.
	o := c.ownership(d)
	switch {
	case o.reason != "":
		return errors.New(o.reason)
	case o.takeOver:
		if err := c.takeOver(d); err != nil {
			return err
		}
	case !o.marked:
		if err := c.mark(d); err != nil {
			return err
		}
	}
	if o.released {
		go removeReleased(d.Path) // a takeover's removal the process did not finish
	}
	if err := os.MkdirAll(filepath.Join(d.Path, agentapi.DiskCacheDir), 0o755); err != nil {
		return err
	}
	return renewLease(d.Path)
}

func (c Checker) mark(d Disk) error {
	data, err := json.Marshal(diskMarker{CacheNode: c.Owner, Disk: d.Name})
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(d.Path, agentapi.DiskMarker), append(data, '\n'), 0o600)
}

// renewLease says this process uses the disk at path: its lease's time is now. No file
// is held open, so the disk can be unmounted underneath.
func renewLease(path string) error {
	lease := filepath.Join(path, agentapi.DiskLease)
	now := time.Now()
	err := os.Chtimes(lease, now, now)
	if errors.Is(err, os.ErrNotExist) {
		err = os.WriteFile(lease, nil, 0o600)
	}
	return err
}

// takeOver empties a disk claimed by the CacheNode d is taken over from, once its lease
// has lapsed, and claims it: the new marker first, so that the previous owner's agent,
// were it to start meanwhile, refuses the disk (or, running, finds its marker replaced
// and takes it out), then the old cache aside.
func (c Checker) takeOver(d Disk) error {
	timeout := c.LeaseTimeout
	if timeout <= 0 {
		timeout = DefaultLeaseTimeout
	}
	info, err := os.Stat(filepath.Join(d.Path, agentapi.DiskLease))
	if err == nil {
		if age := time.Since(info.ModTime()); age < timeout {
			return fmt.Errorf("claimed by CacheNode %s, whose pod on this node used it %s ago: taken over once it has not for %s",
				d.TakeOverFrom, age.Round(time.Second), timeout)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("take over %s: %w", d.Path, err)
	}
	released := filepath.Join(d.Path, fmt.Sprintf("%s%d", agentapi.DiskReleasedPrefix, time.Now().UnixNano()))
	err = c.mark(d)
	if err == nil {
		err = os.Rename(filepath.Join(d.Path, agentapi.DiskCacheDir), released)
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	}
	for _, file := range []string{agentapi.DiskPurgeRecord, agentapi.DiskTagIndex} {
		if err == nil {
			err = os.Remove(filepath.Join(d.Path, file))
			if errors.Is(err, os.ErrNotExist) {
				err = nil
			}
		}
	}
	if err != nil {
		return fmt.Errorf("take over %s from CacheNode %s: %w", d.Path, d.TakeOverFrom, err)
	}
	go removeReleased(d.Path)
	return nil
}

// removeReleased removes what takeovers renamed aside on the disk at path (a cache may
// take a while); what a process did not finish, the next claim of the disk removes.
func removeReleased(path string) {
	entries, _ := os.ReadDir(path)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), agentapi.DiskReleasedPrefix) {
			_ = os.RemoveAll(filepath.Join(path, e.Name()))
		}
	}
}

// nameFew lists up to three names, and how many more there are.
func nameFew(names []string) string {
	sort.Strings(names)
	if len(names) <= 3 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:3], ", "), len(names)-3)
}

// mediaMismatch says why a device does not match the declared media, or "" if it does.
func mediaMismatch(media, dev string, rotational bool) string {
	switch {
	case media == "HDD" && !rotational:
		return fmt.Sprintf("media mismatch: declared HDD but %s is non-rotational", dev)
	case media != "HDD" && rotational:
		return fmt.Sprintf("media mismatch: declared %s but %s is rotational", media, dev)
	case media == "NVMe" && !strings.HasPrefix(dev, "nvme"):
		return fmt.Sprintf("media mismatch: declared NVMe but %s is not an NVMe device", dev)
	}
	return ""
}

// sameDevice reports whether two paths are on the same filesystem.
func sameDevice(a, b string) bool {
	var sa, sb unix.Stat_t
	if unix.Stat(a, &sa) != nil || unix.Stat(b, &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev
}

func probeWritable(dir string) error {
	f, err := os.CreateTemp(dir, probePrefix)
	if err != nil {
		return err
	}
	name := f.Name()
	_, werr := f.Write([]byte("edgepool"))
	cerr := f.Close()
	rerr := os.Remove(name)
	for _, err := range []error{werr, cerr, rerr} {
		if err != nil {
			return err
		}
	}
	return nil
}

type mountEntry struct {
	majorMinor string // e.g. 259:1
	root       string // the path within its filesystem that is mounted here
}

// mountAt finds the filesystem mounted at path (the last one, if mounts are stacked).
func (c Checker) mountAt(path string) (mountEntry, bool, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return mountEntry{}, false, err
	}
	f, err := os.Open(c.MountInfo)
	if err != nil {
		return mountEntry{}, false, err
	}
	defer f.Close()
	mounts, err := mountinfo.GetMountsFromReader(f, nil)
	if err != nil {
		return mountEntry{}, false, err
	}
	var entry mountEntry
	found := false
	for _, m := range mounts {
		if m.Mountpoint == real {
			entry, found = mountEntry{majorMinor: fmt.Sprintf("%d:%d", m.Major, m.Minor), root: m.Root}, true
		}
	}
	return entry, found, nil
}

// blockDevice finds the whole-disk block device behind major:minor and whether it is
// rotational. known is false for filesystems without a block device (tmpfs, overlay).
func (c Checker) blockDevice(majorMinor string) (dev string, rotational, known bool) {
	sysPath, err := filepath.EvalSymlinks(filepath.Join(c.SysRoot, "dev", "block", majorMinor))
	if err != nil {
		return "", false, false
	}
	if _, err := os.Stat(filepath.Join(sysPath, "partition")); err == nil {
		sysPath = filepath.Dir(sysPath) // a partition: its disk is the parent
	}
	dev = filepath.Base(sysPath)
	data, err := os.ReadFile(filepath.Join(sysPath, "queue", "rotational"))
	if err != nil {
		return dev, false, false
	}
	return dev, strings.TrimSpace(string(data)) == "1", true
}

// Usage returns the used and available bytes of the filesystem holding path.
func Usage(path string) (used, avail uint64, err error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return 0, 0, err
	}
	bsize := uint64(fs.Bsize)
	return (fs.Blocks - fs.Bfree) * bsize, fs.Bavail * bsize, nil
}

// AdoptFresh lets the cache user write to a newly made filesystem, whose root
// directory belongs to root. It runs as root with only CAP_CHOWN, before the cache
// starts, and changes the owner of the disk's root directory, nothing else, and only when
// the disk passed every check and its root holds nothing but what mkfs makes (lost+found).
// Anything else is left as it is, and said why: the agent's own checks report it.
func (c Checker) AdoptFresh(d Disk, uid, gid int) (changed bool, reason string, err error) {
	var st unix.Stat_t
	if err := unix.Lstat(d.Path, &st); err != nil {
		return false, fmt.Sprintf("path: %v", err), nil // reported by the agent's checks
	}
	switch {
	case int(st.Uid) == uid && int(st.Gid) == gid:
		// Already adopted, or made for the cache: nothing to do (and root without
		// CAP_DAC_OVERRIDE could not run the write check in it).
		return false, "already the cache user's", nil
	case st.Uid != 0 || st.Gid != 0:
		return false, fmt.Sprintf("owned by %d:%d, neither root's nor the cache user's: left alone", st.Uid, st.Gid), nil
	}
	if check := c.Check(d); !check.Ready {
		return false, check.Reason, nil
	}
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		return false, "", err
	}
	for _, e := range entries {
		if e.Name() != "lost+found" {
			return false, fmt.Sprintf("not a fresh filesystem (holds %s): left alone", e.Name()), nil
		}
	}
	if err := os.Lchown(d.Path, uid, gid); err != nil {
		return false, "", fmt.Errorf("chown %s: %w", d.Path, err)
	}
	return true, "fresh filesystem handed to the cache user", nil
}

// Identity is what makes a disk the one nginx started with: the filesystem's device,
// and the inode of the marker the agent found or wrote on it.
type Identity struct {
	Dev       uint64
	MarkerIno uint64
}

// Identify records the identity of a disk that passed its checks and was claimed.
func (c Checker) Identify(d Disk) (Identity, error) {
	var root, marker unix.Stat_t
	if err := unix.Stat(d.Path, &root); err != nil {
		return Identity{}, err
	}
	if err := unix.Stat(filepath.Join(d.Path, agentapi.DiskMarker), &marker); err != nil {
		return Identity{}, err
	}
	return Identity{Dev: root.Dev, MarkerIno: marker.Ino}, nil
}

// Recheck checks a disk nginx runs on: it is still mounted, still the filesystem nginx
// started with (same device, same marker: anything else is never written to, not even by
// this check), and a bounded write, fsync and read back of a probe file beside the cache
// succeeds. It can block as long as the disk does: the caller bounds it.
func (c Checker) Recheck(d Disk, id Identity) CheckResult {
	fail := func(now bool, format string, args ...any) CheckResult {
		return CheckResult{Reason: fmt.Sprintf(format, args...), Now: now}
	}
	var st unix.Stat_t
	if err := unix.Stat(d.Path, &st); err != nil {
		return fail(!ioError(err), "stat %s: %v", d.Path, err)
	}
	elsewhere := func(format string, args ...any) CheckResult {
		return CheckResult{Reason: fmt.Sprintf(format, args...) + ": not written to; out until the filesystem nginx started on is back or the pod restarts",
			Now: true, OtherFilesystem: true}
	}
	if !c.AllowUnmounted {
		_, found, err := c.mountAt(d.Path)
		switch {
		case err != nil:
			return fail(false, "read mount table: %v", err)
		case !found: // what is left at the path is the filesystem beneath the mount point
			return elsewhere("not a mount point: the disk at %s was unmounted", d.Path)
		}
	}
	if st.Dev != id.Dev {
		return elsewhere("another filesystem is mounted at %s (device %d:%d, nginx started on %d:%d)",
			d.Path, unix.Major(st.Dev), unix.Minor(st.Dev), unix.Major(id.Dev), unix.Minor(id.Dev))
	}
	markerPath := filepath.Join(d.Path, agentapi.DiskMarker)
	var marker unix.Stat_t
	switch err := unix.Stat(markerPath, &marker); {
	case errors.Is(err, unix.ENOENT):
		return elsewhere("the marker %s is gone: another or a reformatted filesystem", markerPath)
	case err != nil:
		return fail(!ioError(err), "stat %s: %v", markerPath, err)
	case marker.Ino != id.MarkerIno:
		return elsewhere("the marker %s was replaced: another or a reformatted filesystem", markerPath)
	}
	if err := probeIO(d.Path); err != nil {
		switch {
		case errors.Is(err, unix.EROFS):
			return fail(true, "read-only: %v", err)
		case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
			return fail(true, "full: %v", err)
		}
		return fail(false, "I/O probe failed: %v", err)
	}
	if err := renewLease(d.Path); err != nil {
		return fail(!ioError(err), "renew the disk's lease: %v", err)
	}
	return CheckResult{OK: true}
}

// ioError says whether err is an I/O error, which one check alone does not trust.
func ioError(err error) bool {
	var errno unix.Errno
	return errors.As(err, &errno) && (errno == unix.EIO || errno == unix.ENXIO || errno == unix.ENODEV)
}

// The probe writes and reads probeBlocks blocks of probeBlock bytes, each its own system
// call: enough I/O that a disk failing one operation in a hundred fails about one probe
// in four (and, while it is out, practically never passes a whole cool-down of probes),
// little enough to run every second on a busy hard disk.
const (
	probeBlock  = 4096
	probeBlocks = 16
)

// probeIO writes a probe file beside the cache block by block, forces it to the disk,
// drops it from the page cache, reads it back block by block (without read-ahead, so each
// read reaches the disk) and removes it.
func probeIO(dir string) (err error) {
	f, err := os.CreateTemp(dir, probePrefix)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && !errors.Is(cerr, os.ErrClosed) && err == nil {
			err = cerr
		}
		if rerr := os.Remove(f.Name()); rerr != nil && err == nil {
			err = rerr
		}
	}()
	data := make([]byte, probeBlock*probeBlocks)
	stamp := []byte(fmt.Sprintf("edgepool probe %d\n", time.Now().UnixNano()))
	for i := 0; i < len(data); i += len(stamp) {
		copy(data[i:], stamp)
	}
	for off := 0; off < len(data); off += probeBlock {
		if _, err := f.WriteAt(data[off:off+probeBlock], int64(off)); err != nil {
			return err
		}
	}
	if err := f.Sync(); err != nil {
		return err
	}
	// The reads must reach the disk, not the pages just written.
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
	got := make([]byte, len(data))
	for off := 0; off < len(got); off += probeBlock {
		if _, err := f.ReadAt(got[off:off+probeBlock], int64(off)); err != nil {
			return err
		}
	}
	if !bytes.Equal(got, data) {
		return errors.New("read back other bytes than were written")
	}
	return nil
}

// claimant names the CacheNode a disk's marker names, as the readers of this CacheNode's
// status may see it: by name (and its disk) in the same namespace, else only as another
// namespace's; the marker on the node says which to the cluster admin.
func (c Checker) claimant(m diskMarker) string {
	ns, _, _ := strings.Cut(c.Owner, "/")
	theirs, name, _ := strings.Cut(m.CacheNode, "/")
	if theirs != ns {
		return "a CacheNode of another namespace"
	}
	return fmt.Sprintf("CacheNode %s (its disk %s)", name, m.Disk)
}
