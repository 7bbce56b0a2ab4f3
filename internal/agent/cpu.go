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

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CPULimit returns the container's CPU limit in whole CPUs, rounded up, read from the
// cgroup filesystem mounted at root (v2: cpu.max; v1: cpu.cfs_quota_us and
// cpu.cfs_period_us under cpu/ or cpu,cpuacct/). ok is false when there is no limit.
func CPULimit(root string) (cpus int, ok bool, err error) {
	if data, err := os.ReadFile(filepath.Join(root, "cpu.max")); err == nil {
		fields := strings.Fields(string(data))
		if len(fields) != 2 {
			return 0, false, fmt.Errorf("parse cpu.max %q", data)
		}
		if fields[0] == "max" {
			return 0, false, nil
		}
		return quotaCPUs(fields[0], fields[1])
	} else if !errors.Is(err, fs.ErrNotExist) {
		return 0, false, err
	}
	for _, dir := range []string{"cpu", "cpu,cpuacct", "cpuacct,cpu"} {
		quota, err := os.ReadFile(filepath.Join(root, dir, "cpu.cfs_quota_us"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		} else if err != nil {
			return 0, false, err
		}
		period, err := os.ReadFile(filepath.Join(root, dir, "cpu.cfs_period_us"))
		if err != nil {
			return 0, false, err
		}
		q := strings.TrimSpace(string(quota))
		if q == "-1" {
			return 0, false, nil
		}
		return quotaCPUs(q, strings.TrimSpace(string(period)))
	}
	return 0, false, nil
}

func quotaCPUs(quota, period string) (int, bool, error) {
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	if err1 != nil || err2 != nil || q <= 0 || p <= 0 {
		return 0, false, fmt.Errorf("parse CPU quota %q / period %q", quota, period)
	}
	return max(1, int(math.Ceil(float64(q)/float64(p)))), true, nil
}

// Workers resolves worker_processes auto: the CPU limit when there is one, capped at the
// CPUs the process may run on; otherwise those CPUs.
func Workers(limit int, limited bool, available int) int {
	if limited && limit < available {
		return limit
	}
	return max(1, available)
}
