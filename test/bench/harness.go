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

// Package bench measures the nginx configurations edgepool renders, side by side with
// baselines, on emulated slow disks (package slowdisk) under wrk load. `make bench`
// runs every scenario; `make test` runs a small smoke of the same code.
package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"time"

	"github.com/edgepool/edgepool/api/v1alpha1"
	agentnginx "github.com/edgepool/edgepool/internal/agent/nginx"
	"github.com/edgepool/edgepool/internal/nginxconf"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/test/bench/slowdisk"
)

// Options size a benchmark run.
type Options struct {
	RepoRoot string
	NginxBin string
	WrkBin   string
	Log      io.Writer `json:"-"`

	ObjectSize   int64         // bytes per object (the published experiment: 4 MB)
	DataSetBytes int64         // bytes of objects on every disk; several times RAM
	Duration     time.Duration // of every measured window
	Ramp         time.Duration // cold load before a window starts
	Rounds       int           // every scenario runs this many times, configurations interleaved
	Slowdown     float64       // every emulated disk this many times slower (1: as the media says)
	Workers      int           // nginx worker processes (workerProcesses: auto)
	// The open loop's heavy cold load offers each disk this multiple of its model's
	// throughput, but at most ColdCapMBps (MB/s): an NVMe's model runs at GB/s, far
	// beyond what 2 CPUs copy through FUSE and nginx.
	HeavyLoad   float64
	ColdCapMBps float64
	// Smoke runs every configuration and kind of load once, not every level of them:
	// D1's closed loop at the heavy cold load only, D4 the largest pool of each media.
	// For make test, which checks that every scenario runs, not what it measures.
	Smoke bool
}

// Harness holds what every run shares: the data set, the origin and the mount points.
type Harness struct {
	opts   Options
	dir    string
	origin *origin
	data   *CacheData
}

func (h *Harness) logf(format string, args ...any) {
	if h.opts.Log != nil {
		fmt.Fprintf(h.opts.Log, format+"\n", args...)
	}
}

// newHarness starts the origin and learns nginx's cache file layout for objects of
// size bytes, with the cache key and headers of spec.
func newHarness(ctx context.Context, opts Options, spec *v1alpha1.CacheNodeSpec, size, dataBytes int64) (*Harness, error) {
	if err := slowdisk.Available(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "edgepool-bench-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil { // nginx's workers run as nobody
		return nil, err
	}
	o, err := startOrigin(size)
	if err != nil {
		return nil, err
	}
	h := &Harness{opts: opts, dir: dir, origin: o}
	learn := spec.DeepCopy()
	if err := localize(learn, h.paths(learn), o.addr, dataBytes); err != nil {
		h.Close()
		return nil, err
	}
	t, err := learnTemplate(ctx, opts.NginxBin, learn, o)
	if err != nil {
		h.Close()
		return nil, err
	}
	o.requests.Store(0) // the fills that taught the template
	h.data = NewCacheData(t, int(max(2, dataBytes/size)))
	h.logf("data set: %d objects of %d bytes per disk (%.1f GiB), cache key %q",
		h.data.Objects, size, float64(int64(h.data.Objects)*size)/(1<<30), t.Key)
	return h, nil
}

// Close stops the origin and removes the mount points.
func (h *Harness) Close() {
	h.origin.close()
	_ = os.RemoveAll(h.dir)
}

// paths are the mount points of spec's disks, by name.
func (h *Harness) paths(spec *v1alpha1.CacheNodeSpec) map[string]string {
	p := map[string]string{}
	for _, d := range spec.Disks {
		p[d.Name] = filepath.Join(h.dir, d.Name)
	}
	return p
}

// config is one configuration under test: a localized spec, the emulated timing of
// each of its disks, and the variant applied to what edgepool renders for it.
type config struct {
	name    string
	spec    *v1alpha1.CacheNodeSpec
	models  map[string]slowdisk.Model
	variant variant
}

// newConfig localizes spec for this harness; disks get their media's timing.
func (h *Harness) newConfig(name string, spec *v1alpha1.CacheNodeSpec, v variant) (*config, error) {
	s := spec.DeepCopy()
	if err := localize(s, h.paths(s), h.origin.addr, int64(h.data.Objects)*h.data.BodySize); err != nil {
		return nil, err
	}
	c := &config{name: name, spec: s, models: map[string]slowdisk.Model{}, variant: v}
	for _, d := range s.Disks {
		c.models[d.Name] = mediaModel(d.Media).Slower(h.opts.Slowdown)
	}
	return c, nil
}

// node is a configuration serving: its disks mounted (with an empty page cache) and
// nginx running on the configuration.
type node struct {
	disks  map[string]*slowdisk.Disk
	onDisk map[string][]int // the objects nginx keeps on each disk (split_clients), learned by index
	nginx  *nginxProc
	addr   string
	// peerPort is a sharded configuration's owner-facing port, 0 for others.
	peerPort int32
	// client warms and verifies objects.
	client *http.Client
}

func (h *Harness) up(ctx context.Context, c *config, seed uint64, nice int) (*node, error) {
	conf, err := render.NginxConf(c.spec)
	if err != nil {
		return nil, err
	}
	if conf, err = c.variant.rewrite(conf); err != nil {
		return nil, err
	}
	// As the node agent installs it: workerProcesses auto is a worker per CPU (Workers).
	if render.Facts(c.spec, conf).WorkerProcesses == 0 {
		conf = string(nginxconf.WithWorkers([]byte(conf), h.opts.Workers))
	}
	// A client of the node's own: no connection it keeps alive outlives the node.
	n := &node{disks: map[string]*slowdisk.Disk{}, addr: fmt.Sprintf("127.0.0.1:%d", c.spec.Listener.Port),
		client: &http.Client{Transport: &http.Transport{}}}
	if c.spec.Sharding != nil {
		n.peerPort = c.spec.Sharding.PeerPort
	}
	for i, d := range c.spec.Disks {
		if err := os.MkdirAll(d.Path, 0o755); err != nil {
			n.down()
			return nil, err
		}
		disk, err := slowdisk.Mount(d.Path, h.data, c.models[d.Name], seed+uint64(i))
		if err != nil {
			n.down()
			return nil, err
		}
		n.disks[d.Name] = disk
	}
	// What edgepool renders runs as the node agent runs it: the thread pools PoolNiceness
	// below the event loops. The event loops start that much above nice, so that the pools
	// run at nice, where all of nginx runs for a hand-written baseline: above or beside
	// what stands in for other machines, never below it.
	agentRun := !c.variant.handWritten
	start := nice
	if agentRun {
		start -= agentnginx.PoolNiceness
	}
	if n.nginx, err = startNginxWith(ctx, h.opts.NginxBin, conf, c.spec, nil, start); err != nil {
		n.down()
		return nil, err
	}
	want, err := nicenessOf(start)
	if got, err2 := processNice(n.nginx.Pid()); err != nil || err2 != nil || got != want {
		n.down()
		return nil, fmt.Errorf("nginx runs at niceness %d, not %d (raising it needs root): %v", got, want, errors.Join(err, err2))
	}
	if err := h.index(ctx, n); err != nil {
		n.down()
		return nil, err
	}
	// The workers run (they have answered the index): their pools go below them.
	if agentRun {
		var pools agentnginx.PoolPriority
		lowered, err := pools.Lower(n.nginx.Pid())
		if err == nil && lowered == 0 && c.spec.IO != v1alpha1.IOSync {
			err = errors.New("no thread to lower")
		}
		if err != nil {
			n.down()
			return nil, fmt.Errorf("lowering nginx's thread pools: %w", err)
		}
	}
	return n, nil
}

// index makes every object known to nginx's keys zone, as its cache loader would a
// minute after start, so no request ever goes to the origin: each object gets a HEAD
// (a HIT) while the disks are free. Then the page cache is dropped: runs start cold.
// Until the loader has run, nginx sends the second of two concurrent first requests
// for an object to the origin, which the read-only emulated disks cannot store.
func (h *Harness) index(ctx context.Context, n *node) error {
	for _, d := range n.disks {
		d.SetFree(true)
	}
	ids := make(chan int)
	errs := make(chan error, 8)
	// A sharded node is indexed at its owner-facing port: through the client-facing one,
	// a hot tier would turn every HEAD into a GET of the whole object.
	addr := n.ownerAddr()
	for range cap(errs) {
		go func() {
			c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			var err error
			for id := range ids {
				if err == nil {
					err = head(ctx, c, addr, id)
				}
			}
			errs <- err
		}()
	}
	for id := range h.data.Objects {
		ids <- id
	}
	close(ids)
	var err error
	for range cap(errs) {
		err = errors.Join(err, <-errs)
	}
	n.onDisk = map[string][]int{}
	for name, d := range n.disks {
		for id := range h.data.Objects {
			if d.WasRead(id) {
				n.onDisk[name] = append(n.onDisk[name], id)
			}
		}
		d.SetFree(false)
		d.DropCache()
	}
	return err
}

func head(ctx context.Context, c *http.Client, addr string, id int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, "http://"+addr+ObjectPath(id), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if s := resp.Header.Get("X-Cache-Status"); resp.StatusCode != http.StatusOK || s != "HIT" {
		return fmt.Errorf("HEAD %s: %s, cache status %q, want a HIT from the emulated disk", ObjectPath(id), resp.Status, s)
	}
	return nil
}

// ownerAddr is where the node serves the keys it owns: a sharded node's owner-facing
// port, any other node's listener.
func (n *node) ownerAddr() string {
	if n.peerPort == 0 {
		return n.addr
	}
	return fmt.Sprintf("127.0.0.1:%d", n.peerPort)
}

func (n *node) down() {
	n.client.CloseIdleConnections()
	if n.nginx != nil {
		n.nginx.stop()
	}
	for _, d := range n.disks {
		_ = d.Unmount()
	}
}

// cpu is the CPU time nginx and this process have used so far, and the time the
// hypervisor has taken from the machine's CPUs (steal).
func (n *node) cpu() (nginx, self, steal time.Duration, err error) {
	if nginx, err = treeCPU(n.nginx.Pid()); err != nil {
		return 0, 0, 0, err
	}
	if self, err = processCPU(os.Getpid()); err != nil {
		return 0, 0, 0, err
	}
	steal, err = machineSteal()
	return nginx, self, steal, err
}

func (n *node) diskStats() map[string]slowdisk.Stats {
	s := map[string]slowdisk.Stats{}
	for name, d := range n.disks {
		s[name] = d.Stats()
	}
	return s
}

// load is what runs against a node: cold connections on random objects, hot
// connections on object 0, and whether every request opens a new connection.
type load struct {
	name        string
	cold, hot   int
	coldThreads int
	shortConns  bool
	perDisk     map[string]int // instead of cold: a client per disk, on that disk's objects, with this many connections
	// Open loop, instead of connections: the hot client's arrivals per second (0: none)
	// and each disk's cold arrivals per second, on that disk's objects (openloop.go).
	open     bool
	hotRate  float64
	coldRate map[string]float64
	// chart names the load in charts, the same in every round (a name holds rates).
	chart string
}

// nice is the niceness nginx and the hot client run at under l: measuredNice when an
// open-loop client measures the hot object's latency (openchild.go), else this process's.
func (l load) nice() int {
	if l.open && l.hotRate > 0 {
		return measuredNice
	}
	return 0
}

// Run is one measured window of one configuration under one load.
type Run struct {
	Scenario  string                 `json:"scenario"`
	Config    string                 `json:"config"`
	Load      string                 `json:"load"`
	Round     int                    `json:"round"`
	Hot       *clientResult          `json:"hot,omitempty"`
	Cold      *clientResult          `json:"cold,omitempty"`
	DiskMBps  map[string]float64     `json:"disk_mb_per_s"` // read from each emulated disk during the window
	Disks     map[string]*DiskWindow `json:"disks"`
	Overflows int                    `json:"queue_overflows"`
	Models    map[string]string      `json:"disk_models"`
	Checked   int                    `json:"objects_verified"`
	// The per-request lines of the whole run (ramp and checks included): counted by the
	// agent's parser, and dropped before it.
	LinesCounted int64 `json:"request_lines_counted"`
	LinesDropped int64 `json:"request_lines_dropped"`
	// CPU time used during the window by nginx (master and workers), and by this process:
	// mostly the emulated disks' FUSE daemon, which every read of nginx goes through, and
	// the reader and parser of the per-request lines.
	NginxCPUSeconds float64 `json:"nginx_cpu_seconds"`
	BenchCPUSeconds float64 `json:"bench_cpu_seconds"`
	// CPU time the hypervisor gave this machine's CPUs to others during the window.
	StealSeconds  float64 `json:"steal_seconds"`
	WindowSeconds float64 `json:"window_seconds"`
	Chart         string  `json:"chart"` // the load's name in charts
	diskStats     map[string]slowdisk.Stats
}

// run measures load on c: the cold load starts Ramp before the window and ends after
// it; the hot client (if any) runs for the window. Afterwards, the hot object and
// random cold ones are fetched and checked byte for byte.
func (h *Harness) run(ctx context.Context, scenario string, c *config, l load, round int) (*Run, error) {
	seed := uint64(round)*7919 + 1
	n, err := h.up(ctx, c, seed, l.nice())
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", scenario, c.name, err)
	}
	defer n.down()
	r := &Run{Scenario: scenario, Config: c.name, Load: l.name, Round: round, Models: map[string]string{}, Chart: cmp.Or(l.chart, l.name)}
	for name, m := range c.models {
		r.Models[name] = m.String()
	}
	if _, err := fetchObject(ctx, n.client, n.addr, 0, h.data.BodySize); err != nil {
		return nil, fmt.Errorf("%s %s: warm the hot object: %w; nginx's log: %s", scenario, c.name, err, n.nginx.logTail())
	}
	if c.spec.Sharding != nil && c.spec.Sharding.HotTier != nil {
		if err := copyHotObject(ctx, n.client, n.addr, h.data.BodySize); err != nil {
			return nil, fmt.Errorf("%s %s: copy the hot object to the hot tier: %w; nginx's log: %s", scenario, c.name, err, n.nginx.logTail())
		}
	}
	type result struct {
		r   *clientResult
		err error
	}

	hot, colds, err := h.clients(c, l, n, seed)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", scenario, c.name, err)
	}
	coldDone := make(chan result, len(colds))
	for _, cold := range colds {
		go func() {
			cr, err := cold(ctx)
			coldDone <- result{cr, err}
		}()
	}
	// An open-loop hot client starts with the cold ones and counts from the window on,
	// so its connections are warm when the window starts.
	hotDone := make(chan result, 1)
	if hot != nil && l.open {
		go func() {
			cr, err := hot(ctx)
			hotDone <- result{cr, err}
		}()
	}
	if len(colds) > 0 || l.open {
		select {
		case <-time.After(h.opts.Ramp):
		case res := <-coldDone:
			return nil, fmt.Errorf("%s %s: cold load ended early: %v", scenario, c.name, res.err)
		}
	}
	before := n.diskStats()
	nginxBefore, benchBefore, stealBefore, err := n.cpu()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", scenario, c.name, err)
	}
	// The window is the closed-loop hot client's run, or else Duration: an open-loop
	// client waits for its last responses after it.
	start := time.Now()
	switch {
	case hot != nil && !l.open:
		cr, err := hot(ctx)
		hotDone <- result{cr, err}
	default:
		if hot == nil {
			hotDone <- result{}
		}
		select {
		case <-time.After(h.opts.Duration):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	window := time.Since(start).Seconds()
	after := n.diskStats()
	nginxAfter, benchAfter, stealAfter, err := n.cpu()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", scenario, c.name, err)
	}
	r.NginxCPUSeconds, r.BenchCPUSeconds = (nginxAfter - nginxBefore).Seconds(), (benchAfter - benchBefore).Seconds()
	r.StealSeconds = (stealAfter - stealBefore).Seconds()
	r.WindowSeconds = window
	r.DiskMBps = map[string]float64{}
	r.Disks = map[string]*DiskWindow{}
	r.diskStats = map[string]slowdisk.Stats{}
	for name := range after {
		r.DiskMBps[name] = float64(after[name].Bytes-before[name].Bytes) / window / 1e6
		r.Disks[name] = diskWindow(c.models[name], before[name], after[name], window, h.data.Size(0), l.coldRate[name]*float64(h.data.BodySize))
		r.diskStats[name] = after[name]
	}
	hotRes := <-hotDone
	if hotRes.err != nil {
		return nil, fmt.Errorf("%s %s: hot client: %w", scenario, c.name, hotRes.err)
	}
	r.Hot = hotRes.r
	for range colds {
		res := <-coldDone
		if res.err != nil {
			return nil, fmt.Errorf("%s %s: cold load: %w", scenario, c.name, res.err)
		}
		r.Cold = r.Cold.add(res.r)
	}
	if err := h.verify(ctx, n, seed); err != nil {
		return nil, fmt.Errorf("%s %s: %w", scenario, c.name, err)
	}
	r.Checked = 1 + verifySample
	r.Overflows = n.nginx.count("queue overflow")
	r.LinesCounted, r.LinesDropped = n.nginx.lineCounts()
	if origin := h.origin.requests.Swap(0); origin > 0 {
		return nil, fmt.Errorf("%s %s: %d requests reached the origin: the cache did not serve from the emulated disks; nginx's log: %s", scenario, c.name, origin, n.nginx.logTail())
	}
	return r, nil
}

const verifySample = 8

// A client loads a node until its load is done.
type client func(ctx context.Context) (*clientResult, error)

// clients are l's hot client on object 0 (nil if none) and its cold ones on c's node n.
func (h *Harness) clients(c *config, l load, n *node, seed uint64) (hot client, colds []client, err error) {
	size, window := h.data.BodySize, h.opts.Duration
	// An open-loop client waits this long after its window for its last responses.
	grace := min(max(window/2, time.Second), 5*time.Second)
	coldIDs := func(disk string) []int {
		return slices.DeleteFunc(slices.Clone(n.onDisk[disk]), func(id int) bool { return id == 0 })
	}
	// A sharded node's cold reads come from its peers, at its owner-facing port, as they
	// mostly do in a fleet (the keys it owns, asked through the other pods); its hot
	// client is its own, at the client-facing port.
	coldAddr := n.ownerAddr()
	switch {
	case l.open:
		for i, d := range c.spec.Disks {
			rate, ok := l.coldRate[d.Name]
			if !ok && l.coldRate != nil {
				return nil, nil, fmt.Errorf("load %q has no cold rate for disk %s", l.name, d.Name)
			}
			if rate > 0 {
				o := openLoad{rate: rate, ids: coldIDs(d.Name), seed: seed + uint64(i) + 1}
				colds = append(colds, func(ctx context.Context) (*clientResult, error) {
					return runOpen(ctx, coldAddr, o, size, h.opts.Ramp, window, grace)
				})
			}
		}
		if l.hotRate > 0 {
			o := openLoad{rate: l.hotRate, ids: []int{0}, seed: seed}
			hot = func(ctx context.Context) (*clientResult, error) {
				return runOpenChild(ctx, l.nice(), n.addr, o, size, h.opts.Ramp, window, grace)
			}
		}
		return hot, colds, nil
	case l.perDisk != nil:
		for _, d := range c.spec.Disks {
			conns, ok := l.perDisk[d.Name]
			if !ok {
				return nil, nil, fmt.Errorf("load %q has no client for disk %s", l.name, d.Name)
			}
			w := wrkLoad{conns: conns, ids: coldIDs(d.Name), seed: int(seed)}
			colds = append(colds, func(ctx context.Context) (*clientResult, error) {
				return runWrk(ctx, h.opts.WrkBin, coldAddr, w, window+2*h.opts.Ramp)
			})
		}
	case l.cold > 0:
		w := wrkLoad{threads: l.coldThreads, conns: l.cold, first: 1, count: h.data.Objects - 1, seed: int(seed), close: l.shortConns}
		colds = append(colds, func(ctx context.Context) (*clientResult, error) {
			return runWrk(ctx, h.opts.WrkBin, coldAddr, w, window+2*h.opts.Ramp)
		})
	}
	if l.hot > 0 {
		w := wrkLoad{conns: l.hot, first: 0, count: 1, seed: int(seed), close: l.shortConns}
		hot = func(ctx context.Context) (*clientResult, error) { return runWrk(ctx, h.opts.WrkBin, n.addr, w, window) }
	}
	return hot, colds, nil
}

// DiskWindow is what one emulated disk did during a run's window, against what its
// model can do.
type DiskWindow struct {
	Model          string  `json:"model"`
	ModelMBps      float64 `json:"model_mb_per_s"`             // slowdisk.Model.Throughput of whole objects
	OfferedMBps    float64 `json:"offered_mb_per_s,omitempty"` // open-loop cold arrivals × object size
	ReadMBps       float64 `json:"read_mb_per_s"`
	Busy           float64 `json:"busy"`               // spindle time used ÷ (window × spindles)
	SeeksPerObject float64 `json:"seeks_per_object"`   // seeks ÷ objects' worth of bytes read
	ReadKiB        float64 `json:"mean_read_kib"`      // per read that reached the disk (FUSE read size)
	Peak           int64   `json:"peak_reads_at_disk"` // since the run started, ramp included
}

func diskWindow(m slowdisk.Model, before, after slowdisk.Stats, window float64, fileSize int64, offered float64) *DiskWindow {
	bytes, reads := float64(after.Bytes-before.Bytes), float64(after.Reads-before.Reads)
	w := &DiskWindow{
		Model: m.String(), ModelMBps: m.Throughput(fileSize) / 1e6, OfferedMBps: offered / 1e6,
		ReadMBps: bytes / window / 1e6, Busy: (after.Busy - before.Busy).Seconds() / window / float64(m.Spindles),
		Peak: after.Peak,
	}
	if bytes > 0 {
		w.SeeksPerObject = float64(after.Seeks-before.Seeks) / (bytes / float64(fileSize))
		w.ReadKiB = bytes / reads / 1024
	}
	return w
}

// verify fetches the hot object and random others and checks every byte; each must be
// a cache HIT, served from the emulated disks.
func (h *Harness) verify(ctx context.Context, n *node, seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 42))
	ids := []int{0}
	for range verifySample {
		ids = append(ids, 1+rng.IntN(h.data.Objects-1))
	}
	for _, id := range ids {
		header, err := fetchObject(ctx, n.client, n.addr, id, h.data.BodySize)
		if err != nil {
			return fmt.Errorf("verify %s: %w; nginx's log: %s", ObjectPath(id), err, n.nginx.logTail())
		}
		if status := header.Get("X-Cache-Status"); status != "HIT" {
			return fmt.Errorf("verify %s: cache status %q, want HIT", ObjectPath(id), status)
		}
	}
	return nil
}

// DefaultOptions are `make bench`'s: 4 MB objects as in the published experiment, a
// data set four times the machine's RAM on every disk, two rounds.
func DefaultOptions() Options {
	return Options{
		NginxBin: "nginx", WrkBin: "wrk",
		ObjectSize: 4 << 20, DataSetBytes: 4 * MemTotal(),
		Duration: 15 * time.Second, Ramp: 3 * time.Second, Rounds: 2, Slowdown: 1, Workers: runtime.NumCPU(),
		HeavyLoad: 1.25, ColdCapMBps: 200,
	}
}
