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
	"strings"
	"testing"

	"github.com/edgepool/edgepool/internal/agent/disks"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
)

// TestAgentFailoverFiles: the agent renders failover files for the disks out that the
// configuration splits to, none when none are, and refuses facts without a valid split
// rather than report a disk out that still gets its keys.
func TestAgentFailoverFiles(t *testing.T) {
	a := New(Options{Disks: []disks.Disk{{Name: "d0"}, {Name: "d1"}, {Name: "gone"}}}, nil)
	cfg := nginxConfig{facts: agentapi.Facts{Split: agentapi.Split{Key: agentapi.SplitKeys[0],
		Disks: []agentapi.SplitDisk{{Name: "d0", Weight: 1}, {Name: "d1", Weight: 2}}}}}
	if files, key, err := a.failoverFiles(cfg); err != nil || len(files) != 0 || key != "" {
		t.Fatalf("nothing out: %v, %q, %v", files, key, err)
	}
	a.failover.Checked("d0", disks.CheckResult{Reason: "read-only", Now: true})
	files, key, err := a.failoverFiles(cfg)
	if err != nil || key == "" || !strings.Contains(files[nginxconf.FailoverMapFile], "d0 "+nginxconf.FailoverVariable+";") ||
		!strings.Contains(files[nginxconf.FailoverSplitFile], "* d1;") {
		t.Fatalf("d0 out: %v, %q, %v", files, key, err)
	}
	a.failover.Checked("gone", disks.CheckResult{Reason: "not a mount point", Now: true})
	if again, key2, err := a.failoverFiles(cfg); err != nil || key2 != key || len(again) != 2 {
		t.Errorf("a disk out that the configuration does not split to changed the files: %v, %v", again, err)
	}
	cfg.facts.Split = agentapi.Split{}
	if _, _, err := a.failoverFiles(cfg); err == nil || !strings.Contains(err.Error(), "no valid split") {
		t.Errorf("facts without a split: %v, want an error", err)
	}
}
