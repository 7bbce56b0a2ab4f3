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

// Package agent is the node agent: it runs in every cache pod, checks the disks, and
// supervises nginx as its child, reloading it in place when the configuration changes
// and turning its error stream into thread-pool overflow metrics.
package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/agent/certs"
	"github.com/edgepool/edgepool/internal/agent/disks"
	"github.com/edgepool/edgepool/internal/agent/nginx"
	"github.com/edgepool/edgepool/internal/agent/nginxlog"
	"github.com/edgepool/edgepool/internal/agent/requestlog"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
)

// Options configure the agent.
type Options struct {
	// Nginx is the nginx binary.
	Nginx string
	// ConfigDir is the mounted ConfigMap: nginx.conf and the facts about it (agentapi).
	ConfigDir string
	// AnnouncedHashFile, when set, holds the agentapi.VolumeHash of the ConfigMap the
	// operator announced on this pod (its annotation, projected by the kubelet): nginx
	// runs only a mounted configuration that matches it.
	AnnouncedHashFile string
	// AnnounceGrace is how long a mounted configuration may differ from the announced
	// one before /status reports it: the kubelet brings the two at the pod's next sync.
	AnnounceGrace time.Duration
	// TLSSecretsDir holds the sites' mounted TLS Secrets, one directory per site
	// (agentapi.TLSSecretsDir unless set).
	TLSSecretsDir string
	// RunDir is nginx's writable prefix: the installed config, pid and temp files.
	RunDir string
	// Disks are the declared disks, checked before nginx starts.
	Disks []disks.Disk
	// Checker checks the disks.
	Checker disks.Checker
	// Workers is the number of nginx workers where the configuration leaves it to the
	// agent: the container's CPUs.
	Workers int
	// Somaxconn is the kernel's backlog cap, reported next to the configured backlog.
	Somaxconn int
	// Debounce groups a burst of file events into one reload.
	Debounce time.Duration
	// Resync is how often the configuration is read again without a file event, in case
	// one was missed.
	Resync time.Duration
	// DiskRecheck is how often failed disk checks are retried before nginx starts, and how
	// often the disks are checked while it runs (every second while a disk is suspect).
	DiskRecheck time.Duration
	// CheckTimeout bounds a check of a running disk: one that has not returned by then
	// counts as failed (a hung disk must not hang the agent).
	CheckTimeout time.Duration
	// OverflowWindow is the span of the overflow counts in /status.
	OverflowWindow time.Duration
	// ServerLimits bound the clients of the agent's port (DefaultServerLimits if zero).
	ServerLimits ServerLimits
	// Pod is this cache pod, namespace/name: a purge request must name it. Unset, every
	// purge is refused.
	Pod string
	// PurgeRate bounds the files per second and disk a purge of prefixes or of everything
	// goes through (0: no bound).
	PurgeRate int
	// RequestQueue is how many per-request lines wait for the parser before more are
	// dropped.
	RequestQueue int
	// Stderr receives nginx's error stream, line by line, unchanged.
	Stderr io.Writer
	// Stdout receives the JSON access log's lines (a CacheNode's accessLogPercent).
	Stdout io.Writer
	Log    *slog.Logger
}

// Agent wires the node's parts: it checks the disks (disks), supervises nginx (nginx)
// with the configuration the operator mounted, the certificates (certs) and the failover
// of the disks out of the split, reads nginx's error stream (nginxlog) and per-request
// lines (requestlog), runs purges (purge), and reports on its HTTP port.
type Agent struct {
	opts     Options
	nginx    *nginx.Supervisor
	overflow *OverflowWindow
	metrics  *metrics
	failover *disks.Failover
	purges   *purgeLedger
	walks    walkQueue
	tags     tagIndexes
	certs    *certs.Store
	// recordMu orders the changes of the disks' purge records; syncing says syncPurges runs.
	recordMu sync.Mutex
	syncing  atomic.Bool
	// failoverChanged wakes the main loop to apply the failover's decisions.
	failoverChanged chan struct{}
	// watcher watches the mounted ConfigMap and Secrets; watched are the Secrets'
	// directories it watches. Only the main loop uses them.
	watcher *fsnotify.Watcher
	watched map[string]bool
	// unannouncedSince is when the mounted configuration last stopped matching the
	// announced one (zero while it matches); graceOver fires when that mismatch is due in
	// /status. Only the main loop uses them.
	unannouncedSince time.Time
	graceOver        <-chan time.Time

	// served is what nginx runs (the main loop writes it); checks what the disks'
	// checks found (they write it).
	served served
	checks diskChecks
}

// New makes an agent; Run starts it.
func New(opts Options, reaper *nginx.Reaper) *Agent {
	names := make([]string, len(opts.Disks))
	for i, d := range opts.Disks {
		names[i] = d.Name
	}
	a := &Agent{
		opts: opts, nginx: nginx.New(opts.Nginx, opts.RunDir, reaper), overflow: NewOverflowWindow(opts.OverflowWindow, time.Now),
		failover:        disks.NewFailover(agentapi.DefaultFailoverPolicy, names, time.Now),
		purges:          newPurgeLedger(),
		failoverChanged: make(chan struct{}, 1),
	}
	a.metrics = newMetrics(a.scrapeState, names)
	secrets := opts.TLSSecretsDir
	if secrets == "" {
		secrets = agentapi.TLSSecretsDir
	}
	a.certs = certs.New(secrets, opts.RunDir, time.Now, opts.Log, func(site string, n float64) {
		a.metrics.certificateReloads.WithLabelValues(site).Add(n)
	})
	return a
}

// Run checks the disks, starts nginx, and reloads it when the configuration changes,
// until ctx ends (then nginx shuts down gracefully: in-flight requests finish) or nginx
// exits (an error: the kubelet restarts the pod).
func (a *Agent) Run(ctx context.Context) error {
	if err := a.nginx.Init(); err != nil {
		return err
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config: %w", err)
	}
	defer watcher.Close()
	// The kubelet replaces a ConfigMap volume's files by swapping a ..data symlink in
	// the directory, so the directory is watched, not the file.
	if err := watcher.Add(a.opts.ConfigDir); err != nil {
		return fmt.Errorf("watch config: %w", err)
	}
	if a.opts.AnnouncedHashFile != "" {
		if err := watcher.Add(filepath.Dir(a.opts.AnnouncedHashFile)); err != nil {
			return fmt.Errorf("watch the announced configuration: %w", err)
		}
	}
	a.watcher, a.watched = watcher, map[string]bool{}

	// nginx sends a line per request to this socket from its first request on; it lives
	// until nginx has exited.
	requests, err := requestlog.Listen(filepath.Join(a.opts.RunDir, nginxconf.RequestLogSocket), a.opts.RequestQueue,
		a.metrics.requests.Dropped(requestlog.DropQueueFull))
	if err != nil {
		return err
	}
	defer requests.Close()
	go requests.Serve(a.metrics.requests.Handle)
	access, err := requestlog.Listen(filepath.Join(a.opts.RunDir, nginxconf.AccessLogSocket), a.opts.RequestQueue, a.metrics.accessLogDropped)
	if err != nil {
		return err
	}
	defer access.Close()
	go access.Serve(a.writeAccessLog)

	if !a.waitForDisks(ctx) {
		return nil
	}
	cfg, dir, failover, ok := a.waitForConfig(ctx, watcher)
	if !ok {
		return nil
	}
	if !a.waitForPurges(ctx, cfg) {
		return nil
	}
	for _, d := range a.opts.Disks {
		if _, started := a.checks.identities()[d.Name]; started {
			a.tagIndex(d, cfg.facts.TagHeaders)
		}
	}
	exited, err := a.startNginx(cfg, dir, failover)
	if err != nil {
		return err
	}
	defer a.closeTagIndexes() // after nginx stopped

	// Disks are checked again while nginx runs, and nginx's error stream is read for failed
	// reads and writes: a disk that fails is taken out of this node's split (failover.go),
	// not discovered by requests failing on it. The checks run beside this loop, so a disk
	// that hangs cannot hold up reloads or shutdown.
	rechecking, stopRecheck := context.WithCancel(ctx)
	defer stopRecheck()
	go a.watchDisks(rechecking)
	go a.watchHotTier(rechecking)
	go a.lowerPoolThreads(rechecking)
	resync := time.NewTicker(a.opts.Resync)
	defer resync.Stop()
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			// nginx's graceful shutdown is SIGQUIT; its SIGTERM drops connections.
			a.opts.Log.Info("Shutting down nginx gracefully")
			a.nginx.Stop(exited)
			return nil
		case ws := <-exited:
			return fmt.Errorf("nginx exited: %s", a.nginx.Exited(ws))
		case ev := <-watcher.Events:
			if ev.Op != fsnotify.Chmod {
				debounce = time.After(a.opts.Debounce)
			}
		case err := <-watcher.Errors:
			a.opts.Log.Error("Config watch failed", "err", err)
		case <-debounce:
			debounce = nil
			a.reconcile(ctx)
		case <-resync.C:
			a.reconcile(ctx)
		case <-a.failoverChanged:
			a.reconcile(ctx)
		case <-a.graceOver:
			a.graceOver = nil
			a.reconcile(ctx)
		}
	}
}

// waitForDisks checks the disks until at least one is ready. nginx never starts on a
// disk that is not: its cache would land on the container's root filesystem, or beside
// someone's files. The disks not ready start out of the split, pointed away from (see
// linkDisks), and are checked on as nginx runs: one that passes joins after a cool-down
// of passing checks, like a disk that failed at runtime.
func (a *Agent) waitForDisks(ctx context.Context) bool {
	for {
		if ids := a.identifyDisks(a.checkDisks()); len(ids) > 0 {
			for i, d := range a.opts.Disks {
				if _, ok := ids[d.Name]; !ok {
					reason := a.checks.of(i).Reason
					a.failover.StartOut(d.Name, reason)
					a.opts.Log.Error("Starting without disk; its keys go to the other disks until it passes its checks", "disk", d.Name, "path", d.Path, "reason", reason)
				}
			}
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(a.opts.DiskRecheck):
		}
	}
}

// identifyDisks records the filesystems of the ready disks, which nginx starts on: a
// disk that comes back as another filesystem is never written to.
func (a *Agent) identifyDisks(ready []bool) map[string]disks.Identity {
	ids := map[string]disks.Identity{}
	for i, d := range a.opts.Disks {
		if !ready[i] {
			continue
		}
		id, err := a.opts.Checker.Identify(d)
		if err != nil {
			a.checks.set(i, false, err.Error())
			a.opts.Log.Error("Disk check failed", "disk", d.Name, "path", d.Path, "reason", err.Error())
			continue
		}
		ids[d.Name] = id
	}
	a.checks.setIdentities(ids)
	return ids
}

// firstCheck checks a disk that nginx did not start on, as before nginx starts: when it
// passes, it is claimed, and its identity is what it is rechecked against from then on.
func (a *Agent) firstCheck(d disks.Disk) (disks.CheckResult, *disks.Identity) {
	st := a.opts.Checker.Check(d)
	if st.Ready {
		if err := a.opts.Checker.Claim(d); err != nil {
			st.Reason = err.Error()
		} else if id, err := a.opts.Checker.Identify(d); err != nil {
			st.Reason = err.Error()
		} else {
			return disks.CheckResult{OK: true}, &id
		}
	}
	// Not the disk's filesystem until it passes: pointed away from.
	return disks.CheckResult{Reason: st.Reason, Now: true, OtherFilesystem: true}, nil
}

// checkDisks checks every disk and claims those that passed (see disks.Checker.Claim),
// records the results for /status and /readyz, logs the disks whose state changed, and
// returns which are ready.
func (a *Agent) checkDisks() []bool {
	states := make([]agentapi.DiskStatus, len(a.opts.Disks))
	ready := make([]bool, len(a.opts.Disks))
	for i, d := range a.opts.Disks {
		states[i] = a.opts.Checker.Check(d)
		if states[i].Ready {
			if err := a.opts.Checker.Claim(d); err != nil {
				states[i].Ready, states[i].Reason = false, err.Error()
			}
		}
		ready[i] = states[i].Ready
	}
	previous := a.checks.setAll(states)
	for i, st := range states {
		if i < len(previous) && previous[i].Ready == st.Ready && previous[i].Reason == st.Reason {
			continue
		}
		if st.Ready {
			a.opts.Log.Info("Disk passed its checks", "disk", st.Name, "path", st.Path, "device", st.Device)
		} else {
			a.opts.Log.Error("Disk check failed", "disk", st.Name, "path", st.Path, "reason", st.Reason)
		}
	}
	return ready
}

// waitForPurges applies the purges made while the pod was away before nginx serves:
// until they are, nginx stays stopped and the pod unready.
func (a *Agent) waitForPurges(ctx context.Context, cfg nginxConfig) bool {
	for {
		err := a.catchUp(ctx, &cfg.facts)
		if err == nil {
			return true
		}
		a.setConfigError(err)
		a.opts.Log.Error("Could not apply the purges listed; nginx waits", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(a.opts.DiskRecheck):
		}
	}
}

// waitForConfig loads and tests the configuration, with the failover of the disks that
// are out, until one passes nginx -t.
func (a *Agent) waitForConfig(ctx context.Context, watcher *fsnotify.Watcher) (cfg nginxConfig, dir, failover string, ok bool) {
	for {
		cfg, dir, failover, err := a.candidate(ctx)
		switch {
		case err == nil:
			return cfg, dir, failover, true
		case errors.Is(err, errUnannounced):
			a.unannounced(err)
		default:
			a.setConfigError(err)
			a.opts.Log.Error("Configuration rejected; waiting for a new one", "err", err)
		}
		select {
		case <-ctx.Done():
			return nginxConfig{}, "", "", false
		case <-watcher.Events:
			// Let a burst of file events settle, unless the agent is stopping.
			select {
			case <-ctx.Done():
				return nginxConfig{}, "", "", false
			case <-time.After(a.opts.Debounce):
			}
		case <-time.After(a.opts.DiskRecheck):
		}
	}
}

// candidate loads the mounted configuration and prepares it, with the failover of the
// disks that are out, in a directory of its own that passed nginx -t.
func (a *Agent) candidate(ctx context.Context) (cfg nginxConfig, dir, failover string, err error) {
	cfg, err = a.mountedConfig()
	if err != nil {
		return cfg, "", "", fmt.Errorf("read configuration: %w", err)
	}
	// nginx -t loads the certificates nginx.conf names: they must be in place first.
	if err := a.syncCertificates(cfg); err != nil {
		return cfg, "", "", err
	}
	dir, failover, err = a.prepare(ctx, cfg)
	return cfg, dir, failover, err
}

// failoverFiles renders the failover files for cfg and the disks that are out now, and
// a string that tells one set of files from another.
func (a *Agent) failoverFiles(cfg nginxConfig) (map[string]string, string, error) {
	// A disk the configuration no longer splits to needs no failover (the pod restarts
	// without it once the DaemonSet rolls).
	var out []string
	if err := cfg.facts.Split.Validate(); err != nil && len(a.outNames()) > 0 {
		return nil, "", fmt.Errorf("cannot take %s out: the facts of the configuration have no valid split (an older operator?): %w",
			strings.Join(a.outNames(), ", "), err)
	}
	for _, name := range a.outNames() {
		if slices.ContainsFunc(cfg.facts.Split.Disks, func(d agentapi.SplitDisk) bool { return d.Name == name }) {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return nil, "", nil
	}
	files, err := nginxconf.FailoverFiles(cfg.facts.Split, out)
	if err != nil {
		return nil, "", fmt.Errorf("render the failover of %s: %w", strings.Join(out, ", "), err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var key strings.Builder
	for _, name := range names {
		key.WriteString(name + "\x00" + files[name] + "\x00")
	}
	return files, key.String(), nil
}

// prepare writes cfg and the failover files for the disks that are out into a
// configuration directory that passed nginx -t.
func (a *Agent) prepare(ctx context.Context, cfg nginxConfig) (dir, failover string, err error) {
	files, failover, err := a.failoverFiles(cfg)
	if err != nil {
		return "", "", err
	}
	if err := a.linkDisks(); err != nil {
		return "", "", err
	}
	dir, err = a.nginx.Prepare(ctx, cfg.effective, includes(files))
	return dir, failover, err
}

// includes are the failover files as nginx.conf includes them: in FailoverDir beside it.
func includes(files map[string]string) map[string]string {
	paths := make(map[string]string, len(files))
	for name, content := range files {
		paths[filepath.Join(nginxconf.FailoverDir, name)] = content
	}
	return paths
}

// outDir is the directory of the empty, read-only directories that the links of the disks
// out of the split point at.
const outDir = "out"

// linkDisks points the link through which nginx reaches each disk (nginxconf.DiskLink) at
// the disk's cache directory, or, while another filesystem is where the disk was (it was
// unmounted, or another one mounted in its place: Failover.Away), at an empty directory
// of the run dir that nginx may not write to. nginx makes a missing cache directory, and
// its cache loader deletes what is not a cache file, whenever it tests or loads a
// configuration: through the links, never on a filesystem not the disk's. A disk out
// for its errors keeps its link: what it still reads (a read-only disk's cache) serves
// until nginx's old workers are gone. The swap is atomic: nginx opens every cache file
// by its path, through the link.
func (a *Agent) linkDisks() error {
	away := a.failover.Away()
	for _, d := range a.opts.Disks {
		target := filepath.Join(d.Path, agentapi.DiskCacheDir)
		if away[d.Name] {
			target = filepath.Join(a.opts.RunDir, outDir, d.Name)
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := os.Mkdir(target, 0o555); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("disk %s: %w", d.Name, err)
			}
		}
		if err := nginx.SwapLink(filepath.Join(a.opts.RunDir, nginxconf.DiskLink(d.Name)), target); err != nil {
			return fmt.Errorf("disk %s: point nginx at %s: %w", d.Name, target, err)
		}
	}
	return nil
}

func (a *Agent) startNginx(cfg nginxConfig, dir, failover string) (<-chan unix.WaitStatus, error) {
	exited, errs, err := a.nginx.Start(dir)
	if err != nil {
		return nil, err
	}
	go a.readErrorStream(errs)
	a.served.update(func(s *servedState) { s.config, s.failover, s.configError = cfg, failover, "" })
	a.setPolicy(cfg)
	a.certs.Committed(false)
	a.metrics.configInstalled(cfg.hash)
	a.opts.Log.Info("Started nginx", "pid", a.nginx.PID(), "configHash", cfg.hash[:12], "workers", cfg.workers)
	return exited, nil
}

// poolPriorityCheck is how often the agent looks for nginx workers whose thread pools it
// has not lowered yet (a reload's, a crashed worker's replacement).
const poolPriorityCheck = time.Second

// lowerPoolThreads runs nginx's thread pools below its event loops (nginx.PoolPriority)
// until ctx ends. A failure is logged when it first happens and when it changes: the
// pools then run as nginx started them, beside the event loops.
func (a *Agent) lowerPoolThreads(ctx context.Context) {
	var pools nginx.PoolPriority
	tick := time.NewTicker(poolPriorityCheck)
	defer tick.Stop()
	var failed string
	for {
		if pid := a.nginx.PID(); pid != 0 {
			n, err := pools.Lower(pid)
			if n > 0 {
				a.opts.Log.Info("Lowered nginx's thread pools below its event loops", "threads", n, "nicenessAdded", nginx.PoolNiceness)
			}
			if msg := fmt.Sprint(err); err != nil && msg != failed {
				a.opts.Log.Error("Lower nginx's thread pools below its event loops", "err", err)
				failed = msg
			} else if err == nil {
				failed = ""
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// requestLogErrorInterval is how often nginx's lines about the per-request lines are
// passed through: a stalled agent makes one per request.
const requestLogErrorInterval = time.Minute

// readErrorStream passes nginx's error stream through unchanged, counts the thread-pool
// queue overflows in it, and feeds the failed reads and writes of each disk to the
// failover. Lines about the per-request lines are counted and passed through at most
// once per requestLogErrorInterval.
func (a *Agent) readErrorStream(r io.ReadCloser) {
	defer r.Close()
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	var passed time.Time
	suppressed := 0
	for s.Scan() {
		line := s.Text()
		l := nginxlog.Classify(line)
		if l.AboutRequestLog() {
			if l.Kind == nginxlog.RequestLineDropped {
				a.metrics.requests.Dropped(requestlog.DropSendFailed).Inc()
			}
			if now := time.Now(); now.Sub(passed) >= requestLogErrorInterval {
				if suppressed > 0 {
					a.opts.Log.Warn("Suppressed nginx's errors about the per-request lines", "lines", suppressed)
				}
				fmt.Fprintln(a.opts.Stderr, line)
				passed, suppressed = now, 0
			} else {
				suppressed++
			}
			continue
		}
		fmt.Fprintln(a.opts.Stderr, line)
		switch l.Kind {
		case nginxlog.Overflow:
			a.overflow.Add(l.Pool)
			a.metrics.overflows.WithLabelValues(l.Pool).Inc()
		case nginxlog.DiskError:
			if d, ok := disks.Find(a.opts.Disks, a.opts.RunDir, l.Disk.Path); ok {
				a.metrics.diskErrors.WithLabelValues(d.Name, nginxlog.ErrnoName(l.Disk.Errno)).Inc()
				if a.failover.IOError(d.Name, l.Disk.What) {
					a.tookOut(d)
				}
			}
		}
	}
}

// writeAccessLog writes the message of an access log line to Stdout.
func (a *Agent) writeAccessLog(datagram []byte) {
	tag, msg, ok := requestlog.Parse(datagram)
	if !ok || tag != nginxconf.AccessLogTag {
		a.metrics.accessLogDropped.Inc()
		return
	}
	_, _ = a.opts.Stdout.Write(append(msg, '\n'))
}

// tookOut logs a disk the failover took out and wakes the main loop to apply it.
func (a *Agent) tookOut(d disks.Disk) {
	o := a.failover.Out()[d.Name]
	a.metrics.diskOuts.WithLabelValues(d.Name).Inc()
	a.opts.Log.Error("Took disk out of this node's split; its keys go to the other disks", "disk", d.Name, "path", d.Path,
		"reason", o.Reason, "cooldown", o.Cooldown.String())
	a.signalFailover()
}

func (a *Agent) signalFailover() {
	select {
	case a.failoverChanged <- struct{}{}:
	default: // a wake-up is pending: it reads the failover's latest decisions
	}
}

// watchDisks checks each running disk every DiskRecheck, or every second while it is
// suspect, each check bounded by CheckTimeout, until ctx ends.
func (a *Agent) watchDisks(ctx context.Context) {
	fast := min(time.Second, a.opts.DiskRecheck)
	tick := time.NewTicker(fast)
	defer tick.Stop()
	type result struct {
		disk int
		r    disks.CheckResult
		id   *disks.Identity // of a disk nginx did not start on, once it passed
	}
	// At most one check per disk is under way, so the buffer never blocks one that
	// returns after ctx ended.
	results := make(chan result, len(a.opts.Disks))
	type inFlight struct{ started, reported time.Time }
	running := map[int]*inFlight{}
	last := make([]time.Time, len(a.opts.Disks))
	ids := maps.Clone(a.checks.identities())
	for {
		select {
		case <-ctx.Done():
			return
		case res := <-results:
			delete(running, res.disk)
			if res.id != nil {
				d := a.opts.Disks[res.disk]
				ids[d.Name] = *res.id
				a.checks.setIdentities(maps.Clone(ids)) // a new map: readers keep the old one
			}
			a.recordCheck(res.disk, res.r)
		case now := <-tick.C:
			for i, d := range a.opts.Disks {
				if f, ok := running[i]; ok {
					if now.Sub(f.reported) >= a.opts.CheckTimeout {
						f.reported = now
						a.recordCheck(i, disks.CheckResult{Reason: fmt.Sprintf(
							"its check has not returned in %s: the disk hangs or is too slow", now.Sub(f.started).Round(time.Second))})
					}
					continue
				}
				if now.Sub(last[i]) < a.opts.DiskRecheck && !a.failover.Suspect(d.Name) {
					continue
				}
				last[i] = now
				running[i] = &inFlight{started: now, reported: now}
				id, started := ids[d.Name]
				go func() {
					var r disks.CheckResult
					var newID *disks.Identity
					if started {
						r = a.opts.Checker.Recheck(d, id)
					} else {
						r, newID = a.firstCheck(d)
					}
					if _, out := a.failover.Out()[d.Name]; r.OK && out {
						// A disk out of the split returns only once it has the purges
						// listed meanwhile: until then its checks do not pass.
						if lag := a.purgeLag(d); lag != "" {
							r = disks.CheckResult{Reason: lag}
							go a.syncPurges()
						}
					}
					results <- result{i, r, newID}
				}()
			}
		}
	}
}

// recordCheck records the result of a check of a running disk, logs a change, and
// applies the failover's decision.
func (a *Agent) recordCheck(i int, r disks.CheckResult) {
	d := a.opts.Disks[i]
	changed := a.checks.set(i, r.OK, r.Reason)
	if changed && r.OK {
		a.opts.Log.Info("Disk passed its checks", "disk", d.Name, "path", d.Path)
	} else if changed {
		a.opts.Log.Error("Disk check failed", "disk", d.Name, "path", d.Path, "reason", r.Reason)
	}
	_, wasOut := a.failover.Out()[d.Name]
	wasAway := a.failover.Away()[d.Name]
	if !a.failover.Checked(d.Name, r) {
		if a.failover.Away()[d.Name] != wasAway {
			a.signalFailover() // its link changes (see linkDisks)
		}
		return
	}
	if wasOut {
		a.opts.Log.Info("Put disk back into this node's split after its cool-down", "disk", d.Name, "path", d.Path)
		a.signalFailover()
		return
	}
	a.tookOut(d)
}

// reconcile brings nginx to what its inputs call for, whichever of them changed: the
// mounted configuration, the certificates of its sites and the disks out of the split.
// It runs on every trigger alike (a file event, the resync, the failover's decision):
// when what should run differs from what runs, it prepares it, tests it with nginx -t
// and signals nginx. A configuration that fails is rejected and the last good one keeps
// serving, with the certificates and the failover applied to it.
func (a *Agent) reconcile(ctx context.Context) {
	if a.nginx.PID() == 0 {
		return
	}
	go a.syncPurges()
	running := a.served.get().config
	cfg, err := a.mountedConfig()
	switch {
	case errors.Is(err, errTornRead):
		// Read again at the next event; meanwhile the running configuration's inputs apply.
	case errors.Is(err, errUnannounced):
		a.unannounced(fmt.Errorf("read configuration: %w", err))
	case err != nil:
		a.rejected(fmt.Errorf("read configuration: %w", err))
	case cfg.hash == running.hash:
		a.setPolicy(cfg) // the facts of the running nginx.conf can change alone
		a.served.update(func(s *servedState) { s.configError = "" })
	default:
		err := a.apply(ctx, cfg)
		if err == nil {
			return
		}
		a.rejected(err)
	}
	if err := a.apply(ctx, running); err != nil {
		a.opts.Log.Error("Could not apply the certificates or the failover to the running configuration", "err", err)
	}
}

// apply has nginx run cfg with the certificates of its sites and the failover of the
// disks out now, unless it runs exactly that already.
func (a *Agent) apply(ctx context.Context, cfg nginxConfig) error {
	was := a.served.get()
	// nginx -t loads the certificates nginx.conf names: they must be in place first.
	if err := a.syncCertificates(cfg); err != nil {
		return err
	}
	newCerts := a.certs.Pending()
	// A disk's link changes without a reload: nginx follows it at every open.
	if err := a.linkDisks(); err != nil {
		return err
	}
	files, failover, err := a.failoverFiles(cfg)
	failoverChanged := err != nil || failover != was.failover
	if cfg.hash == was.config.hash && !failoverChanged && !newCerts {
		a.served.update(func(s *servedState) { s.failoverError = "" }) // what runs is what the failover wants
		return nil
	}
	var dir string
	if err == nil {
		dir, err = a.nginx.Prepare(ctx, cfg.effective, includes(files))
	}
	if err == nil {
		err = a.signal(dir)
	}
	if err != nil {
		if cfg.hash != was.config.hash {
			return err // a new configuration, rejected
		}
		if newCerts {
			// The running configuration passed nginx -t with the pairs it serves: the new
			// ones are what nginx refused.
			a.certs.Revert(err)
			a.opts.Log.Error("nginx refused a new certificate; the last good one keeps serving", "err", err)
		}
		if failoverChanged {
			a.served.update(func(s *servedState) { s.failoverError = err.Error() })
			a.opts.Log.Error("Could not apply the failover; the disks out may still get their keys", "err", err)
		}
		return nil
	}
	a.served.update(func(s *servedState) {
		if cfg.hash != s.config.hash {
			s.configError = "" // a configuration rejected before this one is no longer what is mounted
		}
		s.config, s.failover, s.failoverError = cfg, failover, ""
	})
	switch {
	case cfg.hash != was.config.hash:
		a.setPolicy(cfg)
		a.metrics.reloaded(cfg.hash)
		a.opts.Log.Info("Reloaded nginx", "configHash", cfg.hash[:12], "disksOut", a.outNames())
	case failoverChanged:
		a.metrics.failoverReloads.Inc()
		a.opts.Log.Info("Reloaded nginx with this node's split changed", "configHash", cfg.hash[:12], "disksOut", a.outNames())
	}
	return nil
}

// mountedConfig reads the configuration the operator mounted, once the operator has
// announced it on this pod (Options.AnnouncedHashFile).
func (a *Agent) mountedConfig() (nginxConfig, error) {
	files, err := readVolume(a.opts.ConfigDir)
	if err != nil {
		return nginxConfig{}, err
	}
	if a.opts.AnnouncedHashFile != "" {
		if err := checkAnnounced(files, a.opts.AnnouncedHashFile); err != nil {
			return nginxConfig{}, err
		}
	}
	a.unannouncedSince = time.Time{}
	return loadConfig(files, a.opts.Workers)
}

// unannounced records a mounted configuration the operator has not announced: nginx
// keeps what it runs, and /status says why once the mismatch outlasts AnnounceGrace.
func (a *Agent) unannounced(err error) {
	now := time.Now()
	if a.unannouncedSince.IsZero() {
		a.unannouncedSince = now
	}
	if waited := now.Sub(a.unannouncedSince); waited < a.opts.AnnounceGrace {
		if a.graceOver == nil {
			a.graceOver = time.After(a.opts.AnnounceGrace - waited)
		}
		a.opts.Log.Info("Waiting for the operator to announce the mounted configuration", "err", err)
		return
	}
	a.setConfigError(err)
	a.opts.Log.Error("The mounted configuration is not the one announced; nginx keeps what it runs", "err", err)
}

// rejected records a configuration that was not installed.
func (a *Agent) rejected(err error) {
	a.metrics.reloadFailed()
	a.served.update(func(s *servedState) { s.configError = err.Error() })
	a.opts.Log.Error("Configuration rejected; the last good configuration keeps serving", "err", err)
}

// setPolicy puts in force the failover policy of the configuration that runs.
func (a *Agent) setPolicy(cfg nginxConfig) {
	p := *cfg.facts.Failover
	if p == a.failover.Policy() {
		return
	}
	a.failover.SetPolicy(p)
	a.opts.Log.Info("Changed the disk failover policy", "ioErrors", p.IOErrors, "checkFailures", p.CheckFailures,
		"errorWindow", p.ErrorWindow().String(), "cooldown", p.Cooldown().String(), "maxCooldown", p.MaxCooldown().String())
}

// signal has nginx load the prepared dir.
func (a *Agent) signal(dir string) error {
	if err := a.nginx.Reload(dir); err != nil {
		return err
	}
	// nginx's master loads the certificates at the reload; its old workers finish their
	// connections with the old ones.
	if sites := a.certs.Committed(true); len(sites) > 0 {
		a.opts.Log.Info("Reloaded nginx with new certificates", "sites", sites)
	}
	return nil
}

// syncCertificates brings the run dir's certificates of cfg's sites up to their mounted
// Secrets, and watches those: the kubelet swaps a Secret volume the way it swaps a
// ConfigMap's.
func (a *Agent) syncCertificates(cfg nginxConfig) error {
	if _, err := a.certs.Sync(cfg.facts.Certificates); err != nil {
		return err
	}
	for _, dir := range a.certs.Dirs() {
		if a.watcher == nil || a.watched[dir] {
			continue
		}
		// A directory that does not exist yet is watched once it does (the resync reads it
		// meanwhile).
		if err := a.watcher.Add(dir); err == nil {
			a.watched[dir] = true
		}
	}
	return nil
}

// outNames lists the disks out of the split, in declaration order.
func (a *Agent) outNames() []string {
	out := a.failover.Out()
	names := []string{}
	for _, d := range a.opts.Disks {
		if _, ok := out[d.Name]; ok {
			names = append(names, d.Name)
		}
	}
	return names
}

func (a *Agent) setConfigError(err error) {
	a.served.update(func(s *servedState) { s.configError = err.Error() })
}

// Status is what /status reports.
func (a *Agent) Status() agentapi.Status {
	out := a.failover.Out()
	running := a.nginx.PID() != 0
	served := a.served.get()
	disks := a.checks.all()
	for i := range disks {
		if o, ok := out[disks[i].Name]; ok && running {
			disks[i].Out, disks[i].OutReason, disks[i].OutSince = true, o.Reason, o.Since.UTC().Truncate(time.Second)
			disks[i].CooldownSeconds, disks[i].OtherFilesystem = int(o.Cooldown/time.Second), o.OtherFilesystem
		}
	}
	return agentapi.Status{
		ConfigHash:      served.config.hash,
		ConfigError:     served.configError,
		FailoverError:   served.failoverError,
		Disks:           disks,
		WindowSeconds:   int(a.overflow.Window() / time.Second),
		Overflows:       a.overflow.Recent(),
		WorkerProcesses: served.config.workers,
		Backlog:         served.config.facts.Backlog,
		Somaxconn:       a.opts.Somaxconn,
		Certificates:    a.certs.Status(),
	}
}

func (a *Agent) scrapeState() scrapeState {
	return scrapeState{status: a.Status(), statusPort: a.served.get().config.facts.StatusPort, tagIndexReady: a.tagIndexesReady()}
}

// Ready reports whether nginx serves: before it starts, every disk must pass its checks;
// while it runs, at least one disk must be in the node's split (the others' keys go to
// it), and nginx must answer on its status port (so it has bound its listeners and its
// workers accept connections).
func (a *Agent) Ready() (bool, string) {
	out := a.failover.Out()
	served := a.served.get()
	disks := a.checks.all()
	if a.nginx.PID() == 0 {
		for _, d := range disks {
			if !d.Ready {
				return false, fmt.Sprintf("disk %s: %s", d.Name, d.Reason)
			}
		}
		if served.configError != "" {
			return false, "nginx not started: " + served.configError
		}
		return false, "nginx not started"
	}
	if served.failoverError != "" && len(out) > 0 && len(out) < len(disks) {
		return false, "a disk is out of this node's split but nginx still sends it keys: " + served.failoverError
	}
	if len(disks) > 0 && len(out) == len(disks) {
		reasons := make([]string, len(disks))
		for i, d := range disks {
			reasons[i] = fmt.Sprintf("%s: %s", d.Name, out[d.Name].Reason)
		}
		return false, "every disk is out of this node's split: " + strings.Join(reasons, "; ")
	}
	if _, err := nginx.FetchStubStatus(served.config.facts.StatusPort); err != nil {
		return false, "nginx not answering: " + err.Error()
	}
	return true, "ok"
}
