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
	"slices"
	"sync"

	"github.com/edgepool/edgepool/internal/agent/disks"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// The agent's state has two writers, each with its own lock: the main loop, which alone
// changes what nginx runs (served), and the disks' checks, which alone record what they
// found (diskChecks). Status, readiness and purges only read them.

// servedState is what nginx runs.
type servedState struct {
	config   nginxConfig // zero before nginx starts
	failover string      // the failover files installed with it (failoverFiles' key)
	// configError says why the last configuration read was not installed; failoverError
	// why the failover's last decision was not applied.
	configError, failoverError string
}

// served holds the servedState; only the main loop updates it.
type served struct {
	mu    sync.Mutex
	state servedState
}

func (s *served) get() servedState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func (s *served) update(change func(*servedState)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	change(&s.state)
}

// diskChecks holds what the checks last found of each disk; only the checks update it.
type diskChecks struct {
	mu     sync.Mutex
	status []agentapi.DiskStatus
	// ids are the filesystems of the disks nginx started on, and of those that joined
	// since: a disk that comes back as another filesystem is never written to. The map is
	// replaced, never changed, so a reader may keep it.
	ids map[string]disks.Identity
}

// all returns a copy of every disk's status.
func (c *diskChecks) all() []agentapi.DiskStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.status)
}

func (c *diskChecks) of(i int) agentapi.DiskStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status[i]
}

// setAll records a check of every disk and returns the statuses before it.
func (c *diskChecks) setAll(status []agentapi.DiskStatus) []agentapi.DiskStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	previous := c.status
	c.status = status
	return previous
}

// set records a check of disk i and says whether its result changed.
func (c *diskChecks) set(i int, ready bool, reason string) (changed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &c.status[i]
	changed = st.Ready != ready || st.Reason != reason
	st.Ready, st.Reason = ready, reason
	return changed
}

func (c *diskChecks) identities() map[string]disks.Identity {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids
}

func (c *diskChecks) setIdentities(ids map[string]disks.Identity) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ids = ids
}
