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

package fleet

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"strings"
	"time"
)

// reconcile is one CacheNode reconcile, as controller-runtime logs it at -v=5: a
// "Reconciling" line and a "Reconcile ..." or "Reconciler error" line with the same
// reconcileID. controller_runtime_reconcile_total has no per-object label; these lines do.
type reconcile struct {
	cacheNode string
	took      time.Duration
}

// logLine is the part of a JSON log line the parser reads.
type logLine struct {
	TS          string `json:"ts"`
	Msg         string `json:"msg"`
	Controller  string `json:"controller"`
	Name        string `json:"name"`
	ReconcileID string `json:"reconcileID"`
}

// reconcilesSince reads the CacheNode controller's finished reconciles from the operator's
// log, from byte offset on (a partial last line is left out).
func reconcilesSince(path string, offset int64) ([]reconcile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	started := map[string]time.Time{}
	var out []reconcile
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			break
		}
		var l logLine
		if json.Unmarshal(line, &l) != nil || l.Controller != "cachenode" || l.ReconcileID == "" {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, l.TS)
		if err != nil {
			continue
		}
		switch {
		case l.Msg == "Reconciling":
			started[l.ReconcileID] = ts
		case strings.HasPrefix(l.Msg, "Reconcile done") || l.Msg == "Reconcile successful" || l.Msg == "Reconciler error":
			if start, ok := started[l.ReconcileID]; ok {
				out = append(out, reconcile{cacheNode: l.Name, took: ts.Sub(start)})
				delete(started, l.ReconcileID)
			}
		}
	}
	return out, nil
}

// logSize is the operator log's length: where the next window starts.
func logSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
