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
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/testkit"
)

// origin answers every request with its name.
func origin(t testing.TB, name string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, name)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func originAddr(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }

func diskDir(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(sharedDir(t), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil { // past the umask
		t.Fatal(err)
	}
	return dir
}

// TestReloadUnderLoad applies 10 configuration changes while clients keep sending
// requests through nginx: no request fails, and each new configuration is served.
func TestReloadUnderLoad(t *testing.T) {
	// An origin per configuration, so that a response tells which one served it: a
	// worker of an older configuration that still accepts cannot pass for the new one.
	const changes = 10
	var origins []string
	for i := range changes + 1 {
		origins = append(origins, originAddr(origin(t, fmt.Sprint(i))))
	}
	spec := testSpec(t, origins[0], disk("d0", diskDir(t, "d0"), "SSD"))
	cfg := newConfigDir(t)
	cfg.write(t, renderConf(t, spec))
	agent := startAgent(t, cfg, spec, "--allow-unmounted")
	agent.waitReady(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", spec.Listener.Port)

	// Load: keep-alive clients requesting new objects (cache misses go to the origin).
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := testkit.Get(context.Background(), client, fmt.Sprintf("%s/load/%d/%d", base, g, n)); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				} else {
					ok.Add(1)
				}
			}
		}()
	}

	probe := &http.Client{Timeout: 10 * time.Second}
	var latencies []time.Duration
	for i := range changes {
		want := fmt.Sprint(i + 1)
		spec.Origin.Servers = []string{origins[i+1]}
		start := time.Now()
		cfg.write(t, renderConf(t, spec))
		for n := 0; ; n++ {
			if body, err := testkit.Get(context.Background(), probe, fmt.Sprintf("%s/probe/%d/%d", base, i, n)); err == nil && body == want {
				break
			}
			if time.Since(start) > 15*time.Second {
				t.Fatalf("change %d: origin %s not served within 15s", i+1, want)
			}
			time.Sleep(2 * time.Millisecond)
		}
		latencies = append(latencies, time.Since(start))
		time.Sleep(100 * time.Millisecond) // let load run on the new configuration
	}
	close(stop)
	wg.Wait()

	slices.Sort(latencies)
	t.Logf("%d reloads under load: %d requests ok, %d failed; change written -> new config serving: p50 %s, max %s (includes the agent's 100ms debounce)",
		changes, ok.Load(), failed.Load(), latencies[len(latencies)/2].Round(time.Millisecond), latencies[len(latencies)-1].Round(time.Millisecond))
	if failed.Load() != 0 {
		t.Errorf("%d requests failed during reloads, first: %v", failed.Load(), firstErr.Load())
	}
	if strings.Contains(agent.log.String(), "NGINX environment variable") {
		t.Error("the agent's NGINX environment variable reached nginx")
	}
	if ok.Load() < 100 {
		t.Errorf("only %d requests were sent: the load did not run", ok.Load())
	}
	// The agent counts a reload just after signalling nginx, which may be a moment
	// after the new workers answer.
	eventually(t, 5*time.Second, "every reload to be counted", func() bool {
		return agent.metric("edgepool_config_reloads_total", nil) == changes
	})
	st := agent.status(t)
	if st.ConfigHash != render.Hash(renderConf(t, spec)) {
		t.Errorf("/status configHash %s is not the last configuration's", st.ConfigHash)
	}
	somaxconn, err := os.ReadFile("/proc/sys/net/core/somaxconn")
	if err != nil {
		t.Fatal(err)
	}
	if st.Backlog != int(spec.Listener.Backlog) || fmt.Sprint(st.Somaxconn) != strings.TrimSpace(string(somaxconn)) {
		t.Errorf("/status backlog %d, somaxconn %d; want %d and the kernel's %s", st.Backlog, st.Somaxconn, spec.Listener.Backlog, somaxconn)
	}
	for _, sample := range []struct {
		name   string
		labels map[string]string
	}{
		{"edgepool_nginx_up", nil}, {"edgepool_listen_backlog", nil}, {"edgepool_net_core_somaxconn", nil},
		{"edgepool_disk_ready", map[string]string{"disk": "d0", "path": spec.Disks[0].Path}},
		{"edgepool_disk_used_bytes", map[string]string{"disk": "d0"}},
		{"edgepool_config_info", map[string]string{"hash": st.ConfigHash}},
	} {
		if v := agent.metric(sample.name, sample.labels); v <= 0 {
			t.Errorf("metric %s%v = %v, want > 0", sample.name, sample.labels, v)
		}
	}
	if v := agent.metric("edgepool_nginx_http_requests_total", nil); v < float64(ok.Load()) {
		t.Errorf("edgepool_nginx_http_requests_total = %v, want at least the %d requests sent", v, ok.Load())
	}
}

// TestBadConfigKeepsServing: a configuration that fails nginx -t is rejected, the last
// good one keeps serving, and the failure shows in metrics and /status.
func TestBadConfigKeepsServing(t *testing.T) {
	origins := []string{originAddr(origin(t, "A")), originAddr(origin(t, "B"))}
	spec := testSpec(t, origins[0], disk("d0", diskDir(t, "d0"), "SSD"))
	cfg := newConfigDir(t)
	good := renderConf(t, spec)
	cfg.write(t, good)
	agent := startAgent(t, cfg, spec, "--allow-unmounted")
	agent.waitReady(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", spec.Listener.Port)
	client := &http.Client{Timeout: 5 * time.Second}

	spec.Origin.Servers = []string{origins[1]}
	bad := renderConf(t, spec) + "no_such_directive on;\n"
	cfg.write(t, bad)
	eventually(t, 10*time.Second, "the failed reload to be counted", func() bool {
		return agent.metric("edgepool_config_reloads_failed_total", nil) == 1
	})
	if got := agent.metric("edgepool_config_last_reload_successful", nil); got != 0 {
		t.Errorf("edgepool_config_last_reload_successful = %v, want 0", got)
	}
	st := agent.status(t)
	if !strings.Contains(st.ConfigError, `unknown directive "no_such_directive"`) {
		t.Errorf("/status configError = %q, want nginx -t's message", st.ConfigError)
	}
	if st.ConfigHash != render.Hash(good) {
		t.Errorf("/status configHash changed to a rejected configuration")
	}
	if body, err := testkit.Get(context.Background(), client, base+"/after-bad"); err != nil || body != "A" {
		t.Errorf("after the bad configuration got %q, %v; want the last good one (origin A)", body, err)
	}
	if code, _ := agent.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d: a rejected configuration must not take a serving cache out", code)
	}

	fixed := renderConf(t, spec)
	cfg.write(t, fixed)
	eventually(t, 10*time.Second, "the fixed configuration to be served", func() bool {
		body, err := testkit.Get(context.Background(), client, fmt.Sprintf("%s/after-fix/%d", base, time.Now().UnixNano()))
		return err == nil && body == "B"
	})
	if got := agent.metric("edgepool_config_last_reload_successful", nil); got != 1 {
		t.Errorf("edgepool_config_last_reload_successful = %v after a good reload, want 1", got)
	}
	if st := agent.status(t); st.ConfigError != "" || st.ConfigHash != render.Hash(fixed) {
		t.Errorf("/status after the fix: error %q, hash %s", st.ConfigError, st.ConfigHash)
	}
}
