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
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/testkit"
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

// TestBadConfigKeepsServing: a configuration that fails nginx -t is rejected, the last
// good one keeps serving, and the failure shows in metrics and /status.
func TestBadConfigKeepsServing(t *testing.T) {
	origins := []string{originAddr(origin(t, "A")), originAddr(origin(t, "B"))}
	spec := testSpec(t, origins[0], disk("d0", diskDir(t, "d0"), "SSD"))
	cfg := newConfigDir(t)
	good := renderConf(t, spec)
	cfg.write(t, spec, good)
	agent := startAgent(t, cfg, spec, "--allow-unmounted")
	agent.waitReady(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", spec.Listener.Port)
	client := &http.Client{Timeout: 5 * time.Second}

	spec.Origin.Servers = []string{origins[1]}
	bad := renderConf(t, spec) + "no_such_directive on;\n"
	cfg.write(t, spec, bad)
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
	if st.ConfigHash != agentapi.Hash([]byte(good)) {
		t.Errorf("/status configHash changed to a rejected configuration")
	}
	if body, err := testkit.Get(context.Background(), client, base+"/after-bad"); err != nil || body != "A" {
		t.Errorf("after the bad configuration got %q, %v; want the last good one (origin A)", body, err)
	}
	if code, _ := agent.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d: a rejected configuration must not take a serving cache out", code)
	}

	fixed := renderConf(t, spec)
	cfg.write(t, spec, fixed)
	eventually(t, 10*time.Second, "the fixed configuration to be served", func() bool {
		body, err := testkit.Get(context.Background(), client, fmt.Sprintf("%s/after-fix/%d", base, time.Now().UnixNano()))
		return err == nil && body == "B"
	})
	if got := agent.metric("edgepool_config_last_reload_successful", nil); got != 1 {
		t.Errorf("edgepool_config_last_reload_successful = %v after a good reload, want 1", got)
	}
	if st := agent.status(t); st.ConfigError != "" || st.ConfigHash != agentapi.Hash([]byte(fixed)) {
		t.Errorf("/status after the fix: error %q, hash %s", st.ConfigError, st.ConfigHash)
	}
}

// TestOnlyTheAnnouncedConfigurationRuns: with the pod's announcement projected (the
// operator's annotation on the pod, which a namespace editor may not write), the agent
// starts nginx only on the ConfigMap announced, and a ConfigMap edited around the
// operator (an origin of the editor's choosing) never runs: the last announced one keeps
// serving, and /status says why once the mismatch outlasts the grace.
func TestOnlyTheAnnouncedConfigurationRuns(t *testing.T) {
	origins := []string{originAddr(origin(t, "A")), originAddr(origin(t, "editor's")), originAddr(origin(t, "B"))}
	spec := testSpec(t, origins[0], disk("d0", diskDir(t, "d0"), "SSD"))
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	announced := filepath.Join(sharedDir(t), agentapi.AnnouncedHashFile)
	announce := func(hash string) {
		t.Helper()
		if err := os.WriteFile(announced, []byte(hash), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	announce("") // the annotation is not on the pod yet
	agent := startAgent(t, cfg, spec, "--allow-unmounted", "--announced-config-hash-file", announced, "--announce-grace", "1s")
	eventually(t, 10*time.Second, "/status to say nothing is announced", func() bool {
		st, err := agent.Status(context.Background())
		return err == nil && strings.Contains(st.ConfigError, "nothing is announced yet")
	})
	if code, _ := agent.get("/readyz"); code == http.StatusOK {
		t.Fatalf("/readyz = 200 before any configuration was announced")
	}
	announce(cfg.VolumeHash())
	agent.waitReady(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", spec.Listener.Port)
	client := &http.Client{Timeout: 5 * time.Second}
	if body, err := testkit.Get(context.Background(), client, base+"/first"); err != nil || body != "A" {
		t.Fatalf("got %q, %v; want origin A", body, err)
	}
	runs := agentapi.Hash([]byte(renderConf(t, spec)))

	edited := *spec
	edited.Origin.Servers = []string{origins[1]}
	cfg.writeSpec(t, &edited)
	eventually(t, 10*time.Second, "/status to report the unannounced ConfigMap", func() bool {
		return strings.Contains(agent.status(t).ConfigError, "not the one the operator announced")
	})
	if body, err := testkit.Get(context.Background(), client, base+"/after-edit"); err != nil || body != "A" {
		t.Errorf("after the edit got %q, %v; want the announced configuration's origin A", body, err)
	}
	if st := agent.status(t); st.ConfigHash != runs {
		t.Errorf("/status configHash %.12s, want the announced %.12s", st.ConfigHash, runs)
	}
	if code, _ := agent.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d: an unannounced ConfigMap must not take a serving cache out", code)
	}

	spec.Origin.Servers = []string{origins[2]}
	cfg.writeSpec(t, spec)
	announce(cfg.VolumeHash())
	eventually(t, 10*time.Second, "the announced configuration to be served", func() bool {
		body, err := testkit.Get(context.Background(), client, fmt.Sprintf("%s/announced/%d", base, time.Now().UnixNano()))
		return err == nil && body == "B"
	})
	if st := agent.status(t); st.ConfigError != "" || st.ConfigHash != agentapi.Hash([]byte(renderConf(t, spec))) {
		t.Errorf("/status after the announcement: error %q, hash %.12s", st.ConfigError, st.ConfigHash)
	}
}

// TestResyncReadsAMissedChange: a change whose file events never lead to a reload (here
// the debounce outlasts the test) is still installed by the periodic resync.
func TestResyncReadsAMissedChange(t *testing.T) {
	origins := []string{originAddr(origin(t, "A")), originAddr(origin(t, "B"))}
	spec := testSpec(t, origins[0], disk("d0", diskDir(t, "d0"), "SSD"))
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec, "--allow-unmounted", "--debounce", "1h", "--resync", "1s")
	agent.waitReady(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", spec.Listener.Port)
	client := &http.Client{Timeout: 5 * time.Second}

	spec.Origin.Servers = []string{origins[1]}
	cfg.writeSpec(t, spec)
	eventually(t, 10*time.Second, "the resync to install the change", func() bool {
		body, err := testkit.Get(context.Background(), client, fmt.Sprintf("%s/after-resync/%d", base, time.Now().UnixNano()))
		return err == nil && body == "B"
	})
	if st := agent.status(t); st.ConfigHash != agentapi.Hash([]byte(renderConf(t, spec))) {
		t.Errorf("/status configHash %s is not the resynced configuration's", st.ConfigHash)
	}
}

// TestReloadKeepsRequestsWaitingOnTheDisk: configuration changes while clients, each
// request on a new connection, read cached objects from a disk that answers every read
// 20ms late: each request waits on its disk's thread pool with no timer pending. nginx
// before 1.25.4 let an old worker leave at that moment, dropping the connection ("open
// socket #N left in connection M"; images/cache/packages.txt); the nginx edgepool ships
// waits for it. No request fails, and nginx logs no such alert.
func TestReloadKeepsRequestsWaitingOnTheDisk(t *testing.T) {
	const objects, changes = 200, 10
	srv, _ := cacheableOrigin(t)
	slow := faultFS(t, "d0")
	spec := testSpec(t, originAddr(srv), disk("d0", slow.Dir, "SSD"))
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec)
	t.Cleanup(func() { slow.Delay(0) }) // before the agent stops
	agent.waitReady(t)
	warm(t, spec.Listener.Port, objects, slow.Dir)
	slow.Delay(20 * time.Millisecond)

	var ok, failed atomic.Int64
	var errs testkit.Buffer
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 16 {
		wg.Go(func() {
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
			for i := c; ; i += 16 {
				select {
				case <-stop:
					return
				default:
				}
				if code, cache, _ := testkit.FetchObject(client, spec.Listener.Port, fmt.Sprintf("/obj/%d", i%objects)); code != http.StatusOK || cache != "HIT" {
					failed.Add(1)
					fmt.Fprintf(&errs, "/obj/%d: %d %s\n", i%objects, code, cache)
					continue
				}
				ok.Add(1)
			}
		})
	}
	master := nginxMaster(t, agent.Pid())
	for i := range changes {
		old := workerPIDs(t, master)
		spec.Origin.Keepalive = ptr.To(int32(8 + i%2)) // a new nginx.conf, the same caches
		cfg.writeSpec(t, spec)
		waitSwitched(t, master, old)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d configuration changes, %d requests (new connections, cache HITs 20ms late): %d failed", changes, ok.Load()+failed.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Errorf("%d requests failed:\n%s", failed.Load(), errs.String())
	}
	if ok.Load() < 100 {
		t.Errorf("only %d requests succeeded: the load did not run", ok.Load())
	}
	if n := strings.Count(agent.log.String(), "left in connection"); n > 0 {
		t.Errorf("nginx dropped %d connections as old workers left", n)
	}
}
