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

// Package nginxlog classifies the lines of nginx's error stream that the agent acts on:
// a thread pool's queue overflow, a failed system call on a disk's file, and nginx's
// complaints about the per-request lines it sends the agent. Every pattern is anchored at
// nginx's own prefix (time, level, PID#TID), so that what a client sent, quoted further on
// in a line (its request line, its Referer), never passes for one of them.
package nginxlog

import (
	"fmt"
	"regexp"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// Kind is what a line of nginx's error stream says.
type Kind int

const (
	// Other is any line the agent only passes through.
	Other Kind = iota
	// Overflow: a thread pool's queue was full; Line.Pool names the pool.
	Overflow
	// DiskError: a system call on a file failed with an error that says its disk is
	// failing; Line.Disk says which call, file and error.
	DiskError
	// RequestLineDropped: nginx could not send a request's line to the agent.
	RequestLineDropped
	// RequestLogPeer: nginx could not reach the agent's per-request socket (its lines
	// of the request that follows say whether one was lost).
	RequestLogPeer
)

// Line is a classified line.
type Line struct {
	Kind Kind
	Pool string
	Disk DiskFailure
}

// AboutRequestLog says whether the line is about the per-request lines: a stalled agent
// makes one per request, so such lines are counted and passed through sparingly, and
// never parsed further (the request line in them is the client's).
func (l Line) AboutRequestLog() bool {
	return l.Kind == RequestLineDropped || l.Kind == RequestLogPeer
}

// DiskFailure is one failed system call on a disk's file.
type DiskFailure struct {
	Path  string
	Errno syscall.Errno
	// What is the call and its error, e.g. `pread() failed (5: Input/output error)`.
	What string
}

// linePrefix matches the start of a line of nginx's error log up to its message: time,
// level, PID#TID and, for a connection's lines, *N.
const linePrefix = `^[0-9/]{10} [0-9:]{8} \[[a-z]+\] [0-9]+#[0-9]+: (?:\*[0-9]+ )?`

var (
	// e.g. 2026/01/02 03:04:05 [error] 7#7: thread pool "pool_hdd0" queue overflow: 1 tasks waiting
	overflowRE = regexp.MustCompile(linePrefix + `thread pool "([^"]{1,64})" queue overflow: ([0-9]{1,12}) tasks waiting`)
	// e.g. 2026/01/02 03:04:05 [crit] 7#7: *9 pread() "/mnt/hdd0/cache/3/1c/..." failed (5: Input/output error), client: ...
	// rename() names two files: the first is the disk's.
	diskErrorRE = regexp.MustCompile(linePrefix + `([a-z_]{1,24})\(\) "(/[^"]{1,1000})"(?: to "[^"]{1,1000}")? failed \(([0-9]{1,4}): ([^)]{0,128})\)`)
	// A line nginx could not send to the agent, at level warn, with the request line:
	// `send() to syslog failed while logging request, client: ...` (or `has written only N of M`).
	sendFailedRE = regexp.MustCompile(linePrefix + `send\(\) to syslog (failed|has written only [0-9]+ of [0-9]+) while logging request`)
	// A socket nginx could not reach costs another line of the syslog peer's own, bare:
	// `connect() failed (2: No such file or directory)`.
	syslogPeerErrorRE = regexp.MustCompile(linePrefix + `(connect|send|socket)\(\) failed \([0-9]+: [^)]*\)$`)
)

// diskErrnos are the errors that say a disk is failing (nginx logs others, such as a file
// the cache manager already removed, that say nothing about the disk).
var diskErrnos = map[syscall.Errno]bool{
	unix.EIO: true, unix.ENXIO: true, unix.ENODEV: true, unix.ENOSPC: true, unix.EROFS: true,
	unix.ESTALE: true, unix.EUCLEAN: true, unix.EDQUOT: true, unix.ENOTCONN: true,
}

// Classify says what a line of nginx's error stream is.
func Classify(line string) Line {
	switch {
	case sendFailedRE.MatchString(line):
		return Line{Kind: RequestLineDropped}
	case syslogPeerErrorRE.MatchString(line):
		return Line{Kind: RequestLogPeer}
	}
	if m := overflowRE.FindStringSubmatch(line); m != nil {
		return Line{Kind: Overflow, Pool: m[1]}
	}
	if m := diskErrorRE.FindStringSubmatch(line); m != nil {
		n, err := strconv.Atoi(m[3])
		if err == nil && diskErrnos[syscall.Errno(n)] {
			return Line{Kind: DiskError, Disk: DiskFailure{Path: m[2], Errno: syscall.Errno(n),
				What: fmt.Sprintf("%s() failed (%s: %s)", m[1], m[3], m[4])}}
		}
	}
	return Line{Kind: Other}
}

// ErrnoName is the symbolic name of an errno (EIO), or its number.
func ErrnoName(e syscall.Errno) string {
	if name := unix.ErrnoName(e); name != "" {
		return name
	}
	return strconv.Itoa(int(e))
}
