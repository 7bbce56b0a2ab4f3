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
// clients, for at most 10 rounds, until done reports true. Each concurrent response goes
// to seen: its status (0 if the request failed), X-Cache-Status (or the error) and the
// body's length.
func saturate(t testing.TB, port int32, done func() bool, seen func(code int, cache string, n int64)) {
	t.Helper()
	const objects = 16
	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	for i := range objects { // fill the cache, one request at a time
		if _, err := testkit.Get(context.Background(), client, fmt.Sprintf("http://127.0.0.1:%d/big/%d", port, i)); err != nil {
			t.Fatalf("fill object %d: %v", i, err)
		}
	}
	for round := 0; round < 10 && !done(); round++ {
		var wg sync.WaitGroup
		for c := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				seen(testkit.FetchObject(client, port, fmt.Sprintf("/big/%d", c%objects)))
			}()
		}
		wg.Wait()
	}
}

// TestQueueOverflowIsCounted reads large cached objects through a pool with no queue
// (maxQueue 0: nginx fails every read of a cached header, and the origin answers): nginx
// logs queue overflows, the agent passes the lines through, counts them per pool, and
// reports them in /status.
func TestQueueOverflowIsCounted(t *testing.T) {
	spec := testSpec(t, originAddr(bigOrigin(t)), disk("hdd0", diskDir(t, "hdd0"), "HDD"))
	spec.Disks[0].ThreadPool.Threads = 1
	spec.Disks[0].ThreadPool.MaxQueue = ptr.To[int32](0)
	spec.SendfileMaxChunk = nil // one sendfile task per chunk; small chunks make more tasks
	spec.Default()
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec, "--allow-unmounted", "--overflow-window", "1m")
	agent.waitReady(t)

	overflowed := func() bool {
		return agent.metric("edgepool_thread_pool_queue_overflows_total", map[string]string{"pool": "pool_hdd0"}) > 0
	}
	saturate(t, spec.Listener.Port, overflowed, func(int, string, int64) {})
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

// TestQueueOverflowNeverCutsAResponse saturates a one-thread pool with a one-task queue:
// a read that overflows its queue is the read of a cached header, before the response
// starts, and the origin answers it (FALLBACK, an overflow counted); the reads of a
// response under way wait in the disk's io pool, which never overflows. Every response is
// whole, and none is an error.
func TestQueueOverflowNeverCutsAResponse(t *testing.T) {
	spec := testSpec(t, originAddr(bigOrigin(t)), disk("hdd0", diskDir(t, "hdd0"), "HDD"))
	spec.Disks[0].ThreadPool.Threads = 1
	spec.Disks[0].ThreadPool.MaxQueue = ptr.To[int32](1)
	spec.SendfileMaxChunk = nil
	spec.Default()
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec, "--allow-unmounted")
	agent.waitReady(t)

	var mu sync.Mutex
	statuses := map[string]int{}
	seen := func(code int, cache string, n int64) {
		mu.Lock()
		defer mu.Unlock()
		if code != http.StatusOK || n != bigObject || (cache != "HIT" && cache != "FALLBACK") {
			t.Errorf("a response under saturation: %d %q, %d of %d bytes; want a whole 200, HIT or FALLBACK", code, cache, n, bigObject)
		}
		statuses[cache]++
	}
	both := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return statuses["FALLBACK"] > 0 && statuses["HIT"] > 0
	}
	saturate(t, spec.Listener.Port, both, seen)
	t.Logf("responses by cache status: %v", statuses)
	if !both() {
		t.Fatal("the test saw no fallback (no read overflowed its queue) or no HIT (no body read beside them)")
	}
	// Each overflow (nginx's error stream, which the agent reads whole) is a header read
	// the origin answered: one FALLBACK a client saw. The fallbacks metric comes from the
	// request lines, datagrams that a loaded machine may drop: it is only checked to move.
	overflows := func() float64 {
		return agent.metric("edgepool_thread_pool_queue_overflows_total", map[string]string{"pool": "pool_hdd0"})
	}
	defer func() {
		if t.Failed() {
			t.Logf("the agent counted %v overflows", overflows())
		}
	}()
	eventually(t, 5*time.Second, "the agent to count an overflow per fallback", func() bool {
		return overflows() == float64(statuses["FALLBACK"])
	})
	if n := agent.metric("edgepool_fallbacks_total", map[string]string{"reason": "cache_error"}); n <= 0 {
		t.Errorf("edgepool_fallbacks_total{reason=cache_error} = %v after %d fallbacks", n, statuses["FALLBACK"])
	}
	if n := agent.metric("edgepool_thread_pool_queue_overflows_total", map[string]string{"pool": "pool_hdd0_io"}); n > 0 {
		t.Errorf("the io pool overflowed %v times", n)
	}
}
