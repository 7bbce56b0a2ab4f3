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

package purge

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/edgepool/edgepool/internal/agent/atomicfile"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// MaxRecords bounds the purges a disk's record lists (and the agent remembers).
const MaxRecords = 1024

// A node that restarts must not serve what was purged while it was down (see
// agentapi.ActivePurges). Each disk records, beside its marker, the purges applied to it
// and the latest list of purges it has caught up with. Before nginx starts, the agent
// applies on each disk the listed purges it lacks, and empties a disk whose record is
// older than the list reaches back; while nginx runs, the purges the operator sends are
// recorded on the disks they were applied to, and the ConfigMap's list is a second way
// for a purge to arrive.

// DiskRecord is what a disk's agentapi.DiskPurgeRecord holds.
type DiskRecord struct {
	// SyncedAt is the Generated time of the latest list all of whose purges the disk has:
	// it has every purge created before then.
	SyncedAt time.Time `json:"syncedAt"`
	// Applied are the purges applied to the disk, newest last.
	Applied []string `json:"applied"`
}

// ReadDiskRecord reads a disk's record. A disk without one is new, or from before
// purges; one whose record cannot be read is treated as having missed every purge.
func ReadDiskRecord(diskPath string) (rec DiskRecord, found bool) {
	data, err := os.ReadFile(filepath.Join(diskPath, agentapi.DiskPurgeRecord))
	if errors.Is(err, fs.ErrNotExist) {
		return DiskRecord{}, false
	}
	if err != nil || json.Unmarshal(data, &rec) != nil {
		return DiskRecord{}, true
	}
	return rec, true
}

// WriteDiskRecord replaces a disk's record, keeping its MaxRecords newest purges.
func WriteDiskRecord(diskPath string, rec DiskRecord) error {
	if n := len(rec.Applied); n > MaxRecords {
		rec.Applied = rec.Applied[n-MaxRecords:]
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(diskPath, agentapi.DiskPurgeRecord), append(data, '\n'), 0o600)
}

// CatchUpPlan says what a disk must do before nginx serves from it: empty its cache
// (its record is older than the list reaches back, or unreadable), or apply the listed
// purges it lacks.
func CatchUpPlan(rec DiskRecord, found bool, list agentapi.ActivePurges) (empty bool, todo []agentapi.ActivePurge) {
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

// ReadActive reads the ConfigMap's list of purges; ok is false when there is none
// (an operator from before purges).
func ReadActive(configDir string) (list agentapi.ActivePurges, ok bool, err error) {
	data, err := os.ReadFile(filepath.Join(configDir, agentapi.ActivePurgesKey))
	if errors.Is(err, fs.ErrNotExist) {
		return list, false, nil
	}
	if err != nil {
		return list, false, err
	}
	if err := agentapi.DecodeStrict(data, &list); err != nil {
		return list, false, fmt.Errorf("%s: %w", agentapi.ActivePurgesKey, err)
	}
	if err := list.Validate(); err != nil {
		return list, false, fmt.Errorf("%s: %w", agentapi.ActivePurgesKey, err)
	}
	return list, true, nil
}
