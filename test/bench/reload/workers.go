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

package reload

import (
	"errors"
	"io/fs"
	"strings"
	"syscall"

	"github.com/prometheus/procfs"
)

// nginx names its processes in their command line. A worker told to stop (SIGQUIT, as
// the master does to the old workers after a reload) renames itself to
// "nginx: worker process is shutting down" and closes its listening sockets: from then
// on only the new configuration's workers accept connections.
const acceptingWorkerTitle = "nginx: worker process"

// proc is what /proc says about one process.
type proc struct {
	pid, ppid int
	title     string // the command line, as nginx sets it
}

// readProcs lists the machine's processes.
func readProcs() ([]proc, error) {
	all, err := procfs.AllProcs()
	if err != nil {
		return nil, err
	}
	var out []proc
	for _, p := range all {
		info, err := readProc(p)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // exited meanwhile (a process being reaped answers ESRCH)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

func readProc(p procfs.Proc) (proc, error) {
	stat, err := p.Stat()
	if err != nil {
		return proc{}, err
	}
	cmdline, err := p.CmdLine()
	if err != nil {
		return proc{}, err
	}
	return proc{pid: p.PID, ppid: stat.PPID, title: strings.TrimSpace(strings.Join(cmdline, " "))}, nil
}

// acceptingWorkers are the nginx workers (grandchildren of the agent, children of its
// nginx master) that still accept connections.
func acceptingWorkers(procs []proc, agentPID int) []int {
	masters := map[int]bool{}
	for _, p := range procs {
		if p.ppid == agentPID {
			masters[p.pid] = true
		}
	}
	var out []int
	for _, p := range procs {
		if masters[p.ppid] && p.title == acceptingWorkerTitle {
			out = append(out, p.pid)
		}
	}
	return out
}

// stillAccepting reports whether any of the given workers still accepts connections: it
// has not exited nor started to shut down.
func stillAccepting(pids []int) (bool, error) {
	for _, pid := range pids {
		p, err := procfs.NewProc(pid)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		info, err := readProc(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		if info.title == acceptingWorkerTitle {
			return true, nil
		}
	}
	return false, nil
}
