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

// Package testkit holds what the tests and benchmarks share to run real things (envtest
// with a manager, the operator, the agent, nginx) and to read what they report: a
// process in its own group, the agent and its ConfigMap volume, polling, a log buffer,
// HTTP and Prometheus helpers, and percentiles. It sits at the root's internal/ so that
// the API's and the controllers' envtest suites can import it too; only tests and test/
// import it.
package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/edgepool/edgepool/internal/procstat"
)

// Process is a command started in a process group of its own, so that stopping it also
// stops what it started (nginx's workers, the agent's nginx).
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts cmd in a new process group, keeping the rest of its SysProcAttr (a
// Credential, say).
func Start(cmd *exec.Cmd) (*Process, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the process's ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process exited; Err then says how.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the process's exit error, once Done is closed.
func (p *Process) Err() error { return p.err }

// Stop sends SIGTERM, as the kubelet does, and kills the whole group if the process has
// not exited within grace. What is left of the group afterwards (the workers of a killed
// nginx master) is killed too. It returns an error if the process had to be killed or
// exited with a failure status.
func (p *Process) Stop(grace time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case <-p.done:
		var exit *exec.ExitError
		if errors.As(p.err, &exit) && !exit.Exited() && exit.Sys().(syscall.WaitStatus).Signal() == syscall.SIGTERM {
			break // ended by our signal, without a handler: that is a clean stop
		}
		if p.err != nil {
			err = fmt.Errorf("%s: %w", p.cmd.Path, p.err)
		}
	case <-time.After(grace):
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-p.done
		err = fmt.Errorf("%s did not stop within %s of SIGTERM", p.cmd.Path, grace)
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	// A killed child stuck in a read from a slow or FUSE disk exits only once the read
	// returns, and keeps its listening sockets meanwhile: with reuseport the next server on
	// the port would share its connections with one that never answers.
	for deadline := time.Now().Add(groupExitTimeout); groupRuns(p.Pid()); {
		if time.Now().After(deadline) {
			return errors.Join(err, fmt.Errorf("%s: processes of its group still run %s after SIGKILL", p.cmd.Path, groupExitTimeout))
		}
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// groupExitTimeout bounds how long Stop waits for a killed process group to be gone.
const groupExitTimeout = 30 * time.Second

// groupRuns says whether a process of group pgid runs still: exists and is not a zombie
// (which holds no socket, and which its new parent may reap late).
func groupRuns(pgid int) bool {
	pids, _ := procstat.Processes()
	for _, pid := range pids {
		if st, err := procstat.Read(pid); err == nil && st.State != "Z" && st.PGID == pgid {
			return true
		} // else gone meanwhile
	}
	return false
}

// ThreadNiceness are the niceness of process pid's main thread, then those of its other
// threads (an nginx worker's event loop, then its pools' threads).
func ThreadNiceness(pid int) ([]int, error) {
	tids, err := procstat.Threads(pid)
	if err != nil {
		return nil, err
	}
	main, err := procstat.Read(pid)
	if err != nil {
		return nil, err
	}
	nices := []int{main.Nice}
	for _, tid := range tids {
		if tid != pid {
			st, err := procstat.Read(tid)
			if err != nil {
				return nil, err
			}
			nices = append(nices, st.Nice)
		}
	}
	return nices, nil
}

// Kill kills the process's group at once, as a crash or an eviction would, and waits
// for the process to exit.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	<-p.done
}

// Poll is Eventually, which also fails when the process exits first.
func (p *Process) Poll(ctx context.Context, interval time.Duration, what string, cond func() error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-p.done:
			cancel(fmt.Errorf("%s exited: %v", p.cmd.Path, p.err))
		case <-ctx.Done():
		}
	}()
	return Eventually(ctx, interval, what, cond)
}

// GoBuild builds the Go package pkg into the binary out, from the folder dir.
func GoBuild(ctx context.Context, dir, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, output)
	}
	return nil
}

// AgentBinary is the edgepool-agent binary a benchmark runs: bin if given, else one built
// from repoRoot's ./cmd/agent into dir (which nobody, the agent's user, must be able to read).
func AgentBinary(ctx context.Context, bin, repoRoot, dir string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	bin = filepath.Join(dir, "edgepool-agent")
	return bin, GoBuild(ctx, repoRoot, bin, "./cmd/agent")
}

// Children lists the PIDs whose parent is pid.
func Children(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		var child int
		if _, err := fmt.Sscan(e.Name(), &child); err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // gone meanwhile
		}
		if slices.Contains(strings.Split(string(status), "\n"), fmt.Sprintf("PPid:\t%d", pid)) {
			out = append(out, child)
		}
	}
	return out, nil
}

// WaitWorkersReplaced waits until the nginx master pid runs workers and none of old: after
// a reload, no request reaches a worker of the configuration before.
func WaitWorkersReplaced(ctx context.Context, master int, old []int) error {
	for {
		workers, err := NginxWorkers(master)
		if err == nil && len(workers) > 0 && !slices.ContainsFunc(workers, func(w int) bool { return slices.Contains(old, w) }) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nginx %d kept workers of %v (now %v, %v): %w", master, old, workers, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// NginxWorkers lists the worker processes of the nginx master pid.
func NginxWorkers(master int) ([]int, error) {
	kids, err := Children(master)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, pid := range kids {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmdline), "worker process") {
			out = append(out, pid)
		}
	}
	return out, nil
}
