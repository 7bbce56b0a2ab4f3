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

package testkit

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/edgepool/edgepool/internal/nginxconf"
)

// RequestLogSink stands in for the node agent where nginx runs a rendered configuration
// without it: it binds the per-request log socket in a directory of its own, nginx's
// working directory (Dir), and counts and discards the lines.
type RequestLogSink struct {
	Dir   string
	conn  *net.UnixConn
	lines atomic.Int64
	done  chan struct{}
}

// NewRequestLogSink binds the socket; nginx's workers (nobody, under a root master) may
// send to it.
func NewRequestLogSink() (*RequestLogSink, error) { return NewRequestLogSinkFunc(nil) }

// NewRequestLogSinkFunc is NewRequestLogSink with handle, if not nil, given each line
// (a datagram, valid during the call), as the node agent's parser is.
func NewRequestLogSinkFunc(handle func([]byte)) (*RequestLogSink, error) {
	dir, err := os.MkdirTemp("", "edgepool-requests-")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, nginxconf.RequestLogSocket)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err == nil {
		err = errors.Join(os.Chmod(dir, 0o755), os.Chmod(path, 0o777))
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &RequestLogSink{Dir: dir, conn: conn, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 64<<10)
		for {
			n, err := conn.Read(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.lines.Add(1)
			if handle != nil && err == nil {
				handle(buf[:n])
			}
		}
	}()
	return s, nil
}

// Lines is how many lines it received.
func (s *RequestLogSink) Lines() int64 { return s.lines.Load() }

// Close unbinds the socket and removes its directory.
func (s *RequestLogSink) Close() error {
	err := s.conn.Close()
	<-s.done
	return errors.Join(err, os.RemoveAll(s.Dir))
}
