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
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
)

// Find returns the disk whose path holds path, or whose link under nginx's prefix
// runDir (nginxconf.DiskLink: the path nginx names in its errors) does.
func Find(disks []Disk, runDir, path string) (Disk, bool) {
	for _, d := range disks {
		if strings.HasPrefix(path, d.Path+"/") || strings.HasPrefix(path, filepath.Join(runDir, nginxconf.DiskLink(d.Name))+"/") {
			return d, true
		}
	}
	return Disk{}, false
}

// CheckResult is the outcome of one check of a running disk.
type CheckResult struct {
	OK     bool
	Reason string
	// Now says the failure needs no confirmation: the disk is gone, another filesystem,
	// read-only or full.
	Now bool
	// OtherFilesystem says another filesystem is where the disk was (the disk unmounted,
	// another device, or its marker gone or replaced): it is never written to, and the disk
	// stays out until the filesystem nginx started on is back, or the pod restarts and the
	// startup checks decide.
	OtherFilesystem bool
}

// diskHealth is what the failover knows of one disk.
type diskHealth struct {
	errors       []time.Time // recent I/O errors, oldest first
	failedChecks []time.Time // failed checks within the window, oldest first
	out          bool
	reason       string
	since        time.Time
	otherFS      bool
	cleanSince   time.Time // while out: since when every check passed; zero after a failure
	cooldown     time.Duration
	returned     time.Time // when it was last put back
}

// Out is a disk out of the split, and why.
type Out struct {
	Reason          string
	Since           time.Time
	Cooldown        time.Duration
	OtherFilesystem bool
}

// Failover decides which disks are out of the node's split, from the I/O errors nginx
// reports and the agent's own checks. It does no I/O: the agent feeds it and applies its
// decisions.
type Failover struct {
	policy agentapi.FailoverPolicy
	now    func() time.Time

	mu    sync.Mutex
	disks map[string]*diskHealth
}

// NewFailover keeps the health of the named disks under policy, reading the time from now.
func NewFailover(policy agentapi.FailoverPolicy, names []string, now func() time.Time) *Failover {
	f := &Failover{policy: policy, now: now, disks: map[string]*diskHealth{}}
	for _, n := range names {
		f.disks[n] = &diskHealth{cooldown: policy.Cooldown()}
	}
	return f
}

// SetPolicy changes the policy. A disk keeps its state; its cool-down, doubled or not,
// scales with the policy's and stays within the new bounds.
func (f *Failover) SetPolicy(p agentapi.FailoverPolicy) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == f.policy {
		return
	}
	for _, h := range f.disks {
		scaled := time.Duration(float64(h.cooldown) * float64(p.Cooldown()) / float64(f.policy.Cooldown()))
		h.cooldown = min(max(scaled, p.Cooldown()), p.MaxCooldown())
	}
	f.policy = p
}

// Policy is the policy in force.
func (f *Failover) Policy() agentapi.FailoverPolicy {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.policy
}

// maxErrors bounds the timestamps kept per disk.
const maxErrors = 10000

// IOError records an I/O error on disk; it reports whether the disk was taken out.
func (f *Failover) IOError(disk, what string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.disks[disk]
	if !ok {
		return false
	}
	now := f.now()
	h.errors = append(h.errors, now)
	if len(h.errors) > maxErrors {
		h.errors = h.errors[len(h.errors)-maxErrors:]
	}
	n := f.recentErrors(h, now)
	if h.out {
		h.cleanSince = time.Time{}
		return false
	}
	if n >= f.policy.IOErrors {
		f.takeOut(h, now, fmt.Sprintf("%d I/O errors in %s, the last: %s", n, f.policy.ErrorWindow(), what))
		return true
	}
	return false
}

// recentErrors drops the errors older than the window and counts the rest.
func (f *Failover) recentErrors(h *diskHealth, now time.Time) int {
	cutoff := now.Add(-f.policy.ErrorWindow())
	i := 0
	for i < len(h.errors) && !h.errors[i].After(cutoff) {
		i++
	}
	h.errors = h.errors[i:]
	return len(h.errors)
}

// recentChecks drops the failed checks older than the window and returns the rest.
func (f *Failover) recentChecks(h *diskHealth, now time.Time) []time.Time {
	cutoff := now.Add(-f.policy.ErrorWindow())
	i := 0
	for i < len(h.failedChecks) && !h.failedChecks[i].After(cutoff) {
		i++
	}
	h.failedChecks = h.failedChecks[i:]
	return h.failedChecks
}

// Checked records the result of a check of disk; it reports whether the disk was taken
// out or put back.
func (f *Failover) Checked(disk string, r CheckResult) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.disks[disk]
	if !ok {
		return false
	}
	now := f.now()
	if !r.OK {
		h.cleanSince = time.Time{}
		h.failedChecks = append(f.recentChecks(h, now), now)
		h.otherFS = r.OtherFilesystem
		if h.out {
			if r.OtherFilesystem {
				h.reason = r.Reason
			}
			return false
		}
		if n := len(h.failedChecks); r.Now || n >= f.policy.CheckFailures {
			reason := r.Reason
			if !r.Now && n > 1 {
				reason = fmt.Sprintf("%d checks failed in %s, the last: %s", n, f.policy.ErrorWindow(), r.Reason)
			}
			f.takeOut(h, now, reason)
			return true
		}
		return false
	}
	h.otherFS = false
	if !h.out {
		return false
	}
	if h.cleanSince.IsZero() {
		h.cleanSince = now
	}
	if now.Sub(h.cleanSince) >= h.cooldown {
		h.out, h.reason, h.since, h.cleanSince, h.returned = false, "", time.Time{}, time.Time{}, now
		return true
	}
	return false
}

func (f *Failover) takeOut(h *diskHealth, now time.Time, reason string) {
	switch {
	case !h.returned.IsZero() && now.Sub(h.returned) < f.policy.MaxCooldown():
		h.cooldown = min(2*h.cooldown, f.policy.MaxCooldown())
	default:
		h.cooldown = f.policy.Cooldown()
	}
	h.out, h.reason, h.since, h.cleanSince, h.errors = true, reason, now, time.Time{}, nil
}

// StartOut records a disk that nginx starts without, for reason: it is out, pointed away
// from (see Away) until it passes a check, and put back after a cool-down of them.
func (f *Failover) StartOut(disk, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.disks[disk]; ok {
		h.out, h.reason, h.since, h.otherFS = true, reason, f.now(), true
	}
}

// Out returns the disks that are out, by name.
func (f *Failover) Out() map[string]Out {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]Out{}
	for name, h := range f.disks {
		if h.out {
			out[name] = Out{Reason: h.reason, Since: h.since, Cooldown: h.cooldown, OtherFilesystem: h.otherFS}
		}
	}
	return out
}

// Away returns the disks out of the split while another filesystem is where they were.
func (f *Failover) Away() map[string]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	away := map[string]bool{}
	for name, h := range f.disks {
		if h.out && h.otherFS {
			away[name] = true
		}
	}
	return away
}

// Suspect says whether disk is out, failed its last check, or had I/O errors within the
// window: it is then checked more often.
func (f *Failover) Suspect(disk string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.disks[disk]
	return ok && (h.out || len(f.recentChecks(h, f.now())) > 0 || f.recentErrors(h, f.now()) > 0)
}
