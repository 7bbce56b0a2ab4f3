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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/edgepool/edgepool/internal/agent/atomicfile"
	"github.com/edgepool/edgepool/internal/agent/disks"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// A node that restarts must not serve what was purged while it was down (see
// agentapi.ActivePurges). Each disk records, beside its marker, the purges applied to it
// and the latest list of purges it has caught up with. Before nginx starts, the agent
// applies on each disk the listed purges it lacks, and empties a disk whose record is
// older than the list reaches back; while nginx runs, the purges the operator sends are
// recorded on the disks they were applied to, and the ConfigMap's list is a second way
// for a purge to arrive.

// diskPurgeRecord is what a disk's agentapi.DiskPurgeRecord holds.
type diskPurgeRecord struct {
	// SyncedAt is the Generated time of the latest list all of whose purges the disk has:
	// it has every purge created before then.
	SyncedAt time.Time `json:"syncedAt"`
	// Applied are the purges applied to the disk, newest last.
	Applied []string `json:"applied"`
}

// readDiskPurgeRecord reads a disk's record. A disk without one is new, or from before
// purges; one whose record cannot be read is treated as having missed every purge.
func readDiskPurgeRecord(diskPath string) (rec diskPurgeRecord, found bool) {
	data, err := os.ReadFile(filepath.Join(diskPath, agentapi.DiskPurgeRecord))
	if errors.Is(err, fs.ErrNotExist) {
		return diskPurgeRecord{}, false
	}
	if err != nil || json.Unmarshal(data, &rec) != nil {
		return diskPurgeRecord{}, true
	}
	return rec, true
}

func writeDiskPurgeRecord(diskPath string, rec diskPurgeRecord) error {
	if n := len(rec.Applied); n > maxPurgeRecords {
		rec.Applied = rec.Applied[n-maxPurgeRecords:]
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(diskPath, agentapi.DiskPurgeRecord), append(data, '\n'), 0o600)
}

// catchUpPlan says what a disk must do before nginx serves from it: empty its cache
// (its record is older than the list reaches back, or unreadable), or apply the listed
// purges it lacks.
func catchUpPlan(rec diskPurgeRecord, found bool, list agentapi.ActivePurges) (empty bool, todo []agentapi.ActivePurge) {
	if found && rec.SyncedAt.Before(list.Since) {
		return true, nil
	}
	for _, p := range list.Purges {
		if !slices.Contains(rec.Applied, p.UID) {
			todo = append(todo, p)
		}
	}
	return false, todo
}

// readActivePurges reads the ConfigMap's list of purges; ok is false when there is none
// (an operator from before purges).
func readActivePurges(configDir string) (list agentapi.ActivePurges, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(configDir, agentapi.ActivePurgesKey))
	if errors.Is(err, fs.ErrNotExist) {
		return list, false, nil
	}
	if err != nil {
		return list, false, err
	}
	if err := decodeStrictJSON(data, &list); err != nil {
		return list, false, fmt.Errorf("%s: %w", agentapi.ActivePurgesKey, err)
	}
	if err := list.Validate(); err != nil {
		return list, false, fmt.Errorf("%s: %w", agentapi.ActivePurgesKey, err)
	}
	return list, true, nil
}

func decodeStrictJSON(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// catchUp runs before nginx starts: on each disk nginx starts on, it applies the listed
// purges the disk lacks, or empties it, with no bound on the rate (nothing is served yet), then records
// the list on the disk. The listed purges are Done for the operator's requests.
func (a *Agent) catchUp(ctx context.Context, facts *agentapi.Facts) error {
	list, ok, err := readActivePurges(a.opts.ConfigDir)
	if err != nil || !ok {
		return err
	}
	removed := make([]int64, len(list.Purges))
	var errs []error
	a.mu.Lock()
	ids := a.identities
	a.mu.Unlock()
	for _, d := range a.opts.Disks {
		if _, started := ids[d.Name]; !started {
			continue // nginx starts without it; it catches up before it joins (purgeLag)
		}
		rec, found := readDiskPurgeRecord(d.Path)
		empty, todo := catchUpPlan(rec, found, list)
		cache := filepath.Join(d.Path, agentapi.DiskCacheDir)
		if empty {
			n, err := PurgeCacheDir(ctx, cache, agentapi.PurgeKeys{All: true}, 0)
			if err != nil {
				errs = append(errs, fmt.Errorf("disk %s: %w", d.Name, err))
				continue
			}
			a.opts.Log.Info("Emptied the cache of a disk whose purge record is older than the purges listed: it may have missed one",
				"disk", d.Name, "syncedAt", rec.SyncedAt, "since", list.Since, "removed", n)
		}
		failed := false
		for _, p := range todo {
			keys, err := facts.PurgeKeys(p.Spec)
			var n int64
			if err == nil {
				n, err = PurgeCacheDir(ctx, cache, keys, 0)
			}
			if err != nil {
				errs, failed = append(errs, fmt.Errorf("disk %s: purge %s: %w", d.Name, p.UID, err)), true
				continue
			}
			removed[slices.IndexFunc(list.Purges, func(q agentapi.ActivePurge) bool { return q.UID == p.UID })] += n
			a.opts.Log.Info("Applied a purge made while this pod was away", "disk", d.Name, "uid", p.UID, "scope", p.Spec.Scope, "removed", n)
		}
		if failed {
			continue
		}
		applied := make([]string, len(list.Purges))
		for i, p := range list.Purges {
			applied[i] = p.UID
		}
		if err := writeDiskPurgeRecord(d.Path, diskPurgeRecord{SyncedAt: list.Generated, Applied: applied}); err != nil {
			errs = append(errs, fmt.Errorf("disk %s: record the purges: %w", d.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("catch up with the purges: %w", err)
	}
	for i, p := range list.Purges {
		a.purges.done(p.UID, p.Spec, agentapi.PurgeResult{UID: p.UID, State: agentapi.PurgeDone, Removed: removed[i],
			Finished: time.Now().UTC().Truncate(time.Second)})
	}
	return nil
}

// recordApplied notes on a disk that a purge was applied to it.
func (a *Agent) recordApplied(d disks.Disk, uid string) error {
	a.recordMu.Lock()
	defer a.recordMu.Unlock()
	rec, _ := readDiskPurgeRecord(d.Path)
	if slices.Contains(rec.Applied, uid) {
		return nil
	}
	rec.Applied = append(rec.Applied, uid)
	return writeDiskPurgeRecord(d.Path, rec)
}

// syncPurges runs while nginx runs, after each look at the configuration (and so also
// when a disk is put back into the split): on each disk that is the filesystem nginx
// started on, it applies the listed purges the disk lacks (the ConfigMap as a second way
// for a purge to arrive, and the way back for a disk that was out when a purge ran), or
// empties it when its record is older than the list reaches back, at the bounded rate;
// then it moves the disk's record on to the list.
func (a *Agent) syncPurges() {
	if !a.syncing.CompareAndSwap(false, true) {
		return // one at a time; the next look at the configuration comes soon
	}
	defer a.syncing.Store(false)
	list, ok, err := readActivePurges(a.opts.ConfigDir)
	if err != nil {
		a.opts.Log.Error("Could not read the purges the operator listed", "err", err)
		return
	}
	a.mu.Lock()
	ids, facts := a.identities, a.running.facts
	a.mu.Unlock()
	if !ok || ids == nil {
		return
	}
	ctx := context.Background()
	for _, d := range a.opts.Disks {
		if id, err := a.opts.Checker.Identify(d); err != nil || id != ids[d.Name] {
			continue // not the filesystem nginx started on: never written to
		}
		if err := a.syncDisk(ctx, d, &facts, list); err != nil {
			a.opts.Log.Error("Could not apply the purges listed on a disk; trying again at the next look", "disk", d.Name, "err", err)
		}
	}
}

// syncDisk brings one disk up to the list.
func (a *Agent) syncDisk(ctx context.Context, d disks.Disk, facts *agentapi.Facts, list agentapi.ActivePurges) error {
	rec, found := readDiskPurgeRecord(d.Path)
	if found && !rec.SyncedAt.Before(list.Generated) {
		return nil
	}
	empty, todo := catchUpPlan(rec, found, list)
	if empty {
		todo = []agentapi.ActivePurge{{UID: "", Spec: agentapi.PurgeSpec{Scope: agentapi.PurgeScopeAll}}}
	}
	cache := filepath.Join(d.Path, agentapi.DiskCacheDir)
	for _, p := range todo {
		if p.UID != "" && a.purges.running(p.UID) {
			return nil // being applied through /purge, which records it
		}
		keys, err := facts.PurgeKeys(p.Spec)
		if err != nil {
			return err
		}
		if keys.Walks() {
			a.purges.walk <- struct{}{}
		}
		n, err := PurgeCacheDir(ctx, cache, keys, a.opts.PurgeRate)
		if keys.Walks() {
			<-a.purges.walk
		}
		if err != nil {
			return fmt.Errorf("purge %s: %w", p.UID, err)
		}
		a.opts.Log.Info("Applied a listed purge this disk lacked", "disk", d.Name, "uid", p.UID, "scope", p.Spec.Scope, "removed", n, "emptied", empty)
	}
	a.recordMu.Lock()
	defer a.recordMu.Unlock()
	rec, _ = readDiskPurgeRecord(d.Path) // /purge may have recorded meanwhile
	for _, p := range list.Purges {
		if !slices.Contains(rec.Applied, p.UID) {
			rec.Applied = append(rec.Applied, p.UID)
		}
	}
	rec.SyncedAt = list.Generated
	return writeDiskPurgeRecord(d.Path, rec)
}

// purgeLag says why a disk lacks purges the ConfigMap lists, or "" if it has them all.
func (a *Agent) purgeLag(d disks.Disk) string {
	list, ok, err := readActivePurges(a.opts.ConfigDir)
	if err != nil || !ok {
		return "" // nothing to go by: syncPurges reports an unreadable list
	}
	rec, found := readDiskPurgeRecord(d.Path)
	if found && !rec.SyncedAt.Before(list.Generated) {
		return ""
	}
	switch empty, todo := catchUpPlan(rec, found, list); {
	case empty:
		return "its purge record is older than the purges listed: emptying its cache before it serves again"
	case len(todo) > 0:
		return fmt.Sprintf("applying %d purges made while it was out before it serves again", len(todo))
	}
	return ""
}
