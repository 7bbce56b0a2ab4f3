//go:build bench

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

package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// operator is the edgepool manager binary running as a process of its own.
type operator struct {
	cmd        *exec.Cmd
	metricsURL string
	readyURL   string
	done       chan struct{} // closed when the process exited
	exitErr    error
}

// startOperator runs the manager against the cluster in kubeconfig, with leader election
// off and its metrics and probes on free loopback ports. Its output goes to log.
func startOperator(binary, kubeconfig string, log io.Writer) (*operator, error) {
	metricsPort, err := freePort()
	if err != nil {
		return nil, err
	}
	probePort, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, "--kubeconfig", kubeconfig, "--leader-elect=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metricsPort),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probePort))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start operator: %w", err)
	}
	o := &operator{
		cmd:        cmd,
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		readyURL:   fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort),
		done:       make(chan struct{}),
	}
	go func() { o.exitErr = cmd.Wait(); close(o.done) }()
	return o, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// get returns the body of an HTTP GET that answered 200.
func get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), nil
}

// poll calls cond every interval until it holds, the operator exits, or ctx ends.
func (o *operator) poll(ctx context.Context, what string, cond func() (bool, error)) error {
	var lastErr error
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if ok && err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last error: %v)", what, context.Cause(ctx), lastErr)
		case <-o.done:
			return fmt.Errorf("waiting for %s: operator exited: %v", what, o.exitErr)
		case <-tick.C:
		}
	}
}

// waitReady waits for the operator's readiness probe to answer.
func (o *operator) waitReady(ctx context.Context) error {
	return o.poll(ctx, "the operator's /readyz", func() (bool, error) {
		_, err := get(ctx, o.readyURL)
		return err == nil, err
	})
}

// reconcileStats are the CacheNode controller's counters from the operator's /metrics.
type reconcileStats struct {
	reconciles, errors int
	idle               bool // nothing queued and no reconcile running
	clientWrites       int  // POST, PUT, PATCH and DELETE requests its client sent
	conflicts          int  // its requests answered 409 Conflict
}

func (o *operator) stats(ctx context.Context) (reconcileStats, error) {
	body, err := get(ctx, o.metricsURL)
	if err != nil {
		return reconcileStats{}, err
	}
	return statsOf(parseSamples(body)), nil
}

func statsOf(samples []sample) reconcileStats {
	ctrl := map[string]string{"controller": "cachenode"}
	st := reconcileStats{
		reconciles: int(sum(samples, "controller_runtime_reconcile_total", ctrl)),
		errors:     int(sum(samples, "controller_runtime_reconcile_errors_total", ctrl)),
		idle: sum(samples, "workqueue_depth", ctrl) == 0 &&
			sum(samples, "controller_runtime_active_workers", ctrl) == 0,
	}
	st.conflicts = int(sum(samples, "rest_client_requests_total", map[string]string{"code": "409"}))
	for _, m := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		st.clientWrites += int(sum(samples, "rest_client_requests_total", map[string]string{"method": m}))
	}
	return st
}

// waitIdle waits until the controller has finished at least want reconciles and has
// nothing queued or running. Workers start only once the informers delivered every
// existing object to the queue, so want reconciles then an empty queue mean every
// CacheNode was reconciled.
func (o *operator) waitIdle(ctx context.Context, want int) (reconcileStats, error) {
	var st reconcileStats
	err := o.poll(ctx, fmt.Sprintf("%d reconciles and an idle queue", want), func() (bool, error) {
		var err error
		st, err = o.stats(ctx)
		return err == nil && st.reconciles >= want && st.idle, err
	})
	return st, err
}

// memory reads the operator's VmRSS and VmHWM in MiB.
func (o *operator) memory() (rss, hwm float64, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", o.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	return procMemory(string(status))
}

// stop ends the operator with SIGTERM, as the kubelet would, and kills it if it does not
// exit within 20s.
func (o *operator) stop() error {
	_ = o.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-o.done:
	case <-time.After(20 * time.Second):
		_ = o.cmd.Process.Kill()
		<-o.done
		return errors.New("operator did not stop within 20s of SIGTERM")
	}
	var exit *exec.ExitError
	if errors.As(o.exitErr, &exit) {
		return fmt.Errorf("operator: %w", o.exitErr)
	}
	return nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
