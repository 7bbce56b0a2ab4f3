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
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/edgepool/edgepool/internal/test/testkit"
)

const bigObject = 4 << 20

// bigOrigin serves 4 MiB objects, which it declares fresh for an hour: the default
// CacheNode stores only what the origin declares fresh.
func bigOrigin(t testing.TB) *httptest.Server {
	t.Helper()
	body := bytes.Repeat([]byte("edgepool"), bigObject/8)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// saturate fills the cache with 16 large objects, then reads them with 64 concurrent
// clients, for at most 10 rounds, until done reports true.
func saturate(t testing.TB, base string, done func() bool) {
	t.Helper()
	const objects = 16
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	for i := range objects { // fill the cache, one request at a time
		if _, err := testkit.Get(context.Background(), client, fmt.Sprintf("%s/big/%d", base, i)); err != nil {
			t.Fatalf("fill object %d: %v", i, err)
		}
	}
	for round := 0; round < 10 && !done(); round++ {
		var wg sync.WaitGroup
		for c := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := client.Get(fmt.Sprintf("%s/big/%d", base, c%objects))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
	}
}

// TestQueueOverflowIsCounted saturates a one-thread pool with a one-task queue with
// concurrent reads of large cached objects: nginx logs queue overflows, the agent passes
// the lines through, counts them per pool, and reports them in /status.
func TestQueueOverflowIsCounted(t *testing.T) {
	spec := testSpec(t, originAddr(bigOrigin(t)), disk("hdd0", diskDir(t, "hdd0"), "HDD"))
	spec.Disks[0].ThreadPool.Threads = 1
	spec.Disks[0].ThreadPool.MaxQueue = ptr.To[int32](1)
	spec.SendfileMaxChunk = nil // one sendfile task per chunk; small chunks make more tasks
	spec.Default()
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec, "--allow-unmounted", "--overflow-window", "1m")
	agent.waitReady(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", spec.Listener.Port)

	overflowed := func() bool {
		return agent.metric("edgepool_thread_pool_queue_overflows_total", map[string]string{"pool": "pool_hdd0"}) > 0
	}
	saturate(t, base, overflowed)
	if !overflowed() {
		t.Fatal("no thread-pool queue overflow was counted")
	}
	st := agent.status(t)
	if len(st.Overflows) != 1 || st.Overflows[0].Pool != "pool_hdd0" || st.Overflows[0].Count < 1 {
		t.Errorf("/status overflows = %+v, want pool_hdd0 with a count", st.Overflows)
	}
	if st.WindowSeconds != 60 {
		t.Errorf("/status windowSeconds = %d, want 60", st.WindowSeconds)
	}
	eventually(t, 5*time.Second, "the overflow lines to pass through to the agent's stderr", func() bool {
		return strings.Contains(agent.log.String(), `thread pool "pool_hdd0" queue overflow:`)
	})
	t.Logf("overflows counted: %v", agent.metric("edgepool_thread_pool_queue_overflows_total", map[string]string{"pool": "pool_hdd0"}))
}
