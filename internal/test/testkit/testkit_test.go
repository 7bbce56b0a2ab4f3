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
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestProcessStop(t *testing.T) {
	p, err := Start(exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Errorf("a process ended by SIGTERM: Stop = %v, want nil", err)
	}

	// A shell that ignores SIGTERM, with a child in its group: both are killed.
	dir := t.TempDir()
	p, err = Start(exec.Command("sh", "-c", `trap "" TERM; sleep 60 & echo $! >`+dir+`/child; wait`))
	if err != nil {
		t.Fatal(err)
	}
	var child int
	ctx, cancel := WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Poll(ctx, 10*time.Millisecond, "the shell's child", func() error {
		b, err := os.ReadFile(filepath.Join(dir, "child"))
		if err != nil {
			return err
		}
		child, err = strconv.Atoi(strings.TrimSpace(string(b))) // empty until echo has written
		return err
	}); err != nil || child == 0 {
		t.Fatalf("%v (child %d)", err, child)
	}
	if err := p.Stop(200 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not stop") {
		t.Errorf("a process ignoring SIGTERM: Stop = %v, want an error", err)
	}
	if err := gone(child, 5*time.Second); err != nil {
		t.Errorf("the shell's child outlived Stop: %v", err)
	}

	p, err = Start(exec.Command("sh", "-c", "exit 3"))
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if err := p.Stop(time.Second); err == nil {
		t.Error("a process that failed: Stop = nil, want its exit status")
	}

	p, err = Start(exec.Command("sh", "-c", `trap "" TERM; sleep 60`))
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Kill: the process ended with %v, want killed", err)
	}
}

func TestProcessPoll(t *testing.T) {
	ctx := context.Background()
	p, err := Start(exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop(time.Second) }()
	calls := 0
	if err := p.Poll(ctx, time.Millisecond, "three calls", func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || calls != 3 {
		t.Errorf("Poll = %v after %d calls, want nil after 3", err, calls)
	}

	exiting, err := Start(exec.Command("true"))
	if err != nil {
		t.Fatal(err)
	}
	err = exiting.Poll(ctx, time.Millisecond, "never", func() error { return errors.New("never") })
	if err == nil || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "last error: never") {
		t.Errorf("Poll on a process that exits = %v, want an error saying it exited, with cond's last error", err)
	}
}

func TestEventually(t *testing.T) {
	calls := 0
	if err := Eventually(context.Background(), time.Millisecond, "three calls", func() error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil || calls != 3 {
		t.Errorf("Eventually = %v after %d calls, want nil after 3", err, calls)
	}
	ctx, cancel := WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	err := Eventually(ctx, time.Millisecond, "never", func() error { return errors.New("no") })
	if want := "waiting for never: timed out after 20ms (last error: no)"; err == nil || err.Error() != want {
		t.Errorf("Eventually past its timeout = %v, want %q", err, want)
	}
}

// gone waits until pid exited (or is a zombie).
func gone(pid int, timeout time.Duration) error {
	ctx, cancel := WithTimeout(context.Background(), timeout)
	defer cancel()
	return Eventually(ctx, 10*time.Millisecond, fmt.Sprintf("process %d to exit", pid), func() error {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if _, rest, ok := strings.Cut(string(stat), ") "); ok && strings.HasPrefix(rest, "Z") {
			return nil
		}
		return fmt.Errorf("it is %q", stat)
	})
}

func TestFetch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.Host+" "+r.Header.Get("X-Asked"))
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, "body")
	}))
	defer srv.Close()
	ctx := context.Background()
	r, err := Fetch(ctx, srv.Client(), srv.URL+"/x", http.Header{"Host": {"site.test"}, "X-Asked": {"yes"}})
	if err != nil || r.Code != http.StatusOK || string(r.Body) != "body" || r.Header.Get("X-Seen") != "site.test yes" {
		t.Errorf("Fetch = %+v, %v; want 200, the body, and the request's Host and header seen", r, err)
	}
	if r, err := Fetch(ctx, srv.Client(), srv.URL+"/missing", nil); err != nil || r.Code != http.StatusNotFound {
		t.Errorf("Fetch of a missing page = %+v, %v; want its 404 and no error", r, err)
	}
	if body, err := Get(ctx, srv.Client(), srv.URL+"/x"); err != nil || body != "body" {
		t.Errorf("Get = %q, %v", body, err)
	}
	if _, err := Get(ctx, srv.Client(), srv.URL+"/missing"); err == nil || !strings.Contains(err.Error(), "404 Not Found") {
		t.Errorf("Get of a missing page: %v, want an error naming the 404", err)
	}
}

func TestBuffer(t *testing.T) {
	b := &Buffer{Max: 4}
	for _, s := range []string{"ab", "cd", "ef"} {
		_, _ = b.Write([]byte(s))
	}
	if got := b.String(); got != "cdef" {
		t.Errorf("Buffer{Max: 4} = %q, want the last 4 bytes %q", got, "cdef")
	}
	all := &Buffer{}
	_, _ = all.Write([]byte("abcdef"))
	if got := all.String(); got != "abcdef" {
		t.Errorf("Buffer{} = %q, want everything", got)
	}
	var logged []any
	w := LogWriter(func(args ...any) { logged = append(logged, args...) })
	_, _ = w.Write([]byte("one line\n"))
	if len(logged) != 1 || logged[0] != "one line" {
		t.Errorf("LogWriter logged %q", logged)
	}
}

func TestMetrics(t *testing.T) {
	m, err := ParseMetrics(`# TYPE controller_runtime_reconcile_total counter
controller_runtime_reconcile_total{controller="cachenode",result="success"} 7
controller_runtime_reconcile_total{controller="cachenode",result="error"} 1
controller_runtime_reconcile_total{controller="other",result="success"} 100
# TYPE workqueue_depth gauge
workqueue_depth{controller="cachenode",name="cachenode"} 2
edgepool_config_reloads_total 3
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"controller_runtime_reconcile_total", map[string]string{"controller": "cachenode"}, 8},
		{"controller_runtime_reconcile_total", map[string]string{"controller": "cachenode", "result": "error"}, 1},
		{"controller_runtime_reconcile_total", nil, 108},
		{"controller_runtime_reconcile_total", map[string]string{"code": "409"}, 0}, // no such label
		{"workqueue_depth", map[string]string{"controller": "cachenode"}, 2},
		{"edgepool_config_reloads_total", nil, 3},
		{"absent", nil, 0},
	} {
		if got := m.Sum(tc.name, tc.match); got != tc.want {
			t.Errorf("Sum(%s, %v) = %v, want %v", tc.name, tc.match, got, tc.want)
		}
	}
	if v, ok := m.Find("workqueue_depth", map[string]string{"name": "cachenode"}); !ok || v != 2 {
		t.Errorf("Find(workqueue_depth) = %v, %v; want 2, true", v, ok)
	}
	if _, ok := m.Find("workqueue_depth", map[string]string{"name": "other"}); ok {
		t.Error("Find of a sample that is not there: found")
	}
	results := map[string]float64{}
	m.Each("controller_runtime_reconcile_total", func(l map[string]string, v float64) { results[l["controller"]+"/"+l["result"]] = v })
	if len(results) != 3 || results["other/success"] != 100 {
		t.Errorf("Each saw %v", results)
	}
	if _, err := ParseMetrics("broken{a=\"1\" 3\n"); err == nil {
		t.Error("ParseMetrics of a broken line: want an error")
	}
}

func TestPercentile(t *testing.T) {
	ds := []time.Duration{10, 9, 8, 7, 6, 5, 4, 3, 2, 1} // unsorted on purpose
	for p, want := range map[float64]time.Duration{1: 1, 50: 5, 90: 9, 99: 10, 100: 10} {
		if got := Percentile(ds, p); got != want {
			t.Errorf("Percentile(1..10, %v) = %v, want %v", p, got, want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile(nil) = %v, want 0", got)
	}
	if got := Millis(1500 * time.Microsecond); got != 1.5 {
		t.Errorf("Millis(1.5ms) = %v", got)
	}
}

func TestConfigDir(t *testing.T) {
	c := &ConfigDir{Dir: t.TempDir()}
	for _, conf := range []string{"one", "two"} {
		if err := c.Write(map[string][]byte{"nginx.conf": []byte(conf), "agent.json": []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(c.Dir, "nginx.conf")
	if b, err := os.ReadFile(file); err != nil || string(b) != "two" {
		t.Errorf("nginx.conf = %q, %v; want the last version", b, err)
	}
	for _, name := range []string{"nginx.conf", "agent.json"} {
		if link, _ := os.Readlink(filepath.Join(c.Dir, name)); link != filepath.Join("..data", name) {
			t.Errorf("%s links to %q, want ..data/%s, as in a ConfigMap volume", name, link, name)
		}
	}
	if versions, _ := filepath.Glob(filepath.Join(c.Dir, "..v*")); len(versions) != 1 {
		t.Errorf("versions left: %v, want only the last", versions)
	}
}

// TestFreePortNeverRepeats: a port handed out is not handed out again, so the ports of
// one configuration differ even when the kernel offers a port just freed twice.
func TestFreePortNeverRepeats(t *testing.T) {
	s := &portSet{ports: map[int32]bool{}}
	if !s.claim(8080) || s.claim(8080) || !s.claim(8081) {
		t.Error("claim: a port was handed out twice, or a new one refused")
	}
	seen := map[int32]bool{}
	for range 200 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[port] {
			t.Fatalf("FreePort returned %d twice", port)
		}
		seen[port] = true
	}
}
