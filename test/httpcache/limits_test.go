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

package httpcache_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// from is a client of c whose connections come from the loopback address addr, one per
// request: with reuseport, the kernel hands each to either worker.
func (c *cacheNode) from(addr string) *http.Client {
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: dialer.DialContext, DisableKeepAlives: true, DisableCompression: true}}
}

// codes sends n requests for path through client, one after the other, with the header
// fields (key, value, ...), and counts their statuses.
func (c *cacheNode) codes(t testing.TB, client *http.Client, path string, n int, fields ...string) map[int]int {
	t.Helper()
	codes := map[int]int{}
	for range n {
		r, err := testkit.Fetch(context.Background(), client, c.base+path, header(fields...))
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		codes[r.Code]++
	}
	return codes
}

// TestClientOverItsRateGets429: a client over its rate and burst is answered 429 while
// another client is served; the table is nginx's shared memory, so the two workers the
// requests land on count together; each refusal is counted for the agent's metrics.
func TestClientOverItsRateGets429(t *testing.T) {
	o := startOrigin(t)
	const path = "/limited"
	o.respond(path, http.StatusOK, header("Cache-Control", "public, max-age=600"))
	const rate, burst = 1, 5
	c := startCacheSpec(t, o, func(spec *v1alpha1.CacheNodeSpec) {
		spec.Listener.WorkerProcesses = ptr.To(intstr.FromInt32(2))
		spec.ClientLimits = &v1alpha1.ClientLimits{RequestsPerSecond: rate, Burst: burst}
	})
	start := time.Now()
	greedy := c.codes(t, c.from("127.0.0.2"), path, 40)
	// Two workers with a table each would serve up to twice the burst.
	allowed := 1 + burst + int(time.Since(start).Seconds()*rate)
	if greedy[http.StatusOK] < burst || greedy[http.StatusOK] > allowed || greedy[http.StatusOK]+greedy[http.StatusTooManyRequests] != 40 {
		t.Errorf("a client's 40 requests at once: %v; want from %d to %d served, the others 429", greedy, burst, allowed)
	}
	if other := c.codes(t, c.from("127.0.0.3"), path, burst); other[http.StatusOK] != burst {
		t.Errorf("another client's %d requests: %v, want all served", burst, other)
	}
	// Each refusal is counted from its line, but for the lines nginx could not send in the
	// burst (it logs each): the count is the 429s, less at most those.
	refused := float64(greedy[http.StatusTooManyRequests])
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := c.counts(t, "edgepool_client_limited_total", "limit")["rate"]
		if got == refused {
			break
		}
		if time.Now().After(deadline) {
			if dropped := c.droppedLines(); got > refused || got < refused-float64(dropped) {
				t.Errorf("edgepool_client_limited_total{limit=rate} = %v, want %v (nginx dropped %d lines)", got, refused, dropped)
			} else {
				t.Logf("%v of %v refusals counted: nginx dropped %d lines in the burst", got, refused, dropped)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClientLimitsNameTheClientAsTheTrustedProxiesDo: behind a trusted proxy, each client
// it forwards has its own limit; a client that is not a trusted proxy cannot dodge its
// limit by writing X-Forwarded-For.
func TestClientLimitsNameTheClientAsTheTrustedProxiesDo(t *testing.T) {
	o := startOrigin(t)
	const path = "/limited"
	o.respond(path, http.StatusOK, header("Cache-Control", "public, max-age=600"))
	c := startCacheSpec(t, o, func(spec *v1alpha1.CacheNodeSpec) {
		spec.Listener.TrustedProxies = []string{"127.0.0.2/32"}
		spec.ClientLimits = &v1alpha1.ClientLimits{RequestsPerSecond: 1, Burst: 2}
	})
	proxy := c.from("127.0.0.2")
	for _, client := range []string{"198.51.100.1", "198.51.100.2"} {
		if got := c.codes(t, proxy, path, 3, "X-Forwarded-For", client); got[http.StatusOK] != 3 {
			t.Errorf("3 requests of %s through the trusted proxy: %v, want all served", client, got)
		}
	}
	var forged map[int]int
	untrusted := c.from("127.0.0.3")
	for i, client := range []string{"198.51.100.3", "198.51.100.4", "198.51.100.5", "198.51.100.6", "198.51.100.7", "198.51.100.8"} {
		got := c.codes(t, untrusted, path, 1, "X-Forwarded-For", client)
		if i == 0 {
			forged = got
			continue
		}
		for code, n := range got {
			forged[code] += n
		}
	}
	if forged[http.StatusTooManyRequests] < 3 {
		t.Errorf("6 requests of an untrusted client, each with another X-Forwarded-For: %v, want 3 or more refused", forged)
	}
}

// TestConcurrentRequestsOverTheLimitGet429: a client with more requests under way than
// concurrentRequests is refused the extra ones; the others are served.
func TestConcurrentRequestsOverTheLimitGet429(t *testing.T) {
	o := startOrigin(t)
	const path = "/limited"
	release := make(chan struct{})
	o.handle(path, func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("slow"))
	})
	c := startCacheSpec(t, o, func(spec *v1alpha1.CacheNodeSpec) {
		spec.Listener.WorkerProcesses = ptr.To(intstr.FromInt32(2))
		spec.ClientLimits = &v1alpha1.ClientLimits{ConcurrentRequests: 2}
	})
	client := c.from("127.0.0.2")
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			got := c.codes(t, client, path, 1)
			mu.Lock()
			defer mu.Unlock()
			for code, n := range got {
				codes[code] += n
			}
		})
	}
	// The 4 requests over the limit are answered at once; then the origin answers the 2.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		refused := codes[http.StatusTooManyRequests]
		mu.Unlock()
		if refused == 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if other := c.codes(t, c.from("127.0.0.3"), "/other", 1); other[http.StatusNotFound] != 1 {
		t.Errorf("another client while the first has 2 requests under way: %v, want the origin's 404", other)
	}
	close(release)
	wg.Wait()
	if codes[http.StatusOK] != 2 || codes[http.StatusTooManyRequests] != 4 {
		t.Errorf("6 requests at once: %v, want 2 served and 4 refused", codes)
	}
	c.waitCounts(t, "edgepool_client_limited_total", "limit", map[string]float64{"concurrent": 4})
}

// TestShardedClientLimitsHoldWhereClientsArrive: in a sharded fleet the pod a client
// reached counts its requests, and the owner of their keys does not count them again.
func TestShardedClientLimitsHoldWhereClientsArrive(t *testing.T) {
	o := startOrigin(t)
	const burst = 2
	nodes := startFleet(t, o, 2, func(spec *v1alpha1.CacheNodeSpec) {
		spec.ClientLimits = &v1alpha1.ClientLimits{RequestsPerSecond: 1, Burst: burst}
	})
	// Where the keys are: each asked once, from an address of its own.
	paths := fleetPaths(o, "limited", 20)
	for i, p := range paths {
		if got := nodes[1].codes(t, nodes[1].from(fmt.Sprintf("127.0.1.%d", i)), p, 1, "Host", fleetHost); got[http.StatusOK] != 1 {
			t.Fatalf("%s: %v", p, got)
		}
	}
	var remote []string // keys node 1 owns
	for p, on := range owners(nodes, paths) {
		if slices.Equal(on, []int{1}) && len(remote) < burst+1 {
			remote = append(remote, p)
		}
	}
	if len(remote) < burst+1 {
		t.Fatalf("node 1 owns %d of %d keys", len(remote), len(paths))
	}
	// Each client sends each pod its burst and one: through pod 0 and through pod 1, the
	// keys pod 1 owns. An owner that counted them again would refuse half.
	for _, addr := range []string{"127.0.0.10", "127.0.0.11", "127.0.0.12"} {
		for i, n := range nodes {
			client := n.from(addr)
			for _, p := range remote {
				if got := n.codes(t, client, p, 1, "Host", fleetHost); got[http.StatusOK] != 1 {
					t.Errorf("client %s through pod %d, %s (pod 1's) within its burst: %v, want it served", addr, i, p, got)
				}
			}
			if got := n.codes(t, client, remote[0], 1, "Host", fleetHost); got[http.StatusTooManyRequests] != 1 {
				t.Errorf("client %s through pod %d over its burst: %v, want 429", addr, i, got)
			}
		}
	}
}
