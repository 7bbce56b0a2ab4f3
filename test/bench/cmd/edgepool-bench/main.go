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

// Command edgepool-bench runs `make bench`: the control plane on envtest (C1), reloads
// of the agent's nginx under load (C2), a failing disk (F1), a CachePurge fanned out to
// agent processes behind kwok pods (P1), a fleet of thousands of kwok nodes (C3), and the
// disk scenarios (D1-D5) against nginx configurations rendered from CacheNode specs on
// emulated slow disks. It prints markdown tables; the same results go to a JSON file, and
// charts of the hot client's latency to PNG files. It needs root, /dev/fuse, nginx, wrk,
// KUBEBUILDER_ASSETS (kube-apiserver and etcd), and for P1 and C3 KUBE_BIN and KWOK_BIN (the
// cluster's binaries and kwok).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/edgepool/edgepool/test/bench"
	"github.com/edgepool/edgepool/test/bench/controlplane"
	"github.com/edgepool/edgepool/test/bench/failover"
	"github.com/edgepool/edgepool/test/bench/fanout"
	"github.com/edgepool/edgepool/test/bench/fleet"
	"github.com/edgepool/edgepool/test/bench/reload"
	"github.com/edgepool/edgepool/test/bench/shard"
)

// controlPlaneScenarios (and F1, the failing disk, P1, the purge fan-out, T1, TLS, Z1,
// compression, C3, the fleet, and S1, one cache across the nodes) run before the disk
// scenarios, which take longer.
var controlPlaneScenarios = []string{"C1", "C2", "F1", "P1", "T1", "Z1", "C3", "S1"}

func main() {
	bench.RunOpenChild()
	opts := bench.DefaultOptions()
	opts.Log = os.Stderr
	var c1 controlplane.Options
	var c2 reload.Options
	var f1 failover.Options
	var p1 fanout.Options
	var t1 bench.TLSOptions
	var z1 bench.CompressionOptions
	var c3 fleet.Options
	s1 := shard.DefaultOptions()
	out := flag.String("out", "tmp/bench", "folder for results.json, results.md and the charts (PNG)")
	scenarios := flag.String("scenarios", strings.Join(append(controlPlaneScenarios, bench.Scenarios...), ","), "scenarios to run, comma-separated")
	flag.StringVar(&opts.RepoRoot, "repo", ".", "repository root (for the sample CacheNode, and where the operator and agent are built)")
	flag.IntVar(&c1.CacheNodes, "cachenodes", 1000, "C1: CacheNodes created at once")
	flag.IntVar(&c1.Sequential, "sequential", 20, "C1: CacheNodes created and changed one at a time")
	flag.IntVar(&c2.Reloads, "reloads", 10, "C2: configuration changes")
	flag.IntVar(&c2.Clients, "clients", 8, "C2: keep-alive clients during the reloads")
	flag.IntVar(&p1.Agents, "purge-agents", 100, "P1: fake nodes, cache pods and agent processes")
	flag.IntVar(&p1.Purges, "purges", 20, "P1: CachePurges of a URL, and as many of a tag, one at a time")
	flag.IntVar(&c3.Nodes, "fleet-nodes", 5000, "C3: fake nodes")
	flag.IntVar(&c3.CacheNodes, "fleet-cachenodes", 20, "C3: CacheNodes selecting them, two per region (even)")
	flag.IntVar(&c3.ShrinkTo, "fleet-shrink-to", 0, "C3: nodes the label changes are measured on again (default a fifth; negative: not)")
	flag.Float64Var(&c3.Unhealthy, "fleet-unhealthy", 0.01, "C3: share of the agents that are slow, of those that hang, and of those that are dead, each")
	flag.IntVar(&s1.Nodes, "shard-nodes", s1.Nodes, "S1: cache nodes in each fleet")
	flag.IntVar(&s1.Requests, "shard-requests", s1.Requests, "S1: requests in the key stream")
	flag.DurationVar(&t1.Duration, "tls-duration", 5*time.Second, "T1: window of every kind of connection")
	flag.IntVar(&t1.Rounds, "tls-rounds", 3, "T1: rounds")
	flag.DurationVar(&z1.Duration, "gzip-duration", 5*time.Second, "Z1: window of every kind")
	flag.IntVar(&z1.Rounds, "gzip-rounds", 3, "Z1: rounds")
	flag.StringVar(&opts.NginxBin, "nginx", opts.NginxBin, "nginx binary")
	flag.StringVar(&opts.WrkBin, "wrk", opts.WrkBin, "wrk binary")
	flag.Int64Var(&opts.ObjectSize, "object-size", opts.ObjectSize, "bytes per object")
	flag.Int64Var(&opts.DataSetBytes, "data-set", opts.DataSetBytes, "bytes of objects per disk (default: 4x RAM)")
	flag.DurationVar(&opts.Duration, "duration", opts.Duration, "measured window of every run (whole seconds)")
	flag.DurationVar(&opts.Ramp, "ramp", opts.Ramp, "cold load before and after every window (whole seconds)")
	flag.IntVar(&opts.Rounds, "rounds", opts.Rounds, "rounds; every scenario's configurations run side by side in each")
	flag.Float64Var(&opts.Slowdown, "slowdown", opts.Slowdown, "make every emulated disk this many times slower (<1: faster)")
	flag.Float64Var(&opts.HeavyLoad, "heavy-load", opts.HeavyLoad, "open loop (D1, D5): heavy cold arrivals on each disk, as a multiple of its model's throughput")
	flag.Float64Var(&opts.ColdCapMBps, "cold-cap", opts.ColdCapMBps, "open loop: most MB/s of cold arrivals offered to one disk")
	replot := flag.Bool("replot", false, "only draw the charts again from the results.json in -out")
	flag.Parse()
	if *replot {
		if err := replotCharts(*out); err != nil {
			fmt.Fprintln(os.Stderr, "edgepool-bench:", err)
			os.Exit(1)
		}
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c1.RepoRoot, c1.Log = opts.RepoRoot, os.Stderr
	c2.RepoRoot, c2.Log, c2.NginxBin = opts.RepoRoot, os.Stderr, opts.NginxBin
	f1.RepoRoot, f1.Log, f1.NginxBin = opts.RepoRoot, os.Stderr, opts.NginxBin
	p1.RepoRoot, p1.Log, p1.NginxBin = opts.RepoRoot, os.Stderr, opts.NginxBin
	p1.KubeBin, p1.KwokBin = envOr("KUBE_BIN", filepath.Join(opts.RepoRoot, "bin", "k8s-v1.36.3")), envOr("KWOK_BIN", filepath.Join(opts.RepoRoot, "bin", "k8s-v1.36.3"))
	t1.Log, t1.NginxBin, t1.WrkBin = os.Stderr, opts.NginxBin, opts.WrkBin
	z1.Log, z1.NginxBin, z1.WrkBin = os.Stderr, opts.NginxBin, opts.WrkBin
	c3.RepoRoot, c3.Log, c3.KubeBin, c3.KwokBin = opts.RepoRoot, os.Stderr, p1.KubeBin, p1.KwokBin
	s1.Log, s1.NginxBin = os.Stderr, opts.NginxBin
	log.SetLogger(logr.Discard()) // envtest's, as C1 starts it
	if err := run(ctx, opts, scenarioOptions{c1, c2, f1, p1, t1, z1, c3, s1}, strings.Split(*scenarios, ","), *out); err != nil {
		fmt.Fprintln(os.Stderr, "edgepool-bench:", err)
		os.Exit(1)
	}
}

// report is what results.json holds.
type report struct {
	Machine      bench.Machine            `json:"machine"`
	Options      bench.Options            `json:"options"`
	ControlPlane *controlplane.Result     `json:"controlPlane,omitempty"`
	Reload       *reload.Result           `json:"reload,omitempty"`
	Failover     *failover.Result         `json:"failover,omitempty"`
	PurgeFanOut  *fanout.Result           `json:"purgeFanOut,omitempty"`
	TLS          *bench.TLSResult         `json:"tls,omitempty"`
	Compression  *bench.CompressionResult `json:"compression,omitempty"`
	Fleet        *fleet.Result            `json:"fleet,omitempty"`
	Sharding     *shard.Result            `json:"sharding,omitempty"`
	Results      *bench.Results           `json:"results,omitempty"`
	// Failed are the scenarios that stopped with an error; the others ran on.
	Failed []failure `json:"failed,omitempty"`
}

// failure is a scenario that stopped with an error.
type failure struct {
	Scenario string `json:"scenario"`
	Error    string `json:"error"`
}

// scenarioOptions are the options of the scenarios run before the disk scenarios.
type scenarioOptions struct {
	c1 controlplane.Options
	c2 reload.Options
	f1 failover.Options
	p1 fanout.Options
	t1 bench.TLSOptions
	z1 bench.CompressionOptions
	c3 fleet.Options
	s1 shard.Options
}

func run(ctx context.Context, opts bench.Options, so scenarioOptions, scenarios []string, out string) error {
	known := append(slices.Clone(controlPlaneScenarios), bench.Scenarios...)
	for _, s := range scenarios {
		if !slices.Contains(known, s) {
			return fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(known, ","))
		}
	}
	rep := report{Machine: bench.ThisMachine(opts.NginxBin, opts.WrkBin), Options: opts}
	start := time.Now()
	var tables []string
	var disk []string
	// A scenario that fails is reported, and the others run on: one flaky scenario does
	// not cost a run's other figures.
	fail := func(scenario string, err error) {
		fmt.Fprintf(os.Stderr, "edgepool-bench: %s failed: %v\n", scenario, err)
		rep.Failed = append(rep.Failed, failure{Scenario: scenario, Error: err.Error()})
	}
	for _, s := range scenarios {
		var err error
		switch s {
		case "C1":
			if rep.ControlPlane, err = controlplane.Run(ctx, so.c1); err == nil {
				tables = append(tables, rep.ControlPlane.Markdown())
			}
		case "C2":
			if rep.Reload, err = reload.Run(ctx, so.c2); err == nil {
				tables = append(tables, rep.Reload.Markdown())
			}
		case "F1":
			if rep.Failover, err = failover.Run(ctx, so.f1); err == nil {
				tables = append(tables, rep.Failover.Markdown())
			}
		case "P1":
			if rep.PurgeFanOut, err = fanout.Run(ctx, so.p1); err == nil {
				tables = append(tables, rep.PurgeFanOut.Markdown())
			}
		case "Z1":
			if rep.Compression, err = bench.RunCompression(ctx, so.z1); err == nil {
				tables = append(tables, rep.Compression.Markdown())
			}
		case "C3":
			if rep.Fleet, err = fleet.Run(ctx, so.c3); err == nil {
				tables = append(tables, rep.Fleet.Markdown())
			}
		case "S1":
			if rep.Sharding, err = shard.Run(ctx, so.s1); err == nil {
				tables = append(tables, rep.Sharding.Markdown())
			}
		case "T1":
			if rep.TLS, err = bench.RunTLS(ctx, so.t1); err == nil {
				tables = append(tables, rep.TLS.Markdown())
			}
		default:
			disk = append(disk, s)
		}
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("%s: %w", s, err)
			}
			fail(s, err)
		}
	}
	if len(disk) > 0 {
		var err error
		rep.Results, err = bench.RunScenarios(ctx, opts, disk)
		if ctx.Err() != nil {
			return err
		}
		var failed *bench.ScenarioError
		for _, e := range unjoin(err) {
			if errors.As(e, &failed) {
				fail(failed.Scenario, failed.Err)
			} else {
				fail(strings.Join(disk, ","), e)
			}
		}
		if rep.Results != nil { // nil when no disk scenario could start
			tables = append(tables, fmt.Sprintf("Data set: %.0f GiB of %d MiB objects per emulated disk. Every window %v, %d round(s).\n\n%s",
				float64(opts.DataSetBytes)/(1<<30), opts.ObjectSize>>20, opts.Duration, opts.Rounds, rep.Results.Markdown()))
		}
	}
	m := rep.Machine
	md := fmt.Sprintf("Machine: %d CPUs, %s RAM, Linux %s, nginx %s, %s. Took %s.\n\n%s%s",
		m.CPUs, m.Memory, m.Kernel, m.Nginx, m.Wrk, time.Since(start).Round(time.Second), failures(rep.Failed), strings.Join(tables, "\n"))
	fmt.Println(md)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "results.json"), data, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "results.md"), []byte(md), 0o644); err != nil {
		return err
	}
	if rep.Results != nil {
		charts, err := rep.Results.WriteCharts(out)
		for _, c := range charts {
			fmt.Fprintln(os.Stderr, "chart:", c)
		}
		if err != nil {
			return err
		}
	}
	if len(rep.Failed) > 0 {
		names := make([]string, len(rep.Failed))
		for i, f := range rep.Failed {
			names[i] = f.Scenario
		}
		return fmt.Errorf("failed: %s (the others' results are in %s)", strings.Join(names, ", "), out)
	}
	return nil
}

// failures is the markdown list of the scenarios that failed, first in results.md.
func failures(failed []failure) string {
	if len(failed) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("**Failed** (their figures are missing or partial below):\n\n")
	for _, f := range failed {
		fmt.Fprintf(&b, "- %s: %s\n", f.Scenario, f.Error)
	}
	return b.String() + "\n"
}

// unjoin lists the errors errors.Join put together (err itself if it is not such).
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// replotCharts draws the charts of the disk scenarios in out/results.json again.
func replotCharts(out string) error {
	data, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		return err
	}
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(out, "results.json"), err)
	}
	if rep.Results == nil {
		return fmt.Errorf("%s holds no disk scenario", filepath.Join(out, "results.json"))
	}
	charts, err := rep.Results.WriteCharts(out)
	for _, c := range charts {
		fmt.Fprintln(os.Stderr, "chart:", c)
	}
	return err
}
