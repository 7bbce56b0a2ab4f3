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

// Package procstat reads what edgepool needs of a process's /proc/PID/stat.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// Stat is a process's (its main thread's) state, parent, group, niceness and CPU time.
type Stat struct {
	State      string // "R", "S", "Z"...
	PPID, PGID int
	Nice       int
	CPU        time.Duration // user and system
}

// Processes are the pids /proc lists (the processes of this PID namespace).
func Processes() ([]int, error) {
	return numbered("/proc")
}

// Threads are the ids of pid's threads, its main thread's (pid) among them. A thread's own
// stat is /proc/TID/stat: Read reads it, though /proc does not list it.
func Threads(pid int) ([]int, error) {
	return numbered(fmt.Sprintf("/proc/%d/task", pid))
}

// numbered are the names of dir's entries that are numbers.
func numbered(dir string) ([]int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []int
	for _, e := range entries {
		if id, err := strconv.Atoi(e.Name()); err == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// Read reads /proc/PID/stat.
func Read(pid int) (Stat, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return Stat{}, err
	}
	return parse(pid, data)
}

// parse reads a stat line: "pid (comm) state ppid pgrp ...", where comm may hold spaces
// and parentheses, so the fields follow its last ')'.
func parse(pid int, data []byte) (Stat, error) {
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return Stat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[end+1:]))
	if len(f) < 17 {
		return Stat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var n [5]int64
	for i, field := range []string{f[1], f[2], f[11], f[12], f[16]} { // ppid, pgrp, utime, stime, nice
		v, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return Stat{}, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		n[i] = v
	}
	return Stat{State: f[0], PPID: int(n[0]), PGID: int(n[1]), CPU: time.Duration(n[2]+n[3]) * clockTick, Nice: int(n[4])}, nil
}
