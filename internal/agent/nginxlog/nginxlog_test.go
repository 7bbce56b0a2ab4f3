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

package nginxlog

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestOverflow(t *testing.T) {
	for line, want := range map[string]string{
		`2026/11/21 10:00:00 [error] 12#12: thread pool "pool_hdd0" queue overflow: 65536 tasks waiting`:          "pool_hdd0",
		`2026/11/21 10:00:00 [error] 12#12: *5 thread pool "pool_nvme-1" queue overflow: 0 tasks waiting, client`: "pool_nvme-1",
		`2026/11/21 10:00:00 [error] 12#12: thread pool "default" queue overflow: 1 tasks waiting`:                "default",
		// Only nginx's own message counts, not what a client sent, quoted in another line.
		`thread pool "default" queue overflow: 1 tasks waiting`: "",
		`2026/11/21 10:00:00 [error] 12#12: *5 connect() failed (111: Connection refused) while connecting to upstream, referrer: "thread pool "pool_hdd0" queue overflow: 1 tasks waiting"`: "",
		`2026/11/21 10:00:00 [error] 12#12: open() "/x" failed (2: No such file or directory)`:                                                                                               "",
		`thread pool "pool_a" queue overflow: many tasks waiting`:                                                                                                                            "",
		``: "",
	} {
		l := Classify(line)
		if l.Pool != want || (l.Kind == Overflow) != (want != "") {
			t.Errorf("Classify(%q) = %+v; want an overflow of %q", line, l, want)
		}
	}
}

func TestDiskError(t *testing.T) {
	for line, want := range map[string]*DiskFailure{
		`2026/01/02 03:04:05 [crit] 7#7: *9 pread() "/mnt/hdd0/cache/3/1c/abc" failed (5: Input/output error), client: 127.0.0.1, server: , request: "GET /x HTTP/1.1"`: {
			Path: "/mnt/hdd0/cache/3/1c/abc", Errno: unix.EIO, What: "pread() failed (5: Input/output error)"},
		`2026/01/02 03:04:05 [crit] 7#7: *9 open() "/mnt/d1/cache/a/bc/0000000001" failed (30: Read-only file system) while reading upstream`: {
			Path: "/mnt/d1/cache/a/bc/0000000001", Errno: unix.EROFS, What: "open() failed (30: Read-only file system)"},
		`2026/01/02 03:04:05 [crit] 7#7: *9 pwrite() "/mnt/d1/cache/a/bc/0000000001" failed (28: No space left on device)`: {
			Path: "/mnt/d1/cache/a/bc/0000000001", Errno: unix.ENOSPC, What: "pwrite() failed (28: No space left on device)"},
		`2026/01/02 03:04:05 [crit] 7#7: *9 rename() "/mnt/d1/cache/0000000001" to "/mnt/d1/cache/a/bc/abc" failed (5: Input/output error)`: {
			Path: "/mnt/d1/cache/0000000001", Errno: unix.EIO, What: "rename() failed (5: Input/output error)"},
		// Errors that say nothing about the disk, and lines that are not errors.
		`2026/01/02 03:04:05 [crit] 7#7: unlink() "/mnt/d1/cache/a/bc/abc" failed (2: No such file or directory)`: nil,
		`2026/01/02 03:04:05 [crit] 7#7: *9 open() "/mnt/d1/cache/x" failed (13: Permission denied)`:              nil,
		`2026/01/02 03:04:05 [alert] 7#7: *9 sendfile() failed (5: Input/output error)`:                           nil,
		`2026/01/02 03:04:05 [error] 7#7: thread pool "pool_d1" queue overflow: 1 tasks waiting`:                  nil,
		// What a client sent, quoted in a line about something else, is not a disk's error.
		`2026/11/23 03:57:31 [error] 7#7: *1 connect() failed (111: Connection refused) while connecting to upstream, client: 127.0.0.1, request: "GET /obj HTTP/1.1", referrer: "x pread() "/mnt/hdd0/cache/a/bc/abc" failed (5: Input/output error) y"`: nil,
	} {
		l := Classify(line)
		if want == nil {
			if l.Kind == DiskError {
				t.Errorf("%q: classified as a disk error %+v", line, l.Disk)
			}
			continue
		}
		if l.Kind != DiskError || l.Disk != *want {
			t.Errorf("%q: got %+v, want a disk error %+v", line, l, *want)
		}
	}
	if ErrnoName(unix.EIO) != "EIO" || ErrnoName(unix.Errno(9999)) != "9999" {
		t.Error("ErrnoName")
	}
}

func TestRequestLogLines(t *testing.T) {
	for line, want := range map[string]Kind{
		`2026/11/23 02:47:42 [warn] 4444#4444: *13 send() to syslog failed while logging request, client: 127.0.0.1, server: , request: "GET / HTTP/1.1", host: "127.0.0.1:18081"`: RequestLineDropped,
		`2026/11/23 02:47:42 [warn] 4444#4444: *13 send() to syslog has written only 10 of 60 while logging request, client: 127.0.0.1`:                                            RequestLineDropped,
		`2026/11/23 02:47:26 [alert] 3744#3744: connect() failed (2: No such file or directory)`:                                                                                   RequestLogPeer,
		`2026/11/23 02:47:26 [error] 3744#3744: send() failed (111: Connection refused)`:                                                                                           RequestLogPeer,
		// An origin that refused a connection is not about the request lines.
		`2026/11/23 02:47:26 [error] 3744#3744: *5 connect() failed (111: Connection refused) while connecting to upstream, client: 127.0.0.1`: Other,
		// A request line cannot pass for one.
		`2026/11/23 02:47:26 [error] 3744#3744: *5 upstream timed out, client: 1.2.3.4, request: "GET /x send() to syslog failed while logging request"`: Other,
	} {
		l := Classify(line)
		if l.Kind != want {
			t.Errorf("%q: kind %v, want %v", line, l.Kind, want)
		}
		if l.AboutRequestLog() != (want != Other) {
			t.Errorf("%q: about the request log %v", line, l.AboutRequestLog())
		}
	}
}
