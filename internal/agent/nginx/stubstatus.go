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

package nginx

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/edgepool/edgepool/internal/nginxconf"
)

// StubStatus is nginx's stub_status page: its connections and requests.
type StubStatus struct {
	Active, Accepts, Handled, Requests, Reading, Writing, Waiting int64
}

var stubClient = &http.Client{Timeout: 2 * time.Second}

// FetchStubStatus asks nginx's stub_status on the loopback status port: an answer says
// nginx has bound its listeners and its workers accept connections.
func FetchStubStatus(port int) (StubStatus, error) {
	if port == 0 {
		return StubStatus{}, fmt.Errorf("no status port")
	}
	resp, err := stubClient.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, nginxconf.StubStatusPath))
	if err != nil {
		return StubStatus{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return StubStatus{}, fmt.Errorf("stub_status: %s", resp.Status)
	}
	return parseStubStatus(io.LimitReader(resp.Body, 4096))
}

// parseStubStatus reads nginx's stub_status page:
//
//	Active connections: 2
//	server accepts handled requests
//	 10 10 31
//	Reading: 0 Writing: 1 Waiting: 1
func parseStubStatus(r io.Reader) (StubStatus, error) {
	var s StubStatus
	var lines []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		lines = append(lines, strings.TrimSpace(sc.Text()))
	}
	if len(lines) < 4 {
		return s, fmt.Errorf("stub_status: want 4 lines, got %d", len(lines))
	}
	if _, err := fmt.Sscanf(lines[0], "Active connections: %d", &s.Active); err != nil {
		return s, fmt.Errorf("stub_status line 1: %w", err)
	}
	if _, err := fmt.Sscanf(lines[2], "%d %d %d", &s.Accepts, &s.Handled, &s.Requests); err != nil {
		return s, fmt.Errorf("stub_status line 3: %w", err)
	}
	if _, err := fmt.Sscanf(lines[3], "Reading: %d Writing: %d Waiting: %d", &s.Reading, &s.Writing, &s.Waiting); err != nil {
		return s, fmt.Errorf("stub_status line 4: %w", err)
	}
	return s, nil
}
