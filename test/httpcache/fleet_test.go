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
	"maps"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// A sharded CacheNode's pods, as nginx processes on loopback addresses of their own
// (127.0.0.2, .3, ...), each with its own disk. The configuration is the one the operator
// renders, with one change a pod does not need: each listen names the node's address, as
// a pod's network namespace has only its own (127.0.0.1 stays each pod's loopback, which
// only its own status port uses here). A fleet whose ring is on IPv6 runs in a network
// namespace of its own (testkit.InOwnNetns), each node with an IPv6 address there too.

// fleetNode is one pod of a sharded CacheNode.
type fleetNode struct {
	*cacheNode
	render.Member            // its name in the ring, and its address
	loopback      netip.Addr // its IPv4 address (the ring's too, on IPv4)
	disk          string
	spec          *v1alpha1.CacheNodeSpec
}

// fleetHost is the Host of the fleet tests' requests: the key holds it.
const fleetHost = "fleet.test"

// startFleet runs n sharded cache nodes filling from o, each with the ring of all n.
func startFleet(t testing.TB, o *origin, n int, edit func(*v1alpha1.CacheNodeSpec)) []*fleetNode {
	t.Helper()
	ports := make([]int32, 3)
	for i := range ports {
		port, err := testkit.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = port
	}
	nodes := make([]*fleetNode, n)
	dirs, prefixes := make([]string, n), make([]string, n)
	var members []render.Member
	for i := range n {
		var disk string
		dirs[i], prefixes[i], disk = cacheDirs(t)
		spec := &v1alpha1.CacheNodeSpec{
			Disks:    []v1alpha1.Disk{{Name: "disk0", Path: disk, Media: v1alpha1.MediaSSD, Size: resource.MustParse("256Mi")}},
			Origin:   v1alpha1.Origin{Servers: []string{o.addr}},
			Listener: v1alpha1.Listener{Port: ports[0], StatusPort: ports[1]},
			Sharding: &v1alpha1.Sharding{PeerPort: ports[2]},
		}
		spec.Default()
		if edit != nil {
			edit(spec)
		}
		compressing(t, spec)
		loopback := netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + i)})
		member := render.Member{Name: fmt.Sprintf("node-%d", i), Addr: loopback}
		if spec.Listener.Families()[0] == v1alpha1.IPv6 {
			member.Addr = netip.AddrFrom16([16]byte{0: 0xfd, 15: byte(2 + i)})
			testkit.AddLoopbackAddr(t, member.Addr)
		}
		members = append(members, member)
		nodes[i] = &fleetNode{Member: member, loopback: loopback, disk: disk, spec: spec}
	}
	for i, node := range nodes {
		node.cacheNode = runNginx(t, dirs[i], prefixes[i], node.conf(t, members), node.spec.Disks, netip.AddrPortFrom(node.Addr, uint16(ports[0])).String())
		// A new connection per request: after a reload, no request reaches an old worker.
		node.client.Transport = &http.Transport{DisableCompression: true, DisableKeepAlives: true}
	}
	return nodes
}

// conf renders the node's nginx.conf with ring members, its listens on its own address.
func (n *fleetNode) conf(t testing.TB, members []render.Member) string {
	t.Helper()
	conf, err := render.NginxConfRing(n.spec, members)
	if err != nil {
		t.Fatal(err)
	}
	return testkit.ListenOn(conf, n.loopback, n.Addr)
}

// reload renders the node's configuration with members and has its nginx load it; it
// returns once every worker of the old configuration is gone.
func (n *fleetNode) reload(t testing.TB, members []render.Member) {
	t.Helper()
	if err := os.WriteFile(n.file, []byte(n.conf(t, members)), 0o644); err != nil {
		t.Fatal(err)
	}
	old, err := testkit.NginxWorkers(n.proc.Pid())
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(n.proc.Pid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := testkit.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := testkit.WaitWorkersReplaced(ctx, n.proc.Pid(), old); err != nil {
		t.Fatal(err)
	}
}

// stores says whether the node's disk holds an object of key (in any encoding).
func (n *fleetNode) stores(key string) bool {
	return storedFile(n.disk, key) != ""
}

// counts is what the node agent would count of the node's requests in metric, by the
// values of label (summed over the other labels; the series still at zero left out):
// edgepool_sharded_requests_total by served_by (who served its clients),
// edgepool_owner_requests_total by asked_by (who asked it, as the owner).
func (n *cacheNode) counts(t testing.TB, metric, label string) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(n.metrics.Collectors()...)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, f := range families {
		if f.GetName() != metric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if v := m.GetCounter().GetValue(); l.GetName() == label && v > 0 {
					counts[l.GetValue()] += v
				}
			}
		}
	}
	return counts
}

// waitCounts waits until the node's counts of metric by label are want: nginx sends a
// request's line after its response.
func (n *cacheNode) waitCounts(t testing.TB, metric, label string, want map[string]float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := n.counts(t, metric, label)
		if maps.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("node %s: %s by %s %v, want %v", n.base, metric, label, got, want)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitServedBy waits until the node's client requests by who served them are want.
func (n *fleetNode) waitServedBy(t testing.TB, want map[string]float64) {
	t.Helper()
	n.waitCounts(t, "edgepool_sharded_requests_total", "served_by", want)
}

// fleetPaths are the paths of count cacheable objects at o.
func fleetPaths(o *origin, prefix string, count int) []string {
	paths := make([]string, count)
	for i := range paths {
		paths[i] = fmt.Sprintf("/%s/%d", prefix, i)
		o.respond(paths[i], http.StatusOK, header("Cache-Control", "public, max-age=600"))
	}
	return paths
}

// owners maps each path to the nodes whose disks hold it.
func owners(nodes []*fleetNode, paths []string) map[string][]int {
	m := map[string][]int{}
	for _, p := range paths {
		for i, n := range nodes {
			if n.stores(fleetHost + p) {
				m[p] = append(m[p], i)
			}
		}
	}
	return m
}

// TestFleetStoresEachKeyOnce: with sharding, a key requested through every pod is
// fetched from the origin once and stored on one pod's disk, whichever pod the client
// reached; each pod owns a share of the keys, and serves the others' from their owners.
func TestFleetStoresEachKeyOnce(t *testing.T) {
	o := startOrigin(t)
	storesEachKeyOnce(t, o, startFleet(t, o, 3, nil))
}

// TestFleetOverIPv6: a ring on IPv6 (listener.ipFamilies [IPv6]): the pods listen on
// their IPv6 addresses, reach each other there, and tell their own keys from their
// peers' (nginx brackets an IPv6 upstream address, not the server's), in a network
// namespace of its own where each pod has an IPv6 address of its own.
func TestFleetOverIPv6(t *testing.T) {
	if !testkit.InOwnNetns(t) {
		return
	}
	o := startOrigin(t)
	nodes := startFleet(t, o, 3, func(spec *v1alpha1.CacheNodeSpec) {
		spec.Listener.IPFamilies = []v1alpha1.IPFamily{v1alpha1.IPv6}
	})
	if !nodes[0].Addr.Is6() {
		t.Fatalf("node 0 at %s, want an IPv6 address", nodes[0].Addr)
	}
	storesEachKeyOnce(t, o, nodes)
}

// storesEachKeyOnce requests 30 keys through every node of a fresh fleet, and checks
// that the origin saw each once, one node stores each, every node owns some, and the
// metrics count who served and who asked.
func storesEachKeyOnce(t *testing.T, o *origin, nodes []*fleetNode) {
	t.Helper()
	paths := fleetPaths(o, "once", 30)
	for _, p := range paths {
		for i, n := range nodes {
			r := n.get(t, p, "Host", fleetHost)
			if r.Code != http.StatusOK {
				t.Fatalf("GET %s through node %d: %s", p, i, describe(r))
			}
			if i > 0 && cacheStatus(r) != "HIT" {
				t.Errorf("GET %s through node %d after node 0: %s, want a HIT at the owner", p, i, describe(r))
			}
		}
		if c := o.count(p); c != 1 {
			t.Errorf("%s: the origin received %d requests, want 1", p, c)
		}
	}
	share := make([]int, len(nodes))
	for p, on := range owners(nodes, paths) {
		if len(on) != 1 {
			t.Errorf("%s is stored on nodes %v, want one", p, on)
		}
		for _, i := range on {
			share[i]++
		}
	}
	if slices.Contains(share, 0) {
		t.Errorf("keys stored per node %v: a node owns none", share)
	}
	// The node agents' metrics say who served each node's clients: the node itself for its
	// own keys, another node for the rest.
	// As owners, each served its keys once for itself and once for each other node.
	for i, n := range nodes {
		n.waitServedBy(t, map[string]float64{"own": float64(share[i]), "peer": float64(len(paths) - share[i])})
		n.waitCounts(t, "edgepool_owner_requests_total", "asked_by", map[string]float64{
			"self": float64(share[i]), "peer": float64((len(nodes) - 1) * share[i])})
	}
	t.Logf("keys stored per node: %v", share)
}

// TestFleetCollapsesConcurrentMisses: concurrent misses for one key through every pod
// reach the origin once: they meet at the key's owner, whose cache lock holds them.
func TestFleetCollapsesConcurrentMisses(t *testing.T) {
	o := startOrigin(t)
	nodes := startFleet(t, o, 3, nil)
	const path = "/collapse/slow"
	o.handle(path, func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(500 * time.Millisecond) // every request below arrives meanwhile
		w.Header().Set("Cache-Control", "public, max-age=600")
		_, _ = w.Write([]byte("slow"))
	})
	var wg sync.WaitGroup
	codes := make([]int, 30)
	for i := range codes {
		wg.Go(func() {
			codes[i] = nodes[i%len(nodes)].get(t, path, "Host", fleetHost).Code
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusOK {
			t.Errorf("request %d: %d", i, c)
		}
	}
	if c := o.count(path); c != 1 {
		t.Errorf("30 concurrent requests through 3 nodes reached the origin %d times, want 1", c)
	}
}

// TestFleetMemberLeavingMovesOnlyItsKeys: when a pod leaves the ring, the others send
// only its keys elsewhere: the keys the survivors own stay where they are (hits), and
// the origin hears again only of the keys the leaver stored.
func TestFleetMemberLeavingMovesOnlyItsKeys(t *testing.T) {
	o := startOrigin(t)
	nodes := startFleet(t, o, 3, nil)
	paths := fleetPaths(o, "leave", 60)
	for _, p := range paths {
		if r := nodes[0].get(t, p, "Host", fleetHost); r.Code != http.StatusOK {
			t.Fatalf("GET %s: %s", p, describe(r))
		}
	}
	before := owners(nodes, paths)

	// Node 2 leaves: the operator renders the ring without it, the others reload, then
	// its nginx stops.
	survivors := []render.Member{nodes[0].Member, nodes[1].Member}
	nodes[0].reload(t, survivors)
	nodes[1].reload(t, survivors)
	if err := nodes[2].proc.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	moved := 0
	for _, p := range paths {
		left := slices.Equal(before[p], []int{2})
		if left {
			moved++
		}
		for i, n := range nodes[:2] {
			r := n.get(t, p, "Host", fleetHost)
			if r.Code != http.StatusOK {
				t.Fatalf("GET %s through node %d after node 2 left: %s", p, i, describe(r))
			}
		}
		want := 1
		if left {
			want = 2
		}
		if c := o.count(p); c != want {
			t.Errorf("%s (stored on %v before): the origin received %d requests, want %d", p, before[p], c, want)
		}
	}
	if moved == 0 || moved == len(paths) {
		t.Fatalf("node 2 had stored %d of %d keys: the test needs some, not all", moved, len(paths))
	}
	t.Logf("keys moved when 1 of 3 nodes left: %d of %d", moved, len(paths))
}

// TestFleetMemberBackAtAnotherAddressKeepsItsKeys: a pod recreated on its node (a rolling
// update, a reboot) comes back at another address with its disks; the ring names it by
// its node, so it owns the same keys, and serves them from its disks: the origin is not
// asked again for any key.
func TestFleetMemberBackAtAnotherAddressKeepsItsKeys(t *testing.T) {
	o := startOrigin(t)
	nodes := startFleet(t, o, 3, nil)
	paths := fleetPaths(o, "back", 60)
	for _, p := range paths {
		if r := nodes[0].get(t, p, "Host", fleetHost); r.Code != http.StatusOK {
			t.Fatalf("GET %s: %s", p, describe(r))
		}
	}
	before := owners(nodes, paths)

	// Node 2's pod is recreated: its nginx stops, a new one starts on its disk at another
	// address, and the others load the ring with its new address.
	back := nodes[2]
	if err := back.proc.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	back.Addr = netip.AddrFrom4([4]byte{127, 0, 0, 9})
	back.loopback = back.Addr
	ring := []render.Member{nodes[0].Member, nodes[1].Member, back.Member}
	dir, prefix, _ := cacheDirs(t)
	back.cacheNode = runNginx(t, dir, prefix, back.conf(t, ring), back.spec.Disks,
		netip.AddrPortFrom(back.Addr, uint16(back.spec.Listener.Port)).String())
	back.client.Transport = &http.Transport{DisableCompression: true, DisableKeepAlives: true}
	nodes[0].reload(t, ring)
	nodes[1].reload(t, ring)

	held := 0
	for _, p := range paths {
		if slices.Equal(before[p], []int{2}) {
			held++
		}
		for i, n := range nodes {
			if r := n.get(t, p, "Host", fleetHost); r.Code != http.StatusOK {
				t.Fatalf("GET %s through node %d: %s", p, i, describe(r))
			}
		}
		if c := o.count(p); c != 1 {
			t.Errorf("%s (stored on %v): the origin received %d requests, want 1", p, before[p], c)
		}
	}
	if after := owners(nodes, paths); !maps.EqualFunc(after, before, slices.Equal) {
		t.Errorf("the keys moved between disks: before %v, after %v", before, after)
	}
	if held == 0 {
		t.Fatal("node 2 held none of the keys: the test needs some")
	}
	t.Logf("node 2 back at %s served the %d of %d keys its disk held", back.Addr, held, len(paths))
}

// TestFleetOwnerReloadCostsNoFailover: an owner's reload closes the connections its peers
// keep alive to it; a request that meets one closing is sent again on a new connection,
// never to the key's successor: under load through the other pods, reloads of the owner
// cost no failed request and no origin request, and store nothing twice.
func TestFleetOwnerReloadCostsNoFailover(t *testing.T) {
	o := startOrigin(t)
	nodes := startFleet(t, o, 3, nil)
	ring := []render.Member{nodes[0].Member, nodes[1].Member, nodes[2].Member}
	paths := fleetPaths(o, "reload", 60)
	for _, p := range paths {
		if r := nodes[0].get(t, p, "Host", fleetHost); r.Code != http.StatusOK {
			t.Fatalf("GET %s: %s", p, describe(r))
		}
	}
	before := owners(nodes, paths)
	var held []string // the keys node 2 owns
	for _, p := range paths {
		if slices.Equal(before[p], []int{2}) {
			held = append(held, p)
		}
	}
	if len(held) == 0 {
		t.Fatal("node 2 holds none of the keys: the test needs some")
	}

	done := make(chan struct{})
	var wg sync.WaitGroup
	var requests, failed atomic.Int64
	var mu sync.Mutex
	statuses := map[string]int{} // X-Cache-Status of the answers
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			through := nodes[w%2]
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				h := http.Header{"Host": {fleetHost}}
				if compressAll { // as get asks: one encoding, stored once
					h.Set("Accept-Encoding", "gzip")
				}
				r, err := testkit.Fetch(context.Background(), through.client, through.base+held[i%len(held)], h)
				requests.Add(1)
				if err != nil || r.Code != http.StatusOK {
					failed.Add(1)
					continue
				}
				mu.Lock()
				statuses[cacheStatus(r)]++
				mu.Unlock()
			}
		}()
	}
	for range 5 {
		time.Sleep(200 * time.Millisecond)
		nodes[2].reload(t, ring)
	}
	close(done)
	wg.Wait()

	if failed.Load() > 0 {
		t.Errorf("%d of %d requests failed while node 2 reloaded", failed.Load(), requests.Load())
	}
	for _, p := range paths {
		if c := o.count(p); c != 1 {
			t.Errorf("%s (stored on %v): the origin received %d requests, want 1", p, before[p], c)
		}
	}
	if after := owners(nodes, paths); !maps.EqualFunc(after, before, slices.Equal) {
		t.Errorf("keys stored again elsewhere: before %v, after %v", before, after)
	}
	t.Logf("5 reloads of node 2 under %d requests for its %d keys through nodes 0 and 1: answers by cache status %v",
		requests.Load(), len(held), statuses)
}

// TestFleetOwnerDownCostsNoError: a pod that stops answering before the ring drops it
// costs its keys a retry on their successors, never an error to the client.
func TestFleetOwnerDownCostsNoError(t *testing.T) {
	o := startOrigin(t)
	nodes := startFleet(t, o, 3, nil)
	paths := fleetPaths(o, "down", 30)
	if err := nodes[2].proc.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		for i, n := range nodes[:2] {
			if r := n.get(t, p, "Host", fleetHost); r.Code != http.StatusOK {
				t.Errorf("GET %s through node %d with node 2 down: %s", p, i, describe(r))
			}
		}
		if c := o.count(p); c != 1 {
			t.Errorf("%s: the origin received %d requests, want 1 (the successor stores it)", p, c)
		}
	}
	for p, on := range owners(nodes[:2], paths) {
		if len(on) != 1 {
			t.Errorf("%s is stored on nodes %v, want one", p, on)
		}
	}
}

// TestFleetOriginAnswersWhenNoOwnerDoes: with every owner but the pod itself gone, and
// the pod's own owner port refusing, the client still gets the origin's response.
func TestFleetOriginAnswersWhenNoOwnerDoes(t *testing.T) {
	o := startOrigin(t)
	nodes := startFleet(t, o, 2, nil)
	if err := nodes[1].proc.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Node 0's ring: node 1 alone, which is down.
	nodes[0].reload(t, []render.Member{nodes[1].Member})
	path := fleetPaths(o, "fallback", 1)[0]
	for range 2 {
		r := nodes[0].get(t, path, "Host", fleetHost)
		if r.Code != http.StatusOK {
			t.Fatalf("GET %s with no owner up: %s", path, describe(r))
		}
	}
	if c := o.count(path); c != 2 {
		t.Errorf("the origin received %d requests, want 2: the fallback stores nothing", c)
	}
	if nodes[0].stores(fleetHost + path) {
		t.Errorf("the fallback stored %s", path)
	}
	nodes[0].waitServedBy(t, map[string]float64{"origin": 2})
}

// TestFleetPeerHeadersAreNotTheClients: what a pod tells the owner (the client's address
// and scheme) is the pod's to say: a client that sends the same headers changes neither
// what the origin hears nor the key (RFC 9111 section 4.1).
func TestFleetPeerHeadersAreNotTheClients(t *testing.T) {
	o := startOrigin(t)
	nodes := startFleet(t, o, 2, func(spec *v1alpha1.CacheNodeSpec) { spec.Cache.Key = v1alpha1.CacheKeySchemeHostURI })
	const path = "/peer/headers"
	o.handle(path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=600")
		fmt.Fprintf(w, "for=%s real=%s proto=%s fleet=%s%s", r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Real-IP"), r.Header.Get("X-Forwarded-Proto"),
			r.Header.Get("X-Edgepool-Scheme"), r.Header.Get("X-Edgepool-Pod"))
	})
	for i, n := range nodes {
		r := n.get(t, path, "Host", fleetHost, "X-Edgepool-Scheme", "https", "X-Real-IP", "203.0.113.9", "X-Forwarded-For", "203.0.113.9",
			"X-Edgepool-Pod", "127.0.0.9")
		// What the pods tell each other does not reach the origin either.
		if want := "for=127.0.0.1 real=127.0.0.1 proto=http fleet="; string(r.Body) != want {
			t.Errorf("through node %d: the origin heard %q, want %q", i, r.Body, want)
		}
	}
	if c := o.count(path); c != 1 {
		t.Errorf("the origin received %d requests, want 1", c)
	}
	owner := owners(nodes, []string{path})[path]
	if len(owner) != 0 {
		t.Errorf("stored under %s%s, a key without the scheme", fleetHost, path)
	}
	if !slices.ContainsFunc(nodes, func(n *fleetNode) bool { return n.stores("http://" + fleetHost + path) }) {
		t.Errorf("no node stored http://%s%s: the client's X-Edgepool-Scheme chose the key", fleetHost, path)
	}
}

// TestFleetOwnersUpdateHoldsNoPeersConnection: an owner that answers a stale response
// while it revalidates it behind (stale-while-revalidate) holds the connection it
// answered on until the update ends; it tells the pod that asked to let that pooled
// connection go, and the pod's next request goes over another one, answered at once.
func TestFleetOwnersUpdateHoldsNoPeersConnection(t *testing.T) {
	o := startOrigin(t)
	nodes := startFleet(t, o, 2, nil)
	const path = "/swr/held"
	held, _ := holdUntilReleased(t)
	var n atomic.Int32
	o.handle(path, func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) > 1 {
			<-held // the owner's update waits for the test
		}
		w.Header().Set("Cache-Control", "public, max-age=1, stale-while-revalidate=600")
		_, _ = w.Write([]byte("v1"))
	})
	nodes[0].get(t, path, "Host", fleetHost)
	owner := owners(nodes, []string{path})[path]
	if len(owner) != 1 {
		t.Fatalf("%s stored on nodes %v, want one", path, owner)
	}
	peer := nodes[1-owner[0]]
	var r *testkit.Response
	eventually(t, 15*time.Second, "the owner's copy to go stale", func() bool {
		r = peer.get(t, path, "Host", fleetHost)
		return cacheStatus(r) != "HIT"
	})
	if cacheStatus(r) != "STALE" {
		t.Fatalf("through the peer: %s, want the owner's STALE", describe(r))
	}
	// The peer's pooled connection the owner holds would wait for the origin (10s, failed).
	if r := peer.get(t, path, "Host", fleetHost); cacheStatus(r) != "UPDATING" || string(r.Body) != "v1" {
		t.Errorf("through the peer while the owner's update is held: %s, want v1, UPDATING", describe(r))
	}
}

// hotTier is the hot tier of the hot-tier tests: copies after 2 requests, for 1 s.
func hotTier(spec *v1alpha1.CacheNodeSpec) {
	spec.Sharding.HotTier = &v1alpha1.HotTier{Size: resource.MustParse("16Mi"), MinUses: 2, Seconds: 1}
}

// hotStatus is the hot tier's cache status of a response.
func hotStatus(r *testkit.Response) string { return r.Header.Get("X-Hot-Cache-Status") }

// TestFleetHotTierServesPopularKeysOnEveryPod: with a hot tier, every pod copies a key
// it is asked for often, once its owner served it from its cache, and answers it from
// memory without asking the owner; when the copy's seconds are up, the copy answers
// while the owner is asked again in the background, with the copy's validator (a 304,
// not the object).
func TestFleetHotTierServesPopularKeysOnEveryPod(t *testing.T) {
	o := startOrigin(t)
	nodes := startFleet(t, o, 3, hotTier)
	const path = "/hot/popular"
	o.respond(path, http.StatusOK, header("Cache-Control", "public, max-age=600", "ETag", `"v1"`))
	for i, n := range nodes {
		var got []string
		for range 4 {
			r := n.get(t, path, "Host", fleetHost)
			if r.Code != http.StatusOK {
				t.Fatalf("GET %s through node %d: %s", path, i, describe(r))
			}
			got = append(got, hotStatus(r))
		}
		// Below minUses nginx says MISS and copies nothing; the second is copied, once the
		// owner holds it; then the copy answers.
		if want := []string{"MISS", "MISS", "HIT", "HIT"}; !slices.Equal(got, want) {
			t.Errorf("node %d: hot tier statuses %v, want %v", i, got, want)
		}
	}
	if c := o.count(path); c != 1 {
		t.Errorf("the origin received %d requests, want 1", c)
	}
	for _, n := range nodes {
		owner := "peer"
		if n.stores(fleetHost + path) {
			owner = "own"
		}
		n.waitServedBy(t, map[string]float64{"hot": 2, owner: 2})
	}

	// nginx counts whole seconds, and a copy expires once its second has passed: within 2 s.
	time.Sleep(2100 * time.Millisecond)
	r := nodes[0].get(t, path, "Host", fleetHost)
	if hotStatus(r) != "STALE" || r.Code != http.StatusOK {
		t.Errorf("after its seconds, the copy answered %s (hot %q), want the copy (STALE) while the owner is asked", describe(r), hotStatus(r))
	}
	asked := 0
	eventually(t, 5*time.Second, "the owner to confirm the copy", func() bool {
		asked++
		return hotStatus(nodes[0].get(t, path, "Host", fleetHost)) == "HIT"
	})
	if c := o.count(path); c != 1 {
		t.Errorf("the origin received %d requests, want 1: the owner's copy is fresh", c)
	}
	// The copy answered every request since the first two: the owner's background
	// revalidation is no client's.
	owner := "peer"
	if nodes[0].stores(fleetHost + path) {
		owner = "own"
	}
	nodes[0].waitServedBy(t, map[string]float64{"hot": float64(2 + 1 + asked), owner: 2})
}

// eventually polls cond every 20 ms until it holds, failing the test after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFleetHotCopyAnswersWhileTheOwnerIsAsked: a popular key never waits for its owner:
// while the owner takes its time over a copy past its seconds (here, its own copy has
// expired too and the origin is slow to confirm it), every request is answered from
// the copy, none waits behind the update on a kept connection, and the owner is asked
// once.
func TestFleetHotCopyAnswersWhileTheOwnerIsAsked(t *testing.T) {
	o := startOrigin(t)
	nodes := startFleet(t, o, 2, hotTier)
	const path = "/hot/slow-owner"
	held, release := holdUntilReleased(t)
	o.handle(path, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") != "" {
			<-held // the owner's revalidation waits for the test
		}
		w.Header().Set("Cache-Control", "public, max-age=1")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write([]byte("popular"))
	})
	for range 3 {
		nodes[0].get(t, path, "Host", fleetHost)
	}
	if r := nodes[0].get(t, path, "Host", fleetHost); hotStatus(r) != "HIT" {
		t.Fatalf("the popular key is not in the hot tier: %s (hot %q)", describe(r), hotStatus(r))
	}
	time.Sleep(2100 * time.Millisecond) // the copy and the owner's are past their second
	// Over one kept connection, as a load balancer sends them: the response that started
	// the owner's update asks to close it (nginx would read the next request on it only
	// after the update), and the next requests go over a new one, never waiting.
	client := overOneConnection()
	var got []string
	for i := range 5 {
		r := nodes[0].getOver(t, client, path, "Host", fleetHost)
		if r.Code != http.StatusOK || string(r.Body) != "popular" {
			t.Fatalf("while the owner was asked: %s, want the copy", describe(r))
		}
		if closes := i == 0; r.Closes != closes {
			t.Errorf("while the owner was asked: response %d (hot %q) asks to close: %v, want %v", i+1, hotStatus(r), r.Closes, closes)
		}
		got = append(got, hotStatus(r))
	}
	if want := []string{"STALE", "UPDATING", "UPDATING", "UPDATING", "UPDATING"}; !slices.Equal(got, want) {
		t.Errorf("while the owner was asked: hot tier statuses %v, want %v", got, want)
	}
	eventually(t, 5*time.Second, "the owner to ask the origin", func() bool { return o.count(path) == 2 })
	release()
	eventually(t, 5*time.Second, "the owner to confirm the copy", func() bool {
		return hotStatus(nodes[0].get(t, path, "Host", fleetHost)) == "HIT"
	})
	if c := o.count(path); c != 2 {
		t.Errorf("the origin received %d requests, want 2: the fill and the owner's one revalidation", c)
	}
}

// TestFleetHotTierHoldsNoRequest: a hot tier never holds a request behind another: while
// one request for a key makes its copy, or asks the owner of a key the owner does not
// store (each does once the key is past minUses), the others go to the owner at once, as
// without a hot tier. nginx's cache lock would hold each of them, looking again every
// 500ms and letting one through at a time, up to its 5s timeout.
func TestFleetHotTierHoldsNoRequest(t *testing.T) {
	o := startOrigin(t)
	nodes := startFleet(t, o, 1, func(spec *v1alpha1.CacheNodeSpec) {
		hotTier(spec)
		spec.Cache.Lock = new(false) // the owner's lock would hold them too (a key it does not store)
	})
	const path = "/hot/private-popular"
	const together = 3
	var arrived atomic.Int32
	all := make(chan struct{})
	held, _ := holdUntilReleased(t)
	o.handle(path, func(w http.ResponseWriter, _ *http.Request) {
		// The first answers at once; the others only once all of them are at the origin.
		switch arrived.Add(1) {
		case 1:
		case 1 + together:
			close(all)
		default:
			select {
			case <-all:
			case <-held:
			}
		}
		w.Header().Set("Cache-Control", "private, max-age=600")
		_, _ = w.Write([]byte("yours"))
	})
	nodes[0].get(t, path, "Host", fleetHost) // the key's first use: below minUses, no lock
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableCompression: true}}
	errs := make([]error, together)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			r, err := testkit.Fetch(context.Background(), client, nodes[0].base+path, http.Header{"Host": {fleetHost}})
			switch {
			case err != nil:
				errs[i] = err
			case r.Code != http.StatusOK || string(r.Body) != "yours":
				errs[i] = fmt.Errorf("%s", describe(r))
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d of %d sent together: %v (held by the hot tier?)", i+1, together, err)
		}
	}
	if c := o.count(path); c != 1+together {
		t.Errorf("the origin received %d requests, want %d: a response the owner does not store is never copied", c, 1+together)
	}
}

// TestFleetHotTierCopiesOnlyWhatOwnersStore: the hot tier follows the owner's cache
// policy: a response the owner did not store (private) is never copied, a request with
// Authorization is never answered from a copy, and a Range request goes to the owner as
// it is.
func TestFleetHotTierCopiesOnlyWhatOwnersStore(t *testing.T) {
	o := startOrigin(t)
	nodes := startFleet(t, o, 2, hotTier)
	const private = "/hot/private"
	o.respond(private, http.StatusOK, header("Cache-Control", "private, max-age=600"))
	for range 4 {
		if r := nodes[0].get(t, private, "Host", fleetHost); hotStatus(r) == "HIT" {
			t.Errorf("a private response was answered from the hot tier: %s", describe(r))
		}
	}
	if c := o.count(private); c != 4 {
		t.Errorf("the origin received %d requests for a private response, want 4", c)
	}

	const popular = "/hot/shared"
	o.respond(popular, http.StatusOK, header("Cache-Control", "public, max-age=600", "Accept-Ranges", "bytes"))
	for range 3 {
		nodes[0].get(t, popular, "Host", fleetHost)
	}
	if r := nodes[0].get(t, popular, "Host", fleetHost); hotStatus(r) != "HIT" {
		t.Fatalf("the popular response is not in the hot tier: %s (hot %q)", describe(r), hotStatus(r))
	}
	if r := nodes[0].get(t, popular, "Host", fleetHost, "Authorization", "Bearer x"); hotStatus(r) != "BYPASS" {
		t.Errorf("a request with Authorization: hot status %q, want BYPASS", hotStatus(r))
	}
	r := nodes[0].get(t, popular, "Host", fleetHost, "Range", "bytes=0-3")
	if r.Code != http.StatusPartialContent || string(r.Body) != popular[:4] || hotStatus(r) != "" {
		t.Errorf("a Range request: %s (hot %q), want the owner's 206 of %q", describe(r), hotStatus(r), popular[:4])
	}
}
