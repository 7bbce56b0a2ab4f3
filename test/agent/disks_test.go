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

package agent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// mountTmpfs mounts a fresh tmpfs at dir (options such as "ro" appended).
func mountTmpfs(t testing.TB, dir string, opts ...string) {
	t.Helper()
	run(t, "mount", "-t", "tmpfs", "-o", strings.Join(append([]string{"size=64m", "mode=0777"}, opts...), ","), "edgepool-test", dir)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
}

// unmountUnderneath unmounts dir from under the running agent and nginx. The agent's
// disk checks and nginx's cache loader hold a file there for milliseconds at a time, so
// a busy mount is tried again, for up to 5 s.
func unmountUnderneath(t testing.TB, dir string) {
	t.Helper()
	var out []byte
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if out, err = exec.Command("umount", dir).CombinedOutput(); err == nil || !strings.Contains(string(out), "busy") {
			break
		}
	}
	if err != nil {
		t.Fatalf("umount %s: %v: %s", dir, err, out)
	}
}

// mountLoopDisk mounts an ext4 filesystem on a loop device (a non-rotational block
// device) at dir.
func mountLoopDisk(t testing.TB, dir string) {
	t.Helper()
	image := filepath.Join(sharedDir(t), "disk.img")
	run(t, "truncate", "-s", "32M", image)
	dev := run(t, "losetup", "--find", "--show", image)
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	run(t, "mkfs.ext4", "-q", dev)
	run(t, "mount", dev, dir)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
}

// mediaOf is the media of the device mounted at dir.
func mediaOf(t testing.TB, dir string) string {
	t.Helper()
	media, err := testkit.DeviceMedia(run(t, "findmnt", "-n", "-o", "SOURCE", dir))
	if err != nil {
		t.Fatal(err)
	}
	return media
}

// oppositeMedia is the media the device mounted at dir is not.
func oppositeMedia(t testing.TB, dir string) string {
	if mediaOf(t, dir) == "HDD" {
		return "SSD"
	}
	return "HDD"
}

func listening(port int32) bool {
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// TestFailedDiskChecksKeepNginxStopped: a disk that is not what the CacheNode declares is
// reported (readiness, /status, metrics) and nginx is not started.
func TestFailedDiskChecksKeepNginxStopped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		media  string
		setup  func(t *testing.T, dir string)
		reason string
	}{
		{"unmounted directory", "SSD", func(*testing.T, string) {}, "not a mount point"},
		{"read-only filesystem", "SSD", func(t *testing.T, dir string) { mountTmpfs(t, dir, "ro") }, "not writable"},
		{"directory of another filesystem", "SSD", func(t *testing.T, dir string) {
			src := diskDir(t, "src")
			mountTmpfs(t, src)
			if err := os.Mkdir(filepath.Join(src, "sub"), 0o777); err != nil {
				t.Fatal(err)
			}
			run(t, "mount", "--bind", filepath.Join(src, "sub"), dir)
			t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
		}, "not a disk"},
		{"media opposite to the device's", "", func(t *testing.T, dir string) { mountLoopDisk(t, dir) }, "media mismatch"},
		{"non-NVMe device declared NVMe", "NVMe", func(t *testing.T, dir string) { mountLoopDisk(t, dir) }, "media mismatch: declared NVMe but loop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := diskDir(t, "d0")
			tc.setup(t, dir)
			media := tc.media
			if media == "" {
				media = oppositeMedia(t, dir)
			}
			spec := testSpec(t, originAddr(origin(t, "A")), disk("d0", dir, media))
			cfg := newConfigDir(t)
			cfg.writeSpec(t, spec)
			agent := startAgent(t, cfg, spec)
			eventually(t, 10*time.Second, "the disk check to be reported", func() bool {
				code, _ := agent.get("/status")
				return code == http.StatusOK && len(agent.status(t).Disks) == 1
			})
			st := agent.status(t).Disks[0]
			if st.Ready || !strings.Contains(st.Reason, tc.reason) {
				t.Errorf("disk status = %+v, want not ready because %q", st, tc.reason)
			}
			code, body := agent.get("/readyz")
			if code != http.StatusServiceUnavailable || !strings.Contains(body, tc.reason) {
				t.Errorf("/readyz = %d %q, want 503 naming the disk problem", code, body)
			}
			if got := agent.metric("edgepool_disk_ready", map[string]string{"disk": "d0", "path": dir}); got != 0 {
				t.Errorf("edgepool_disk_ready = %v, want 0", got)
			}
			time.Sleep(500 * time.Millisecond) // a few re-checks
			if listening(spec.Listener.Port) || strings.Contains(agent.log.String(), "Started nginx") {
				t.Error("nginx was started on a disk that failed its checks")
			}
		})
	}
}

// TestDiskMountedLaterStartsNginx: once the missing disk is mounted, the agent's
// periodic re-check passes and nginx starts.
func TestDiskMountedLaterStartsNginx(t *testing.T) {
	dir := diskDir(t, "d0")
	spec := testSpec(t, originAddr(origin(t, "A")), disk("d0", dir, "HDD"))
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec)
	eventually(t, 10*time.Second, "the missing disk to be reported", func() bool {
		code, body := agent.get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "not a mount point")
	})
	mountTmpfs(t, dir) // tmpfs has no block device: media cannot be checked, the rest can
	agent.waitReady(t)
	if body, err := testkit.Get(context.Background(), http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/x", spec.Listener.Port)); err != nil || body != "A" {
		t.Fatalf("after the disk appeared: %q, %v", body, err)
	}
	if st := agent.status(t).Disks[0]; !st.Ready {
		t.Errorf("disk status = %+v, want ready", st)
	}
}

// TestDiskUnmountedUnderneathIsReported: the disks are checked again while nginx runs, so
// a disk unmounted under a running cache is taken out of the split at once and, being the
// only one, turns the pod unready, named in /status. A fresh filesystem mounted in its
// place is another disk: the agent does not write to it while nginx runs (the next start
// of the pod decides, with the startup checks).
func TestDiskUnmountedUnderneathIsReported(t *testing.T) {
	dir := diskDir(t, "d0")
	mountTmpfs(t, dir)
	spec := testSpec(t, originAddr(origin(t, "A")), disk("d0", dir, "HDD"))
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec)
	agent.waitReady(t)

	unmountUnderneath(t, dir)
	eventually(t, 10*time.Second, "the unmounted disk to be reported", func() bool {
		code, body := agent.get("/readyz")
		st := agent.status(t).Disks[0]
		return code == http.StatusServiceUnavailable && strings.Contains(body, "every disk is out of this node's split: d0: not a mount point") &&
			!st.Ready && strings.Contains(st.Reason, "not a mount point") && st.Out
	})
	mountTmpfs(t, dir)
	eventually(t, 10*time.Second, "the new filesystem to be refused", func() bool {
		st := agent.status(t).Disks[0]
		return st.Out && st.OtherFilesystem && strings.Contains(st.Reason, "not written to; out until the filesystem nginx started on is back")
	})
	time.Sleep(time.Second) // five more checks
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("the agent wrote to the filesystem mounted in the disk's place: %v, %v", entries, err)
	}
	if code, _ := agent.get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d with the only disk out, want 503", code)
	}
}

// TestShutdownAndNginxExit: SIGTERM shuts nginx down gracefully and the agent exits 0;
// if nginx dies, the agent exits non-zero so the kubelet restarts the pod.
func TestShutdownAndNginxExit(t *testing.T) {
	spec := testSpec(t, originAddr(origin(t, "A")), disk("d0", diskDir(t, "d0"), "SSD"))
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)

	agent := startAgent(t, cfg, spec, "--allow-unmounted")
	agent.waitReady(t)
	master := nginxMaster(t, agent.Pid())
	if err := syscall.Kill(agent.Pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-agent.Done():
		if agent.Err() != nil {
			t.Errorf("agent exit after SIGTERM: %v, want 0", agent.Err())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("agent did not exit after SIGTERM")
	}
	if syscall.Kill(master, 0) == nil {
		t.Error("nginx master still runs after the agent exited")
	}

	spec.Listener.Port = freePort(t)
	cfg.writeSpec(t, spec)
	agent = startAgent(t, cfg, spec, "--allow-unmounted")
	agent.waitReady(t)
	if err := syscall.Kill(nginxMaster(t, agent.Pid()), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-agent.Done():
		if agent.Err() == nil {
			t.Error("agent exited 0 after nginx died, want non-zero")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("agent did not exit after nginx died")
	}
}

// TestWorkersFollowCPULimit: worker_processes auto becomes the container's CPU limit.
func TestWorkersFollowCPULimit(t *testing.T) {
	cgroup := sharedDir(t)
	if err := os.WriteFile(filepath.Join(cgroup, "cpu.max"), []byte("100000 100000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := testSpec(t, originAddr(origin(t, "A")), disk("d0", diskDir(t, "d0"), "SSD"))
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec, "--allow-unmounted", "--cgroup-root", cgroup)
	agent.waitReady(t)
	if st := agent.status(t); st.WorkerProcesses != 1 {
		t.Errorf("/status workerProcesses = %d, want 1 (the CPU limit)", st.WorkerProcesses)
	}
	master := nginxMaster(t, agent.Pid())
	eventually(t, 5*time.Second, "one nginx worker", func() bool {
		workers := 0
		for _, pid := range children(t, master) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.Contains(string(cmdline), "worker process") {
				workers++
			}
		}
		return workers == 1
	})
}

// children lists the PIDs whose parent is pid.
func children(t testing.TB, pid int) []int {
	t.Helper()
	kids, err := testkit.Children(pid)
	if err != nil {
		t.Fatal(err)
	}
	return kids
}

// nginxMaster is the agent's nginx child.
func nginxMaster(t testing.TB, agentPID int) int {
	t.Helper()
	kids := children(t, agentPID)
	if len(kids) != 1 {
		t.Fatalf("agent has children %v, want exactly nginx", kids)
	}
	return kids[0]
}

// A fresh filesystem's root belongs to root; the init step hands it, and only it, to the
// cache user. A disk holding anything else, and a directory that is not a disk, are left
// exactly as they were.
func TestAdoptFreshDisks(t *testing.T) {
	fresh, foreign, plain := sharedDir(t), sharedDir(t), sharedDir(t)
	for _, dir := range []string{fresh, foreign} {
		image := filepath.Join(sharedDir(t), "disk.img")
		run(t, "truncate", "-s", "32M", image)
		dev := run(t, "losetup", "--find", "--show", image)
		t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
		run(t, "mkfs.ext4", "-q", dev)
		run(t, "mount", dev, dir)
		t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	}
	if err := os.WriteFile(filepath.Join(foreign, "someone-elses.db"), []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(plain, 0, 0); err != nil {
		t.Fatal(err)
	}
	before := map[string]syscall.Stat_t{}
	for _, dir := range []string{foreign, plain} {
		var st syscall.Stat_t
		must(syscall.Stat(dir, &st))
		before[dir] = st
	}

	// As the init container runs it: root with no capability but CAP_CHOWN.
	adopt := func() string {
		return run(t, "setpriv", "--bounding-set=-all,+chown", "--inh-caps=-all", "--", agentBinary,
			"--adopt-fresh-disks", "--cache-uid=101",
			"--disk=name=fresh,path="+fresh+",media="+mediaOf(t, fresh),
			"--disk=name=foreign,path="+foreign+",media="+mediaOf(t, foreign),
			"--disk=name=plain,path="+plain+",media=SSD")
	}
	out := adopt()

	var st syscall.Stat_t
	must(syscall.Stat(fresh, &st))
	if st.Uid != 101 || st.Gid != 101 {
		t.Errorf("fresh disk: owner %d:%d, want 101:101\n%s", st.Uid, st.Gid, out)
	}
	for dir, was := range before {
		must(syscall.Stat(dir, &st))
		if st.Uid != was.Uid || st.Gid != was.Gid || st.Mode != was.Mode {
			t.Errorf("%s changed: owner %d:%d mode %o, was %d:%d %o", dir, st.Uid, st.Gid, st.Mode, was.Uid, was.Gid, was.Mode)
		}
	}
	if b, err := os.ReadFile(filepath.Join(foreign, "someone-elses.db")); err != nil || string(b) != "data" {
		t.Errorf("the foreign file changed: %q, %v", b, err)
	}
	for _, want := range []string{`"disk":"foreign"`, "holds someone-elses.db, which edgepool did not make", `"disk":"plain"`, "not a mount point"} {
		if !strings.Contains(out, want) {
			t.Errorf("the agent's log does not say %q:\n%s", want, out)
		}
	}
	// Once adopted, a restart of the pod finds the disk the cache user's and leaves it.
	if again := adopt(); !strings.Contains(again, `"disk":"fresh","path":"`+fresh+`","adopted":false,"reason":"already the cache user's"`) {
		t.Errorf("second run on the adopted disk:\n%s", again)
	}
}

// TestForeignFilesAreNeverTouched: nginx's cache manager deletes every file under a cache
// path that is not a cache file, so the agent starts nginx only on a disk that is empty
// or already marked as this CacheNode's. A disk holding someone's files is refused, named
// in /readyz and /status, and keeps every byte; emptied, it is claimed and serves.
func TestForeignFilesAreNeverTouched(t *testing.T) {
	dir := diskDir(t, "d0")
	mountTmpfs(t, dir)
	precious := make([]byte, 1<<20)
	if _, err := rand.Read(precious); err != nil {
		t.Fatal(err)
	}
	foreign := filepath.Join(dir, "backup.tar")
	if err := os.WriteFile(foreign, precious, 0o644); err != nil {
		t.Fatal(err)
	}
	spec := testSpec(t, originAddr(origin(t, "A")), disk("d0", dir, "HDD"))
	// The test origin sends no caching headers: store its 200s (forced freshness).
	spec.Cache.Valid = []v1alpha1.CacheValidity{{Codes: []string{"200"}, Duration: "1h"}}
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec)

	eventually(t, 10*time.Second, "the foreign files to be reported", func() bool {
		code, body := agent.get("/readyz")
		st, err := agent.Status(context.Background())
		return err == nil && code == http.StatusServiceUnavailable && strings.Contains(body, "holds backup.tar, which edgepool did not make") &&
			!st.Disks[0].Ready && strings.Contains(st.Disks[0].Reason, "empty "+dir+" or choose another path")
	})
	time.Sleep(time.Second) // five more checks of the disk
	if got, err := os.ReadFile(foreign); err != nil || !bytes.Equal(got, precious) {
		t.Fatalf("the foreign file changed (err %v)", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the refused disk holds %d entries, want only the foreign file", len(entries))
	}
	if st := agent.status(t); st.ConfigHash != "" {
		t.Errorf("nginx runs configuration %s on a refused disk", st.ConfigHash)
	}

	if err := os.Remove(foreign); err != nil {
		t.Fatal(err)
	}
	agent.waitReady(t)
	if body, err := testkit.Get(context.Background(), http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/y", spec.Listener.Port)); err != nil || body != "A" {
		t.Fatalf("after the disk was emptied: %q, %v", body, err)
	}
	if _, err := os.Stat(filepath.Join(dir, agentapi.DiskMarker)); err != nil {
		t.Errorf("the claimed disk has no marker: %v", err)
	}
	eventually(t, 10*time.Second, "the response to be cached in the disk's cache directory", func() bool {
		files := 0
		_ = filepath.WalkDir(filepath.Join(dir, agentapi.DiskCacheDir), func(_ string, e os.DirEntry, _ error) error {
			if e != nil && !e.IsDir() {
				files++
			}
			return nil
		})
		return files == 1
	})
}
