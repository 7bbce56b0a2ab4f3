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
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/edgepool/edgepool/internal/agent/disks"
	"github.com/edgepool/edgepool/internal/agent/purge"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// The agent does each purge once. It keeps a bounded record of the purges it was asked
// for, by UID: a repeat of a purge (the operator asking how far it got, or a request
// replayed by someone who captured it) is answered from the record and does nothing. Only
// a purge that failed runs again, and only for a request issued after the one that ran it
// (the operator's retry; a replay of the failed request gets the failure).
const (
	maxPurgeRecords = purge.MaxRecords
	maxPurgesActive = 16
	maxPurgeMessage = 1024
	// purgeAnswerWait is how long a request waits for its purge to finish before it is
	// answered Running: an exact purge is done well within it, in one round trip.
	purgeAnswerWait = time.Second
)

// errPurgeBusy: too many purges are running; the operator asks again.
var errPurgeBusy = errors.New("too many purges running on this pod: ask again later")

// errPurgeUIDReused: a signed request names a UID the agent knows with another purge.
var errPurgeUIDReused = errors.New("this purge's UID was used for another purge")

type purgeRecord struct {
	result   agentapi.PurgeResult
	spec     [sha256.Size]byte
	issuedAt int64         // of the request that started the latest run
	finished chan struct{} // closed when the latest run finishes
}

// purgeLedger is the record of purges, oldest first.
type purgeLedger struct {
	mu      sync.Mutex
	records map[string]*purgeRecord
	order   []string
	active  int
	// walk lets one walk (prefixes, everything) run at a time: each already reads every
	// disk in parallel, one file at a time per disk.
	walk chan struct{}
	// reads lets maxPurgeReads requests read their bodies at once (up to
	// MaxSignedPurgeBytes each, before the signature is checked), so that many slow or
	// forged bodies hold a bounded amount of memory; refusals bounds their log lines.
	reads    chan struct{}
	refusals *logLimiter
}

// maxPurgeReads: the operator reconciles up to --max-concurrent-reconciles purges (4) at once,
// each sent to a pod once at a time; a request holds its slot while it is read and
// verified, not while its purge runs.
const maxPurgeReads = 4

func newPurgeLedger() *purgeLedger {
	return &purgeLedger{records: map[string]*purgeRecord{}, walk: make(chan struct{}, 1),
		reads: make(chan struct{}, maxPurgeReads), refusals: newLogLimiter(time.Second, time.Now)}
}

// start records a purge the agent was asked for, and says whether it must run now.
func (l *purgeLedger) start(r agentapi.PurgeRequest) (agentapi.PurgeResult, bool, error) {
	spec, err := json.Marshal(r.Spec)
	if err != nil {
		return agentapi.PurgeResult{}, false, err
	}
	sum := sha256.Sum256(spec)
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, known := l.records[r.UID]
	switch {
	case known && rec.spec != sum:
		return agentapi.PurgeResult{}, false, errPurgeUIDReused
	case known && (rec.result.State != agentapi.PurgeFailed || r.IssuedAt <= rec.issuedAt):
		return rec.result, false, nil
	case l.active >= maxPurgesActive:
		return agentapi.PurgeResult{}, false, errPurgeBusy
	}
	if !known {
		rec = &purgeRecord{spec: sum}
		l.records[r.UID] = rec
		l.order = append(l.order, r.UID)
		l.evict()
	}
	rec.issuedAt, rec.finished = r.IssuedAt, make(chan struct{})
	rec.result = agentapi.PurgeResult{UID: r.UID, State: agentapi.PurgeRunning}
	l.active++
	return rec.result, true, nil
}

// evict forgets the oldest finished purges beyond maxPurgeRecords.
func (l *purgeLedger) evict() {
	for i := 0; len(l.records) > maxPurgeRecords && i < len(l.order); {
		uid := l.order[i]
		if l.records[uid].result.State == agentapi.PurgeRunning {
			i++
			continue
		}
		delete(l.records, uid)
		l.order = append(l.order[:i], l.order[i+1:]...)
	}
}

// done records a purge the agent applied on its own (listed in the ConfigMap), unless it
// knows it already.
func (l *purgeLedger) done(uid string, spec agentapi.PurgeSpec, res agentapi.PurgeResult) {
	b, err := json.Marshal(spec)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, known := l.records[uid]; known {
		return
	}
	finished := make(chan struct{})
	close(finished)
	l.records[uid] = &purgeRecord{spec: sha256.Sum256(b), result: res, finished: finished}
	l.order = append(l.order, uid)
	l.evict()
}

func (l *purgeLedger) finish(uid string, res agentapi.PurgeResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active--
	if rec, ok := l.records[uid]; ok {
		rec.result = res
		close(rec.finished)
	}
}

// running says whether a purge is running.
func (l *purgeLedger) running(uid string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := l.records[uid]
	return rec != nil && rec.result.State == agentapi.PurgeRunning
}

// wait waits up to d for the latest run of a purge to finish, and returns its result.
func (l *purgeLedger) wait(uid string, d time.Duration) agentapi.PurgeResult {
	l.mu.Lock()
	rec := l.records[uid]
	l.mu.Unlock()
	if rec == nil {
		return agentapi.PurgeResult{UID: uid, State: agentapi.PurgeRunning}
	}
	select {
	case <-rec.finished:
	case <-time.After(d):
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return rec.result
}

// handlePurge serves PurgePath: a purge signed by the operator, for this pod, issued
// within the allowed clock skew; the answer says how far it got.
func (a *Agent) handlePurge(w http.ResponseWriter, r *http.Request) {
	reply := func(code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	refuse := func(code int, err error) {
		if suppressed, ok := a.purges.refusals.allow(); ok {
			a.opts.Log.Error("Refused a purge request", "remote", r.RemoteAddr, "err", err, "refusalsNotLogged", suppressed)
		}
		reply(code, map[string]string{"error": err.Error()})
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		refuse(http.StatusMethodNotAllowed, errors.New("purges are POSTed"))
		return
	}
	if r.ContentLength > agentapi.MaxSignedPurgeBytes {
		refuse(http.StatusRequestEntityTooLarge, fmt.Errorf("a purge request is at most %d bytes", agentapi.MaxSignedPurgeBytes))
		return
	}
	req, code, err := a.readPurge(r)
	if err != nil {
		refuse(code, err)
		return
	}
	res, err := a.Purge(req, purgeAnswerWait)
	switch {
	case errors.Is(err, errPurgeBusy):
		refuse(http.StatusServiceUnavailable, err)
	case err != nil:
		refuse(http.StatusConflict, err)
	default:
		reply(http.StatusOK, res)
	}
}

// readPurge reads and verifies a purge request, holding one of the few read slots while
// it does (not while the purge runs), and says with which status to refuse one.
func (a *Agent) readPurge(r *http.Request) (agentapi.PurgeRequest, int, error) {
	select {
	case a.purges.reads <- struct{}{}:
		defer func() { <-a.purges.reads }()
	default:
		return agentapi.PurgeRequest{}, http.StatusServiceUnavailable, errors.New("busy reading other purge requests; ask again")
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, agentapi.MaxSignedPurgeBytes+1))
	switch {
	case err != nil:
		return agentapi.PurgeRequest{}, http.StatusBadRequest, err
	case len(body) > agentapi.MaxSignedPurgeBytes:
		return agentapi.PurgeRequest{}, http.StatusRequestEntityTooLarge, fmt.Errorf("a purge request is at most %d bytes", agentapi.MaxSignedPurgeBytes)
	}
	keys, err := a.operatorKeys()
	if err != nil {
		return agentapi.PurgeRequest{}, http.StatusServiceUnavailable, err
	}
	req, err := agentapi.VerifyPurge(body, keys, a.opts.Pod, time.Now())
	switch {
	case errors.Is(err, agentapi.ErrPurgeMalformed):
		return req, http.StatusBadRequest, err
	case err != nil:
		return req, http.StatusForbidden, err
	}
	return req, http.StatusOK, nil
}

// operatorKeys reads the keys the operator published in the ConfigMap. They are read at
// each request: a new operator's key is taken as soon as the kubelet updates the volume.
func (a *Agent) operatorKeys() ([]ed25519.PublicKey, error) {
	data, err := os.ReadFile(filepath.Join(a.opts.ConfigDir, agentapi.OperatorKeysKey))
	if err != nil {
		return nil, fmt.Errorf("the operator's keys are not published in the ConfigMap: %w", err)
	}
	return agentapi.ParseOperatorKeys(data)
}

// Purge starts a verified purge, or answers from the record when the agent was asked for
// it before. It waits up to wait for the purge to finish (a prefix purge can take minutes:
// the operator asks again for its result).
func (a *Agent) Purge(req agentapi.PurgeRequest, wait time.Duration) (agentapi.PurgeResult, error) {
	res, run, err := a.purges.start(req)
	if err != nil {
		return res, err
	}
	if run {
		go func() {
			res := a.runPurge(context.Background(), req.UID, req.Spec)
			a.purges.finish(req.UID, res)
		}()
	}
	if res.State != agentapi.PurgeRunning || wait <= 0 {
		return res, nil
	}
	return a.purges.wait(req.UID, wait), nil
}

// runPurge purges every disk nginx started on, in parallel.
func (a *Agent) runPurge(ctx context.Context, uid string, spec agentapi.PurgeSpec) agentapi.PurgeResult {
	start := time.Now()
	res := agentapi.PurgeResult{UID: uid}
	removed, err := a.purgeDisks(ctx, uid, spec)
	res.Removed, res.Finished = removed, time.Now().UTC().Truncate(time.Second)
	a.metrics.purgedFiles.Add(float64(removed))
	if err != nil {
		res.State, res.Message = agentapi.PurgeFailed, clip(err.Error(), maxPurgeMessage)
		a.metrics.purges.WithLabelValues(agentapi.PurgeFailed).Inc()
		a.opts.Log.Error("Purge failed", "uid", uid, "scope", spec.Scope, "soft", spec.Soft, "removed", removed, "err", err)
		return res
	}
	res.State = agentapi.PurgeDone
	a.metrics.purges.WithLabelValues(agentapi.PurgeDone).Inc()
	a.opts.Log.Info("Purged the cache", "uid", uid, "scope", spec.Scope, "soft", spec.Soft, "removed", removed, "took", time.Since(start).Round(time.Millisecond).String())
	return res
}

// purgeDisks runs a purge on each disk that is still the filesystem nginx started on. A
// disk that is not (unmounted, or another filesystem) is not touched, and the purge fails
// for it: the operator asks again until the disk is back or the purge expires. A purge
// that walks the cache waits for the walk that runs, and then walks with every other
// purge that waited meanwhile (walkQueue).
func (a *Agent) purgeDisks(ctx context.Context, uid string, spec agentapi.PurgeSpec) (int64, error) {
	facts, ids := a.served.get().config.facts, a.checks.identities()
	if a.nginx.PID() == 0 || ids == nil {
		return 0, errors.New("nginx is not running yet")
	}
	keys, err := facts.PurgeKeys(spec)
	if err != nil {
		return 0, err
	}
	job := &purgeJob{uid: uid, keys: keys, done: make(chan struct{})}
	if !keys.Walks() {
		a.purgeBatch(ctx, ids, []*purgeJob{job})
		return job.removed, job.err
	}
	if a.walks.add(job) {
		a.runWalks(ctx, ids)
	}
	<-job.done
	return job.removed, job.err
}

// purgeJob is one purge in a batch, and what the batch did for it.
type purgeJob struct {
	uid     string
	keys    agentapi.PurgeKeys
	done    chan struct{} // closed when removed and err are final
	removed int64
	err     error
}

// walkQueue holds the purges that wait for a walk of the cache. The purge that finds no
// walk running runs the walks, each with every purge waiting at its start, until none
// waits: a burst of prefix purges reads each cache file once or twice, not once per purge.
type walkQueue struct {
	mu      sync.Mutex
	waiting []*purgeJob
	running bool
}

// add queues job, and says whether the caller runs the walks.
func (q *walkQueue) add(job *purgeJob) (run bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.waiting = append(q.waiting, job)
	if q.running {
		return false
	}
	q.running = true
	return true
}

// take hands over the purges waiting, or none (and the runner stops) when none waits.
func (q *walkQueue) take() []*purgeJob {
	q.mu.Lock()
	defer q.mu.Unlock()
	batch := q.waiting
	q.waiting = nil
	q.running = len(batch) > 0
	return batch
}

// runWalks walks the cache for the purges waiting until none waits, one walk at a time
// beside the catch-up of listed purges (the walk token).
func (a *Agent) runWalks(ctx context.Context, ids map[string]disks.Identity) {
	for batch := a.walks.take(); len(batch) > 0; batch = a.walks.take() {
		a.purges.walk <- struct{}{}
		a.purgeBatch(ctx, ids, batch)
		<-a.purges.walk
		a.metrics.purgeWalks.Inc()
	}
}

// purgeBatch runs the batch's purges on every disk nginx started on, in parallel, and
// finishes each job.
func (a *Agent) purgeBatch(ctx context.Context, ids map[string]disks.Identity, batch []*purgeJob) {
	keys, uids := make([]agentapi.PurgeKeys, len(batch)), make([]string, len(batch))
	for i, job := range batch {
		keys[i], uids[i] = job.keys, job.uid
	}
	type result struct {
		removed []int64
		err     error
	}
	results := make([]result, len(a.opts.Disks))
	var wg sync.WaitGroup
	for i, d := range a.opts.Disks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started, ok := ids[d.Name]
			if !ok {
				return // nginx started without it: it catches up before it joins (purgeLag)
			}
			if id, err := a.opts.Checker.Identify(d); err != nil || id != started {
				results[i].err = fmt.Errorf("disk %s: not the filesystem nginx started on (unmounted or replaced): not touched", d.Name)
				return
			}
			removed, err := purge.CacheDirAll(ctx, filepath.Join(d.Path, agentapi.DiskCacheDir), keys, a.opts.PurgeRate, a.tagFiles(d, keys))
			if err == nil {
				err = a.recordApplied(d, uids...) // a restart does not do them again
			}
			results[i] = result{removed, err}
			if err != nil {
				results[i].err = fmt.Errorf("disk %s: %w", d.Name, err)
			}
		}()
	}
	wg.Wait()
	var errs []error
	for _, r := range results {
		errs = append(errs, r.err)
	}
	errs = append(errs, a.purgeHotTier(ctx, keys))
	err := errors.Join(errs...)
	for j, job := range batch {
		for _, r := range results {
			if r.removed != nil {
				job.removed += r.removed[j]
			}
		}
		job.err = err
		close(job.done)
	}
}

// purgeHotTier removes the copies in a sharded pod's hot tier that the purges name. It
// runs after the disks: a copy taken meanwhile from this pod's own disks would be one the
// purge names. A copy taken from another owner before that owner applied the purge answers
// at most until the hot tier asks the owner again and is refused (HotTierStaleBound).
func (a *Agent) purgeHotTier(ctx context.Context, keys []agentapi.PurgeKeys) error {
	dir := a.hotTierDir()
	if dir == "" {
		return nil
	}
	removed, err := purge.Copies(ctx, dir, keys)
	for _, n := range removed {
		a.metrics.hotTierPurged.Add(float64(n))
	}
	if err != nil {
		return fmt.Errorf("hot tier: %w", err)
	}
	return nil
}

// clip shortens s to at most n bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// logLimiter lets one line through per interval and counts the ones it held back, so that
// a flood of refused requests cannot flood the pod's log.
type logLimiter struct {
	mu         sync.Mutex
	interval   time.Duration
	now        func() time.Time
	last       time.Time
	suppressed int
}

func newLogLimiter(interval time.Duration, now func() time.Time) *logLimiter {
	return &logLimiter{interval: interval, now: now}
}

// allow says whether to log now, and how many lines were held back since the last one.
func (l *logLimiter) allow() (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t := l.now(); l.last.IsZero() || t.Sub(l.last) >= l.interval {
		suppressed, l.suppressed, l.last = l.suppressed, 0, t
		return suppressed, true
	}
	l.suppressed++
	return 0, false
}
