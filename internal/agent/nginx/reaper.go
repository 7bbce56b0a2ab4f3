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
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// Reaper waits for every child of the process. In a container the agent is PID 1, so
// orphaned processes are re-parented to it and must be reaped, and a catch-all wait(-1)
// would steal the exit status of the commands the agent runs itself. So every child is
// started through the Reaper and waited for through it.
type Reaper struct {
	mu      sync.Mutex
	waiters map[int]chan unix.WaitStatus
}

// NewReaper makes the process a child subreaper (so orphaned descendants are reaped here
// even when it is not PID 1) and starts reaping until ctx ends.
func NewReaper(ctx context.Context) (*Reaper, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("become child subreaper: %w", err)
	}
	r := &Reaper{waiters: map[int]chan unix.WaitStatus{}}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD)
	go func() {
		defer signal.Stop(sigs)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sigs:
				r.reap()
			}
		}
	}()
	return r, nil
}

func (r *Reaper) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		// An orphan's status is dropped: reaping it is all it needs.
		r.mu.Lock()
		if ch, ok := r.waiters[pid]; ok {
			ch <- ws
			delete(r.waiters, pid)
		}
		r.mu.Unlock()
	}
}

// Start starts cmd and returns a channel that receives its exit status.
func (r *Reaper) Start(cmd *exec.Cmd) (<-chan unix.WaitStatus, error) {
	ch := make(chan unix.WaitStatus, 1)
	r.mu.Lock()
	defer r.mu.Unlock() // held across Start, so reap cannot see the exit before the waiter exists
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r.waiters[cmd.Process.Pid] = ch
	return ch, nil
}

// Run runs cmd to completion and returns its combined output. The output is read
// through a pipe, not a file: the exec package's copying goroutines end only in Wait,
// which the Reaper replaces, and the container's root filesystem is read-only, so there
// is no temp directory to write to.
func (r *Reaper) Run(ctx context.Context, cmd *exec.Cmd) (output []byte, err error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	cmd.Stdout, cmd.Stderr = pw, pw
	done, err := r.Start(cmd)
	pw.Close() // the child holds its own copy; EOF comes when it exits
	if err != nil {
		return nil, err
	}
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(pr)
		read <- b
	}()
	var ws unix.WaitStatus
	select {
	case ws = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		ws = <-done
	}
	// A descendant that outlives cmd may hold the pipe open: then stop waiting with ctx.
	select {
	case output = <-read:
	case <-ctx.Done():
	}
	if ws.Exited() && ws.ExitStatus() == 0 {
		return output, nil
	}
	return output, fmt.Errorf("%s: %s", cmd.Path, describe(ws))
}

func describe(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "killed by " + ws.Signal().String()
	}
	return fmt.Sprintf("exit status %d", ws.ExitStatus())
}
