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
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strings"
)

// Machine describes where a benchmark ran.
type Machine struct {
	CPUs   int    `json:"cpus"`
	Memory string `json:"memory"`
	Kernel string `json:"kernel"`
	Nginx  string `json:"nginx"`
	Wrk    string `json:"wrk"`
}

// ThisMachine reads the machine's CPUs, memory, kernel and tool versions.
func ThisMachine(nginxBin, wrkBin string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), Memory: fmt.Sprintf("%.1f GiB", float64(MemTotal())/(1<<30))}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command(nginxBin, "-v").CombinedOutput(); err == nil {
		m.Nginx = strings.TrimPrefix(strings.TrimSpace(string(out)), "nginx version: ")
	}
	if out, _ := exec.Command(wrkBin, "-v").CombinedOutput(); len(out) > 0 {
		m.Wrk, _, _ = strings.Cut(strings.TrimSpace(string(out)), " [")
	}
	return m
}

// MemTotal is the machine's RAM in bytes, from /proc/meminfo.
func MemTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var kb int64
	for _, line := range strings.Split(string(b), "\n") {
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			return kb << 10
		}
	}
	return 0
}

func (r *Run) summary() string {
	return fmt.Sprintf("%s round %d | %-45s | %-24s | hot %s | cold %s | disks %s | overflows %d | CPU stolen %.2f s",
		r.Scenario, r.Round+1, r.Config, r.Load, clientCell(r.Hot), clientCell(r.Cold), r.disks(), r.Overflows, r.StealSeconds)
}

func clientCell(c *clientResult) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprintf("%s req/s, %.0f MB/s, mean %s, p99 %s, errors %d",
		rateCell(c), c.BytesPerSec()/1e6, c.meanLatency().format(ms), c.p99().format(ms), c.Errors)
}

// rateCell is a client's req/s; an open-loop client's with its offered rate and the
// requests that did not complete in time.
func rateCell(c *clientResult) string {
	s := c.rate().format(f1)
	if !c.open() {
		return s
	}
	s += fmt.Sprintf(" of %.1f offered", c.OfferedPerSec)
	if c.Unfinished > 0 {
		s += fmt.Sprintf(", %d unfinished", c.Unfinished)
	}
	if c.Unsent > 0 {
		s += fmt.Sprintf(", %d unsent", c.Unsent)
	}
	return s
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }

func ms(us float64) string {
	if us >= 10000 {
		return fmt.Sprintf("%.0f ms", us/1000)
	}
	return fmt.Sprintf("%.2f ms", us/1000)
}

func (r *Run) disks() string {
	names := make([]string, 0, len(r.DiskMBps))
	for n := range r.DiskMBps {
		names = append(names, n)
	}
	sort.Strings(names)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.0f", n, r.DiskMBps[n]))
	}
	return strings.Join(parts, ", ")
}

// Markdown renders the runs and the ratios as two tables.
func (res *Results) Markdown() string {
	var b strings.Builder
	b.WriteString("| Scenario | Configuration | Load | Round | Hot req/s | Hot mean | Hot p99 | Hot stdev | Hot MB/s | Cold req/s | Cold MB/s | Disk reads MB/s | Errors | Queue overflows |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Runs {
		hot, cold := r.Hot, r.Cold
		var errs int64
		row := []string{r.Scenario, r.Config, r.Load, fmt.Sprint(r.Round + 1)}
		if hot != nil {
			errs += hot.Errors
			row = append(row, rateCell(hot), hot.meanLatency().format(ms), hot.p99().format(ms), hot.latencyStdev().format(ms), fmt.Sprintf("%.0f", hot.BytesPerSec()/1e6))
		} else {
			row = append(row, "-", "-", "-", "-", "-")
		}
		if cold != nil {
			errs += cold.Errors
			row = append(row, rateCell(cold), fmt.Sprintf("%.0f", cold.BytesPerSec()/1e6))
		} else {
			row = append(row, "-", "-")
		}
		row = append(row, r.disks(), fmt.Sprint(errs), fmt.Sprint(r.Overflows))
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	b.WriteString(res.diskTable())
	b.WriteString("\n| Scenario | Ratio (within each round) | Target | Median | Spread over rounds | Met |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range res.Ratios {
		met := r.Met()
		if met == "no" {
			met = "**no**"
		}
		target := r.Target
		if target == "" {
			target = "-"
		}
		var spread []string
		for _, v := range r.Values {
			spread = append(spread, v.format(ratio))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.Scenario, r.Name, target, r.Median().format(ratio), strings.Join(spread, ", "), met)
	}
	return b.String()
}

func ratio(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0fx", v)
	case v >= 10:
		return fmt.Sprintf("%.1fx", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// diskTable shows, for every run with an open-loop cold load, what each emulated disk
// did against what its model can do.
func (res *Results) diskTable() string {
	var b strings.Builder
	for _, r := range res.Runs {
		for _, name := range slices.Sorted(maps.Keys(r.Disks)) {
			d := r.Disks[name]
			if d.OfferedMBps == 0 {
				continue
			}
			if b.Len() == 0 {
				b.WriteString("\n| Scenario | Configuration | Round | Disk | Model | Model MB/s | Offered MB/s | Read MB/s | Read ÷ model | Spindles busy | Seeks per object | Mean read | Peak reads at the disk |\n")
				b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %.0f | %.0f | %.0f | %.2f | %.0f%% | %.2f | %.0f KiB | %d |\n",
				r.Scenario, r.Config, r.Round+1, name, d.Model, d.ModelMBps, d.OfferedMBps, d.ReadMBps, d.ReadMBps/d.ModelMBps,
				100*d.Busy, d.SeeksPerObject, d.ReadKiB, d.Peak)
		}
	}
	return b.String()
}
