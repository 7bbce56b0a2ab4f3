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
	"errors"
	"fmt"
	"testing"

	"github.com/edgepool/edgepool/internal/agentapi"
)

func TestPurgeLedger(t *testing.T) {
	l := newPurgeLedger()
	all := agentapi.PurgeSpec{Scope: "All"}
	req := func(uid string, issued int64) agentapi.PurgeRequest {
		return agentapi.PurgeRequest{UID: uid, IssuedAt: issued, Spec: all}
	}
	step := func(what string, r agentapi.PurgeRequest, wantRun bool, wantState string, wantErr error) {
		t.Helper()
		res, run, err := l.start(r)
		if run != wantRun || res.State != wantState || !errors.Is(err, wantErr) {
			t.Errorf("%s: run %v, state %q, err %v; want %v, %q, %v", what, run, res.State, err, wantRun, wantState, wantErr)
		}
	}
	step("a new purge", req("a", 100), true, agentapi.PurgeRunning, nil)
	step("asked again while it runs", req("a", 101), false, agentapi.PurgeRunning, nil)
	step("the UID with another purge", agentapi.PurgeRequest{UID: "a", IssuedAt: 102, Spec: agentapi.PurgeSpec{Scope: "URLs", URLs: []string{"http://a.example/"}}},
		false, "", errPurgeUIDReused)
	l.finish("a", agentapi.PurgeResult{UID: "a", State: agentapi.PurgeDone, Removed: 3})
	step("done, asked again", req("a", 200), false, agentapi.PurgeDone, nil)

	step("another", req("b", 100), true, agentapi.PurgeRunning, nil)
	l.finish("b", agentapi.PurgeResult{UID: "b", State: agentapi.PurgeFailed})
	step("failed, replayed", req("b", 100), false, agentapi.PurgeFailed, nil)
	step("failed, issued again", req("b", 101), true, agentapi.PurgeRunning, nil)
	l.finish("b", agentapi.PurgeResult{UID: "b", State: agentapi.PurgeDone})

	for i := range maxPurgesActive {
		step("filling", req(fmt.Sprintf("c%d", i), 1), true, agentapi.PurgeRunning, nil)
	}
	step("one too many", req("d", 1), false, "", errPurgeBusy)
	for i := range maxPurgesActive {
		l.finish(fmt.Sprintf("c%d", i), agentapi.PurgeResult{State: agentapi.PurgeDone})
	}
	for i := range maxPurgeRecords {
		step("many", req(fmt.Sprintf("e%d", i), 1), true, agentapi.PurgeRunning, nil)
		l.finish(fmt.Sprintf("e%d", i), agentapi.PurgeResult{State: agentapi.PurgeDone})
	}
	if len(l.records) != maxPurgeRecords || len(l.order) != maxPurgeRecords {
		t.Errorf("%d records, %d in order; want %d", len(l.records), len(l.order), maxPurgeRecords)
	}
	if _, ok := l.records["a"]; ok {
		t.Error("the oldest record was kept beyond the bound")
	}
}
