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
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

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
	atMost   float64 // the target as an upper bound; 0: none
}

func (r *Ratio) Median() Value { return median(r.Values) }

// Met says whether every round met the target: "yes", "no" (some round did not),
// "unknown" (some round's figure is a bound that cannot tell) or "(no target)".
func (r *Ratio) Met() string {
	if r.atLeast == 0 && r.atMost == 0 {
		return "(no target)"
	}
	met := "yes"
	for _, v := range r.Values {
		meets := v.meets(r.atLeast)
		if r.atMost != 0 {
			meets = v.meetsAtMost(r.atMost)
		}
		switch meets {
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
	res.add(&Ratio{Scenario: scenario, Name: name, Target: target, atLeast: atLeast}, v)
}

// ratioAtMost is a ratio whose target is an upper bound.
func (res *Results) ratioAtMost(scenario, name, target string, atMost float64, v Value) {
	res.add(&Ratio{Scenario: scenario, Name: name, Target: target, atMost: atMost}, v)
}

func (res *Results) add(ratio *Ratio, v Value) {
	for _, r := range res.Ratios {
		if r.Scenario == ratio.Scenario && r.Name == ratio.Name {
			r.Values = append(r.Values, v)
			return
		}
	}
	ratio.Values = []Value{v}
	res.Ratios = append(res.Ratios, ratio)
}

// Scenario names, in the order they run.
var Scenarios = []string{"D1", "D2", "D3", "D4", "D5", "L1"}

// RunScenarios runs the named disk scenarios, every one opts.Rounds times. One that
// fails is in the error (a ScenarioError each), and the others run on.
func RunScenarios(ctx context.Context, opts Options, names []string) (*Results, error) {
	sample, err := sampleSpec(opts.RepoRoot)
	if err != nil {
		return nil, err
	}
	if opts.HeavyLoad <= 0 || opts.ColdCapMBps <= 0 {
		return nil, fmt.Errorf("the open loop's heavy load (%v) and cold cap (%v MB/s) must be positive", opts.HeavyLoad, opts.ColdCapMBps)
	}
	res := &Results{}
	var failed []error
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
		case "D5":
			err = d5(ctx, opts, sample, res)
		case "L1":
			err = l1(ctx, opts, sample, res)
		default:
			err = fmt.Errorf("unknown scenario %q (have %v)", name, Scenarios)
		}
		if err != nil {
			if ctx.Err() != nil {
				return res, err
			}
			failed = append(failed, &ScenarioError{Scenario: name, Err: err})
		}
	}
	return res, errors.Join(failed...)
}

// ScenarioError is a disk scenario that stopped with an error; RunScenarios runs the
// others on.
type ScenarioError struct {
	Scenario string
	Err      error
}

func (e *ScenarioError) Error() string { return e.Scenario + ": " + e.Err.Error() }
func (e *ScenarioError) Unwrap() error { return e.Err }

// hotConnections is the published experiment's hot client: 50 connections on one file.
const hotConnections = 50

// The cold loads, in connections per nginx worker.
const (
	moderatePerWorker = 20
	heavyPerWorker    = 50
)

// d1 is the published experiment: thread pools off, nginx's minimal `aio threads;`,
// and what edgepool renders for the sample CacheNode, at a moderate and a heavy cold
// load, with the hot client alone as the unloaded limit. Closed-loop wrk clients give
// the published req/s and mean latency ratios; open-loop clients give the hot client's
// latency at a fixed rate, half its unloaded limit, against the heavy load's fixed
// arrivals on every disk.
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
	hotTier, err := h.newConfig("edgepool with a 64Mi hot tier (sharded, one pod)", withHotTier(sample), rendered)
	if err != nil {
		return err
	}
	alone := load{name: "hot alone", hot: hotConnections}
	loads := []load{
		{name: fmt.Sprintf("moderate: %d cold", moderatePerWorker*opts.Workers), cold: moderatePerWorker * opts.Workers, hot: hotConnections},
		{name: fmt.Sprintf("heavy: %d cold", heavyPerWorker*opts.Workers), cold: heavyPerWorker * opts.Workers, hot: hotConnections},
	}
	if opts.Smoke {
		loads = loads[len(loads)-1:]
	}
	cold := h.coldRates(edgepool, opts.HeavyLoad)
	for round := range opts.Rounds {
		limit, err := h.record(ctx, res, "D1", edgepool, alone, round)
		if err != nil {
			return err
		}
		hotRate := limit.Hot.rate()
		if hotRate.Bound != Exact || hotRate.V <= 0 {
			return fmt.Errorf("D1: the hot client alone measured %v req/s", hotRate)
		}
		openAlone := load{name: fmt.Sprintf("open: hot %.0f/s alone", hotRate.V/2), open: true, hotRate: hotRate.V / 2, chart: "hot alone"}
		openHeavy := load{name: fmt.Sprintf("open: hot %.0f/s, heavy cold %s", hotRate.V/2, rateNames(cold)), open: true,
			hotRate: hotRate.V / 2, coldRate: cold, chart: "heavy cold load"}
		quiet, err := h.record(ctx, res, "D1", edgepool, openAlone, round)
		if err != nil {
			return err
		}
		// The same with cold arrivals on the HDDs only: what the thread pools keep from
		// the hot client is their reads' wait, not the CPU that the NVMe's cold bytes take.
		hddOnly := map[string]float64{}
		for _, d := range edgepool.spec.Disks {
			if d.Media == v1alpha1.MediaHDD {
				hddOnly[d.Name] = cold[d.Name]
			} else {
				hddOnly[d.Name] = 0
			}
		}
		hddRun, err := h.record(ctx, res, "D1", edgepool, load{name: fmt.Sprintf("open: hot %.0f/s, cold on the HDD only %s", hotRate.V/2, rateNames(hddOnly)),
			open: true, hotRate: hotRate.V / 2, coldRate: hddOnly, chart: "heavy cold load on the HDD only"}, round)
		if err != nil {
			return err
		}
		var runs []*Run
		for _, c := range []*config{noThreads, minimal, edgepool} {
			r, err := h.record(ctx, res, "D1", c, openHeavy, round)
			if err != nil {
				return err
			}
			runs = append(runs, r)
		}
		quietHot, err := h.record(ctx, res, "D1", hotTier, openAlone, round)
		if err != nil {
			return err
		}
		heavyHot, err := h.record(ctx, res, "D1", hotTier, openHeavy, round)
		if err != nil {
			return err
		}
		offP99, minP99, epP99 := runs[0].Hot.p99(), runs[1].Hot.p99(), runs[2].Hot.p99()
		const open = "open loop, hot at half its unloaded req/s: "
		res.ratioAtMost("D1", open+"hot tier: hot p99, heavy cold load ÷ alone", "≤ 1.2x", 1.2, div(heavyHot.Hot.p99(), quietHot.Hot.p99()))
		res.ratio("D1", open+"edgepool ÷ hot tier, hot p99 under the heavy cold load", "", 0, div(epP99, heavyHot.Hot.p99()))
		res.ratioAtMost("D1", open+"edgepool hot p99, heavy cold load ÷ alone", "≤ 1.5x", 1.5, div(epP99, quiet.Hot.p99()))
		res.ratio("D1", open+"threads off ÷ edgepool, hot p99 under the heavy cold load", "≥ 30x", 30, div(offP99, epP99))
		res.ratio("D1", open+"edgepool hot p99, heavy cold load on the HDD only ÷ alone", "", 0, div(hddRun.Hot.p99(), quiet.Hot.p99()))
		res.ratio("D1", open+"aio threads; ÷ edgepool, hot p99 under the heavy cold load", "", 0, div(minP99, epP99))
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

// withHotTier is spec sharded, alone in its ring, with a 64 MiB hot tier: a hot object is
// copied to memory and served from there, out of every disk's pool (issue 27).
func withHotTier(spec *v1alpha1.CacheNodeSpec) *v1alpha1.CacheNodeSpec {
	s := spec.DeepCopy()
	s.Sharding = &v1alpha1.Sharding{PeerPort: v1alpha1.DefaultPeerPort,
		HotTier: &v1alpha1.HotTier{Size: resource.MustParse("64Mi"), MinUses: 2, Seconds: 1}}
	return s
}

// coldRates are the open-loop heavy cold load on c's disks, in requests per second:
// overload times each disk's model throughput, capped at Options.ColdCapMBps.
func (h *Harness) coldRates(c *config, overload float64) map[string]float64 {
	rates := map[string]float64{}
	for name, m := range c.models {
		bytes := min(overload*m.Throughput(h.data.Size(0)), h.opts.ColdCapMBps*1e6)
		rates[name] = bytes / float64(h.data.BodySize)
	}
	return rates
}

// rateNames names per-disk rates, in disk order: "hdd0 36.5/s, nvme0 47.7/s".
func rateNames(rates map[string]float64) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(rates)) {
		parts = append(parts, fmt.Sprintf("%s %.1f/s", name, rates[name]))
	}
	return strings.Join(parts, ", ")
}

// d2 isolates disks: three HDDs, one slower (5x: a disk that slows; 20x: a sick one,
// retrying its reads); edgepool's pool per disk against one pool shared by all disks.
// What counts is what the healthy disks still deliver.
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
	type slowPair struct {
		factor          float64
		perDisk, shared *config
	}
	var pairs []slowPair
	for _, factor := range d2Slowdowns {
		perDisk, err := h.newConfig(fmt.Sprintf("per-disk pools, hdd2 %gx slower", factor), spec, rendered)
		if err != nil {
			return err
		}
		shared, err := h.newConfig(fmt.Sprintf("one shared pool (%d threads), hdd2 %gx slower", threads, factor), spec, sharedPool(threads))
		if err != nil {
			return err
		}
		for _, c := range []*config{perDisk, shared} {
			c.models["hdd2"] = c.models["hdd2"].Slower(factor)
		}
		pairs = append(pairs, slowPair{factor, perDisk, shared})
	}
	// One open-loop client per disk, at the same arrival rate on every disk: what a
	// healthy HDD serves with room to spare. The slow hdd2 serves a fifth (a twentieth) of
	// it, so its requests pile up, as they do when a real disk slows.
	rate := d2Demand * healthy.models["hdd0"].Throughput(h.data.Size(0)) / float64(h.data.BodySize)
	demand := load{name: fmt.Sprintf("open: %.1f/s per disk (%.1fx a healthy HDD)", rate, d2Demand), open: true,
		coldRate: map[string]float64{"hdd0": rate, "hdd1": rate, "hdd2": rate}}
	healthyMBps := func(r *Run) Value { return exact(r.DiskMBps["hdd0"] + r.DiskMBps["hdd1"]) }
	for round := range opts.Rounds {
		base, err := h.record(ctx, res, "D2", healthy, demand, round)
		if err != nil {
			return err
		}
		for _, p := range pairs {
			ours, err := h.record(ctx, res, "D2", p.perDisk, demand, round)
			if err != nil {
				return err
			}
			theirs, err := h.record(ctx, res, "D2", p.shared, demand, round)
			if err != nil {
				return err
			}
			res.ratio("D2", fmt.Sprintf("open loop, hdd2 %gx slower, piling up: hdd0+hdd1 MB/s, per-disk pools ÷ all healthy", p.factor), "≥ 0.90", 0.90, div(healthyMBps(ours), healthyMBps(base)))
			res.ratio("D2", fmt.Sprintf("open loop, hdd2 %gx slower, piling up: hdd0+hdd1 MB/s, per-disk pools ÷ one shared pool", p.factor), "≥ 10x", 10, div(healthyMBps(ours), healthyMBps(theirs)))
		}
	}
	return nil
}

// d2Slowdowns are how much slower D2's slow disk is than a healthy one. With one shared
// pool every disk's reads leave at the slow disk's pace, so the healthy disks' loss is
// about their demand ÷ twice the slow disk's throughput (docs/pool-sizing.md): a disk
// that slows 5x cannot show a 10x gap, one that is sick (20x) can.
var d2Slowdowns = []float64{5, 20}

// d2Demand is D2's arrival rate on every disk, as a share of a healthy HDD's throughput.
const d2Demand = 0.8

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

// d4Sizes are the pool sizes D4 compares for each media, around its default.
var d4Sizes = []struct {
	media   v1alpha1.Media
	threads []int32
}{
	{v1alpha1.MediaHDD, []int32{16, 64, 128, 256}},
	{v1alpha1.MediaNVMe, []int32{4, 16, 32, 64}},
}

// d4 sizes pools, for each media: one disk of the sample alone with several pool sizes,
// under the heavy cold load, so the hot object shares its pool with cold reads that wait
// for the disk. The hot client's share of its unloaded limit shows where a pool is too
// small. (In the two-disk sample the hot object lands on nvme0, whose reads are short.)
func d4(ctx context.Context, opts Options, sample *v1alpha1.CacheNodeSpec, res *Results) error {
	for _, sizes := range d4Sizes {
		if err := d4Media(ctx, opts, sample, sizes.media, sizes.threads, res); err != nil {
			return err
		}
	}
	return nil
}

func d4Media(ctx context.Context, opts Options, sample *v1alpha1.CacheNodeSpec, media v1alpha1.Media, sizes []int32, res *Results) error {
	one := sample.DeepCopy()
	one.Disks = slices.DeleteFunc(one.Disks, func(d v1alpha1.Disk) bool { return d.Media != media })
	if len(one.Disks) == 0 {
		return fmt.Errorf("D4: the sample has no %s disk", media)
	}
	h, err := newHarness(ctx, opts, one, opts.ObjectSize, opts.DataSetBytes)
	if err != nil {
		return err
	}
	defer h.Close()
	if opts.Smoke {
		sizes = sizes[len(sizes)-1:]
	}
	var configs []*config
	for _, threads := range sizes {
		spec := one.DeepCopy()
		for i := range spec.Disks {
			spec.Disks[i].ThreadPool.Threads = threads
		}
		c, err := h.newConfig(fmt.Sprintf("%s only, %d threads", one.Disks[0].Name, threads), spec, rendered)
		if err != nil {
			return err
		}
		configs = append(configs, c)
	}
	// The media's default pool with a hot tier: the hot object out of the pool.
	def := one.DeepCopy()
	def.Disks[0].ThreadPool.Threads = 0
	hot, err := h.newConfig(fmt.Sprintf("%s only, %d threads (default), 64Mi hot tier", one.Disks[0].Name, def.Disks[0].Threads()), withHotTier(def), rendered)
	if err != nil {
		return err
	}
	heavy := load{name: fmt.Sprintf("heavy: %d cold", heavyPerWorker*opts.Workers), cold: heavyPerWorker * opts.Workers, hot: hotConnections}
	alone := load{name: "hot alone", hot: hotConnections}
	for round := range opts.Rounds {
		limit, err := h.record(ctx, res, "D4", configs[len(configs)-1], alone, round)
		if err != nil {
			return err
		}
		for _, c := range configs {
			r, err := h.record(ctx, res, "D4", c, heavy, round)
			if err != nil {
				return err
			}
			res.ratio("D4", c.name+": hot req/s under heavy load ÷ hot alone", "", 0, div(r.Hot.rate(), limit.Hot.rate()))
			res.ratio("D4", c.name+": hot p99 under heavy load ÷ hot alone", "", 0, div(r.Hot.p99(), limit.Hot.p99()))
		}
		hotAlone, err := h.record(ctx, res, "D4", hot, alone, round)
		if err != nil {
			return err
		}
		r, err := h.record(ctx, res, "D4", hot, heavy, round)
		if err != nil {
			return err
		}
		res.ratio("D4", hot.name+": hot req/s under heavy load ÷ hot alone", "", 0, div(r.Hot.rate(), hotAlone.Hot.rate()))
		res.ratioAtMost("D4", hot.name+": hot p99 under heavy load ÷ hot alone", "≤ 1.5x", 1.5, div(r.Hot.p99(), hotAlone.Hot.p99()))
	}
	return nil
}

// d5 is the disks' own limit: the sample CacheNode under the open loop's heavy cold
// load alone, every disk offered more than its model serves (or the cap, for a model
// faster than this machine). Each disk's reads are compared with its model's throughput;
// the run's disk table says what held a disk back (spindle busy, seeks, read sizes,
// reads queued at the disk).
func d5(ctx context.Context, opts Options, sample *v1alpha1.CacheNodeSpec, res *Results) error {
	h, err := newHarness(ctx, opts, sample, opts.ObjectSize, opts.DataSetBytes)
	if err != nil {
		return err
	}
	defer h.Close()
	edgepool, err := h.newConfig("edgepool (sample CacheNode)", sample, rendered)
	if err != nil {
		return err
	}
	cold := h.coldRates(edgepool, opts.HeavyLoad)
	heavy := load{name: "open: heavy cold " + rateNames(cold), open: true, coldRate: cold}
	for round := range opts.Rounds {
		r, err := h.record(ctx, res, "D5", edgepool, heavy, round)
		if err != nil {
			return err
		}
		for _, d := range edgepool.spec.Disks {
			w := r.Disks[d.Name]
			if w.OfferedMBps >= w.ModelMBps {
				res.ratio("D5", fmt.Sprintf("%s (%s): MB/s read ÷ the model's %.0f MB/s", d.Name, d.Media, w.ModelMBps), "≥ 0.90", 0.90,
					exact(w.ReadMBps/w.ModelMBps))
				continue
			}
			// The model is faster than the machine: the cap is what was asked of it.
			res.ratio("D5", fmt.Sprintf("%s (%s): MB/s read ÷ the %.0f MB/s offered (its model's %.0f MB/s is beyond this machine)",
				d.Name, d.Media, w.OfferedMBps, w.ModelMBps), "≥ 0.90", 0.90, exact(w.ReadMBps/w.OfferedMBps))
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
