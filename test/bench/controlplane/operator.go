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
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"time"

	"github.com/prometheus/procfs"

	"github.com/edgepool/edgepool/internal/test/testkit"
)

// operator is the edgepool manager binary running as a process of its own.
type operator struct {
	*testkit.Process
	metricsURL string
	readyURL   string
}

// startOperator runs the manager against the cluster in kubeconfig, with leader election
// off and its metrics and probes on free loopback ports. Its output goes to log.
func startOperator(binary, kubeconfig string, log io.Writer) (*operator, error) {
	metricsPort, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	probePort, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, "--kubeconfig", kubeconfig, "--leader-elect=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", metricsPort),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", probePort))
	cmd.Stdout, cmd.Stderr = log, log
	p, err := testkit.Start(cmd)
	if err != nil {
		return nil, err
	}
	return &operator{
		Process:    p,
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort),
		readyURL:   fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort),
	}, nil
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// pollInterval is how often the operator's endpoints are asked while waiting.
const pollInterval = 100 * time.Millisecond

// waitReady waits for the operator's readiness probe to answer.
func (o *operator) waitReady(ctx context.Context) error {
	return o.Poll(ctx, pollInterval, "the operator's /readyz", func() error {
		_, err := testkit.Get(ctx, httpClient, o.readyURL)
		return err
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
	body, err := testkit.Get(ctx, httpClient, o.metricsURL)
	if err != nil {
		return reconcileStats{}, err
	}
	m, err := testkit.ParseMetrics(body)
	if err != nil {
		return reconcileStats{}, err
	}
	return statsOf(m), nil
}

func statsOf(m testkit.Metrics) reconcileStats {
	ctrl := map[string]string{"controller": "cachenode"}
	st := reconcileStats{
		reconciles: int(m.Sum("controller_runtime_reconcile_total", ctrl)),
		errors:     int(m.Sum("controller_runtime_reconcile_errors_total", ctrl)),
		idle: m.Sum("workqueue_depth", ctrl) == 0 &&
			m.Sum("controller_runtime_active_workers", ctrl) == 0,
		conflicts: int(m.Sum("rest_client_requests_total", map[string]string{"code": "409"})),
	}
	for _, verb := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		st.clientWrites += int(m.Sum("rest_client_requests_total", map[string]string{"method": verb}))
	}
	return st
}

// waitIdle waits until the controller has finished at least want reconciles and has
// nothing queued or running. Workers start only once the informers delivered every
// existing object to the queue, so want reconciles then an empty queue mean every
// CacheNode was reconciled.
func (o *operator) waitIdle(ctx context.Context, want int) (reconcileStats, error) {
	var st reconcileStats
	err := o.Poll(ctx, pollInterval, fmt.Sprintf("%d reconciles and an idle queue", want), func() error {
		var err error
		if st, err = o.stats(ctx); err != nil {
			return err
		}
		if st.reconciles < want || !st.idle {
			return fmt.Errorf("%d reconciles, idle: %v", st.reconciles, st.idle)
		}
		return nil
	})
	return st, err
}

// memory reads the operator's resident memory now (VmRSS) and at its peak (VmHWM), in MiB.
func (o *operator) memory() (rss, hwm float64, err error) {
	p, err := procfs.NewProc(o.Pid())
	if err != nil {
		return 0, 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0, err
	}
	return mib(st.VmRSS), mib(st.VmHWM), nil
}

// mib is bytes in MiB, to a tenth.
func mib(bytes uint64) float64 { return float64(bytes*10>>20) / 10 }

// stop ends the operator with SIGTERM, as the kubelet would, and kills it if it does not
// exit within 20s.
func (o *operator) stop() error { return o.Stop(20 * time.Second) }
