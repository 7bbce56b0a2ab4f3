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

package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// requestSum sums a per-request metric over the samples whose labels include labels.
func (p *agentProc) requestSum(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	m, err := p.Metrics(context.Background())
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	return m.Sum(name, labels)
}

// fetchCacheStatus asks the cache on 127.0.0.1:port for path, with header's name/value
// pairs, reads the body and returns X-Cache-Status.
func fetchCacheStatus(t *testing.T, client *http.Client, port int32, path string, header ...string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
	for i := 0; i < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Header.Get("X-Cache-Status")
}

// TestRequestMetrics sends requests whose cache status and disk are known (the disk by
// where nginx stored the response): /metrics counts exactly those, per disk.
func TestRequestMetrics(t *testing.T) {
	srv, originHits := cacheableOrigin(t)
	spec := testSpec(t, originAddr(srv), disk("d0", diskDir(t, "d0"), "SSD"), disk("d1", diskDir(t, "d1"), "HDD"))
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec, "--allow-unmounted")
	agent.waitReady(t)

	before := agent.status(t)
	client := &http.Client{Timeout: 10 * time.Second}
	// Each request waits for the agent to count the one before: the socket queues 11
	// lines (net.unix.max_dgram_qlen) and drops the next, so requests sent faster than a
	// busy machine schedules the agent's reader would test the queue, not the counting
	// (TestStalledAgentNeverBlocksNginx tests the queue).
	sentSoFar := 0.0
	get := func(path string, header ...string) string {
		t.Helper()
		if sentSoFar > 0 {
			eventually(t, 10*time.Second, "the agent to count the last request", func() bool {
				return agent.requestSum(t, "edgepool_requests_total", nil) >= sentSoFar
			})
		}
		sentSoFar++
		return fetchCacheStatus(t, client, spec.Listener.Port, path, header...)
	}
	const objects = 12
	perDisk := map[string]float64{}
	for i := range objects {
		path := fmt.Sprintf("/obj/%d", i)
		for _, want := range []string{"MISS", "HIT"} {
			if got := get(path); got != want {
				t.Fatalf("%s: %s, want %s", path, got, want)
			}
		}
		// Requests with credentials go to the origin (the default policy).
		if got := get(path, "Authorization", "Bearer x"); got != "BYPASS" {
			t.Fatalf("%s with Authorization: %s, want BYPASS", path, got)
		}
		stored := ""
		for _, d := range spec.Disks {
			if _, err := os.Stat(cacheFile(d.Path, path)); err == nil {
				stored = d.Name
			}
		}
		if stored == "" {
			t.Fatalf("%s is on no disk", path)
		}
		perDisk[stored]++
	}
	if perDisk["d0"] == 0 || perDisk["d1"] == 0 {
		t.Fatalf("the split put every object on one disk: %v", perDisk)
	}
	const sent = 3 * objects
	eventually(t, 10*time.Second, "the agent to count every request", func() bool {
		return agent.requestSum(t, "edgepool_requests_total", nil) >= sent
	})

	m, err := agent.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"d0", "d1"} {
		for _, status := range []string{"MISS", "HIT", "BYPASS"} {
			labels := map[string]string{"cache_status": status, "disk": d, "status_class": "2xx"}
			if got := m.Sum("edgepool_requests_total", labels); got != perDisk[d] {
				t.Errorf("edgepool_requests_total%v = %v, want %v", labels, got, perDisk[d])
			}
			labels = map[string]string{"cache_status": status, "disk": d}
			if got := m.Sum("edgepool_request_duration_seconds", labels); got != perDisk[d] {
				t.Errorf("edgepool_request_duration_seconds%v observations = %v, want %v", labels, got, perDisk[d])
			}
			// Each response is the 8 KiB body and its headers.
			if got := m.Sum("edgepool_response_bytes_total", labels); got < perDisk[d]*8192 || got > perDisk[d]*(8192+1024) {
				t.Errorf("edgepool_response_bytes_total%v = %v for %v responses of 8 KiB", labels, got, perDisk[d])
			}
		}
	}
	if got := m.Sum("edgepool_requests_total", nil); got != sent {
		t.Errorf("edgepool_requests_total sums to %v, want %d", got, sent)
	}
	want := float64(originHits.Load())
	if got := m.Sum("edgepool_origin_responses_total", map[string]string{"status_class": "2xx"}); got != want || want != 2*objects {
		t.Errorf("edgepool_origin_responses_total{2xx} = %v; the origin answered %v requests, want %d", got, want, 2*objects)
	}
	if got := m.Sum("edgepool_origin_response_duration_seconds", nil); got != 2*objects {
		t.Errorf("edgepool_origin_response_duration_seconds has %v observations, want %d", got, 2*objects)
	}
	if got := m.Sum("edgepool_request_lines_dropped_total", nil); got != 0 {
		t.Errorf("%v lines dropped", got)
	}
	// The status the operator reads (and writes into the CacheNode when it changes) holds
	// no request counters: traffic alone never makes a status write.
	if after := agent.status(t); !reflect.DeepEqual(after, before) {
		t.Errorf("serving requests changed /status:\nbefore %+v\nafter  %+v", before, after)
	}
}

// TestStalledAgentNeverBlocksNginx stops the agent (SIGSTOP): nginx keeps serving, its
// lines the agent cannot take are dropped, and once the agent runs again it counts each
// request exactly once, as a request or as a dropped line. nginx's complaints about the
// dropped lines are neither taken for disk errors nor passed through one by one. Stopped
// for longer than its error stream's pipe holds, nginx still serves.
func TestStalledAgentNeverBlocksNginx(t *testing.T) {
	srv, _ := cacheableOrigin(t)
	spec := testSpec(t, originAddr(srv), disk("d0", diskDir(t, "d0"), "SSD"))
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec, "--allow-unmounted")
	agent.waitReady(t)

	client := &http.Client{Timeout: 10 * time.Second} // a blocked nginx fails the test here
	stalled := func(requests int) {
		t.Helper()
		if err := syscall.Kill(agent.Pid(), syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = syscall.Kill(agent.Pid(), syscall.SIGCONT) }()
		for i := range requests {
			if code, cache := fetch(client, spec.Listener.Port, fmt.Sprintf("/obj/%d", i%10)); code != http.StatusOK {
				t.Fatalf("request %d with the agent stopped: %d %s", i, code, cache)
			}
		}
	}
	const requests = 500 // nginx's complaints about them fit in the error stream's pipe
	stalled(requests)
	var counted, dropped float64
	eventually(t, 10*time.Second, "every request counted or dropped", func() bool {
		counted = agent.requestSum(t, "edgepool_requests_total", nil)
		dropped = agent.requestSum(t, "edgepool_request_lines_dropped_total", map[string]string{"reason": "send_failed"})
		return counted+dropped >= requests
	})
	t.Logf("%v requests counted, %v lines dropped", counted, dropped)
	if counted+dropped != requests || dropped == 0 {
		t.Errorf("%v requests counted and %v lines dropped, want %d in all, some dropped", counted, dropped, requests)
	}
	if v := agent.metric("edgepool_disk_errors_total", nil); v > 0 {
		t.Errorf("nginx's complaints counted as %v disk errors", v)
	}
	if st := agent.status(t); st.Disks[0].Out {
		t.Errorf("the disk was taken out: %s", st.Disks[0].OutReason)
	}
	if n := strings.Count(agent.log.String(), "to syslog"); n > 1 {
		t.Errorf("the agent passed %d of nginx's complaints about dropped lines through, want at most 1 a minute", n)
	}

	// About 200 bytes of complaint per request: more than the pipe's 1 MiB.
	stalled(6000)
	eventually(t, 10*time.Second, "the agent to read what nginx wrote while it was stopped", func() bool {
		now := agent.requestSum(t, "edgepool_request_lines_dropped_total", map[string]string{"reason": "send_failed"})
		return now > dropped
	})
	before := agent.requestSum(t, "edgepool_requests_total", nil)
	if code, _ := fetch(client, spec.Listener.Port, "/obj/0"); code != http.StatusOK {
		t.Fatal(code)
	}
	eventually(t, 10*time.Second, "the next request counted", func() bool {
		return agent.requestSum(t, "edgepool_requests_total", nil) == before+1
	})
}

// TestAccessLogJSON: with accessLogPercent, every request (100%) becomes a JSON line on the
// agent's standard output, what the client sent escaped; a sample of 1% logs few.
func TestAccessLogJSON(t *testing.T) {
	srv, _ := cacheableOrigin(t)
	spec := testSpec(t, originAddr(srv), disk("d0", diskDir(t, "d0"), "SSD"))
	spec.AccessLogPercent = 100
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec, "--allow-unmounted")
	agent.waitReady(t)

	client := &http.Client{Timeout: 10 * time.Second}
	// Sent raw: quotes and a backslash in the request line and a header.
	const odd, userAgent = `/obj/"quoted"\`, `agent "with" quotes é`
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", spec.Listener.Port))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: %s\r\nConnection: close\r\n\r\n", odd, userAgent)
	reply, _ := io.ReadAll(conn)
	conn.Close()
	if !strings.HasPrefix(string(reply), "HTTP/1.1 200") {
		t.Fatalf("raw request: %.100q", reply)
	}
	for range 2 {
		fetch(client, spec.Listener.Port, "/obj/plain")
	}
	type line struct {
		URI         string `json:"uri"`
		Status      int    `json:"status"`
		CacheStatus string `json:"cache_status"`
		Disk        string `json:"disk"`
		UserAgent   string `json:"user_agent"`
		BytesSent   int64  `json:"bytes_sent"`
	}
	var lines []line
	eventually(t, 10*time.Second, "three access log lines", func() bool {
		lines = nil
		for _, text := range strings.Split(agent.log.String(), "\n") {
			var l line
			if json.Unmarshal([]byte(text), &l) == nil && l.URI != "" {
				lines = append(lines, l)
			}
		}
		return len(lines) >= 3
	})
	if len(lines) != 3 {
		t.Fatalf("%d access log lines, want 3: %+v", len(lines), lines)
	}
	if l := lines[0]; l.URI != odd || l.UserAgent != userAgent || l.Status != 200 || l.CacheStatus != "MISS" || l.Disk != "d0" || l.BytesSent < 8192 {
		t.Errorf("first line %+v, want the odd request as sent, a MISS on d0", l)
	}
	if lines[1].CacheStatus != "MISS" || lines[2].CacheStatus != "HIT" {
		t.Errorf("cache statuses %s, %s, want MISS then HIT", lines[1].CacheStatus, lines[2].CacheStatus)
	}
	if v := agent.metric("edgepool_access_log_lines_dropped_total", nil); v != 0 {
		t.Errorf("%v access log lines dropped", v)
	}

	// 1%: of 300 requests, far fewer are logged (the draw is random, the bound loose).
	master := nginxMaster(t, agent.Pid())
	old := workerPIDs(t, master)
	spec.AccessLogPercent = 1
	cfg.writeSpec(t, spec)
	eventually(t, 20*time.Second, "the 1% configuration to be served", func() bool {
		return agent.status(t).ConfigHash == agentapi.Hash([]byte(renderConf(t, spec)))
	})
	client.CloseIdleConnections()
	waitSwitched(t, master, old) // the old workers log every request
	before := strings.Count(agent.log.String(), `"uri":`)
	for i := range 300 {
		fetch(client, spec.Listener.Port, fmt.Sprintf("/obj/%d", i))
	}
	eventually(t, 10*time.Second, "the 300 requests counted", func() bool {
		return agent.requestSum(t, "edgepool_requests_total", nil) >= 303
	})
	if logged := strings.Count(agent.log.String(), `"uri":`) - before; logged > 30 {
		t.Errorf("%d of 300 requests logged at 1%%", logged)
	}
}

// TestClientCannotForgeDiskErrors: nginx quotes what a client sent (its Referer) in the
// error lines about a failed origin. Lines made to look like a disk's failed reads, or a
// pool's overflow, count as neither: the disk stays in, no overflow is reported.
func TestClientCannotForgeDiskErrors(t *testing.T) {
	closed := refusingAddr(t) // every fill fails
	d0 := diskDir(t, "d0")
	spec := testSpec(t, closed, disk("d0", d0, "SSD"))
	spec.DiskFailover.IOErrors = 2
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec, "--allow-unmounted")
	agent.waitReady(t)

	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 10 {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/obj/%d", spec.Listener.Port, i), nil)
		req.Header.Set("Referer", fmt.Sprintf(`x pread() "%s/cache/a/bc/abc" failed (5: Input/output error) thread pool "pool_d0" queue overflow: 1 tasks waiting`, d0))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("request %d: %d, want 502 from the unreachable origin", i, resp.StatusCode)
		}
	}
	eventually(t, 10*time.Second, "nginx's error lines with the forged Referer", func() bool {
		return strings.Count(agent.log.String(), "referrer:") >= 10
	})
	if v := agent.metric("edgepool_disk_errors_total", nil); v != 0 {
		t.Errorf("edgepool_disk_errors_total = %v", v)
	}
	if v := agent.metric("edgepool_thread_pool_queue_overflows_total", nil); v != 0 {
		t.Errorf("edgepool_thread_pool_queue_overflows_total = %v", v)
	}
	st := agent.status(t)
	if st.Disks[0].Out || len(st.Overflows) > 0 {
		t.Errorf("/status: disk out %v (%s), overflows %v", st.Disks[0].Out, st.Disks[0].OutReason, st.Overflows)
	}
}
