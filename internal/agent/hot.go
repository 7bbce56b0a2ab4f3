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
	"os"
	"path/filepath"
	"time"

	"github.com/edgepool/edgepool/internal/agent/hottier"
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

// watchHotTier keeps a sharded pod's hot tier (hottier) free of the copies nginx left in it
// when it was full, and of copies their owners no longer confirm, until ctx ends. A pod
// without a hot tier has no such directory.
func (a *Agent) watchHotTier(ctx context.Context) {
	dir := filepath.Join(a.opts.RunDir, nginxconf.HotTierDir)
	if info, err := os.Lstat(dir); err != nil || !info.IsDir() {
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
