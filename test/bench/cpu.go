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

	"github.com/edgepool/edgepool/internal/procstat"
)

// processCPU is the CPU time (user and system) pid has used so far.
func processCPU(pid int) (time.Duration, error) {
	st, err := procstat.Read(pid)
	return st.CPU, err
}

// processNice is the niceness pid runs at.
func processNice(pid int) (int, error) {
	st, err := procstat.Read(pid)
	return st.Nice, err
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

// userHZ is the unit of /proc/stat's CPU times: fixed at 100 a second on Linux.
const userHZ = 100

// machineSteal is the CPU time the hypervisor has given this machine's CPUs to others
// so far (steal, in /proc/stat): a window with much of it measured a machine that was
// not all the bench's, whatever the configuration.
func machineSteal() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return stealOf(string(data))
}

// stealOf reads the steal time off /proc/stat's text: its first line sums every CPU.
func stealOf(stat string) (time.Duration, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: no steal time in %q", line)
	}
	ticks, err := strconv.ParseUint(f[8], 10, 63)
	if err != nil {
		return 0, fmt.Errorf("/proc/stat: steal time: %w", err)
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}
