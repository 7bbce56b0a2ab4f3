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

// Package fanout is benchmark scenario P1: a CachePurge fanned out to many cache pods.
// A kwok cluster (real apiserver, scheduler and DaemonSet controller; fake nodes) runs
// one CacheNode whose DaemonSet has a pod on each of Agents fake nodes; the operator runs
// as a process against it; and each pod's agent is a real edgepool-agent process
// supervising a real nginx on a disk of its own (a tmpfs mounted in the agent's private
// mount namespace), listening on its pod's IP (kwok gives pods loopback addresses). It
// measures CachePurge created → Complete (every node done), one purge at a time: by URL,
// then by tag (each agent's tag index naming the object's file), in turn.
//
// What differs from a real node, and why it does not touch what is measured:
//   - The bench is each pod's kubelet: it copies the CacheNode's ConfigMap into each
//     agent's config folder whenever it changes, as a ConfigMap volume.
//   - All nginx run in one network namespace, where 100 cannot share the listener and
//     stub_status ports: each agent's nginx.conf is rendered from the CacheNode's spec with
//     ports of its own (and its facts with it). operator.pub and purges.json are the
//     ConfigMap's as they are. A purge does not depend on either port.
//   - Each purge removes one object per disk, cached just before it through each nginx from
//     an origin in the bench: the figure is the fan-out (operator → every agent → signed,
//     checked, the file removed → status), not a disk walk, which TestPurgesUnderLoad
//     (test/agent) and the real node measure.
package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/cachepod"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
	"github.com/edgepool/edgepool/internal/test/testkit/clusterslot"
	"github.com/edgepool/edgepool/internal/test/testkit/kwokcluster"
)

// Options configure a run.
type Options struct {
	// Agents is the number of fake nodes, cache pods and agent processes (default 100).
	Agents int
	// Purges is the number of CachePurges of each kind (by URL, by tag) created, one after
	// the other (default 20).
	Purges int
	// RepoRoot is the repository root: ./cmd/manager and ./cmd/agent are built from it,
	// the CRDs read from it.
	RepoRoot string
	// KubeBin holds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and
	// etcd; KwokBin kwok and kwokctl; NginxBin is nginx.
	KubeBin, KwokBin, NginxBin string
	// Log receives progress lines.
	Log io.Writer
}

// Result is what a run measured. Durations are in milliseconds.
type Result struct {
	Agents int `json:"agents"`
	Purges int `json:"purges"`
	// StartupMs is from the first agent started to every agent ready.
	StartupMs float64 `json:"startupMs"`
	// Created → Complete with every node done, per purge by URL, in order.
	CompleteMs []float64 `json:"completeMs"`
	P50Ms      float64   `json:"p50Ms"`
	P99Ms      float64   `json:"p99Ms"`
	MaxMs      float64   `json:"maxMs"`
	// The same for the purges by tag.
	TagCompleteMs []float64 `json:"tagCompleteMs"`
	TagP50Ms      float64   `json:"tagP50Ms"`
	TagP99Ms      float64   `json:"tagP99Ms"`
	TagMaxMs      float64   `json:"tagMaxMs"`
	// ObjectsRemoved sums the purges' status.objectsRemoved (one per node and purge).
	ObjectsRemoved int64 `json:"objectsRemoved"`
	// AgentsRSSMiB is the agents' and their nginx's VmRSS summed, once ready (pages nginx's
	// master and worker share are counted in each).
	AgentsRSSMiB float64 `json:"agentsRssMiB"`
}

const (
	namespace = "edgepool-bench"
	cacheNode = "fanout"
	// Each agent's nginx gets listenBase+i and statusBase+i (see the package comment),
	// below the ephemeral ports (32768-60999), which a connection may hold at any time.
	listenBase = 21000
	statusBase = 22000
	// firstAgentUID is the first agent's user: unused ids, below nobody (65534).
	firstAgentUID = 40000
)

func (o Options) withDefaults() (Options, error) {
	if o.Agents == 0 {
		o.Agents = 100
	}
	if o.Purges == 0 {
		o.Purges = 20
	}
	if o.Agents < 0 || o.Agents > 250 || o.Purges < 0 {
		return o, errors.New("agents must be 1-250 (one /24 of pod addresses), purges not negative")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o, nil
}

type bench struct {
	opts      Options
	work      string
	k8s       client.Client
	agentBin  string
	agents    []*agentProc
	configsMu sync.Mutex
	origin    string
}

type agentProc struct {
	index  int
	pod    corev1.Pod
	config *testkit.ConfigDir
	proc   *testkit.Process
	addr   string
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.opts.Log, "P1: "+format+"\n", args...)
}

// Run runs P1.
func Run(ctx context.Context, opts Options) (res *Result, err error) {
	if opts, err = opts.withDefaults(); err != nil {
		return nil, err
	}
	if opts.RepoRoot, err = filepath.Abs(opts.RepoRoot); err != nil {
		return nil, err
	}
	b := &bench{opts: opts, work: filepath.Join(opts.RepoRoot, "tmp", "bench", "p1")}
	if err := os.RemoveAll(b.work); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(b.work, 0o755); err != nil {
		return nil, err
	}
	manager := filepath.Join(b.work, "manager")
	if err := testkit.GoBuild(ctx, opts.RepoRoot, manager, "./cmd/manager"); err != nil {
		return nil, err
	}
	if b.agentBin, err = testkit.AgentBinary(ctx, "", opts.RepoRoot, b.work); err != nil {
		return nil, err
	}
	stopCluster, err := b.startCluster(ctx)
	if err != nil {
		return nil, err
	}
	defer stopCluster()

	opLog, err := os.Create(filepath.Join(b.work, "operator.log"))
	if err != nil {
		return nil, err
	}
	defer opLog.Close()
	cmd := exec.Command(manager, "--kubeconfig", filepath.Join(b.work, "kubeconfig"), "--metrics-bind-address=0",
		"--health-probe-bind-address=0", "--agent-poll-interval=30s")
	cmd.Stdout, cmd.Stderr = opLog, opLog
	operator, err := testkit.Start(cmd)
	if err != nil {
		return nil, err
	}
	defer func() { _ = operator.Stop(20 * time.Second) }()
	defer b.stopAgents()

	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tag, ok := strings.CutPrefix(r.URL.Path, "/tagged/"); ok {
			w.Header().Set("Surrogate-Key", tag)
		}
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	defer origin.Close()
	b.origin = origin.Listener.Addr().String()
	pods, err := b.createFleet(ctx)
	if err != nil {
		return nil, err
	}
	res = &Result{Agents: opts.Agents, Purges: opts.Purges}
	if err := b.startAgents(ctx, pods, res); err != nil {
		return nil, err
	}
	if err := b.purges(ctx, res); err != nil {
		return nil, err
	}
	return res, nil
}

// startCluster creates the kwok cluster and installs the CRDs; the returned func deletes it.
func (b *bench) startCluster(ctx context.Context) (func(), error) {
	start := time.Now()
	c, err := kwokcluster.Start(ctx, kwokcluster.Options{Slot: clusterslot.PurgeFanout, Work: b.work,
		RepoRoot: b.opts.RepoRoot, KubeBin: b.opts.KubeBin, KwokBin: b.opts.KwokBin,
		Kwok: clusterslot.KwokSettings{Parallelism: 8}, QPS: 200, Burst: 400})
	if err != nil {
		return nil, err
	}
	b.logf("kwok cluster up in %s", time.Since(start).Round(time.Millisecond))
	b.k8s = c.Client
	return c.Stop, nil
}

// createFleet creates the fake nodes and the CacheNode, and waits for a running pod, with
// an address of its own, on every node.
func (b *bench) createFleet(ctx context.Context) ([]corev1.Pod, error) {
	if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return nil, err
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("200Gi"),
	}
	for i := range b.opts.Agents {
		name := fmt.Sprintf("p1-node-%03d", i)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels: map[string]string{"type": "kwok", "kubernetes.io/hostname": name, "edgepool.bench/group": "p1", "disk.edgepool.io/nvme": "1"}},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		}
		if err := b.k8s.Create(ctx, node); err != nil {
			return nil, fmt.Errorf("create Node: %w", err)
		}
	}
	cn := &v1alpha1.CacheNode{
		ObjectMeta: metav1.ObjectMeta{Name: cacheNode, Namespace: namespace},
		Spec: v1alpha1.CacheNodeSpec{
			Placement: v1alpha1.Placement{NodeSelector: map[string]string{"edgepool.bench/group": "p1"}},
			Origin:    v1alpha1.Origin{Servers: []string{b.origin}},
			Disks: []v1alpha1.Disk{{Name: "nvme0", Path: "/mnt/p1/nvme0", Media: v1alpha1.MediaNVMe,
				Size: resource.MustParse("8Mi"), KeysZoneSize: ptr.To(resource.MustParse("1Mi"))}},
		},
	}
	cn.Spec.Listener.WorkerProcesses = ptr.To(intstr.FromInt32(1))
	if err := b.k8s.Create(ctx, cn); err != nil {
		return nil, fmt.Errorf("create CacheNode: %w", err)
	}
	start := time.Now()
	var pods []corev1.Pod
	wait, cancel := testkit.WithTimeout(ctx, 2*time.Minute+time.Duration(b.opts.Agents)*time.Second)
	defer cancel()
	err := testkit.Eventually(wait, 250*time.Millisecond, "a running cache pod on every node", func() error {
		list := &corev1.PodList{}
		if err := b.k8s.List(ctx, list, client.InNamespace(namespace), client.MatchingLabels(cachepod.SelectorLabels(cn))); err != nil {
			return err
		}
		pods = pods[:0]
		ips := map[string]bool{}
		for _, p := range list.Items {
			if cachepod.AgentEndpoint(&p) != "" && !ips[p.Status.PodIP] {
				ips[p.Status.PodIP] = true
				pods = append(pods, p)
			}
		}
		if len(pods) != b.opts.Agents {
			// Say where each pod is, so that a stall shows whose it is: the DaemonSet
			// controller's (too few pods), the scheduler's (no node) or kwok's (not running).
			var seen []string
			for _, p := range list.Items {
				seen = append(seen, fmt.Sprintf("%s on %q %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP))
			}
			return fmt.Errorf("%d of %d pods running with addresses of their own (pods: %v)", len(pods), b.opts.Agents, seen)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	b.logf("%d cache pods running %s after the CacheNode's creation", len(pods), time.Since(start).Round(time.Millisecond))
	return pods, nil
}

// startAgents starts an agent for each pod, keeps their config folders in step with the
// ConfigMap, and waits until all are ready.
func (b *bench) startAgents(ctx context.Context, pods []corev1.Pod, res *Result) error {
	cn := &v1alpha1.CacheNode{}
	if err := b.k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cacheNode}, cn); err != nil {
		return err
	}
	var data map[string]string
	wait, cancel := testkit.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := testkit.Eventually(wait, 100*time.Millisecond, "the ConfigMap with the operator's key", func() error {
		var err error
		data, err = b.configMapData(ctx, cn)
		return err
	}); err != nil {
		return err
	}
	for i, pod := range pods {
		dir := filepath.Join(b.work, "agents", pod.Name)
		for _, sub := range []string{"config", "run", "disk"} {
			if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
				return err
			}
		}
		if err := os.Chown(filepath.Join(dir, "run"), agentUID(i), agentUID(i)); err != nil {
			return err
		}
		a := &agentProc{index: i, pod: pod, config: &testkit.ConfigDir{Dir: filepath.Join(dir, "config")}, addr: cachepod.AgentEndpoint(&pod)}
		if err := b.writeConfig(cn, a, data); err != nil {
			return err
		}
		b.agents = append(b.agents, a)
	}
	go b.kubelet(ctx, cn, data)

	start := time.Now()
	for _, a := range b.agents {
		if err := b.startAgent(a); err != nil {
			return err
		}
	}
	wait, cancel = testkit.WithTimeout(ctx, 2*time.Minute+time.Duration(b.opts.Agents)*time.Second)
	defer cancel()
	for _, a := range b.agents {
		agent := &testkit.Agent{Process: a.proc, Addr: a.addr}
		if err := agent.WaitReady(wait); err != nil {
			return fmt.Errorf("agent of %s (log %s): %w", a.pod.Name, filepath.Join(b.work, "agents", a.pod.Name, "agent.log"), err)
		}
	}
	res.StartupMs = testkit.Millis(time.Since(start))
	for _, a := range b.agents {
		res.AgentsRSSMiB += groupRSSMiB(a.proc.Pid())
	}
	b.logf("%d agents (and their nginx) ready in %.0f ms, %.0f MiB resident", len(b.agents), res.StartupMs, res.AgentsRSSMiB)
	return nil
}

// configMapData reads the CacheNode's ConfigMap from the API server, once it carries
// the operator's key.
func (b *bench) configMapData(ctx context.Context, cn *v1alpha1.CacheNode) (map[string]string, error) {
	cm := &corev1.ConfigMap{}
	if err := b.k8s.Get(ctx, client.ObjectKey{Namespace: namespace, Name: cachepod.ConfigMapName(cn)}, cm); err != nil {
		return nil, err
	}
	if cm.Data[agentapi.OperatorKeysKey] == "" {
		return nil, errors.New("no operator.pub yet")
	}
	return cm.Data, nil
}

// writeConfig swaps in an agent's ConfigMap volume: the ConfigMap's data, with nginx.conf
// and its facts rendered for the agent's own ports.
func (b *bench) writeConfig(cn *v1alpha1.CacheNode, a *agentProc, data map[string]string) error {
	spec := cn.Spec.DeepCopy()
	spec.Listener.Port, spec.Listener.StatusPort = int32(listenBase+a.index), int32(statusBase+a.index)
	conf, err := render.NginxConf(spec)
	if err != nil {
		return err
	}
	facts, err := json.Marshal(render.Facts(spec, conf))
	if err != nil {
		return err
	}
	files := map[string][]byte{}
	for k, v := range data {
		files[k] = []byte(v)
	}
	files[agentapi.ConfigKey], files[agentapi.FactsKey] = []byte(conf), facts
	b.configsMu.Lock()
	defer b.configsMu.Unlock()
	return a.config.Write(files)
}

// kubelet copies the ConfigMap into every agent's folder when it changes, as the kubelet
// does at once for a pod whose annotations changed.
func (b *bench) kubelet(ctx context.Context, cn *v1alpha1.CacheNode, last map[string]string) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		data, err := b.configMapData(ctx, cn)
		if err != nil || reflect.DeepEqual(data, last) {
			continue
		}
		for _, a := range b.agents {
			if err := b.writeConfig(cn, a, data); err != nil {
				b.logf("could not update the config of %s: %v", a.pod.Name, err)
			}
		}
		last = data
	}
}

// agentUID is the user agent i runs as. Each pod would be on a node of its own, and the
// kernel's per-user limits (128 inotify instances, of which an agent takes two) are per
// node: so each agent is a user of its own here.
func agentUID(i int) int { return firstAgentUID + i }

// startAgent runs an agent in a mount namespace of its own, where a tmpfs is its disk, as
// its own user (agentUID), on its pod's address.
func (b *bench) startAgent(a *agentProc) error {
	dir := filepath.Join(b.work, "agents", a.pod.Name)
	disk := filepath.Join(dir, "disk")
	log, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	args := []string{"--mount", "--propagation", "private", "--", "/bin/sh", "-c",
		fmt.Sprintf(`mount -t tmpfs -o size=16m,mode=0755,uid=%d,gid=%[1]d edgepool-p1 "$1" && shift && exec setpriv --reuid=%[1]d --regid=%[1]d --clear-groups -- "$@"`, agentUID(a.index)),
		"sh", disk, b.agentBin,
		"--listen", a.addr, "--nginx", b.opts.NginxBin, "--config-dir", a.config.Dir, "--run-dir", filepath.Join(dir, "run"),
		"--disk", fmt.Sprintf("name=nvme0,path=%s,media=NVMe", disk),
		"--cache-node", namespace + "/" + cacheNode, "--pod", namespace + "/" + a.pod.Name,
	}
	cmd := exec.Command("unshare", args...)
	cmd.Stdout, cmd.Stderr = log, log
	a.proc, err = testkit.Start(cmd)
	return err
}

func (b *bench) stopAgents() {
	var wg sync.WaitGroup
	for _, a := range b.agents {
		if a.proc != nil {
			wg.Go(func() { _ = a.proc.Stop(10 * time.Second) })
		}
	}
	wg.Wait()
}

// purges creates the purges one at a time, by URL and by tag in turn, and times each from
// its create to its Complete condition.
func (b *bench) purges(ctx context.Context, res *Result) error {
	var took, tagTook []time.Duration
	for i := range 2 * b.opts.Purges {
		p := &v1alpha1.CachePurge{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p1-%03d", i), Namespace: namespace},
			Spec: v1alpha1.CachePurgeSpec{CacheNode: cacheNode, Scope: v1alpha1.PurgeURLs,
				URLs: []string{fmt.Sprintf("http://www.example.com/p1/%d", i)}},
		}
		url := p.Spec.URLs[0]
		byTag := i%2 == 1
		if byTag { // the origin labels /tagged/<tag> with the tag
			tag := fmt.Sprintf("p1-%d", i)
			p.Spec.Scope, p.Spec.URLs, p.Spec.Tags = v1alpha1.PurgeTags, nil, []string{tag}
			url = "http://www.example.com/tagged/" + tag
		}
		if err := b.cache(ctx, url); err != nil {
			return err
		}
		start := time.Now()
		if err := b.k8s.Create(ctx, p); err != nil {
			return fmt.Errorf("create CachePurge: %w", err)
		}
		wait, cancel := testkit.WithTimeout(ctx, time.Minute)
		err := testkit.Eventually(wait, 5*time.Millisecond, "CachePurge "+p.Name+" Complete", func() error {
			if err := b.k8s.Get(ctx, client.ObjectKeyFromObject(p), p); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionComplete); c == nil || c.Status != metav1.ConditionTrue {
				return fmt.Errorf("done on %d of %d nodes", p.Status.DoneNodes, b.opts.Agents)
			}
			return nil
		})
		cancel()
		if err != nil {
			return err
		}
		d := time.Since(start)
		if int(p.Status.DoneNodes) != b.opts.Agents {
			return fmt.Errorf("CachePurge %s Complete with %d nodes done, want %d", p.Name, p.Status.DoneNodes, b.opts.Agents)
		}
		res.ObjectsRemoved += p.Status.ObjectsRemoved
		if byTag {
			tagTook = append(tagTook, d)
			res.TagCompleteMs = append(res.TagCompleteMs, testkit.Millis(d))
		} else {
			took = append(took, d)
			res.CompleteMs = append(res.CompleteMs, testkit.Millis(d))
		}
		b.logf("CachePurge %s (%s): created → Complete on %d nodes in %s", p.Name, p.Spec.Scope, p.Status.DoneNodes, d.Round(time.Millisecond))
	}
	res.P50Ms, res.P99Ms = testkit.Millis(testkit.Percentile(took, 50)), testkit.Millis(testkit.Percentile(took, 99))
	res.MaxMs = slices.Max(res.CompleteMs)
	res.TagP50Ms, res.TagP99Ms = testkit.Millis(testkit.Percentile(tagTook, 50)), testkit.Millis(testkit.Percentile(tagTook, 99))
	res.TagMaxMs = slices.Max(res.TagCompleteMs)
	return nil
}

// cache has every agent's nginx fetch url (http://host/path) from the origin and cache it.
func (b *bench) cache(ctx context.Context, url string) error {
	host, path, _ := strings.Cut(strings.TrimPrefix(url, "http://"), "/")
	for _, a := range b.agents {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/%s", listenBase+a.index, path), nil)
		if err != nil {
			return err
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("cache %s on %s: %w", url, a.pod.Name, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("cache %s on %s: %s", url, a.pod.Name, resp.Status)
		}
	}
	return nil
}

// groupRSSMiB sums VmRSS over pid and its descendants (the agent and its nginx).
func groupRSSMiB(pid int) float64 {
	var kib float64
	pids := []int{pid}
	for len(pids) > 0 {
		p := pids[0]
		pids = pids[1:]
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				var v float64
				_, _ = fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &v)
				kib += v
			}
		}
		children, _ := testkit.Children(p)
		pids = append(pids, children...)
	}
	return kib / 1024
}
