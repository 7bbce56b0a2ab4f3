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
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

// processCPU is the CPU time (user and system) pid has used so far.
func processCPU(pid int) (time.Duration, error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, f := range fields[11:13] { // utime, stime
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// processNice is the niceness pid runs at.
func processNice(pid int) (int, error) {
	fields, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(fields[16])
}

// statFields are the fields of /proc/PID/stat from the third (state) on.
func statFields(pid int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	// The command name, in parentheses, may hold spaces: the fields follow its last ')'.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(fields) < 17 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	return fields, nil
}

// treeCPU is the CPU time pid and its children (nginx's master and workers) have used
// so far. A child that exited in between is not counted.
func treeCPU(pid int) (time.Duration, error) {
	total, err := processCPU(pid)
	if err != nil {
		return 0, err
	}
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, err
	}
	for _, f := range strings.Fields(string(kids)) {
		child, err := strconv.Atoi(f)
		if err != nil {
			return 0, err
		}
		if cpu, err := processCPU(child); err == nil {
			total += cpu
		}
	}
	return total, nil
}
