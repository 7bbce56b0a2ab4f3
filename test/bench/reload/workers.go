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

package reload

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// readProcs lists the processes under procRoot (/proc).
func readProcs(procRoot string) ([]proc, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		p, err := readProc(procRoot, pid)
		if errors.Is(err, fs.ErrNotExist) {
			continue // exited meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func readProc(procRoot string, pid int) (proc, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return proc{}, err
	}
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return proc{}, err
	}
	ppid, err := parentPID(string(stat))
	if err != nil {
		return proc{}, fmt.Errorf("%s/stat: %w", dir, err)
	}
	return proc{pid: pid, ppid: ppid, title: commandTitle(cmdline)}, nil
}

// parentPID reads the fourth field of /proc/PID/stat; the second, the command name in
// parentheses, may itself contain spaces and parentheses.
func parentPID(stat string) (int, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, errors.New("no command name")
	}
	fields := strings.Fields(stat[end+1:])
	if len(fields) < 2 {
		return 0, errors.New("too few fields")
	}
	return strconv.Atoi(fields[1])
}

// commandTitle is a command line with its NUL separators and padding as spaces, trimmed.
func commandTitle(cmdline []byte) string {
	return strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
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
func stillAccepting(procRoot string, pids []int) (bool, error) {
	for _, pid := range pids {
		p, err := readProc(procRoot, pid)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		if p.title == acceptingWorkerTitle {
			return true, nil
		}
	}
	return false, nil
}
