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
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// Options configure the agent.
type Options struct {
	// Nginx is the nginx binary.
	Nginx string
	// ConfigDir is the mounted ConfigMap: nginx.conf and the facts about it (agentapi).
	ConfigDir string
	// RunDir is nginx's writable prefix: the installed config, pid and temp files.
	RunDir string
	// Disks are the declared disks, checked before nginx starts.
	Disks []Disk
	// Checker checks the disks.
	Checker DiskChecker
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
	// DiskRecheck is how often failed disk checks are retried.
	DiskRecheck time.Duration
	// OverflowWindow is the span of the overflow counts in /status.
	OverflowWindow time.Duration
	// Stderr receives nginx's error stream, line by line, unchanged.
	Stderr io.Writer
	Log    *slog.Logger
}

// Agent supervises one nginx.
type Agent struct {
	opts     Options
	reaper   *Reaper
	overflow *OverflowWindow
	metrics  *metrics

	mu          sync.Mutex
	disks       []agentapi.DiskStatus
	running     nginxConfig // the configuration nginx runs; zero before it starts
	configError string
	nginxPID    int
}

// New makes an agent; Run starts it.
func New(opts Options, reaper *Reaper) *Agent {
	a := &Agent{opts: opts, reaper: reaper, overflow: NewOverflowWindow(opts.OverflowWindow, time.Now)}
	a.metrics = newMetrics(a.scrapeState)
	return a
}

// Run checks the disks, starts nginx, and reloads it when the configuration changes,
// until ctx ends (then nginx shuts down gracefully: in-flight requests finish) or nginx
// exits (an error: the kubelet restarts the pod).
func (a *Agent) Run(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(a.opts.RunDir, "tmp"), 0o755); err != nil {
		return fmt.Errorf("create run dir: %w", err)
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

	if !a.waitForDisks(ctx) {
		return nil
	}
	cfg, ok := a.waitForConfig(ctx, watcher)
	if !ok {
		return nil
	}
	exited, err := a.startNginx(cfg)
	if err != nil {
		return err
	}

	// Disks are checked again while nginx runs: one unmounted or failing underneath it is
	// reported (DisksReady, /readyz), not discovered by the cache landing elsewhere. The
	// checks run beside this loop, so a disk that hangs cannot hold up reloads or shutdown.
	rechecking, stopRecheck := context.WithCancel(ctx)
	defer stopRecheck()
	go a.recheckDisks(rechecking)
	resync := time.NewTicker(a.opts.Resync)
	defer resync.Stop()
	var debounce <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			// nginx's graceful shutdown is SIGQUIT; its SIGTERM drops connections.
			a.opts.Log.Info("Shutting down nginx gracefully")
			return a.stop(exited)
		case ws := <-exited:
			pid := a.setPID(0)
			_ = unix.Kill(-pid, unix.SIGKILL) // workers of a dead master must not serve on
			return fmt.Errorf("nginx exited: %s", describe(ws))
		case ev := <-watcher.Events:
			if ev.Op != fsnotify.Chmod {
				debounce = time.After(a.opts.Debounce)
			}
		case err := <-watcher.Errors:
			a.opts.Log.Error("Config watch failed", "err", err)
		case <-debounce:
			debounce = nil
			a.reload(ctx)
		case <-resync.C:
			a.reload(ctx)
		}
	}
}

// waitForDisks checks the disks until all are ready. nginx is never started while one is
// missing: its cache would land on the container's root filesystem.
func (a *Agent) waitForDisks(ctx context.Context) bool {
	for !a.checkDisks() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(a.opts.DiskRecheck):
		}
	}
	return true
}

// recheckDisks checks the disks every DiskRecheck until ctx ends.
func (a *Agent) recheckDisks(ctx context.Context) {
	tick := time.NewTicker(a.opts.DiskRecheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			a.checkDisks()
		}
	}
}

// checkDisks checks every disk and claims those that passed (see DiskChecker.Claim),
// records the results for /status and /readyz, logs the disks whose state changed, and
// reports whether all are ready.
func (a *Agent) checkDisks() bool {
	states := make([]agentapi.DiskStatus, len(a.opts.Disks))
	ready := true
	for i, d := range a.opts.Disks {
		states[i] = a.opts.Checker.Check(d)
		if states[i].Ready {
			if err := a.opts.Checker.Claim(d); err != nil {
				states[i].Ready, states[i].Reason = false, err.Error()
			}
		}
		ready = ready && states[i].Ready
	}
	a.mu.Lock()
	previous := a.disks
	a.disks = states
	a.mu.Unlock()
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

// waitForConfig loads and tests the configuration until one passes nginx -t.
func (a *Agent) waitForConfig(ctx context.Context, watcher *fsnotify.Watcher) (nginxConfig, bool) {
	for {
		cfg, err := a.candidate(ctx)
		if err == nil {
			return cfg, true
		}
		a.setConfigError(err)
		a.opts.Log.Error("Configuration rejected; waiting for a new one", "err", err)
		select {
		case <-ctx.Done():
			return nginxConfig{}, false
		case <-watcher.Events:
			// Let a burst of file events settle, unless the agent is stopping.
			select {
			case <-ctx.Done():
				return nginxConfig{}, false
			case <-time.After(a.opts.Debounce):
			}
		case <-time.After(a.opts.DiskRecheck):
		}
	}
}

// candidate loads the mounted configuration and checks it with nginx -t, leaving it
// installable as RunDir/nginx.conf.candidate.
func (a *Agent) candidate(ctx context.Context) (nginxConfig, error) {
	cfg, err := loadConfig(a.opts.ConfigDir, a.opts.Workers)
	if err != nil {
		return cfg, fmt.Errorf("read configuration: %w", err)
	}
	path := a.candidatePath()
	if err := os.WriteFile(path, cfg.effective, 0o644); err != nil {
		return cfg, fmt.Errorf("write candidate configuration: %w", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	test := exec.Command(a.opts.Nginx, "-t", "-q", "-e", "stderr", "-p", a.opts.RunDir+"/", "-c", path)
	test.Env = nginxEnv()
	out, err := a.reaper.Run(tctx, test)
	if err != nil {
		return cfg, fmt.Errorf("nginx -t: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return cfg, nil
}

// nginxEnv is nginx's environment: nothing of the agent's but PATH and TZ. nginx reads
// NGINX as listening sockets inherited in a binary upgrade, so a stray NGINX variable
// (a common name for "the nginx binary") must never reach it.
func nginxEnv() []string {
	var env []string
	for _, key := range []string{"PATH", "TZ"} {
		if v, ok := os.LookupEnv(key); ok {
			env = append(env, key+"="+v)
		}
	}
	return env
}

func (a *Agent) candidatePath() string { return filepath.Join(a.opts.RunDir, "nginx.conf.candidate") }
func (a *Agent) activePath() string    { return filepath.Join(a.opts.RunDir, "nginx.conf") }

func (a *Agent) startNginx(cfg nginxConfig) (<-chan unix.WaitStatus, error) {
	if err := os.Rename(a.candidatePath(), a.activePath()); err != nil {
		return nil, fmt.Errorf("install configuration: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(a.opts.Nginx, "-e", "stderr", "-p", a.opts.RunDir+"/", "-c", a.activePath())
	cmd.Stdout, cmd.Stderr = w, w
	cmd.Env = nginxEnv()
	// Its own process group, so workers left behind by a master that died can be killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	exited, err := a.reaper.Start(cmd)
	w.Close() // the child holds its own copy
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("start nginx: %w", err)
	}
	go a.readErrorStream(r)
	a.mu.Lock()
	a.running, a.configError, a.nginxPID = cfg, "", cmd.Process.Pid
	a.mu.Unlock()
	a.metrics.configInstalled(cfg.hash)
	a.opts.Log.Info("Started nginx", "pid", cmd.Process.Pid, "configHash", cfg.hash[:12], "workers", cfg.workers)
	return exited, nil
}

// readErrorStream passes nginx's error stream through unchanged and counts the
// thread-pool queue overflows in it.
func (a *Agent) readErrorStream(r io.ReadCloser) {
	defer r.Close()
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		line := s.Text()
		fmt.Fprintln(a.opts.Stderr, line)
		if pool, ok := ParseOverflow(line); ok {
			a.overflow.Add(pool)
			a.metrics.overflows.WithLabelValues(pool).Inc()
		}
	}
}

// reload installs a changed configuration that passes nginx -t and signals nginx to load
// it in place; a configuration that fails is rejected and the last good one keeps serving.
func (a *Agent) reload(ctx context.Context) {
	cfg, err := loadConfig(a.opts.ConfigDir, a.opts.Workers)
	a.mu.Lock()
	unchanged := err == nil && cfg.hash == a.running.hash
	pid := a.nginxPID
	a.mu.Unlock()
	if unchanged || pid == 0 || errors.Is(err, errTornRead) {
		return
	}
	cfg, err = a.candidate(ctx)
	if err != nil {
		a.metrics.reloadFailed()
		a.setConfigError(err)
		a.opts.Log.Error("Configuration rejected; the last good configuration keeps serving", "err", err)
		return
	}
	if err := os.Rename(a.candidatePath(), a.activePath()); err != nil {
		a.metrics.reloadFailed()
		a.setConfigError(err)
		return
	}
	if err := unix.Kill(pid, unix.SIGHUP); err != nil {
		a.metrics.reloadFailed()
		a.setConfigError(fmt.Errorf("signal nginx: %w", err))
		return
	}
	a.mu.Lock()
	a.running, a.configError = cfg, ""
	a.mu.Unlock()
	a.metrics.reloaded(cfg.hash)
	a.opts.Log.Info("Reloaded nginx", "configHash", cfg.hash[:12])
}

// stop shuts nginx down gracefully (in-flight requests finish), waits for it, then kills
// what is left of its process group.
func (a *Agent) stop(exited <-chan unix.WaitStatus) error {
	a.mu.Lock()
	pid := a.nginxPID
	a.mu.Unlock()
	if pid != 0 {
		_ = unix.Kill(pid, unix.SIGQUIT) // nginx's graceful shutdown
		<-exited
		_ = unix.Kill(-pid, unix.SIGKILL)
		a.setPID(0)
	}
	return nil
}

// setPID records nginx's PID and returns the previous one.
func (a *Agent) setPID(pid int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.nginxPID
	a.nginxPID = pid
	return old
}

func (a *Agent) setConfigError(err error) {
	a.mu.Lock()
	a.configError = err.Error()
	a.mu.Unlock()
}

// Status is what /status reports.
func (a *Agent) Status() agentapi.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return agentapi.Status{
		ConfigHash:      a.running.hash,
		ConfigError:     a.configError,
		Disks:           append([]agentapi.DiskStatus(nil), a.disks...),
		WindowSeconds:   int(a.overflow.Window() / time.Second),
		Overflows:       a.overflow.Recent(),
		WorkerProcesses: a.running.workers,
		Backlog:         a.running.facts.Backlog,
		Somaxconn:       a.opts.Somaxconn,
	}
}

func (a *Agent) scrapeState() scrapeState {
	st := a.Status()
	a.mu.Lock()
	defer a.mu.Unlock()
	return scrapeState{status: st, statusPort: a.running.facts.StatusPort}
}

// Ready reports whether every disk passed its checks and nginx answers on its status
// port (so it has bound its listeners and its workers accept connections).
func (a *Agent) Ready() (bool, string) {
	a.mu.Lock()
	for _, d := range a.disks {
		if !d.Ready {
			a.mu.Unlock()
			return false, fmt.Sprintf("disk %s: %s", d.Name, d.Reason)
		}
	}
	pid, configError, port := a.nginxPID, a.configError, a.running.facts.StatusPort
	a.mu.Unlock()
	switch {
	case pid == 0 && configError != "":
		return false, "nginx not started: " + configError
	case pid == 0:
		return false, "nginx not started"
	}
	if _, err := fetchStubStatus(port); err != nil {
		return false, "nginx not answering: " + err.Error()
	}
	return true, "ok"
}
