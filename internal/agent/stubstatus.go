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
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// A client of nginx's stub_status, on the loopback status port.

type stubStatus struct {
	active, accepts, handled, requests, reading, writing, waiting int64
}

var stubClient = &http.Client{Timeout: 2 * time.Second}

func fetchStubStatus(port int) (stubStatus, error) {
	if port == 0 {
		return stubStatus{}, fmt.Errorf("no status port")
	}
	resp, err := stubClient.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, agentapi.StubStatusPath))
	if err != nil {
		return stubStatus{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return stubStatus{}, fmt.Errorf("stub_status: %s", resp.Status)
	}
	return parseStubStatus(io.LimitReader(resp.Body, 4096))
}

// parseStubStatus reads nginx's stub_status page:
//
//	Active connections: 2
//	server accepts handled requests
//	 10 10 31
//	Reading: 0 Writing: 1 Waiting: 1
func parseStubStatus(r io.Reader) (stubStatus, error) {
	var s stubStatus
	var lines []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		lines = append(lines, strings.TrimSpace(sc.Text()))
	}
	if len(lines) < 4 {
		return s, fmt.Errorf("stub_status: want 4 lines, got %d", len(lines))
	}
	if _, err := fmt.Sscanf(lines[0], "Active connections: %d", &s.active); err != nil {
		return s, fmt.Errorf("stub_status line 1: %w", err)
	}
	if _, err := fmt.Sscanf(lines[2], "%d %d %d", &s.accepts, &s.handled, &s.requests); err != nil {
		return s, fmt.Errorf("stub_status line 3: %w", err)
	}
	if _, err := fmt.Sscanf(lines[3], "Reading: %d Writing: %d Waiting: %d", &s.reading, &s.writing, &s.waiting); err != nil {
		return s, fmt.Errorf("stub_status line 4: %w", err)
	}
	return s, nil
}
