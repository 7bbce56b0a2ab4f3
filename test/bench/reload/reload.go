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

// Package reload is benchmark scenario C2: the real edgepool-agent supervising real nginx,
// with configurations rendered by internal/render, reloads nginx R times while keep-alive
// clients send requests through it. It measures the time from a configuration written
// (as the kubelet swaps a ConfigMap volume) to the new configuration serving, and counts
// the requests that failed during the reloads.
package reload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// Options configure a run.
type Options struct {
	// Reloads is R, the configuration changes applied. Default 10.
	Reloads int
	// Clients is the number of keep-alive clients sending requests. Default 8.
	Clients int
	// NginxBin is the nginx binary, built with thread pools. Required.
	NginxBin string
	// Debounce is the agent's --debounce. Default 500ms, the agent's default, which the
	// cache pod runs with.
	Debounce time.Duration
	// AgentBin is the edgepool-agent binary, run as nobody. Default: built from RepoRoot.
	AgentBin string
	// RepoRoot is the repository root, where ./cmd/agent is built. Default: the current
	// directory.
	RepoRoot string
	// Log receives progress lines and, on failure, the tail of the agent's log.
	Log io.Writer
	// AgentLog, if set, receives the agent's whole log.
	AgentLog io.Writer
}

// Result is what a run measured. Durations are in milliseconds.
type Result struct {
	Reloads    int     `json:"reloads"`
	Clients    int     `json:"clients"`
	DebounceMs float64 `json:"debounceMs"`
	// Configuration written (the ConfigMap volume's ..data swapped) -> a new connection
	// first served by the new configuration. Includes the agent's debounce and nginx -t.
	ReloadP50Ms float64 `json:"reloadP50Ms"`
	ReloadP99Ms float64 `json:"reloadP99Ms"`
	ReloadMaxMs float64 `json:"reloadMaxMs"`
	// Configuration written -> every new connection served by the new configuration: the
	// workers of the older one have stopped accepting (exited or shutting down). Between
	// the two, nginx's old workers still accept some connections; StaleResponses counts
	// the probes (one new connection each, Probes in all) they answered after the new
	// configuration had served one.
	SettledP50Ms   float64 `json:"settledP50Ms"`
	SettledP99Ms   float64 `json:"settledP99Ms"`
	SettledMaxMs   float64 `json:"settledMaxMs"`
	StaleResponses int     `json:"staleResponses"`
	Probes         int     `json:"probes"`
	// Requests the load clients completed while the changes were applied (from just
	// before the first until each client completed two after the last), in LoadMs, and
	// those that failed (transport error or not 200). FirstError is the first failure.
	Requests       int     `json:"requests"`
	FailedRequests int     `json:"failedRequests"`
	FirstError     string  `json:"firstError,omitempty"`
	LoadMs         float64 `json:"loadMs"`
	// The agent's edgepool_config_reloads_total and edgepool_config_reloads_failed_total.
	AgentReloads       int `json:"agentReloads"`
	AgentFailedReloads int `json:"agentFailedReloads"`
	// ConfigHash is the hash of the last configuration written, ServingConfigHash the one
	// the agent's /status reports running.
	ConfigHash        string `json:"configHash"`
	ServingConfigHash string `json:"servingConfigHash"`
	// For tests to check further: the spec of the last configuration written, and what
	// the agent's /status and /metrics said at the end.
	Spec    *v1alpha1.CacheNodeSpec `json:"-"`
	Status  agentapi.Status         `json:"-"`
	Metrics testkit.Metrics         `json:"-"`
}

const (
	readyTimeout  = 30 * time.Second // agent built, disks checked, nginx answering
	changeTimeout = 30 * time.Second // one change served, and every client past it
	countTimeout  = 5 * time.Second  // the last reload counted by the agent
	probeInterval = 2 * time.Millisecond
	agentLogTail  = 64 << 10
)

func (o Options) withDefaults() (Options, error) {
	if o.Reloads == 0 {
		o.Reloads = 10
	}
	if o.Clients == 0 {
		o.Clients = 8
	}
	if o.Debounce == 0 {
		o.Debounce = 500 * time.Millisecond
	}
	if o.RepoRoot == "" {
		o.RepoRoot = "."
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.AgentLog == nil {
		o.AgentLog = io.Discard
	}
	switch {
	case o.Reloads < 0 || o.Clients < 0 || o.Debounce < 0:
		return o, errors.New("reloads, clients and debounce must not be negative")
	case o.NginxBin == "":
		return o, errors.New("NginxBin is required (Debian's nginx-light has thread pools)")
	case os.Geteuid() != 0:
		return o, errNotRoot
	}
	if _, err := os.Stat(filepath.Join(o.RepoRoot, "go.mod")); err != nil && o.AgentBin == "" {
		return o, fmt.Errorf("RepoRoot is not the repository root: %w", err)
	}
	return o, nil
}

// Run builds the agent (unless AgentBin is given), starts it on a rendered configuration
// and measures C2. It returns an error when something does not happen in time; the
// Result's counts say whether the reloads met their targets.
func Run(ctx context.Context, opts Options) (*Result, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "edgepool-bench-reload-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil { // nobody runs the agent binary from here
		return nil, err
	}
	agentBin, err := testkit.AgentBinary(ctx, opts.AgentBin, opts.RepoRoot, work)
	if err != nil {
		return nil, err
	}

	agentLog := &testkit.Buffer{Max: agentLogTail}
	res, err := run(ctx, opts, work, agentBin, io.MultiWriter(agentLog, opts.AgentLog))
	if err != nil {
		fmt.Fprintf(opts.Log, "agent log (tail):\n%s\n", agentLog)
		return nil, err
	}
	return res, nil
}

func run(ctx context.Context, opts Options, work, agentBin string, agentLog io.Writer) (*Result, error) {
	// One origin per configuration, answering with the configuration's number: a
	// response tells exactly which configuration served it.
	origins := make([]string, opts.Reloads+1)
	for i := range origins {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, strconv.Itoa(i))
		}))
		defer srv.Close()
		origins[i] = strings.TrimPrefix(srv.URL, "http://")
	}

	diskDir, err := sharedDir(work, "d0")
	if err != nil {
		return nil, err
	}
	spec, err := benchSpec(origins[0], diskDir)
	if err != nil {
		return nil, err
	}
	confDir, err := sharedDir(work, "config")
	if err != nil {
		return nil, err
	}
	runDir, err := sharedDir(work, "run")
	if err != nil {
		return nil, err
	}
	cfg := &testkit.ConfigDir{Dir: confDir}
	if _, err := writeSpec(cfg, spec); err != nil {
		return nil, err
	}

	agent, err := testkit.StartAgent(agentBin, fmt.Sprintf("127.0.0.1:%d", spec.Listener.AgentPort), []string{
		"--nginx", opts.NginxBin, "--config-dir", cfg.Dir, "--run-dir", filepath.Join(runDir, "agent"),
		"--debounce", opts.Debounce.String(), "--allow-unmounted",
		"--disk", fmt.Sprintf("name=%s,path=%s,media=%s", spec.Disks[0].Name, spec.Disks[0].Path, spec.Disks[0].Media),
	}, agentLog)
	if err != nil {
		return nil, err
	}
	// SIGTERM: nginx finishes the requests in flight. Before the origins close.
	defer func() { _ = agent.Stop(15 * time.Second) }()
	readyCtx, cancel := testkit.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := agent.WaitReady(readyCtx); err != nil {
		return nil, err
	}

	base := fmt.Sprintf("http://127.0.0.1:%d", spec.Listener.Port)
	load := startLoad(base, opts.Clients)
	defer load.stop()
	res := &Result{Reloads: opts.Reloads, Clients: opts.Clients, DebounceMs: testkit.Millis(opts.Debounce)}
	var served, settled []time.Duration
	for i := 1; i <= opts.Reloads; i++ {
		spec.Origin.Servers = []string{origins[i]}
		ct, err := change(ctx, cfg, spec, base, i, agent, load)
		if err != nil {
			return nil, err
		}
		served, settled = append(served, ct.served), append(settled, ct.settled)
		res.StaleResponses += ct.stale
		res.Probes += ct.probes
		res.ConfigHash = ct.hash
		fmt.Fprintf(opts.Log, "C2 change %d: served after %s, old workers stopped accepting after %s; %d of %d probes after the first served by an older configuration\n",
			i, ct.served.Round(time.Millisecond), ct.settled.Round(time.Millisecond), ct.stale, ct.probes)
	}
	res.LoadMs = testkit.Millis(load.stop())
	res.Requests, res.FailedRequests, res.FirstError = load.requests(), int(load.failed.Load()), load.firstError()
	res.ReloadP50Ms, res.ReloadP99Ms, res.ReloadMaxMs = quantiles(served)
	res.SettledP50Ms, res.SettledP99Ms, res.SettledMaxMs = quantiles(settled)
	if err := countReloads(ctx, agent, opts.Reloads, res); err != nil {
		return nil, err
	}
	if res.Status, err = agent.Status(ctx); err != nil {
		return nil, fmt.Errorf("agent /status: %w", err)
	}
	res.ServingConfigHash, res.Spec = res.Status.ConfigHash, spec
	fmt.Fprintf(opts.Log, "C2 %d reloads under %d keep-alive clients (debounce %s): written -> served p50 %.1fms, p99 %.1fms, max %.1fms; -> old workers stopped p50 %.1fms, p99 %.1fms, max %.1fms; %d requests, %d failed\n",
		res.Reloads, res.Clients, opts.Debounce, res.ReloadP50Ms, res.ReloadP99Ms, res.ReloadMaxMs,
		res.SettledP50Ms, res.SettledP99Ms, res.SettledMaxMs, res.Requests, res.FailedRequests)
	return res, nil
}

var errNotRoot = errors.New("the reload benchmark needs root, to run the agent and nginx as nobody as the cache pod runs them unprivileged")

// sharedDir makes a directory in parent that the unprivileged agent and nginx can write.
func sharedDir(parent, name string) (string, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o777); err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o777) // past the umask
}

// countReloads reads the agent's /metrics into res, waiting up to countTimeout for it to
// count want reloads, failed or not: the agent counts a reload just after signalling
// nginx, which may be a moment after the new workers answer. Fewer is not an error: the
// Result says how many.
func countReloads(ctx context.Context, agent *testkit.Agent, want int, res *Result) error {
	ctx, cancel := testkit.WithTimeout(ctx, countTimeout)
	defer cancel()
	err := testkit.Eventually(ctx, 20*time.Millisecond, "the agent to count every reload", func() error {
		m, err := agent.Metrics(ctx)
		if err != nil {
			return err
		}
		res.Metrics = m
		res.AgentReloads = int(m.Sum("edgepool_config_reloads_total", nil))
		res.AgentFailedReloads = int(m.Sum("edgepool_config_reloads_failed_total", nil))
		if res.AgentReloads+res.AgentFailedReloads < want {
			return fmt.Errorf("%d reloads and %d failed ones counted", res.AgentReloads, res.AgentFailedReloads)
		}
		return nil
	})
	if res.Metrics == nil {
		return fmt.Errorf("agent /metrics: %w", err)
	}
	return nil
}

// benchSpec is a defaulted CacheNode spec with one SSD disk, listening on free ports.
func benchSpec(origin, diskPath string) (*v1alpha1.CacheNodeSpec, error) {
	spec := &v1alpha1.CacheNodeSpec{
		Disks:  []v1alpha1.Disk{{Name: "d0", Path: diskPath, Media: v1alpha1.MediaSSD, Size: resource.MustParse("1Gi")}},
		Origin: v1alpha1.Origin{Servers: []string{origin}},
	}
	for _, port := range []*int32{&spec.Listener.Port, &spec.Listener.StatusPort, &spec.Listener.AgentPort} {
		p, err := testkit.FreePort()
		if err != nil {
			return nil, err
		}
		*port = p
	}
	spec.Default()
	return spec, nil
}

// writeSpec renders spec into the configuration directory and returns its hash.
func writeSpec(cfg *testkit.ConfigDir, spec *v1alpha1.CacheNodeSpec) (string, error) {
	conf, err := render.NginxConf(spec)
	if err != nil {
		return "", fmt.Errorf("render: %w", err)
	}
	return agentapi.Hash([]byte(conf)), cfg.WriteConf(spec, conf)
}

// changeTimes is what one change measured, from the configuration written.
type changeTimes struct {
	served  time.Duration // to a new connection first served by the new configuration
	settled time.Duration // to no worker of an older configuration accepting connections
	stale   int           // probes answered by an older configuration after served
	probes  int
	hash    string // of the configuration written
}

// change writes spec's configuration, number i, and probes with new connections until
// one is served by it (its own origin answers with i) and the workers that ran before
// the change no longer accept connections. It then waits until every load client has
// completed two more requests, so the load ran through the old workers' shutdown.
func change(ctx context.Context, cfg *testkit.ConfigDir, spec *v1alpha1.CacheNodeSpec, base string, i int, agent *testkit.Agent, load *load) (changeTimes, error) {
	var ct changeTimes
	ctx, cancel := testkit.WithTimeout(ctx, changeTimeout)
	defer cancel()
	procs, err := readProcs()
	if err != nil {
		return ct, err
	}
	old := acceptingWorkers(procs, agent.Pid())
	if len(old) == 0 {
		return ct, fmt.Errorf("change %d: no nginx worker is running", i)
	}

	start := time.Now()
	if ct.hash, err = writeSpec(cfg, spec); err != nil {
		return ct, err
	}
	probe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	want := strconv.Itoa(i)
	err = testkit.Eventually(ctx, probeInterval, fmt.Sprintf("change %d to serve", i), func() error {
		body, err := testkit.Get(ctx, probe, fmt.Sprintf("%s/probe/%d/%d", base, i, ct.probes))
		ct.probes++
		switch {
		case err == nil && body == want:
			if ct.served == 0 {
				ct.served = time.Since(start)
			}
		case err == nil && ct.served != 0:
			ct.stale++
		}
		if ct.settled == 0 {
			accepting, err := stillAccepting(old)
			if err != nil {
				return err
			}
			if !accepting {
				ct.settled = time.Since(start)
			}
		}
		if ct.served == 0 || ct.settled == 0 {
			return fmt.Errorf("served after %s, old workers stopped after %s; last probe: %q, %v", ct.served, ct.settled, body, err)
		}
		return nil
	})
	if err != nil {
		return ct, err
	}
	ct.settled = max(ct.served, ct.settled)
	if err := load.waitProgress(ctx, 2); err != nil {
		return ct, fmt.Errorf("change %d: %w", i, err)
	}
	return ct, nil
}

// load is keep-alive clients, each on a connection of its own, requesting new objects
// (cache misses, so every request goes through to the origin) until stopped.
type load struct {
	done     []atomic.Int64 // requests completed per client, ok or not
	failed   atomic.Int64
	firstErr atomic.Value
	stopCh   chan struct{}
	wg       sync.WaitGroup
	start    time.Time
	stopOnce sync.Once
	took     time.Duration
}

func startLoad(base string, clients int) *load {
	l := &load{done: make([]atomic.Int64, clients), stopCh: make(chan struct{}), start: time.Now()}
	for c := range clients {
		l.wg.Go(func() {
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			for n := 0; ; n++ {
				select {
				case <-l.stopCh:
					return
				default:
				}
				if _, err := testkit.Get(context.Background(), client, fmt.Sprintf("%s/load/%d/%d", base, c, n)); err != nil {
					l.failed.Add(1)
					l.firstErr.CompareAndSwap(nil, err.Error())
				}
				l.done[c].Add(1)
			}
		})
	}
	return l
}

// waitProgress waits until every client has completed n more requests.
func (l *load) waitProgress(ctx context.Context, n int64) error {
	marks := make([]int64, len(l.done))
	for c := range l.done {
		marks[c] = l.done[c].Load() + n
	}
	return testkit.Eventually(ctx, time.Millisecond, "the load clients to make progress", func() error {
		for c := range l.done {
			if l.done[c].Load() < marks[c] {
				return fmt.Errorf("client %d is at %d requests, not yet %d", c, l.done[c].Load(), marks[c])
			}
		}
		return nil
	})
}

// stop stops the clients and returns how long they ran.
func (l *load) stop() time.Duration {
	l.stopOnce.Do(func() {
		close(l.stopCh)
		l.wg.Wait()
		l.took = time.Since(l.start)
	})
	return l.took
}

func (l *load) requests() int {
	total := int64(0)
	for c := range l.done {
		total += l.done[c].Load()
	}
	return int(total)
}

func (l *load) firstError() string {
	if s, ok := l.firstErr.Load().(string); ok {
		return s
	}
	return ""
}

// quantiles returns the p50, p99 and maximum of ds in milliseconds.
func quantiles(ds []time.Duration) (p50, p99, maxMs float64) {
	return testkit.Millis(testkit.Percentile(ds, 50)), testkit.Millis(testkit.Percentile(ds, 99)), testkit.Millis(testkit.Percentile(ds, 100))
}
