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

package bench

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// Ratio is one figure of merit, computed within each round from runs measured side by
// side, with its target.
type Ratio struct {
	Scenario string  `json:"scenario"`
	Name     string  `json:"name"`
	Target   string  `json:"target"`
	Values   []Value `json:"values"` // one per round
	atLeast  float64 // the target as a lower bound; 0: none
}

func (r *Ratio) Median() Value { return median(r.Values) }

// Met says whether every round met the target: "yes", "no" (some round did not),
// "unknown" (some round's figure is a bound that cannot tell) or "(no target)".
func (r *Ratio) Met() string {
	if r.atLeast == 0 {
		return "(no target)"
	}
	met := "yes"
	for _, v := range r.Values {
		switch v.meets(r.atLeast) {
		case "no":
			return "no"
		case "unknown":
			met = "unknown"
		}
	}
	return met
}

// Results is everything one benchmark run measured.
type Results struct {
	Runs   []*Run   `json:"runs"`
	Ratios []*Ratio `json:"ratios"`
}

func (res *Results) ratio(scenario, name, target string, atLeast float64, v Value) {
	for _, r := range res.Ratios {
		if r.Scenario == scenario && r.Name == name {
			r.Values = append(r.Values, v)
			return
		}
	}
	res.Ratios = append(res.Ratios, &Ratio{Scenario: scenario, Name: name, Target: target, Values: []Value{v}, atLeast: atLeast})
}

// Scenario names, in the order they run.
var Scenarios = []string{"D1", "D2", "D3", "D4", "L1"}

// RunScenarios runs the named disk scenarios, every one opts.Rounds times.
func RunScenarios(ctx context.Context, opts Options, names []string) (*Results, error) {
	sample, err := sampleSpec(opts.RepoRoot)
	if err != nil {
		return nil, err
	}
	res := &Results{}
	for _, name := range names {
		var err error
		switch name {
		case "D1":
			err = d1(ctx, opts, sample, res)
		case "D2":
			err = d2(ctx, opts, sample, res)
		case "D3":
			err = d3(ctx, opts, sample, res)
		case "D4":
			err = d4(ctx, opts, sample, res)
		case "L1":
			err = l1(ctx, opts, sample, res)
		default:
			err = fmt.Errorf("unknown scenario %q (have %v)", name, Scenarios)
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// hotConnections is the published experiment's hot client: 50 connections on one file.
const hotConnections = 50

// The cold loads, in connections per nginx worker.
const (
	moderatePerWorker = 20
	heavyPerWorker    = 50
)

// d1 is the published experiment: thread pools off, nginx's minimal `aio threads;`,
// and what edgepool renders for the sample CacheNode, at a moderate and a heavy cold
// load, with the hot client alone as the unloaded limit.
func d1(ctx context.Context, opts Options, sample *v1alpha1.CacheNodeSpec, res *Results) error {
	h, err := newHarness(ctx, opts, sample, opts.ObjectSize, opts.DataSetBytes)
	if err != nil {
		return err
	}
	defer h.Close()
	off := sample.DeepCopy()
	off.IO = v1alpha1.IOSync
	noThreads, err := h.newConfig("thread pools off (io: sync)", off, rendered)
	if err != nil {
		return err
	}
	minimal, err := h.newConfig("aio threads; (default pool)", sample, defaultPool)
	if err != nil {
		return err
	}
	edgepool, err := h.newConfig("edgepool (sample CacheNode)", sample, rendered)
	if err != nil {
		return err
	}
	alone := load{name: "hot alone", hot: hotConnections}
	loads := []load{
		{name: fmt.Sprintf("moderate: %d cold", moderatePerWorker*opts.Workers), cold: moderatePerWorker * opts.Workers, hot: hotConnections},
		{name: fmt.Sprintf("heavy: %d cold", heavyPerWorker*opts.Workers), cold: heavyPerWorker * opts.Workers, hot: hotConnections},
	}
	for round := range opts.Rounds {
		limit, err := h.record(ctx, res, "D1", edgepool, alone, round)
		if err != nil {
			return err
		}
		for _, l := range loads {
			var runs []*Run
			for _, c := range []*config{noThreads, minimal, edgepool} {
				r, err := h.record(ctx, res, "D1", c, l, round)
				if err != nil {
					return err
				}
				runs = append(runs, r)
			}
			off, min, ep := runs[0].Hot, runs[1].Hot, runs[2].Hot
			res.ratio("D1", l.name+": edgepool ÷ threads off, hot req/s", "≥ 31x", 31, div(ep.rate(), off.rate()))
			res.ratio("D1", l.name+": threads off ÷ edgepool, hot mean latency", "≥ 33x", 33, div(off.meanLatency(), ep.meanLatency()))
			res.ratio("D1", l.name+": edgepool hot req/s ÷ hot alone", "≥ 0.90", 0.90, div(ep.rate(), limit.Hot.rate()))
			res.ratio("D1", l.name+": aio threads; ÷ threads off, hot req/s", "", 0, div(min.rate(), off.rate()))
			res.ratio("D1", l.name+": aio threads; hot req/s ÷ hot alone", "", 0, div(min.rate(), limit.Hot.rate()))
		}
	}
	return nil
}

// d2 isolates disks: three HDDs, one 5x slower; edgepool's pool per disk against one
// pool shared by all disks. What counts is what the healthy disks still deliver.
func d2(ctx context.Context, opts Options, sample *v1alpha1.CacheNodeSpec, res *Results) error {
	spec := sample.DeepCopy()
	spec.Disks = nil
	for i := range 3 {
		spec.Disks = append(spec.Disks, v1alpha1.Disk{Name: fmt.Sprintf("hdd%d", i), Path: fmt.Sprintf("/mnt/hdd%d", i),
			Media: v1alpha1.MediaHDD, Size: resource.MustParse("1Ti")})
	}
	spec.Default()
	h, err := newHarness(ctx, opts, spec, opts.ObjectSize, opts.DataSetBytes)
	if err != nil {
		return err
	}
	defer h.Close()
	threads := spec.Disks[0].Threads()
	healthy, err := h.newConfig("per-disk pools, all disks healthy", spec, rendered)
	if err != nil {
		return err
	}
	perDisk, err := h.newConfig("per-disk pools, hdd2 5x slower", spec, rendered)
	if err != nil {
		return err
	}
	shared, err := h.newConfig(fmt.Sprintf("one shared pool (%d threads), hdd2 5x slower", threads), spec, sharedPool(threads))
	if err != nil {
		return err
	}
	for _, c := range []*config{perDisk, shared} {
		c.models["hdd2"] = c.models["hdd2"].Slower(5)
	}
	// One client per disk, so the healthy disks' clients are not held up by waiting
	// on the slow disk themselves: what slows them is only how nginx queues their reads.
	// Under equal demand, every client has the heavy load's connections per worker. A
	// closed-loop client slows down with its disk, though, while real demand does not:
	// a slow disk's requests pile up. The backlogged load stands for that, the slow
	// disk's client keeping twice a pool's threads in flight per worker.
	clients := func(slow int) map[string]int {
		return map[string]int{"hdd0": heavyPerWorker * opts.Workers, "hdd1": heavyPerWorker * opts.Workers, "hdd2": slow * opts.Workers}
	}
	equal := load{name: fmt.Sprintf("equal demand: a client per disk, %d connections per worker each", heavyPerWorker),
		perDisk: clients(heavyPerWorker)}
	backlog := load{name: fmt.Sprintf("hdd2 backlogged: its client %d connections per worker, the others %d", 2*threads, heavyPerWorker),
		perDisk: clients(2 * int(threads))}
	demands := []struct {
		label string
		load  load
	}{{"equal demand", equal}, {"hdd2 backlogged", backlog}}
	healthyMBps := func(r *Run) Value { return exact(r.DiskMBps["hdd0"] + r.DiskMBps["hdd1"]) }
	for round := range opts.Rounds {
		base, err := h.record(ctx, res, "D2", healthy, equal, round)
		if err != nil {
			return err
		}
		// The all-healthy reference ran at equal demand: the healthy disks' clients are
		// the same in both loads.
		for _, d := range demands {
			ours, err := h.record(ctx, res, "D2", perDisk, d.load, round)
			if err != nil {
				return err
			}
			theirs, err := h.record(ctx, res, "D2", shared, d.load, round)
			if err != nil {
				return err
			}
			res.ratio("D2", d.label+": hdd0+hdd1 MB/s, per-disk pools with a slow hdd2 ÷ all healthy", "≥ 0.90", 0.90, div(healthyMBps(ours), healthyMBps(base)))
			res.ratio("D2", d.label+": hdd0+hdd1 MB/s, per-disk pools ÷ one shared pool, slow hdd2", "≥ 10x", 10, div(healthyMBps(ours), healthyMBps(theirs)))
		}
	}
	return nil
}

// d3 is listener sharding: short connections (one request each) for small objects
// in the page cache, with reuseport against accept_mutex on a shared socket.
func d3(ctx context.Context, opts Options, sample *v1alpha1.CacheNodeSpec, res *Results) error {
	const size, objects = 1 << 10, 1000
	h, err := newHarness(ctx, opts, sample, size, size*objects)
	if err != nil {
		return err
	}
	defer h.Close()
	reuse, err := h.newConfig("listen reuseport", sample, rendered)
	if err != nil {
		return err
	}
	mutex := sample.DeepCopy()
	mutex.Listener.ReusePort = new(false)
	mutex.Listener.AcceptMutex = new(true)
	shared, err := h.newConfig("accept_mutex on, one socket", mutex, rendered)
	if err != nil {
		return err
	}
	short := load{name: fmt.Sprintf("%d short connections", 50*opts.Workers), cold: 50 * opts.Workers, coldThreads: opts.Workers, shortConns: true}
	for round := range opts.Rounds {
		a, err := h.record(ctx, res, "D3", reuse, short, round)
		if err != nil {
			return err
		}
		b, err := h.record(ctx, res, "D3", shared, short, round)
		if err != nil {
			return err
		}
		res.ratio("D3", "reuseport ÷ accept_mutex, req/s", "published 2-3x", 0, div(a.Cold.rate(), b.Cold.rate()))
		res.ratio("D3", "accept_mutex ÷ reuseport, latency stdev", "published 8.4x (26.59 → 3.15 ms)", 0, div(b.Cold.latencyStdev(), a.Cold.latencyStdev()))
	}
	return nil
}

// d4 sizes pools: one HDD (the sample's hdd0) with 4, 16 and 64 threads, under the
// heavy cold load, so the hot object shares its pool with cold reads that wait for
// the spindle. The hot client's share of its unloaded limit shows where a pool is too
// small. (In the two-disk sample the hot object lands on nvme0, whose reads are short.)
func d4(ctx context.Context, opts Options, sample *v1alpha1.CacheNodeSpec, res *Results) error {
	hdd := sample.DeepCopy()
	hdd.Disks = slices.DeleteFunc(hdd.Disks, func(d v1alpha1.Disk) bool { return d.Media != v1alpha1.MediaHDD })
	h, err := newHarness(ctx, opts, hdd, opts.ObjectSize, opts.DataSetBytes)
	if err != nil {
		return err
	}
	defer h.Close()
	var configs []*config
	for _, threads := range []int32{4, 16, 64} {
		spec := hdd.DeepCopy()
		for i := range spec.Disks {
			spec.Disks[i].ThreadPool.Threads = threads
		}
		c, err := h.newConfig(fmt.Sprintf("hdd0 only, %d threads", threads), spec, rendered)
		if err != nil {
			return err
		}
		configs = append(configs, c)
	}
	heavy := load{name: fmt.Sprintf("heavy: %d cold", heavyPerWorker*opts.Workers), cold: heavyPerWorker * opts.Workers, hot: hotConnections}
	for round := range opts.Rounds {
		limit, err := h.record(ctx, res, "D4", configs[len(configs)-1], load{name: "hot alone", hot: hotConnections}, round)
		if err != nil {
			return err
		}
		for _, c := range configs {
			r, err := h.record(ctx, res, "D4", c, heavy, round)
			if err != nil {
				return err
			}
			res.ratio("D4", c.name+": hot req/s under heavy load ÷ hot alone", "", 0, div(r.Hot.rate(), limit.Hot.rate()))
		}
	}
	return nil
}

// l1 is what the per-request lines to the node agent cost: nginx's cheapest requests
// (small objects from the page cache, keep-alive connections), where a line per request
// weighs most, with the lines read and parsed by the agent's own code, against the same
// configuration without them.
func l1(ctx context.Context, opts Options, sample *v1alpha1.CacheNodeSpec, res *Results) error {
	const objects = 1000
	for _, size := range []int64{1 << 10, 64 << 10} {
		h, err := newHarness(ctx, opts, sample, size, size*objects)
		if err != nil {
			return err
		}
		defer h.Close()
		on, err := h.newConfig("edgepool (per-request lines to the agent)", sample, rendered)
		if err != nil {
			return err
		}
		off, err := h.newConfig("per-request lines off", sample, withoutRequestLines)
		if err != nil {
			return err
		}
		conns := 50 * opts.Workers
		busy := load{name: fmt.Sprintf("%d KiB objects, %d keep-alive connections", size>>10, conns), cold: conns, coldThreads: opts.Workers}
		for round := range opts.Rounds {
			// Every other round runs the configuration without the lines first, so that
			// a drift of the machine's load favours neither.
			order := []*config{on, off}
			if round%2 == 1 {
				order = []*config{off, on}
			}
			runs := map[*config]*Run{}
			for _, c := range order {
				r, err := h.record(ctx, res, "L1", c, busy, round)
				if err != nil {
					return err
				}
				runs[c] = r
			}
			with, without := runs[on], runs[off]
			res.ratio("L1", fmt.Sprintf("%d KiB: per-request lines on ÷ off, req/s", size>>10), "≥ 0.95", 0.95, div(with.Cold.rate(), without.Cold.rate()))
			// nginx's CPU per request depends less than req/s on how much CPU the
			// machine's other work leaves to the run. (This process's is mostly the
			// emulated disks'; BenchmarkRequestLine gives the agent's cost of a line.)
			res.ratio("L1", fmt.Sprintf("%d KiB: per-request lines off ÷ on, nginx CPU per request", size>>10), "", 0,
				div(without.nginxCPUPerRequest(), with.nginxCPUPerRequest()))
			res.ratio("L1", fmt.Sprintf("%d KiB: lines dropped ÷ lines sent", size>>10), "", 0,
				exact(float64(with.LinesDropped)/float64(max(1, with.LinesCounted+with.LinesDropped))))
		}
	}
	return nil
}

// nginxCPUPerRequest is the CPU time nginx used per request of the cold load during the
// window.
func (r *Run) nginxCPUPerRequest() Value {
	rate := r.Cold.rate()
	return div(exact(r.NginxCPUSeconds), Value{V: rate.V * r.WindowSeconds, Bound: rate.Bound})
}

// record runs and keeps the run.
func (h *Harness) record(ctx context.Context, res *Results, scenario string, c *config, l load, round int) (*Run, error) {
	r, err := h.run(ctx, scenario, c, l, round)
	if err != nil {
		return nil, err
	}
	h.logf("%s", r.summary())
	res.Runs = append(res.Runs, r)
	return r, nil
}
