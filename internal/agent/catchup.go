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
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/edgepool/edgepool/internal/agent/disks"
	"github.com/edgepool/edgepool/internal/agent/purge"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// A node that restarts must not serve what was purged while it was down: see
// purge.DiskRecord.

// catchUp runs before nginx starts: it empties the hot tier (emptyHotTier), and on each
// disk nginx starts on, it applies the listed purges the disk lacks, or empties it, with
// no bound on the rate (nothing is served yet), then records the list on the disk. The listed purges are Done for the operator's requests.
func (a *Agent) catchUp(ctx context.Context, facts *agentapi.Facts) error {
	if err := a.emptyHotTier(ctx); err != nil {
		return err
	}
	list, ok, err := purge.ReadActive(a.opts.ConfigDir)
	if err != nil || !ok {
		return err
	}
	removed := make([]int64, len(list.Purges))
	var errs []error
	ids := a.checks.identities()
	for _, d := range a.opts.Disks {
		if _, started := ids[d.Name]; !started {
			continue // nginx starts without it; it catches up before it joins (purgeLag)
		}
		rec, found := purge.ReadDiskRecord(d.Path)
		empty, todo := purge.CatchUpPlan(rec, found, list)
		cache := filepath.Join(d.Path, agentapi.DiskCacheDir)
		if empty {
			n, err := purge.CacheDir(ctx, cache, agentapi.PurgeKeys{All: true}, 0)
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
				n, err = purge.CacheDir(ctx, cache, keys, 0)
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
		if err := purge.WriteDiskRecord(d.Path, purge.DiskRecord{SyncedAt: list.Generated, Applied: applied}); err != nil {
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

// recordApplied notes on a disk that purges were applied to it, in one write.
func (a *Agent) recordApplied(d disks.Disk, uids ...string) error {
	a.recordMu.Lock()
	defer a.recordMu.Unlock()
	rec, _ := purge.ReadDiskRecord(d.Path)
	before := len(rec.Applied)
	for _, uid := range uids {
		if !slices.Contains(rec.Applied, uid) {
			rec.Applied = append(rec.Applied, uid)
		}
	}
	if len(rec.Applied) == before {
		return nil
	}
	return purge.WriteDiskRecord(d.Path, rec)
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
	list, ok, err := purge.ReadActive(a.opts.ConfigDir)
	if err != nil {
		a.opts.Log.Error("Could not read the purges the operator listed", "err", err)
		return
	}
	ids, facts := a.checks.identities(), a.served.get().config.facts
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
	rec, found := purge.ReadDiskRecord(d.Path)
	if found && !rec.SyncedAt.Before(list.Generated) {
		return nil
	}
	empty, todo := purge.CatchUpPlan(rec, found, list)
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
		n, err := purge.CacheDir(ctx, cache, keys, a.opts.PurgeRate)
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
	rec, _ = purge.ReadDiskRecord(d.Path) // /purge may have recorded meanwhile
	for _, p := range list.Purges {
		if !slices.Contains(rec.Applied, p.UID) {
			rec.Applied = append(rec.Applied, p.UID)
		}
	}
	rec.SyncedAt = list.Generated
	return purge.WriteDiskRecord(d.Path, rec)
}

// purgeLag says why a disk lacks purges the ConfigMap lists, or "" if it has them all.
func (a *Agent) purgeLag(d disks.Disk) string {
	list, ok, err := purge.ReadActive(a.opts.ConfigDir)
	if err != nil || !ok {
		return "" // nothing to go by: syncPurges reports an unreadable list
	}
	rec, found := purge.ReadDiskRecord(d.Path)
	if found && !rec.SyncedAt.Before(list.Generated) {
		return ""
	}
	switch empty, todo := purge.CatchUpPlan(rec, found, list); {
	case empty:
		return "its purge record is older than the purges listed: emptying its cache before it serves again"
	case len(todo) > 0:
		return fmt.Sprintf("applying %d purges made while it was out before it serves again", len(todo))
	}
	return ""
}
