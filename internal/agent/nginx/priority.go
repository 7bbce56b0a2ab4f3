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
	"errors"
	"fmt"
	"io/fs"

	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/procstat"
)

// PoolNiceness is how far below its event loop (a worker's main thread) each nginx worker's
// thread pools run. The event loop answers what needs no disk (the hot tier, a peer's
// answer, a small file already read) and moves every response's bytes; the pools' threads
// read and send the disks' files. At the same priority, a heavy cold load's threads take
// the CPU from the event loops in turn, and a hot object served from memory waits behind
// cold reads after all (measured: D1's hot tier, docs/bench/README.md). Below them, the
// pools take the CPU the event loops leave. Niceness weighs threads against others in
// the same cgroup: the pod's share of the node is unchanged.
const PoolNiceness = 10

// PoolPriority runs the thread pools of an nginx master's workers PoolNiceness below
// their event loops. nginx starts a worker's pools as the worker starts, and a reload or a
// crashed worker starts new workers: Lower looks again each time it is called.
type PoolPriority struct {
	// lowered are, for each worker, the threads already lowered: a thread is lowered
	// (and counted) once, however the calls interleave with the pools starting or a
	// worker's threads exiting.
	lowered map[int]map[int]bool
}

// Lower lowers the pool threads of master's workers that came since the last call, and
// returns how many threads it lowered. Unprivileged: a process may lower its own user's.
func (p *PoolPriority) Lower(master int) (int, error) {
	workers, err := children(master)
	if err != nil {
		return 0, err
	}
	if p.lowered == nil {
		p.lowered = map[int]map[int]bool{}
	}
	for pid := range p.lowered {
		if !workers[pid] {
			delete(p.lowered, pid)
		}
	}
	lowered := 0
	var errs []error
	for pid := range workers {
		n, err := p.lowerWorker(pid)
		lowered += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return lowered, errors.Join(errs...)
}

// lowerWorker lowers worker pid's threads other than its main one that it has not lowered
// yet (a call in the middle of a pool's start lowers those there, the next one the rest).
func (p *PoolPriority) lowerWorker(pid int) (int, error) {
	tasks, err := procstat.Threads(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil // it exited
	} else if err != nil {
		return 0, err
	}
	done := p.lowered[pid]
	var fresh []int
	for _, tid := range tasks {
		if tid != pid && !done[tid] {
			fresh = append(fresh, tid)
		}
	}
	if len(fresh) == 0 {
		return 0, nil
	}
	st, err := procstat.Read(pid)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	if done == nil {
		done = map[int]bool{}
		p.lowered[pid] = done
	}
	target := min(19, st.Nice+PoolNiceness)
	lowered := 0
	for _, tid := range fresh {
		if err := unix.Setpriority(unix.PRIO_PROCESS, tid, target); errors.Is(err, unix.ESRCH) {
			continue // it exited
		} else if err != nil {
			return lowered, fmt.Errorf("lower nginx worker %d's thread %d to niceness %d: %w", pid, tid, target, err)
		}
		done[tid] = true
		lowered++
	}
	return lowered, nil
}

// children are the processes whose parent is pid, found in /proc (the pod's own
// processes, a handful).
func children(pid int) (map[int]bool, error) {
	pids, err := procstat.Processes()
	if err != nil {
		return nil, err
	}
	kids := map[int]bool{}
	for _, child := range pids {
		if st, err := procstat.Read(child); err == nil && st.PPID == pid {
			kids[child] = true
		} // else it exited, or is not ours to read
	}
	return kids, nil
}
