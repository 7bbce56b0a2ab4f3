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

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/testkit"
	"github.com/edgepool/edgepool/internal/test/testkit/clusterslot"
)

// TestRealNodeShardedPodJoinsItsRing: a sharded cache pod on the real kubelet enters the
// ring once Ready (the operator renders its address, the agent reloads in place, and
// nginx as UID 101 listens on the peer port), and serves through the ring: the request
// goes to the key's owner, itself here, whose disks answer the second time, and the pod's
// hot tier (a memory volume) the third.
func TestRealNodeShardedPodJoinsItsRing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	origin, originHits := newOrigin(t, "origin")
	cn := realCacheNode(t, ns, "sharded", origin)
	cn.Spec.Sharding = &v1alpha1.Sharding{HotTier: &v1alpha1.HotTier{Size: resource.MustParse("8Mi")}}
	pod, base := runCache(t, g, cn)

	waitForSoleMember(g, cn, pod, fmt.Sprintf("server %s:%d;", pod.Status.PodIP, v1alpha1.DefaultPeerPort))

	_, first := get(g, base+"/sharded")
	_, second := get(g, base+"/sharded")
	g.Expect([]string{first, second}).To(Equal([]string{"MISS", "HIT"}))
	g.Expect(originHits()).To(Equal(1))

	// The hot tier, a memory volume the cache user writes: the second request was copied.
	r, err := testkit.Fetch(ctx, http.DefaultClient, base+"/sharded", http.Header{"Host": {siteHost}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Header.Get("X-Hot-Cache-Status")).To(Equal("HIT"))
}

// TestRealNodeShardedRingOverIPv6: the real node's pods are dual-stack (IPv4 first, as in
// a dual-stack cluster); a CacheNode whose ring is on IPv6 (listener.ipFamilies [IPv6,
// IPv4]) renders the pod's IPv6 address as its member, nginx in the pod (UID 101) listens
// on [::] too, and a request through the pod's IPv4 address goes to the key's owner,
// itself, over IPv6; a client on the node reaches the pod over IPv6 and gets the HIT.
func TestRealNodeShardedRingOverIPv6(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	origin, originHits := newOrigin(t, "origin")
	cn := realCacheNode(t, ns, "ipv6", origin)
	cn.Spec.Listener.IPFamilies = []v1alpha1.IPFamily{v1alpha1.IPv6, v1alpha1.IPv4}
	cn.Spec.Sharding = &v1alpha1.Sharding{}
	pod, base := runCache(t, g, cn)

	var v6 netip.Addr
	for _, ip := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is6() {
			v6 = a
		}
	}
	g.Expect(v6.IsValid()).To(BeTrue(), "pod %s has no IPv6 address: %v", pod.Name, pod.Status.PodIPs)
	waitForSoleMember(g, cn, pod, fmt.Sprintf("server %s;", netip.AddrPortFrom(v6, v1alpha1.DefaultPeerPort)))

	_, first := get(g, base+"/v6")
	_, second := get(g, base+"/v6")
	g.Expect([]string{first, second}).To(Equal([]string{"MISS", "HIT"}))
	g.Expect(originHits()).To(Equal(1))

	// Over IPv6, from the node (this machine has no route to the pods' IPv6 network).
	url := fmt.Sprintf("http://%s/v6", netip.AddrPortFrom(v6, uint16(cn.Spec.Listener.Port)))
	out := node.exec(t, "curl", "-sS", "-o", "/dev/null", "-D", "-", "-H", "Host: "+siteHost, url)
	g.Expect(out).To(ContainSubstring("200 OK"))
	g.Expect(out).To(MatchRegexp(`(?i)x-cache-status: HIT`))
	g.Expect(originHits()).To(Equal(1))
}

// waitForSoleMember waits until a sharded CacheNode's ring is pod alone, its rendered
// configuration holds member (the pod's upstream line), and the pod applied it.
func waitForSoleMember(g Gomega, cn *v1alpha1.CacheNode, pod *corev1.Pod, member string) {
	g.Eventually(func(g Gomega) {
		got := getCacheNode(g, cn.Namespace, cn.Name)
		g.Expect(got.Status.Sharding).NotTo(BeNil())
		g.Expect(got.Status.Sharding.Members).To(BeEquivalentTo(1))
		g.Expect(got.Status.Sharding.MemberPods).To(Equal([]string{pod.Name}))
		cm := &corev1.ConfigMap{}
		g.Expect(k8s.Get(context.Background(), types.NamespacedName{Namespace: cn.Namespace, Name: cn.Name + "-nginx"}, cm)).To(Succeed())
		g.Expect(cm.Data[agentapi.ConfigKey]).To(ContainSubstring(member))
		applied := conditionOf(got, "ConfigApplied")
		g.Expect(applied.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(applied.Message).To(ContainSubstring(got.Status.ConfigHash[:12]))
	}, timeout, interval).Should(Succeed())
}

// fleetNodes starts the suite's other real nodes beside its first, links every two of them
// (node.sh join: their pods reach each other over the pod network, as in a cluster), and
// stops them and deletes their Nodes when the test ends. It returns every real node by name.
func fleetNodes(t *testing.T) map[string]*realNode {
	t.Helper()
	nodes := []*realNode{node}
	for i, slot := range clusterslot.E2E.RealNodes[1:] {
		n, err := startRealNode(slot, filepath.Join(workDir, fmt.Sprintf("node-%d", i+2)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if n.stopped {
				return
			}
			if err := n.checkIsolation(); err != nil {
				t.Error(err)
			}
			n.stop()
			_ = k8s.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: slot.Name}})
		})
		t.Logf("real node %s Ready %s after node.sh up", slot.Name, n.readyAfter.Round(10*time.Millisecond))
		nodes = append(nodes, n)
	}
	byName := map[string]*realNode{}
	for i, a := range nodes {
		byName[a.slot.Name] = a
		for _, b := range nodes[i+1:] {
			a.join(t, b)
		}
	}
	return byName
}

// join links n's network namespace to peer's (node.sh join).
func (n *realNode) join(t *testing.T, peer *realNode) {
	t.Helper()
	ifN, ifPeer, addrN, addrPeer := clusterslot.PairLink(n.slot, peer.slot)
	cmd := exec.Command(n.script, "join")
	cmd.Env = append(n.env(), "PEER_NODE_DIR="+peer.dir, "PEER_POD_CIDR="+peer.slot.PodCIDR,
		"PAIR_IF="+ifN, "PEER_PAIR_IF="+ifPeer, "PAIR_ADDR="+addrN, "PEER_PAIR_ADDR="+addrPeer)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node.sh join %s %s: %v: %s", n.slot.Name, peer.slot.Name, err, out)
	}
}

// fleetPod is one cache pod of a fleet, on its real node.
type fleetPod struct {
	name, base string // base: the URL of its listener
	node       *realNode
}

// TestRealNodesShareOneCache: a sharded CacheNode on three real kubelets, linked as a
// cluster's pod network links them, is one cache. A key asked through any pod is fetched
// from the origin once and stored on exactly one node's disks; a hot key is then answered
// from every pod's memory tier; a pod recreated at another address keeps its keys; a node
// drained under load (its pod deleted, as when it leaves the CacheNode's placement) costs
// no request, and only its keys move, to the survivors; a node that dies outright costs a
// retry, not a failed request.
func TestRealNodesShareOneCache(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	nodes := fleetNodes(t)
	ns := newNamespace(t)
	origin, originHits := newOrigin(t, "origin")
	disks := map[string]string{}
	for name, n := range nodes {
		disks[name], _ = n.newDisk(t, "fleet-ssd0", v1alpha1.MediaSSD, true)
	}
	cn := &v1alpha1.CacheNode{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: ns},
		Spec: v1alpha1.CacheNodeSpec{
			Placement: v1alpha1.Placement{
				NodeSelector: map[string]string{realNodeLabel: "true"},
				Tolerations:  []corev1.Toleration{{Key: realNodeTaint.Key, Operator: corev1.TolerationOpExists}},
			},
			// The same path on every node, each its own loop device.
			Disks:    []v1alpha1.Disk{{Name: "ssd0", Path: disks[realNodeName], Media: v1alpha1.MediaSSD, Size: resource.MustParse("64Mi")}},
			Origin:   v1alpha1.Origin{Servers: []string{origin}},
			Sharding: &v1alpha1.Sharding{HotTier: &v1alpha1.HotTier{Size: resource.MustParse("8Mi")}},
		},
	}
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	t.Cleanup(func() { _ = k8s.Delete(ctx, cn) })
	pods := waitForRing(t, g, cn, nodes, len(nodes))

	// One owner per key: each key asked through every pod, in turn.
	const keys = 30
	for k := range keys {
		for i := range pods {
			p := pods[(k+i)%len(pods)]
			body, _ := get(g, fmt.Sprintf("%s/k/%d", p.base, k))
			g.Expect(body).To(Equal(fmt.Sprintf("object /k/%d from origin\n", k)))
		}
	}
	g.Expect(originHits()).To(Equal(keys), "the origin's requests for %d keys asked through %d pods", keys, len(pods))
	stored := map[string]int{}
	g.Eventually(func(g Gomega) {
		total := 0
		for _, p := range pods {
			stored[p.node.slot.Name] = p.node.cacheFiles(t, disks[p.node.slot.Name])
			g.Expect(stored[p.node.slot.Name]).To(BeNumerically(">", 0), "keys stored on %s", p.node.slot.Name)
			total += stored[p.node.slot.Name]
		}
		g.Expect(total).To(Equal(keys), "cache files on the nodes' disks: %v", stored)
	}, timeout, interval).Should(Succeed())
	t.Logf("%d keys, each asked through %d pods: %d origin requests; stored per node %v", keys, len(pods), keys, stored)

	// A hot key: the third request through each pod comes from its memory tier (admitted
	// after two uses), whichever node owns it.
	for _, p := range pods {
		for i, want := range []string{"MISS", "MISS", "HIT"} {
			r, err := testkit.Fetch(ctx, http.DefaultClient, p.base+"/hot", http.Header{"Host": {siteHost}})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(r.Code).To(Equal(http.StatusOK))
			g.Expect(r.Header.Get("X-Hot-Cache-Status")).To(Equal(want), "request %d of /hot through %s", i+1, p.name)
		}
	}
	// Past its second, a copy answers while its pod asks the owner again in the background;
	// the owner's answer makes it fresh.
	time.Sleep(2100 * time.Millisecond)
	hotStatus := func(g Gomega) string {
		r, err := testkit.Fetch(ctx, http.DefaultClient, pods[0].base+"/hot", http.Header{"Host": {siteHost}})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(r.Code).To(Equal(http.StatusOK))
		g.Expect(string(r.Body)).To(Equal("object /hot from origin\n"))
		return r.Header.Get("X-Hot-Cache-Status")
	}
	g.Expect(hotStatus(g)).To(Equal("STALE"), "/hot through %s past the copy's second", pods[0].name)
	g.Eventually(hotStatus, timeout, interval).Should(Equal("HIT"), "/hot through %s once the owner answered", pods[0].name)
	g.Expect(originHits()).To(Equal(keys + 1))
	hotOn := "" // the node whose disks hold /hot
	g.Eventually(func(g Gomega) {
		hotOn = ""
		for _, p := range pods {
			if p.node.cacheFiles(t, disks[p.node.slot.Name]) == stored[p.node.slot.Name]+1 {
				hotOn = p.node.slot.Name
			}
		}
		g.Expect(hotOn).NotTo(BeEmpty(), "the node that stored /hot")
	}, timeout, interval).Should(Succeed())

	// A pod recreated on its node (a rolling update, a reboot) comes back at another
	// address; the ring names it by its node, so it keeps its keys and serves them from its
	// disks: asked again through another pod, no key reaches the origin.
	recreated, deleted := pods[0], time.Now()
	g.Expect(k8s.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: recreated.name}})).To(Succeed())
	pods = waitForRing(t, g, cn, nodes, len(nodes)) // the old pod gone, a new one Ready
	back := time.Since(deleted)
	g.Expect(pods[0].name).NotTo(Equal(recreated.name), "the pod on %s", recreated.node.slot.Name)
	g.Expect(pods[0].base).NotTo(Equal(recreated.base), "the recreated pod's address")
	before := originHits()
	for k := range keys {
		get(g, fmt.Sprintf("%s/k/%d", pods[1+k%(len(pods)-1)].base, k))
	}
	g.Expect(originHits()).To(Equal(before), "origin requests for the %d keys after %s's pod came back at another address", keys, recreated.node.slot.Name)
	t.Logf("%s's pod recreated (%s, was %s; in the ring again %s after the delete): its %d keys stayed; 0 origin requests for the %d keys",
		recreated.node.slot.Name, pods[0].base, recreated.base, back.Round(100*time.Millisecond), stored[recreated.node.slot.Name], keys)

	// A node drained under load: the load goes to the other pods (as a Service's would once
	// the pod is gone), the drained node's pod is deleted and leaves the ring.
	drained, survivors := pods[len(pods)-1], pods[:len(pods)-1]
	before = originHits()
	load := startLoad(survivors, "/k/", keys)
	g.Expect(setNodeLabel(ctx, drained.node.slot.Name, realNodeLabel, "")).To(Succeed())
	drainedAt := time.Now()
	t.Cleanup(func() { _ = setNodeLabel(ctx, drained.node.slot.Name, realNodeLabel, "true") })
	survivors = waitForRing(t, g, cn, nodes, len(survivors))
	drainTook := time.Since(drainedAt)
	time.Sleep(2 * time.Second) // load on the new ring
	requests, failures := load.stop()
	g.Expect(failures).To(BeEmpty(), "failed of %d requests while %s was drained", requests, drained.node.slot.Name)
	for k := range keys { // every key once more, now from the survivors
		get(g, fmt.Sprintf("%s/k/%d", survivors[k%len(survivors)].base, k))
	}
	moved := originHits() - before
	g.Expect(moved).To(Equal(stored[drained.node.slot.Name]), "origin requests after the drain: the drained node's keys, once each")
	want := keys // and /hot, where a survivor holds it
	if hotOn != drained.node.slot.Name {
		want++
	}
	g.Eventually(func(g Gomega) {
		total := 0
		for _, p := range survivors {
			total += p.node.cacheFiles(t, disks[p.node.slot.Name])
		}
		g.Expect(total).To(Equal(want), "cache files on the survivors' disks")
	}, timeout, interval).Should(Succeed())
	t.Logf("drain of %s (its pod gone %s after the label): 0 failed of %d requests; %d keys moved (the %d it held), %d stayed",
		drained.node.slot.Name, drainTook.Round(100*time.Millisecond),
		requests, moved, stored[drained.node.slot.Name], keys-moved)

	// A node that dies outright: its pod stays in the ring until the node's lease runs out,
	// so a request for one of its keys waits out the connect timeout and goes to the next
	// owner (keys never asked before, so none is in a memory tier).
	dead, alive := survivors[len(survivors)-1], survivors[0]
	g.Expect(dead.node.checkIsolation()).To(Succeed())
	dead.node.stop()
	load = startLoad([]fleetPod{alive}, "/d/", 200)
	time.Sleep(12 * time.Second) // past the 10 s a failed member is skipped, so it is tried again
	requests, failures = load.stop()
	g.Expect(failures).To(BeEmpty(), "failed of %d requests after %s died", requests, dead.node.slot.Name)
	// A request that waits out the connect timeout marks the dead owner failed for 10 s in
	// one of its pod's workers: a few such requests per worker, not every request.
	g.Expect(load.slow).To(BeNumerically("<=", requests/20), "requests of %d that took a second or more after %s died", requests, dead.node.slot.Name)
	t.Logf("%s died: 0 failed of %d requests; %d took a second or more, the slowest %s", dead.node.slot.Name, requests,
		load.slow, load.slowest.Round(time.Millisecond))
}

// waitForRing waits until the CacheNode has one Ready pod on each of want real nodes, its
// ring names them all, and every pod runs that configuration; it returns the pods.
func waitForRing(t *testing.T, g Gomega, cn *v1alpha1.CacheNode, nodes map[string]*realNode, want int) []fleetPod {
	t.Helper()
	var pods []fleetPod
	g.Eventually(func(g Gomega) {
		list := &corev1.PodList{}
		g.Expect(k8s.List(context.Background(), list, client.InNamespace(cn.Namespace),
			client.MatchingLabels{"app.kubernetes.io/instance": cn.Name})).To(Succeed())
		pods = nil
		for _, p := range list.Items {
			g.Expect(p.DeletionTimestamp).To(BeNil(), "pod %s is leaving", p.Name)
			g.Expect(podReady(&p)).To(BeTrue(), "pod %s on %s: %v", p.Name, p.Spec.NodeName, p.Status.ContainerStatuses)
			pods = append(pods, fleetPod{name: p.Name, node: nodes[p.Spec.NodeName],
				base: fmt.Sprintf("http://%s:%d", p.Status.PodIP, cn.Spec.Listener.Port)})
		}
		g.Expect(pods).To(HaveLen(want))
		got := getCacheNode(g, cn.Namespace, cn.Name)
		g.Expect(got.Status.Sharding).NotTo(BeNil())
		g.Expect(got.Status.Sharding.Members).To(BeEquivalentTo(want))
		names := make([]string, len(pods))
		for i, p := range pods {
			names[i] = p.name
		}
		g.Expect(got.Status.Sharding.MemberPods).To(ConsistOf(names), "the pods the status names in the ring")
		applied := conditionOf(got, v1alpha1.ConditionConfigApplied)
		g.Expect(applied.Status).To(Equal(metav1.ConditionTrue), applied.Message)
		g.Expect(applied.Message).To(ContainSubstring(fmt.Sprintf("%s is running on %d nodes", got.Status.ConfigHash[:12], want)))
	}, timeout, interval).Should(Succeed())
	sort.Slice(pods, func(i, j int) bool { return pods[i].node.slot.Name < pods[j].node.slot.Name })
	return pods
}

// setNodeLabel sets a label of a Node, or removes it when value is empty.
func setNodeLabel(ctx context.Context, name, key, value string) error {
	nd := &corev1.Node{}
	if err := k8s.Get(ctx, client.ObjectKey{Name: name}, nd); err != nil {
		return err
	}
	patch := client.MergeFrom(nd.DeepCopy())
	if value == "" {
		delete(nd.Labels, key)
	} else {
		nd.Labels[key] = value
	}
	return k8s.Patch(ctx, nd, patch)
}

// fleetLoad asks for keys through pods from a few clients until stopped, and keeps what
// failed.
type fleetLoad struct {
	done     chan struct{}
	wg       sync.WaitGroup
	mu       sync.Mutex
	requests int
	slowest  time.Duration
	slow     int // requests that took a second or more
	failures []string
}

func startLoad(pods []fleetPod, prefix string, keys int) *fleetLoad {
	l := &fleetLoad{done: make(chan struct{})}
	c := &http.Client{Timeout: 15 * time.Second}
	for w := range 4 {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := w; ; i++ {
				select {
				case <-l.done:
					return
				default:
				}
				p := pods[i%len(pods)]
				start := time.Now()
				r, err := testkit.Fetch(context.Background(), c, fmt.Sprintf("%s%s%d", p.base, prefix, i%keys), http.Header{"Host": {siteHost}})
				l.mu.Lock()
				l.requests++
				l.slowest = max(l.slowest, time.Since(start))
				if time.Since(start) >= time.Second {
					l.slow++
				}
				if err != nil {
					l.failures = append(l.failures, fmt.Sprintf("%s: %v", p.name, err))
				} else if r.Code != http.StatusOK {
					l.failures = append(l.failures, fmt.Sprintf("%s: %d %s", p.name, r.Code, r.Body))
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// stop ends the load and returns how many requests were made and those that failed.
func (l *fleetLoad) stop() (int, []string) {
	close(l.done)
	l.wg.Wait()
	return l.requests, l.failures
}
