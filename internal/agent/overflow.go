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
	"sort"
	"sync"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// OverflowWindow counts overflows per pool within a sliding window.
type OverflowWindow struct {
	window time.Duration
	now    func() time.Time

	mu     sync.Mutex
	recent map[string][]time.Time // per pool, oldest first
}

// NewOverflowWindow counts within the given window, reading the time from now.
func NewOverflowWindow(window time.Duration, now func() time.Time) *OverflowWindow {
	return &OverflowWindow{window: window, now: now, recent: map[string][]time.Time{}}
}

// maxRecent bounds the timestamps kept per pool; beyond it the oldest are dropped, so an
// overflow storm cannot exhaust memory (the count then saturates at maxRecent).
const maxRecent = 100000

// Add records one overflow of pool.
func (w *OverflowWindow) Add(pool string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := append(w.recent[pool], w.now())
	if len(r) > maxRecent {
		r = r[len(r)-maxRecent:]
	}
	w.recent[pool] = r
}

// Recent returns the overflows per pool within the window, the largest first.
func (w *OverflowWindow) Recent() []agentapi.PoolOverflow {
	w.mu.Lock()
	defer w.mu.Unlock()
	cutoff := w.now().Add(-w.window)
	var out []agentapi.PoolOverflow
	for pool, times := range w.recent {
		i := sort.Search(len(times), func(i int) bool { return times[i].After(cutoff) })
		if times = times[i:]; len(times) == 0 {
			delete(w.recent, pool)
			continue
		}
		w.recent[pool] = times
		out = append(out, agentapi.PoolOverflow{Pool: pool, Count: int64(len(times))})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Pool < out[j].Pool
	})
	return out
}

// Window is the span Recent counts over.
func (w *OverflowWindow) Window() time.Duration { return w.window }
