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

// Command edgepool-bench runs `make bench`: the disk scenarios (D1-D4) against nginx
// configurations rendered from CacheNode specs, on emulated slow disks, and prints a
// markdown table; the same results go to a JSON file. It needs root, /dev/fuse, nginx
// and wrk.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/edgepool/edgepool/test/bench"
)

func main() {
	opts := bench.DefaultOptions()
	opts.Log = os.Stderr
	out := flag.String("out", "tmp/bench", "folder for results.json and results.md")
	scenarios := flag.String("scenarios", strings.Join(bench.Scenarios, ","), "scenarios to run, comma-separated")
	flag.StringVar(&opts.RepoRoot, "repo", ".", "repository root (for the sample CacheNode)")
	flag.StringVar(&opts.NginxBin, "nginx", opts.NginxBin, "nginx binary")
	flag.StringVar(&opts.WrkBin, "wrk", opts.WrkBin, "wrk binary")
	flag.Int64Var(&opts.ObjectSize, "object-size", opts.ObjectSize, "bytes per object")
	flag.Int64Var(&opts.DataSetBytes, "data-set", opts.DataSetBytes, "bytes of objects per disk (default: 4x RAM)")
	flag.DurationVar(&opts.Duration, "duration", opts.Duration, "measured window of every run (whole seconds)")
	flag.DurationVar(&opts.Ramp, "ramp", opts.Ramp, "cold load before and after every window (whole seconds)")
	flag.IntVar(&opts.Rounds, "rounds", opts.Rounds, "rounds; every scenario's configurations run side by side in each")
	flag.Float64Var(&opts.Slowdown, "slowdown", opts.Slowdown, "make every emulated disk this many times slower (<1: faster)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, strings.Split(*scenarios, ","), *out); err != nil {
		fmt.Fprintln(os.Stderr, "edgepool-bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, opts bench.Options, scenarios []string, out string) error {
	machine := bench.ThisMachine(opts.NginxBin, opts.WrkBin)
	start := time.Now()
	res, err := bench.RunScenarios(ctx, opts, scenarios)
	if err != nil {
		return err
	}
	md := fmt.Sprintf("Machine: %d CPUs, %s RAM, Linux %s, nginx %s, %s. Data set: %.0f GiB of %d MiB objects per emulated disk. "+
		"Every window %v, %d round(s); %s.\n\n%s",
		machine.CPUs, machine.Memory, machine.Kernel, machine.Nginx, machine.Wrk,
		float64(opts.DataSetBytes)/(1<<30), opts.ObjectSize>>20, opts.Duration, opts.Rounds, time.Since(start).Round(time.Second), res.Markdown())
	fmt.Println(md)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(struct {
		Machine bench.Machine  `json:"machine"`
		Options bench.Options  `json:"options"`
		Results *bench.Results `json:"results"`
	}{machine, opts, res}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "results.json"), data, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "results.md"), []byte(md), 0o644)
}
