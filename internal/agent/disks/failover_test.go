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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
)

func TestFind(t *testing.T) {
	disks := []Disk{{Name: "a", Path: "/mnt/a"}, {Name: "ab", Path: "/mnt/ab"}}
	for path, want := range map[string]string{
		"/mnt/ab/cache/x": "ab", "/run/edgepool/disks/ab/3/1c/x": "ab", "/run/edgepool/disks/a/3/1c/x": "a",
		"/mnt/abc/cache/x": "", "/run/edgepool/disks/abc/x": "", "/run/edgepool/out/a/x": "", "/mnt/b/cache/x": "",
	} {
		if d, ok := Find(disks, "/run/edgepool", path); d.Name != want || ok != (want != "") {
			t.Errorf("Find %s = %q, %v, want %q", path, d.Name, ok, want)
		}
	}
}

// clock is a settable time for the failover.
type clock struct{ t time.Time }

func (c *clock) now() time.Time           { return c.t }
func (c *clock) step(d time.Duration)     { c.t = c.t.Add(d) }
func outOf(f *Failover, disk string) bool { _, ok := f.Out()[disk]; return ok }

var testPolicy = agentapi.FailoverPolicy{IOErrors: 5, ErrorWindowSeconds: 10, CheckFailures: 2, CooldownSeconds: 60, MaxCooldownSeconds: 600}

// TestFailoverErrorWindow: errors take a disk out only when enough fall within the
// window; a single transient error, or a trickle slower than the window, does not.
func TestFailoverErrorWindow(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	f := NewFailover(testPolicy, []string{"d0", "d1"}, c.now)
	if f.IOError("d0", "pread() failed (5: Input/output error)") || outOf(f, "d0") {
		t.Fatal("one error took the disk out")
	}
	if !f.Suspect("d0") || f.Suspect("d1") {
		t.Error("a disk with a recent error is suspect, one without is not")
	}
	for range 20 { // one error every 3s: never 5 within 10s
		c.step(3 * time.Second)
		if f.IOError("d0", "x") {
			t.Fatal("a trickle of errors took the disk out")
		}
	}
	c.step(time.Minute)
	for i := range 5 {
		c.step(time.Second)
		took := f.IOError("d0", "pread() failed (5: Input/output error)")
		if took != (i == 4) {
			t.Fatalf("error %d: took out = %v", i+1, took)
		}
	}
	o := f.Out()["d0"]
	if !strings.HasPrefix(o.Reason, "5 I/O errors in 10s, the last: pread() failed (5: Input/output error)") || o.Cooldown != time.Minute {
		t.Errorf("out = %+v", o)
	}
	if outOf(f, "d1") || f.IOError("nope", "x") {
		t.Error("another disk, or an unknown one, was affected")
	}
}

// TestFailoverChecks: one failed I/O probe is not enough, two within the window are, a
// passed check between them or not (a flaky disk passes every other check); a check that
// finds the disk gone takes it out at once; the disk is put back after a cool-down of
// clean checks, and an error or failure during it starts the cool-down again.
func TestFailoverChecks(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	f := NewFailover(testPolicy, []string{"d0"}, c.now)
	probe := CheckResult{Reason: "I/O probe failed: EIO"}
	if f.Checked("d0", probe) || !f.Suspect("d0") {
		t.Fatal("one failed probe took the disk out, or left it unsuspected")
	}
	c.step(11 * time.Second)
	if f.Checked("d0", probe) || outOf(f, "d0") {
		t.Fatal("two failed probes 11s apart took the disk out")
	}
	if f.Checked("d0", CheckResult{OK: true}) || !f.Suspect("d0") {
		t.Fatal("a passed check took the disk out, or forgave the failure before it")
	}
	c.step(time.Second)
	if !f.Checked("d0", probe) || !strings.HasPrefix(f.Out()["d0"].Reason, "2 checks failed in 10s") {
		t.Fatalf("two failed probes within the window: out = %v", f.Out())
	}
	// The cool-down: clean checks for a minute.
	f.Checked("d0", CheckResult{OK: true})
	c.step(50 * time.Second)
	f.Checked("d0", CheckResult{OK: true})
	f.IOError("d0", "a late error of a request in flight") // restarts the cool-down
	c.step(20 * time.Second)
	if f.Checked("d0", CheckResult{OK: true}) {
		t.Fatal("put back although an error fell within the cool-down")
	}
	c.step(59 * time.Second)
	if f.Checked("d0", CheckResult{OK: true}) {
		t.Fatal("put back before a full cool-down of clean checks")
	}
	c.step(time.Second)
	if !f.Checked("d0", CheckResult{OK: true}) || outOf(f, "d0") {
		t.Fatal("not put back after the cool-down")
	}
	// Gone: at once.
	if !f.Checked("d0", CheckResult{Reason: "not a mount point", Now: true}) {
		t.Fatal("an unmounted disk was not taken out at once")
	}
}

// TestFailoverDoesNotFlap: a disk that fails again soon after its return waits twice as
// long each time (up to the maximum); one that stayed healthy for the maximum starts over.
func TestFailoverDoesNotFlap(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	f := NewFailover(testPolicy, []string{"d0"}, c.now)
	gone := CheckResult{Reason: "read-only", Now: true}
	var cooldowns []time.Duration
	for range 6 {
		if !f.Checked("d0", gone) {
			t.Fatal("not taken out")
		}
		cd := f.Out()["d0"].Cooldown
		cooldowns = append(cooldowns, cd)
		f.Checked("d0", CheckResult{OK: true})
		c.step(cd)
		if !f.Checked("d0", CheckResult{OK: true}) {
			t.Fatal("not put back after its cool-down")
		}
		c.step(5 * time.Second) // fails again soon
	}
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	for i := range want {
		if cooldowns[i] != want[i] {
			t.Fatalf("cool-downs %v, want %v", cooldowns, want)
		}
	}
	c.step(10 * time.Minute)
	f.Checked("d0", gone)
	if cd := f.Out()["d0"].Cooldown; cd != time.Minute {
		t.Errorf("after %s healthy, the cool-down is %s, want the base again", 10*time.Minute, cd)
	}
}

// TestFailoverOtherFilesystem: a disk that came back as another filesystem is never put
// back, however long its checks say so; once the filesystem nginx started on is back, it
// is put back after its cool-down.
func TestFailoverOtherFilesystem(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	f := NewFailover(testPolicy, []string{"d0"}, c.now)
	f.Checked("d0", CheckResult{Reason: "not a mount point", Now: true})
	other := CheckResult{Reason: "another filesystem is mounted: not written to", Now: true, OtherFilesystem: true}
	for range 100 {
		c.step(time.Minute)
		if f.Checked("d0", other) {
			t.Fatal("put back a disk that is another filesystem")
		}
	}
	if o := f.Out()["d0"]; !o.OtherFilesystem || !strings.Contains(o.Reason, "another filesystem") {
		t.Errorf("out = %+v, want another filesystem, named", o)
	}
	f.Checked("d0", CheckResult{OK: true})
	c.step(time.Minute)
	if !f.Checked("d0", CheckResult{OK: true}) {
		t.Error("not put back after the filesystem nginx started on came back for a cool-down")
	}
}

// TestRecheck: the checks of a running disk, on a real directory.
func TestRecheck(t *testing.T) {
	dir := t.TempDir()
	c := Checker{AllowUnmounted: true, Owner: "ns/cn"}
	d := Disk{Name: "d0", Path: dir, Media: "SSD"}
	if err := c.Claim(d); err != nil {
		t.Fatal(err)
	}
	id, err := c.Identify(d)
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Recheck(d, id); !r.OK {
		t.Fatalf("healthy disk: %+v", r)
	}
	// The marker, the cache and the lease the check renews.
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("the probe left files behind: %v", entries)
	}
	if r := c.Recheck(d, Identity{Dev: id.Dev + 1, MarkerIno: id.MarkerIno}); r.OK || !r.OtherFilesystem || !strings.Contains(r.Reason, "another filesystem is mounted") {
		t.Errorf("other device: %+v", r)
	}
	marker := filepath.Join(dir, agentapi.DiskMarker)
	data, _ := os.ReadFile(marker)
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	if r := c.Recheck(d, id); r.OK || !r.OtherFilesystem || !strings.Contains(r.Reason, "is gone") {
		t.Errorf("marker gone: %+v", r)
	}
	// A file takes the freed inode first, so that the new marker gets another.
	filler := filepath.Join(t.TempDir(), "filler")
	if err := os.WriteFile(filepath.Join(dir, "filler"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(marker, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "filler"), filler); err != nil {
		t.Fatal(err)
	}
	if r := c.Recheck(d, id); r.OK || !r.OtherFilesystem {
		t.Errorf("marker replaced (another inode): %+v", r)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("a disk that is another filesystem was written to: %v", entries)
	}
}

// TestFailoverPolicyChange: a change of the CacheNode's policy keeps each disk's state and
// brings its cool-down within the new bounds.
func TestFailoverPolicyChange(t *testing.T) {
	want := agentapi.FailoverPolicy{IOErrors: 3, CheckFailures: 4, ErrorWindowSeconds: 20, CooldownSeconds: 5, MaxCooldownSeconds: 40}

	c := &clock{t: time.Unix(1000, 0)}
	f := NewFailover(testPolicy, []string{"d0", "d1"}, c.now)
	f.Checked("d0", CheckResult{Reason: "read-only", Now: true})
	f.SetPolicy(want)
	if f.Policy() != want {
		t.Fatalf("Policy = %+v after SetPolicy(%+v)", f.Policy(), want)
	}
	if o, ok := f.Out()["d0"]; !ok || o.Cooldown != 5*time.Second {
		t.Errorf("d0 after the change: %+v, %v; want still out, its cool-down the new 5s", o, ok)
	}
	f.SetPolicy(agentapi.FailoverPolicy{IOErrors: 3, CheckFailures: 4, ErrorWindowSeconds: 20, CooldownSeconds: 30, MaxCooldownSeconds: 120})
	if o := f.Out()["d0"]; o.Cooldown != 30*time.Second {
		t.Errorf("d0's cool-down %s after the policy's went from 5s to 30s, want 30s", o.Cooldown)
	}
	f.Checked("d0", CheckResult{OK: true}) // back after its cool-down, then failing again: doubled
	c.step(30 * time.Second)
	f.Checked("d0", CheckResult{OK: true})
	f.Checked("d0", CheckResult{Reason: "read-only", Now: true})
	f.SetPolicy(want)
	if o := f.Out()["d0"]; o.Cooldown != 10*time.Second {
		t.Errorf("d0's doubled cool-down %s after the policy's went from 30s to 5s, want 10s", o.Cooldown)
	}
	for range 3 { // the new policy counts 3 errors, not 5
		f.IOError("d1", "pread() failed (5: Input/output error)")
	}
	if !outOf(f, "d1") {
		t.Error("3 I/O errors did not take d1 out under a policy of 3")
	}
}
