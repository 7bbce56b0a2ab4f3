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
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/edgepool/edgepool/internal/agent/hottier"
	"github.com/edgepool/edgepool/internal/agent/purge"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
)

// How the hot tier is watched: its filesystem is looked at every hotTierCheck; while it
// is nearly full, what failed copies left in it is swept at most every hotTierSweep,
// leaving what was written in the last hotTierCopyAge (a copy under way).
const (
	hotTierCheck   = time.Second
	hotTierSweep   = 5 * time.Second
	hotTierCopyAge = 2 * time.Second
)

// hotTierDir is a sharded pod's hot tier, "" for a pod without one.
func (a *Agent) hotTierDir() string {
	dir := filepath.Join(a.opts.RunDir, nginxconf.HotTierDir)
	if info, err := os.Lstat(dir); err != nil || !info.IsDir() {
		return ""
	}
	return dir
}

// emptyHotTier removes every copy in the hot tier before nginx starts: its copies may
// predate purges made while nginx was down (a memory volume outlives its containers), and
// they are only copies, taken again from their owners.
func (a *Agent) emptyHotTier(ctx context.Context) error {
	dir := a.hotTierDir()
	if dir == "" {
		return nil
	}
	removed, err := purge.Copies(ctx, dir, []agentapi.PurgeKeys{{All: true}})
	if removed[0] > 0 {
		a.opts.Log.Info("Emptied the hot tier before nginx starts", "files", removed[0])
	}
	if err != nil {
		return fmt.Errorf("emptying the hot tier: %w", err)
	}
	return nil
}

// watchHotTier keeps a sharded pod's hot tier (hottier) free of the copies nginx left in it
// when it was full, and of copies their owners no longer confirm, until ctx ends. A pod
// without a hot tier has no such directory.
func (a *Agent) watchHotTier(ctx context.Context) {
	dir := a.hotTierDir()
	if dir == "" {
		return
	}
	tick := time.NewTicker(hotTierCheck)
	defer tick.Stop()
	var swept, staleSwept time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if now.Sub(staleSwept) >= nginxconf.HotTierStaleSweep {
				staleSwept = now
				files, bytes, err := hottier.SweepStale(ctx, dir, now.Add(-nginxconf.HotTierStaleGrace))
				a.metrics.hotTierStale.Add(float64(files))
				if files > 0 || err != nil {
					a.opts.Log.Info("Removed hot tier copies their owners did not confirm", "files", files, "bytes", bytes, "err", err)
				}
			}
			if now.Sub(swept) < hotTierSweep {
				continue
			}
			if full, err := hottier.NearlyFull(dir); err != nil || !full {
				continue
			}
			swept = now
			files, bytes, err := hottier.Sweep(ctx, dir, now.Add(-hotTierCopyAge))
			a.metrics.hotTierLeftovers.Add(float64(files))
			if files > 0 || err != nil {
				a.opts.Log.Info("Removed the copies nginx left in the full hot tier", "files", files, "bytes", bytes, "err", err)
			}
		}
	}
}
