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

package procstat

import (
	"os"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestParseTakesTheFieldsAfterTheCommandName(t *testing.T) {
	line := "4242 (a) b (c) S 17 4242 4242 0 -1 4194560 100 0 0 0 150 25 0 0 20 5 1 0 1 0 0\n"
	got, err := parse(4242, []byte(line))
	if err != nil {
		t.Fatal(err)
	}
	want := Stat{State: "S", PPID: 17, PGID: 4242, CPU: 1750 * time.Millisecond, Nice: 5}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{"4242 a S 1", "4242 (a) S 1 2 3", "4242 (a) S x 4242 4242 0 -1 0 0 0 0 0 1 1 0 0 20 0 1"} {
		if _, err := parse(4242, []byte(bad)); err == nil {
			t.Errorf("parse(%q) succeeded", bad)
		}
	}
}

func TestReadReadsThisProcess(t *testing.T) {
	st, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The raw getpriority system call returns 20 - niceness.
	if st.PPID != os.Getppid() || st.Nice != 20-prio || st.PGID != syscall.Getpgrp() {
		t.Errorf("read %+v, want parent %d, group %d, niceness %d", st, os.Getppid(), syscall.Getpgrp(), 20-prio)
	}
}

func TestProcessesAndThreadsListThisProcess(t *testing.T) {
	pids, err := Processes()
	if err != nil {
		t.Fatal(err)
	}
	tids, err := Threads(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, os.Getpid()) || !slices.Contains(tids, os.Getpid()) || len(tids) < 2 {
		t.Errorf("this process %d: processes %v, threads %v (a Go program runs several)", os.Getpid(), len(pids), tids)
	}
	if _, err := Threads(-1); err == nil {
		t.Error("the threads of no process were listed")
	}
}
