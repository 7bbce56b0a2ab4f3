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
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
)

// FreePort returns a TCP port free on every address: nginx's rendered listen binds the
// wildcard, and a port free on loopback alone may be held on another address (the real
// node's link, where the e2e suite's origins listen), which made nginx's bind fail.
//
// Nor is it one FreePort returned before in this process: the kernel may hand out a port
// it just freed again, and the two ports of one configuration (a listener and its status
// port) must differ.
func FreePort() (int32, error) {
	for range 100 {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		port := int32(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		if handedOut.claim(port) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("find a free port: 100 ports in a row were handed out before")
}

// handedOut are the ports FreePort returned.
var handedOut = &portSet{ports: map[int32]bool{}}

type portSet struct {
	mu    sync.Mutex
	ports map[int32]bool
}

// claim says whether port was not handed out before, and marks it.
func (s *portSet) claim(port int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ports[port] {
		return false
	}
	s.ports[port] = true
	return true
}

// Response is an HTTP response, read whole.
type Response struct {
	Code   int
	Header http.Header
	Body   []byte
	// Closes says the response asked to close its connection (Connection: close, a field
	// Go's client takes out of Header).
	Closes bool
}

// Fetch GETs url with header's fields (a Host field sets the Host asked for) and reads
// the response, whatever its status: only a transport error is an error.
func Fetch(ctx context.Context, c *http.Client, url string, header http.Header) (*Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if header != nil {
		req.Header, req.Host = header.Clone(), header.Get("Host")
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &Response{Code: resp.StatusCode, Header: resp.Header, Body: body, Closes: resp.Close}, nil
}

// Get returns the body of a GET of url; a transport error or a status other than 200 is
// an error.
func Get(ctx context.Context, c *http.Client, url string) (string, error) {
	r, err := Fetch(ctx, c, url, nil)
	if err != nil {
		return "", err
	}
	if r.Code != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d %s: %s", url, r.Code, http.StatusText(r.Code), r.Body)
	}
	return string(r.Body), nil
}
