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
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// When an open-loop client measures the hot object's latency, the parts measured (nginx
// and that client) run above the parts that stand in for other machines and hardware
// (the emulated disks' FUSE daemon and the cold clients, in this process): on a node the
// disks copy by DMA and the clients are elsewhere, so their CPU would not delay nginx or
// the hot client; here, on the same CPUs, the cold load would count their CPU in the hot
// latency, not only nginx's. nginx and the hot client run at niceness measuredNice (which
// needs root, as the FUSE mounts do), the hot client in a process of its own: the running
// binary again (the bench, or a test binary), told by openChildEnv.

// measuredNice is the niceness of nginx and of the hot open-loop client.
const measuredNice = -10

// openChildEnv, set, makes RunOpenChild run this process as an open-loop client.
const openChildEnv = "EDGEPOOL_BENCH_OPEN_CLIENT"

// openChildJob is what the child is to do: runOpen's arguments.
type openChildJob struct {
	Addr   string        `json:"addr"`
	Rate   float64       `json:"rate"`
	IDs    []int         `json:"ids"`
	Seed   uint64        `json:"seed"`
	Size   int64         `json:"size"`
	Warm   time.Duration `json:"warm"`
	Window time.Duration `json:"window"`
	Grace  time.Duration `json:"grace"`
}

// openChildResult is the child's answer, on its standard output.
type openChildResult struct {
	Result *clientResult `json:"result,omitempty"`
	Error  string        `json:"error,omitempty"`
	Nice   int           `json:"nice"` // the child's niceness
}

// RunOpenChild runs this process as an open-loop client and exits, when it was started as
// one; otherwise it returns at once. The bench binary and the tests' TestMain call it
// first.
func RunOpenChild() {
	if os.Getenv(openChildEnv) == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var out openChildResult
	var job openChildJob
	var err error
	if out.Nice, err = processNice(os.Getpid()); err != nil {
		out.Error = err.Error()
	} else if err := json.NewDecoder(os.Stdin).Decode(&job); err != nil {
		out.Error = "read the job: " + err.Error()
	} else if out.Result, err = runOpen(ctx, job.Addr, openLoad{rate: job.Rate, ids: job.IDs, seed: job.Seed},
		job.Size, job.Warm, job.Window, job.Grace); err != nil {
		out.Error = err.Error()
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(2)
	}
	os.Exit(0)
}

// runOpenChild is runOpen in a process of its own, at niceness nice.
func runOpenChild(ctx context.Context, nice int, addr string, l openLoad, size int64, warm, d, grace time.Duration) (*clientResult, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	job, err := json.Marshal(openChildJob{Addr: addr, Rate: l.rate, IDs: l.ids, Seed: l.seed, Size: size, Warm: warm, Window: d, Grace: grace})
	if err != nil {
		return nil, err
	}
	cmd := niced(ctx, nice, self)
	cmd.Env = append(os.Environ(), openChildEnv+"=1")
	cmd.Stdin = bytes.NewReader(job)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	var res openChildResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("open-loop client process: %w; its errors: %s", errors.Join(err, runErr), stderr.Bytes())
	}
	switch {
	case res.Error != "":
		return nil, errors.New(res.Error)
	}
	if want, err := nicenessOf(nice); err != nil || res.Nice != want {
		return nil, fmt.Errorf("the open-loop client ran at niceness %d, not %d (raising it needs root): %v", res.Nice, want, err)
	}
	return res.Result, nil
}

// nicenessOf is the niceness of a process niced(nice) starts.
func nicenessOf(nice int) (int, error) {
	self, err := processNice(os.Getpid())
	return max(-20, min(19, self+nice)), err
}

// niced is a command that runs bin at niceness nice (0: as this process).
func niced(ctx context.Context, nice int, bin string, args ...string) *exec.Cmd {
	if nice == 0 {
		return exec.CommandContext(ctx, bin, args...)
	}
	return exec.CommandContext(ctx, "nice", append([]string{"-n", strconv.Itoa(nice), bin}, args...)...)
}
