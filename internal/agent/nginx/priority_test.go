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

package nginx

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/edgepool/edgepool/internal/procstat"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// workerNiceness are, for each of master's workers, the niceness of its main thread and
// those of its other threads.
func workerNiceness(master int) (map[int][]int, error) {
	workers, err := children(master)
	if err != nil {
		return nil, err
	}
	out := map[int][]int{}
	for pid := range workers {
		if out[pid], err = testkit.ThreadNiceness(pid); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TestPoolPriorityLowersEveryWorkersPools runs a real nginx with two workers of two thread
// pools each: their pools' threads, and only those, go PoolNiceness below the event
// loops; a second look lowers nothing; a reload's new workers are lowered too. It looks
// as often as it can, so that looks fall in the middle of a pool's start or a worker's exit.
func TestPoolPriorityLowersEveryWorkersPools(t *testing.T) {
	g := NewWithT(t)
	binary, err := testkit.NginxBinary()
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reaper, err := NewReaper(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	s := New(binary, t.TempDir(), reaper)
	g.Expect(s.Init()).To(Succeed())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	withPools := func(body string) []byte {
		c := conf(port, body, false)
		c = bytes.Replace(c, []byte("worker_processes 1;"), []byte("worker_processes 2;\nthread_pool pool_a threads=3;\nthread_pool pool_b threads=2;"), 1)
		return c
	}
	const threads = 3 + 2

	first, err := s.Prepare(ctx, withPools("first"), nil)
	g.Expect(err).NotTo(HaveOccurred())
	exited, errs, err := s.Start(first)
	g.Expect(err).NotTo(HaveOccurred())
	defer s.Stop(exited)
	go func() { _, _ = io.Copy(io.Discard, errs) }()
	master, err := procstat.Read(s.PID())
	g.Expect(err).NotTo(HaveOccurred())
	lowered := func(workers map[int][]int) bool {
		for _, nices := range workers {
			if len(nices) != 1+threads || nices[0] != master.Nice {
				return false
			}
			for _, n := range nices[1:] {
				if n != min(19, master.Nice+PoolNiceness) {
					return false
				}
			}
		}
		return len(workers) == 2
	}

	var p PoolPriority
	total := 0
	g.Eventually(func(g Gomega) {
		n, err := p.Lower(s.PID())
		g.Expect(err).NotTo(HaveOccurred())
		total += n
		g.Expect(workerNiceness(s.PID())).To(Satisfy(lowered))
	}, 10*time.Second, time.Millisecond).Should(Succeed())
	g.Expect(total).To(Equal(2*threads), "threads lowered: each pool thread of each worker, once")
	g.Expect(p.Lower(s.PID())).To(BeZero(), "a second look lowers nothing")
	before, err := workerNiceness(s.PID())
	g.Expect(err).NotTo(HaveOccurred())

	second, err := s.Prepare(ctx, withPools("second"), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Reload(second)).To(Succeed())
	total = 0
	g.Eventually(func(g Gomega) {
		n, err := p.Lower(s.PID())
		g.Expect(err).NotTo(HaveOccurred())
		total += n
		now, err := workerNiceness(s.PID())
		g.Expect(err).NotTo(HaveOccurred())
		for pid := range before {
			g.Expect(now).NotTo(HaveKey(pid), "the first workers still run")
		}
		g.Expect(now).To(Satisfy(lowered))
	}, 10*time.Second, time.Millisecond).Should(Succeed())
	g.Expect(total).To(Equal(2*threads), "the reload's workers' threads lowered once")
	g.Expect(p.Lower(s.PID())).To(BeZero(), "a second look after the reload lowers nothing")
	g.Expect(p.lowered).To(HaveLen(2), "the first workers forgotten")
}
