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
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
)

func TestCatchUpPlan(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := agentapi.ActivePurge{UID: "a"}, agentapi.ActivePurge{UID: "b"}
	list := agentapi.ActivePurges{Generated: t0.Add(time.Hour), Since: t0, Purges: []agentapi.ActivePurge{a, b}}
	for _, tc := range []struct {
		name      string
		rec       DiskRecord
		found     bool
		wantEmpty bool
		wantTodo  []string
	}{
		{"a new disk applies what is listed", DiskRecord{}, false, false, []string{"a", "b"}},
		{"a disk that has one", DiskRecord{SyncedAt: t0, Applied: []string{"a"}}, true, false, []string{"b"}},
		{"a disk that has both", DiskRecord{SyncedAt: t0.Add(time.Minute), Applied: []string{"b", "a", "z"}}, true, false, nil},
		{"a disk synced before the list reaches back", DiskRecord{SyncedAt: t0.Add(-time.Second), Applied: []string{"a", "b"}}, true, true, nil},
		{"an unreadable record", DiskRecord{}, true, true, nil},
	} {
		empty, todo := CatchUpPlan(tc.rec, tc.found, list)
		var uids []string
		for _, p := range todo {
			uids = append(uids, p.UID)
		}
		if empty != tc.wantEmpty || !slices.Equal(uids, tc.wantTodo) {
			t.Errorf("%s: empty %v, todo %v; want %v, %v", tc.name, empty, uids, tc.wantEmpty, tc.wantTodo)
		}
	}
	dir := t.TempDir()
	if _, found := ReadDiskRecord(dir); found {
		t.Error("a disk without a record has one")
	}
	must(t, os.WriteFile(filepath.Join(dir, agentapi.DiskPurgeRecord), []byte("{"), 0o644))
	if rec, found := ReadDiskRecord(dir); !found || !rec.SyncedAt.IsZero() {
		t.Errorf("an unreadable record: %+v, %v; want found and synced never", rec, found)
	}
	many := DiskRecord{SyncedAt: t0}
	for i := range MaxRecords + 10 {
		many.Applied = append(many.Applied, fmt.Sprint(i))
	}
	must(t, WriteDiskRecord(dir, many))
	if rec, _ := ReadDiskRecord(dir); len(rec.Applied) != MaxRecords || rec.Applied[0] != "10" || !rec.SyncedAt.Equal(t0) {
		t.Errorf("a long record kept %d, from %s", len(rec.Applied), rec.Applied[0])
	}
}
