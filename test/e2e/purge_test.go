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
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// purgeObjects is how many objects TestRealNodePurgesOfManyObjects caches and then
// purges: small by default, so the suite stays short; the issues' figure is 100000.
var purgeObjects = flag.Int("purge-objects", 5000, "objects the real node's prefix purge test caches and purges")

// A purge made with `edgepool purge` reaches the real cache pod: the operator signs it
// with the key it published in the CacheNode's ConfigMap, which the kubelet delivered to
// the pod, and the agent removes the object from nginx's cache on the real disk. The
// command returns when the CachePurge is Complete; the purged object is a MISS next,
// refilled from the origin, and the others are still HITs.
func TestRealNodePurgeWithTheCLI(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	origin, hits := newOrigin(t, "origin")
	cn := realCacheNode(t, ns, "purged", origin)
	_, base := runCache(t, g, cn)
	for _, o := range []string{"/p/1", "/p/2"} {
		get(g, base+o)
		_, status := get(g, base+o)
		g.Expect(status).To(Equal("HIT"), o)
	}
	before := hits()

	cli := filepath.Join(t.TempDir(), "edgepool")
	g.Expect(testkit.GoBuild(context.Background(), root, cli, "./cmd/edgepool")).To(Succeed())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	started := time.Now()
	out, err := exec.CommandContext(ctx, cli, "purge", "--kubeconfig", kubeconfig, "-n", ns, cn.Name,
		"--url", fmt.Sprintf("http://%s/p/1", siteHost), "--timeout", "2m").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "edgepool purge: %s", out)
	t.Logf("edgepool purge returned after %s:\n%s", time.Since(started).Round(time.Millisecond), out)
	g.Expect(string(out)).To(ContainSubstring("1/1 nodes done"))

	_, status := get(g, base+"/p/1")
	g.Expect(status).To(Equal("MISS"), "the purged object")
	g.Expect(hits()).To(Equal(before+1), "the purged object is refilled from the origin, once")
	_, status = get(g, base+"/p/2")
	g.Expect(status).To(Equal("HIT"), "an object the purge did not name")
}

// Purges of many objects on the real node: the objects are cached through nginx from the
// origin (real cache files, on two loop-device disks), then a CachePurge by tag removes the
// tenth of them the origin labelled tenth (each disk's tag index names their files), and
// a CachePurge of their prefix removes the others (every cache file read), while a client
// keeps asking for a hot object outside the prefix, which stays a HIT throughout. The fill
// time, each purge's time and the hot object's latency before and during each purge are
// logged, not asserted.
func TestRealNodePurgesOfManyObjects(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	origin, hits := newOrigin(t, "origin")
	objects := *purgeObjects
	// Each cached object takes an inode and a 4 KiB block, and levels=1:2 4,096 directories:
	// disks of 4 KiB per inode, big enough for their half of the objects, twice over.
	perDisk := int64(objects/2+4096) * 4096 * 2
	size := max(128<<20, perDisk+64<<20)
	cn := &v1alpha1.CacheNode{
		ObjectMeta: metav1.ObjectMeta{Name: "bulk", Namespace: ns},
		Spec: v1alpha1.CacheNodeSpec{
			Placement: v1alpha1.Placement{
				NodeSelector: map[string]string{"kubernetes.io/hostname": realNodeName},
				Tolerations:  []corev1.Toleration{{Key: realNodeTaint.Key, Operator: corev1.TolerationOpExists}},
			},
			Origin: v1alpha1.Origin{Servers: []string{origin}},
		},
	}
	for _, d := range []struct {
		name  string
		media v1alpha1.Media
	}{{"ssd0", v1alpha1.MediaSSD}, {"hdd0", v1alpha1.MediaHDD}} {
		path, _ := node.newDiskOfSize(t, "bulk-"+d.name, d.media, true, strconv.FormatInt(size, 10), "-i", "4096")
		cn.Spec.Disks = append(cn.Spec.Disks, v1alpha1.Disk{Name: d.name, Path: path, Media: d.media,
			Size: *resource.NewQuantity(size-64<<20, resource.BinarySI), KeysZoneSize: ptr.To(resource.MustParse("16Mi"))})
	}
	_, base := runCache(t, g, cn)

	// Fill: every object a MISS, stored by nginx.
	filler := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	started := time.Now()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(objects); i = next.Add(1) - 1 {
				r, err := testkit.Fetch(ctx, filler, fmt.Sprintf("%s/bulk/%d", base, i), http.Header{"Host": {siteHost}})
				if err != nil || r.Code != http.StatusOK || r.Header.Get("X-Cache-Status") != "MISS" {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	fill := time.Since(started)
	g.Expect(failed.Load()).To(BeZero(), "fills that failed or were not a MISS")
	g.Expect(hits()).To(Equal(objects))
	get(g, base+"/hot/1")
	_, status := get(g, base+"/hot/1")
	g.Expect(status).To(Equal("HIT"))
	count := func() int {
		total := 0
		for _, d := range cn.Spec.Disks {
			out := node.exec(t, "sh", "-c", fmt.Sprintf("find %s/%s -type f -user 101 | wc -l", d.Path, agentapi.DiskCacheDir))
			n, err := strconv.Atoi(strings.TrimSpace(out))
			g.Expect(err).NotTo(HaveOccurred(), out)
			total += n
		}
		return total
	}
	g.Eventually(count, timeout, interval).Should(Equal(objects+1), "cache files on the disks")
	t.Logf("filled %d objects through nginx in %s (%.0f objects/s)", objects, fill.Round(time.Millisecond), float64(objects)/fill.Seconds())

	hot := func(stop <-chan struct{}, n int) (took []time.Duration, notHit []string) {
		for i := 0; n == 0 || i < n; i++ {
			select {
			case <-stop:
				return took, notHit
			default:
			}
			start := time.Now()
			r, err := testkit.Fetch(ctx, http.DefaultClient, base+"/hot/1", http.Header{"Host": {siteHost}})
			took = append(took, time.Since(start))
			switch {
			case err != nil:
				notHit = append(notHit, err.Error())
			case r.Code != http.StatusOK || r.Header.Get("X-Cache-Status") != "HIT":
				notHit = append(notHit, fmt.Sprintf("%d %s", r.Code, r.Header.Get("X-Cache-Status")))
			}
			time.Sleep(10 * time.Millisecond)
		}
		return took, notHit
	}
	before, notHit := hot(nil, 300)
	g.Expect(notHit).To(BeEmpty())
	t.Logf("hot object (HIT every time) before the purges: p50/p99/max %s/%s/%s over %d requests",
		testkit.Percentile(before, 50), testkit.Percentile(before, 99), testkit.Percentile(before, 100), len(before))

	// purge creates a CachePurge of spec and waits until it is Complete, while the hot
	// object is asked for.
	purge := func(name string, spec v1alpha1.CachePurgeSpec) *v1alpha1.CachePurge {
		spec.CacheNode = cn.Name
		p := &v1alpha1.CachePurge{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
		stop := make(chan struct{})
		type hotResult struct {
			took   []time.Duration
			notHit []string
		}
		during := make(chan hotResult, 1)
		go func() { took, notHit := hot(stop, 0); during <- hotResult{took, notHit} }()
		started := time.Now()
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionComplete)).To(BeTrue(), "%+v", p.Status)
		}, 10*time.Minute, 50*time.Millisecond).Should(Succeed())
		took := time.Since(started)
		close(stop)
		d := <-during
		g.Expect(d.notHit).To(BeEmpty(), "the hot object during the purge")
		t.Logf("%s purge of %d objects: created → Complete in %s; hot object (HIT every time) p50/p99/max %s/%s/%s over %d requests during it",
			name, p.Status.ObjectsRemoved, took.Round(time.Millisecond),
			testkit.Percentile(d.took, 50), testkit.Percentile(d.took, 99), testkit.Percentile(d.took, 100), len(d.took))
		return p
	}
	tagged := (objects + 9) / 10
	p := purge("tag", v1alpha1.CachePurgeSpec{Scope: v1alpha1.PurgeTags, Tags: []string{"tenth"}})
	g.Expect(p.Status.ObjectsRemoved).To(BeEquivalentTo(tagged))
	g.Expect(count()).To(Equal(objects-tagged+1), "cache files left: the untagged and the hot object")
	p = purge("prefix", v1alpha1.CachePurgeSpec{Scope: v1alpha1.PurgePrefixes,
		Prefixes: []v1alpha1.PurgeHost{{Host: siteHost, Paths: []string{"/bulk/"}}}})
	g.Expect(p.Status.ObjectsRemoved).To(BeEquivalentTo(objects - tagged))
	g.Expect(count()).To(Equal(1), "cache files left: the hot object's")

	for _, i := range []int{objects / 2, objects/2 + 1} {
		_, status = get(g, fmt.Sprintf("%s/bulk/%d", base, i))
		g.Expect(status).To(Equal("MISS"), "a purged object")
	}
}

// An agent that is down while a purge is pending catches up when it returns. The cache
// pod is cut off from the operator (its agent port dropped on the node) and its processes
// are stopped (SIGSTOP: a hung pod, neither the operator's request nor the ConfigMap's
// list can reach its agent); the purge is created and stays Pending, and its list,
// announced on the pod, reaches the pod's volume. Then the hung container is killed and the
// kubelet restarts it: its agent applies the listed purge before nginx serves again, so the
// purged object is a MISS while the operator still cannot reach the pod. Once the pod is
// reachable, the purge goes Complete with the object the catch-up removed.
func TestRealNodePurgeCatchesUpAfterTheAgentWasDown(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	origin, hits := newOrigin(t, "origin")
	cn := realCacheNode(t, ns, "down", origin)
	pod, base := runCache(t, g, cn)
	for _, o := range []string{"/p/1", "/p/2"} {
		get(g, base+o)
		_, status := get(g, base+o)
		g.Expect(status).To(Equal("HIT"), o)
	}

	rule := []string{"FORWARD", "-s", linkHost, "-d", pod.Status.PodIP, "-p", "tcp", "--dport", strconv.Itoa(int(cn.Spec.Listener.AgentPort)), "-j", "DROP"}
	node.exec(t, append([]string{"iptables", "-I"}, rule...)...)
	blocked := true
	unblock := func() {
		if blocked {
			node.exec(t, append([]string{"iptables", "-D"}, rule...)...)
			blocked = false
		}
	}
	t.Cleanup(unblock)

	agent, procs := containerProcs(t, pod, agentCommand)
	for _, pid := range procs {
		g.Expect(syscall.Kill(pid, syscall.SIGSTOP)).To(Succeed())
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			for _, pid := range procs {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		}
	})

	p := &v1alpha1.CachePurge{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: ns},
		Spec: v1alpha1.CachePurgeSpec{CacheNode: cn.Name, Scope: v1alpha1.PurgeURLs, URLs: []string{fmt.Sprintf("http://%s/p/1", siteHost)}}}
	created := time.Now()
	g.Expect(k8s.Create(ctx, p)).To(Succeed())
	// The list reaches the pod's volume at once: the operator announced it on the pod.
	volume := fmt.Sprintf("%s/*/kubelet/pods/%s/volumes/kubernetes.io~configmap/config/%s %[1]s/kubelet/root/pods/%[2]s/volumes/kubernetes.io~configmap/config/%[3]s",
		node.dir, pod.UID, agentapi.ActivePurgesKey)
	g.Eventually(func() string {
		out, _ := node.run("exec", "sh", "-c", "cat "+volume+" 2>/dev/null; true")
		return out
	}, timeout, 20*time.Millisecond).Should(ContainSubstring(string(p.UID)))
	inVolume := time.Since(created)
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		g.Expect(p.Status.PendingNodes).To(BeEquivalentTo(1))
		g.Expect(meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionComplete)).NotTo(BeNil())
	}, timeout, interval).Should(Succeed())
	c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionComplete)
	t.Logf("purge pending while the pod is cut off: %s: %s; its list in the pod's volume %s after its creation", c.Reason, c.Message, inVolume.Round(time.Millisecond))

	// The hung container's agent (its PID 1, and with it the container) is killed; the
	// kubelet restarts it.
	restarts := pod.Status.ContainerStatuses[0].RestartCount
	g.Expect(syscall.Kill(agent, syscall.SIGKILL)).To(Succeed())
	stopped = false
	killed := time.Now()
	g.Eventually(func(g Gomega) {
		pod = cachePod(g, ns, cn.Name)
		g.Expect(pod.Status.ContainerStatuses[0].RestartCount).To(BeNumerically(">", restarts))
		g.Expect(podReady(pod)).To(BeTrue())
	}, timeout, interval).Should(Succeed())
	t.Logf("cache container killed; restarted and Ready again after %s", time.Since(killed).Round(time.Millisecond))

	// Back, still unreachable for the operator: the purge was applied before nginx served.
	before := hits()
	_, status := get(g, base+"/p/1")
	g.Expect(status).To(Equal("MISS"), "the object purged while the agent was down")
	g.Expect(hits()).To(Equal(before + 1))
	_, status = get(g, base+"/p/2")
	g.Expect(status).To(Equal("HIT"), "an object the purge did not name")
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
	g.Expect(p.Status.PendingNodes).To(BeEquivalentTo(1), "the operator reached the pod while it was cut off")
	logs, err := kubectl("logs", "-n", ns, pod.Name, "-c", "cache")
	g.Expect(err).NotTo(HaveOccurred(), logs)
	var caughtUp []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "Applied a purge made while this pod was away") || strings.Contains(line, "Emptied the cache") {
			caughtUp = append(caughtUp, line)
		}
	}
	g.Expect(caughtUp).NotTo(BeEmpty(), "the restarted agent's log:\n%s", logs)
	g.Expect(caughtUp).To(ContainElement(ContainSubstring(string(p.UID))))
	t.Logf("the restarted agent caught up:\n%s", strings.Join(caughtUp, "\n"))

	unblock()
	reachable := time.Now()
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionComplete)).To(BeTrue(), "%+v", p.Status)
	}, timeout, 50*time.Millisecond).Should(Succeed())
	g.Expect(p.Status.DoneNodes).To(BeEquivalentTo(1))
	g.Expect(p.Status.ObjectsRemoved).To(BeEquivalentTo(1), "the catch-up's count")
	t.Logf("pod reachable again → purge Complete in %s (created → Complete %s); objects removed %d",
		time.Since(reachable).Round(time.Millisecond), time.Since(created).Round(time.Millisecond), p.Status.ObjectsRemoved)
}

// agentCommand is the name of the cache container's entrypoint, as /proc/PID/comm shows it.
const agentCommand = "edgepool-agent"

// containerProcs finds, from this machine's view, the process named comm that is PID 1 of a
// container of pod, and every process of that container, through the pod's memory cgroup
// (hack/node/node.sh records the node's).
func containerProcs(t *testing.T, pod *corev1.Pod, comm string) (init int, all []int) {
	t.Helper()
	cgroups, err := os.ReadFile(filepath.Join(node.dir, "cgroups"))
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range strings.Fields(string(cgroups)) {
		if !strings.HasPrefix(dir, "/sys/fs/cgroup/memory/") {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, "kubepods", "*", "pod"+string(pod.UID), "*", "cgroup.procs"))
		for _, f := range files {
			data, _ := os.ReadFile(f)
			var pids []int
			init = 0
			for _, field := range strings.Fields(string(data)) {
				pid, _ := strconv.Atoi(field)
				pids = append(pids, pid)
				name, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
				status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
				if strings.TrimSpace(string(name)) == comm && nsPID1(string(status)) {
					init = pid
				}
			}
			if init != 0 {
				return init, pids
			}
		}
	}
	t.Fatalf("no process %s is PID 1 of a container of pod %s", comm, pod.Name)
	return 0, nil
}

// nsPID1 says whether a /proc/PID/status is of a process that is PID 1 in its own PID namespace.
func nsPID1(status string) bool {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			f := strings.Fields(rest)
			return len(f) > 1 && f[len(f)-1] == "1"
		}
	}
	return false
}
