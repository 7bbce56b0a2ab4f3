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

// Package fleet is benchmark scenario C3: the operator in front of a fleet of thousands of
// nodes. A kwok cluster (real apiserver, scheduler, DaemonSet controller and garbage
// collector; fake nodes whose pods kwok marks running on loopback addresses) holds Nodes
// fake nodes in regions and tiers, with and without disks, and CacheNodes CacheNodes that
// select them: for each region, an edge CacheNode on the region's edge nodes with two NVMe
// disks, and a region CacheNode on all its nodes, eligible where two HDDs are. The
// operator runs as a process (its log at -v=5, which names every reconcile's CacheNode),
// and this process serves every cache pod's agent, answering /status as a real agent on a
// good node does, except a share of slow, hung and dead ones. It measures:
//   - creating the CacheNodes → every DaemonSet applied and every status observed with
//     the right node counts, then → converged: every pod ready, every status counting
//     them, each agent's report in (ConfigApplied); the operator's CPU and memory;
//   - a sweep of the agents with nothing changed: API writes (want 0) and reconciles;
//   - node label changes: which CacheNodes are reconciled (want: those selecting the node
//     before or after) and how long those reconciles take, at the full fleet and again
//     after shrinking it, so that a reconcile's cost shows how it grows with the fleet;
//   - a new operator's first sweep of every agent at once (as after a failover).
package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/controllers/cachenode"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
	"github.com/edgepool/edgepool/internal/test/testkit/clusterslot"
	"github.com/edgepool/edgepool/internal/test/testkit/kwokcluster"
)

// Options configure a run.
type Options struct {
	// Nodes is the number of fake nodes (default 5000); CacheNodes the number of
	// CacheNodes, two per region (default 20).
	Nodes, CacheNodes int
	// ShrinkTo is the fleet the label changes are measured on again (default Nodes/5;
	// negative: not at all).
	ShrinkTo int
	// Unhealthy is the share of agents that are slow, of those that hang and of those that
	// are dead, each (default 0.01).
	Unhealthy float64
	// PollInterval, AgentTimeout and AgentConcurrency are the operator's
	// --agent-poll-interval, --agent-timeout and --agent-concurrency (default 30s, 2s, 16:
	// its own defaults).
	PollInterval, AgentTimeout time.Duration
	AgentConcurrency           int
	// PromptPodExit deletes a terminating cache pod at once, as a real kubelet does when
	// the pod's processes exit. In kwok clusters a deleted pod was seen to stay Terminating
	// for 35-45 s (cause not found: kwokctl's stages delete it at once), which the smoke
	// need not wait for.
	PromptPodExit bool
	// Slot is the kwok cluster's name, ports and addresses (default clusterslot.Fleet, a
	// /19 of pods: room for 8,190); every address of its pod range is listened on. Work is
	// under RepoRoot/tmp/bench/<Work> (default c3).
	Slot clusterslot.Slot
	Work string
	// RepoRoot is the repository root: ./cmd/manager is built from it, the CRDs read from it.
	RepoRoot string
	// KubeBin holds kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and
	// etcd; KwokBin kwok and kwokctl.
	KubeBin, KwokBin string
	// Log receives progress lines.
	Log io.Writer
}

const (
	namespace = "edgepool-c3"
	agentPort = 19145
	// The labels that place the fleet.
	regionLabel = "topology.kubernetes.io/region"
	tierLabel   = "edgepool.bench/tier"
	fleetLabel  = "edgepool.bench/fleet"
)

func (o Options) withDefaults() (Options, error) {
	if o.Nodes == 0 {
		o.Nodes = 5000
	}
	if o.CacheNodes == 0 {
		o.CacheNodes = 20
	}
	if o.ShrinkTo == 0 {
		o.ShrinkTo = o.Nodes / 5
	}
	if o.Unhealthy == 0 {
		o.Unhealthy = 0.01
	}
	if o.PollInterval == 0 {
		o.PollInterval = 30 * time.Second
	}
	if o.AgentTimeout == 0 {
		o.AgentTimeout = 2 * time.Second
	}
	if o.AgentConcurrency == 0 {
		o.AgentConcurrency = 16
	}
	if o.Slot.Name == "" {
		o.Slot = clusterslot.Fleet
	}
	if o.Work == "" {
		o.Work = "c3"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	prefix, err := netip.ParsePrefix(o.Slot.PodCIDR)
	switch {
	case err != nil:
		return o, fmt.Errorf("pod CIDR: %w", err)
	case o.CacheNodes < 2 || o.CacheNodes%2 != 0:
		return o, errors.New("CacheNodes must be even (two per region) and at least 2")
	case o.Nodes < 10*o.CacheNodes:
		return o, errors.New("at least 10 nodes per CacheNode")
	case o.ShrinkTo >= o.Nodes || (o.ShrinkTo > 0 && o.ShrinkTo < 10*o.CacheNodes):
		return o, errors.New("shrink to fewer nodes than the fleet, and at least 10 per CacheNode")
	case o.Unhealthy < 0 || o.Unhealthy > 0.3:
		return o, errors.New("unhealthy share must be 0-0.3")
	case 1<<(32-prefix.Bits())-2 < o.Nodes:
		return o, fmt.Errorf("pod CIDR %s has fewer addresses than %d nodes", o.Slot.PodCIDR, o.Nodes)
	}
	return o, nil
}

// Result is what a run measured. Durations are in milliseconds.
type Result struct {
	Nodes      int     `json:"nodes"`
	CacheNodes int     `json:"cacheNodes"`
	Unhealthy  float64 `json:"unhealthy"`
	// Selected and Eligible sum the CacheNodes' expected counts; Pods is Eligible.
	Selected int `json:"selected"`
	Eligible int `json:"eligible"`
	// AppliedMs: created → every DaemonSet applied and every status observed for its
	// generation with the selected and eligible counts the labels imply.
	AppliedMs float64 `json:"appliedMs"`
	// PodsReadyMs: created → every DaemonSet's pods running and ready, none terminating:
	// the DaemonSet controller's, the scheduler's and kwok's part, which the statuses follow.
	PodsReadyMs float64 `json:"podsReadyMs"`
	// ConvergedMs: created → every DaemonSet's pods ready (kwok), every status counting
	// them ready, ConfigApplied True, and every live agent asked.
	ConvergedMs float64 `json:"convergedMs"`
	// The operator over created → converged: CPU seconds (user+system), resident memory at
	// the end and at its peak, its API writes (client metrics: POST, PUT, PATCH, DELETE).
	OperatorCPUSeconds float64 `json:"operatorCpuSeconds"`
	OperatorRSSMiB     float64 `json:"operatorRssMiB"`
	OperatorHWMMiB     float64 `json:"operatorHwmMiB"`
	ConvergeWrites     int     `json:"convergeWrites"`
	// NoOp is a poll interval with nothing changed: every live agent asked again.
	NoOp NoOpSweep `json:"noOp"`
	// Churn are the node label changes, at the full fleet and after the shrink.
	Churn []Churn `json:"churn"`
	// Sweep is a new operator's first round of every agent.
	Sweep Sweep `json:"sweep"`
}

// NoOpSweep is one poll interval in which no agent's answer changed.
type NoOpSweep struct {
	WindowMs       float64 `json:"windowMs"`
	AgentsAsked    int     `json:"agentsAsked"`
	OperatorWrites int     `json:"operatorWrites"`
	// APIWrites are the apiserver's writes to what only the operator writes: CacheNodes,
	// server-side applies, pod patches (apiserver_request_total).
	APIWrites  int `json:"apiWrites"`
	Reconciles int `json:"reconciles"`
}

// Churn is one node label change.
type Churn struct {
	Nodes int    `json:"nodes"`
	Event string `json:"event"`
	// Affected are the CacheNodes that select the node before or after; Reconciled the
	// reconciles of each CacheNode, by name, until the fleet converged again.
	Affected   []string       `json:"affected"`
	Reconciled map[string]int `json:"reconciled"`
	// ReconcileMs are the reconciles' durations; ConvergedMs is the change → converged.
	ReconcileMs []float64 `json:"reconcileMs"`
	// ObservedMs is the change → every status counting the nodes anew; ConvergedMs →
	// converged (a pod started or removed by the DaemonSet controller, scheduler and kwok).
	ObservedMs  float64 `json:"observedMs"`
	ConvergedMs float64 `json:"convergedMs"`
}

// Sweep is a new operator's first round of every agent.
type Sweep struct {
	Healthy, Slow, Hung, Dead int
	// FirstAskMs: operator started → first agent asked. HealthyMs: first ask → last healthy
	// agent answered. AllMs: first ask → every live agent asked and each ask over (the slow
	// and hung ones at the operator's timeout). Dead agents refuse at once and are not seen.
	FirstAskMs float64 `json:"firstAskMs"`
	HealthyMs  float64 `json:"healthyMs"`
	AllMs      float64 `json:"allMs"`
}

// node is the bench's model of one fake node's labels.
type node struct {
	name   string
	labels map[string]string
	// changed: a churn event changed it already.
	changed bool
}

type bench struct {
	opts     Options
	work     string
	cluster  *kwokcluster.Cluster
	k8s      client.Client
	manager  string
	operator *operator
	agents   *agents
	pods     cache.Indexer // the cache pods, as a watch delivers them
	// podsReady is when the last waitConverged first saw every DaemonSet's pods ready.
	podsReady time.Duration
	nodes     map[string]*node
	cns       []*v1alpha1.CacheNode
	res       *Result
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.opts.Log, "C3: "+format+"\n", args...)
}

// Run runs C3.
func Run(ctx context.Context, opts Options) (res *Result, err error) {
	if opts, err = opts.withDefaults(); err != nil {
		return nil, err
	}
	if opts.RepoRoot, err = filepath.Abs(opts.RepoRoot); err != nil {
		return nil, err
	}
	b := &bench{opts: opts, work: filepath.Join(opts.RepoRoot, "tmp", "bench", opts.Work), nodes: map[string]*node{},
		res: &Result{Nodes: opts.Nodes, CacheNodes: opts.CacheNodes, Unhealthy: opts.Unhealthy}}
	if err := os.RemoveAll(b.work); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(b.work, 0o755); err != nil {
		return nil, err
	}
	b.manager = filepath.Join(b.work, "manager")
	if err := testkit.GoBuild(ctx, opts.RepoRoot, b.manager, "./cmd/manager"); err != nil {
		return nil, err
	}
	prefix := netip.MustParsePrefix(opts.Slot.PodCIDR)
	if b.agents, err = startAgents(prefix, agentPort, 2*opts.AgentTimeout); err != nil {
		return nil, err
	}
	defer b.agents.stop()
	start := time.Now()
	b.cluster, err = kwokcluster.Start(ctx, kwokcluster.Options{
		Slot: opts.Slot, Work: b.work, RepoRoot: opts.RepoRoot, KubeBin: opts.KubeBin, KwokBin: opts.KwokBin,
		Kwok: clusterslot.KwokSettings{Parallelism: 16, NodeLeaseSeconds: 600}, NoQPSLimits: true,
	})
	if err != nil {
		return nil, err
	}
	defer b.cluster.Stop()
	b.k8s = b.cluster.Client
	b.logf("kwok cluster up in %s", time.Since(start).Round(time.Millisecond))
	stopWatch, err := b.watchPods(ctx)
	if err != nil {
		return nil, err
	}
	defer stopWatch()
	if err := b.createNodes(ctx); err != nil {
		return nil, err
	}
	if b.operator, err = startOperator(ctx, b.manager, b.cluster.Kubeconfig, filepath.Join(b.work, "operator.log"), opts); err != nil {
		return nil, err
	}
	defer func() { _ = b.operator.stop() }()
	if err := b.converge(ctx); err != nil {
		return nil, err
	}
	if err := b.noOpSweep(ctx); err != nil {
		return nil, err
	}
	if err := b.churn(ctx); err != nil {
		return nil, err
	}
	if err := b.sweep(ctx); err != nil {
		return nil, err
	}
	if opts.ShrinkTo > 0 {
		if err := b.shrink(ctx); err != nil {
			return nil, err
		}
		if err := b.churn(ctx); err != nil {
			return nil, err
		}
	}
	return b.res, nil
}

// nodeName names the fleet's node i.
func nodeName(i int) string { return fmt.Sprintf("c3-node-%05d", i) }

// nodeIndex is the index in a node's name, -1 if it is none of the fleet's.
func nodeIndex(name string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(name, "c3-node-"))
	if err != nil {
		return -1
	}
	return i
}

// regions is the number of regions: two CacheNodes each.
func (b *bench) regions() int { return b.opts.CacheNodes / 2 }

// nodeLabels places node i: region i mod regions; 70% edge nodes, each with two NVMe disks
// but one in twenty with none; the rest core nodes, with four HDDs and an NVMe.
func (b *bench) nodeLabels(i int) map[string]string {
	l := map[string]string{"type": "kwok", "kubernetes.io/hostname": nodeName(i), fleetLabel: "c3",
		regionLabel: fmt.Sprintf("r%d", i%b.regions())}
	if (i/b.regions())%10 < 7 {
		l[tierLabel] = "edge"
		if (i/b.regions())%20 == 3 {
			l[cachenode.DiskLabel(v1alpha1.MediaNVMe)] = "0"
		} else {
			l[cachenode.DiskLabel(v1alpha1.MediaNVMe)] = "2"
		}
	} else {
		l[tierLabel] = "core"
		l[cachenode.DiskLabel(v1alpha1.MediaHDD)] = "4"
		l[cachenode.DiskLabel(v1alpha1.MediaNVMe)] = "1"
	}
	return l
}

// behaviourOf says how the agent of a pod on node i answers: one in 1/Unhealthy of each
// kind, spread over the regions.
func (b *bench) behaviourOf(i int) behaviour {
	every := int(1 / b.opts.Unhealthy)
	switch i % every {
	case every / 4:
		return slow
	case every / 2:
		return hung
	case 3 * every / 4:
		return dead
	}
	return healthy
}

// createNodes creates the fleet, sixteen at a time.
func (b *bench) createNodes(ctx context.Context) error {
	start := time.Now()
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
	}
	if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		return err
	}
	for i := range b.opts.Nodes {
		b.nodes[nodeName(i)] = &node{name: nodeName(i), labels: b.nodeLabels(i)}
	}
	err := parallel(ctx, 16, b.opts.Nodes, func(i int) error {
		n := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels: b.nodeLabels(i)},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		}
		if err := b.k8s.Create(ctx, n); err != nil {
			return fmt.Errorf("create Node: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.logf("%d nodes created in %s", b.opts.Nodes, time.Since(start).Round(time.Millisecond))
	// A fleet is ready before its CacheNodes come: kwok marks each node Ready, and the node
	// lifecycle controller lifts its not-ready taint, which DaemonSet pods do not tolerate
	// for scheduling. Else the convergence measured would be kwok's start of the nodes.
	wait, cancel := testkit.WithTimeout(ctx, 5*time.Minute+time.Duration(b.opts.Nodes)*20*time.Millisecond)
	defer cancel()
	if err := testkit.Eventually(wait, 3*time.Second, "every node Ready and untainted", func() error {
		list := &corev1.NodeList{}
		if err := b.k8s.List(ctx, list, client.MatchingLabels{fleetLabel: "c3"}); err != nil {
			return err
		}
		notReady := 0
		for _, n := range list.Items {
			ready := false
			for _, c := range n.Status.Conditions {
				ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
			}
			if !ready || len(n.Spec.Taints) > 0 {
				notReady++
			}
		}
		if len(list.Items) != b.opts.Nodes || notReady > 0 {
			return fmt.Errorf("%d of %d nodes not Ready or tainted", notReady+b.opts.Nodes-len(list.Items), b.opts.Nodes)
		}
		return nil
	}); err != nil {
		return err
	}
	b.logf("%d nodes Ready and untainted %s after their creation", b.opts.Nodes, time.Since(start).Round(time.Millisecond))
	return nil
}

// parallel runs f(0..n-1), width at a time, and returns the first error.
func parallel(ctx context.Context, width, n int, f func(i int) error) error {
	work := make(chan int)
	errs := make(chan error, width)
	var wg sync.WaitGroup
	for range width {
		wg.Go(func() {
			for i := range work {
				if err := f(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range n {
		select {
		case work <- i:
		case err := <-errs:
			close(work)
			wg.Wait()
			return err
		case <-ctx.Done():
			close(work)
			wg.Wait()
			return ctx.Err()
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// cacheNodes are the fleet's CacheNodes: per region an edge one (its edge nodes, two
// NVMe disks) and a region one (all its nodes, two HDDs). The edge CacheNodes share their
// disk paths, as do the region ones, on nodes none of them share: the operator checks
// each pair for a conflict.
func (b *bench) cacheNodes() []*v1alpha1.CacheNode {
	var out []*v1alpha1.CacheNode
	for r := range b.regions() {
		region := fmt.Sprintf("r%d", r)
		for _, kind := range []string{"edge", "region"} {
			cn := &v1alpha1.CacheNode{ObjectMeta: metav1.ObjectMeta{Name: kind + "-" + region, Namespace: namespace},
				Spec: v1alpha1.CacheNodeSpec{Origin: v1alpha1.Origin{Servers: []string{"10.0.0.1:80"}}}}
			cn.Spec.NodeSelector = map[string]string{fleetLabel: "c3", regionLabel: region}
			media, paths := v1alpha1.MediaHDD, []string{"hdd0", "hdd1"}
			if kind == "edge" {
				cn.Spec.NodeSelector[tierLabel] = "edge"
				media, paths = v1alpha1.MediaNVMe, []string{"nvme0", "nvme1"}
			}
			for _, p := range paths {
				cn.Spec.Disks = append(cn.Spec.Disks, v1alpha1.Disk{Name: p, Path: "/mnt/disks/" + p, Media: media,
					Size: resource.MustParse("100Gi"), KeysZoneSize: ptr.To(resource.MustParse("16Mi"))})
			}
			cn.Spec.Listener.AgentPort = agentPort
			out = append(out, cn)
		}
	}
	return out
}

// expected is what a CacheNode's status should count, from the bench's model of the labels.
type expected struct{ selected, eligible int }

func (b *bench) expect(cn *v1alpha1.CacheNode) expected {
	selector := labels.SelectorFromSet(cn.Spec.NodeSelector)
	media := cn.Spec.Disks[0].Media
	var e expected
	for _, n := range b.nodes {
		if !selector.Matches(labels.Set(n.labels)) {
			continue
		}
		e.selected++
		if count, _ := strconv.Atoi(n.labels[cachenode.DiskLabel(media)]); count >= len(cn.Spec.Disks) {
			e.eligible++
		}
	}
	return e
}

// affected names the CacheNodes that select a node with labels before or after.
func (b *bench) affected(before, after map[string]string) []string {
	var out []string
	for _, cn := range b.cns {
		s := labels.SelectorFromSet(cn.Spec.NodeSelector)
		if s.Matches(labels.Set(before)) || s.Matches(labels.Set(after)) {
			out = append(out, cn.Name)
		}
	}
	sort.Strings(out)
	return out
}

// watchPods keeps b.pods in step with the cache pods and tells the fake agents about
// each running one.
func (b *bench) watchPods(ctx context.Context) (func(), error) {
	cs, err := kubernetes.NewForConfig(b.cluster.Config)
	if err != nil {
		return nil, err
	}
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", namespace, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	learn := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if ok && pod.DeletionTimestamp != nil && b.opts.PromptPodExit {
			go func() {
				_ = cs.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			}()
			return
		}
		// A pod on its way out is not asked; its address may already be a new pod's (kwok
		// reuses addresses), which its late updates must not take back.
		if !ok || pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || pod.Status.Phase != corev1.PodRunning {
			return
		}
		i := nodeIndex(pod.Spec.NodeName)
		if i < 0 {
			return
		}
		if err := b.agents.learn(pod, pod.Labels["app.kubernetes.io/instance"], b.behaviourOf(i)); err != nil {
			fmt.Fprintf(b.opts.Log, "C3: %v: the operator's asks to it are refused\n", err)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: learn, UpdateFunc: func(_, obj any) { learn(obj) },
	}); err != nil {
		return nil, err
	}
	b.pods = inf.GetIndexer()
	wctx, cancel := context.WithCancel(ctx)
	go inf.RunWithContext(wctx)
	if !cache.WaitForCacheSync(wctx.Done(), inf.HasSynced) {
		cancel()
		return nil, errors.New("the pod watch did not sync")
	}
	return cancel, nil
}

// converge creates the CacheNodes and waits until the fleet converged.
func (b *bench) converge(ctx context.Context) error {
	cpu0, err := b.operator.cpuSeconds()
	if err != nil {
		return err
	}
	writes0, err := b.operator.writes(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	for _, cn := range b.cacheNodes() {
		if err := b.k8s.Create(ctx, cn); err != nil {
			return fmt.Errorf("create CacheNode: %w", err)
		}
		// The answer of its healthy agents: the configuration the operator renders from the
		// spec as stored (with the API's defaults), every disk ready.
		conf, err := render.NginxConf(&cn.Spec)
		if err != nil {
			return err
		}
		st := &agentapi.Status{ConfigHash: agentapi.Hash([]byte(conf)), WindowSeconds: 60, WorkerProcesses: 1, Backlog: 511, Somaxconn: 4096}
		for _, d := range cn.Spec.Disks {
			st.Disks = append(st.Disks, agentapi.DiskStatus{Name: d.Name, Path: d.Path, Ready: true})
		}
		if err := b.agents.setStatus(cn.Name, st); err != nil {
			return err
		}
		b.cns = append(b.cns, cn)
	}
	for _, cn := range b.cns {
		e := b.expect(cn)
		b.res.Selected += e.selected
		b.res.Eligible += e.eligible
	}
	applied, err := b.waitConverged(ctx, start, 5*time.Minute+time.Duration(b.opts.Nodes)*50*time.Millisecond)
	if err != nil {
		return err
	}
	took := time.Since(start)
	b.res.AppliedMs, b.res.PodsReadyMs, b.res.ConvergedMs = testkit.Millis(applied), testkit.Millis(b.podsReady), testkit.Millis(took)
	cpu1, err := b.operator.cpuSeconds()
	if err != nil {
		return err
	}
	b.res.OperatorCPUSeconds = cpu1 - cpu0
	if b.res.OperatorRSSMiB, b.res.OperatorHWMMiB, err = b.operator.memory(); err != nil {
		return err
	}
	writes1, err := b.operator.writes(ctx)
	if err != nil {
		return err
	}
	b.res.ConvergeWrites = writes1 - writes0
	b.logf("%d CacheNodes: applied and observed in %s, converged (%d pods ready, agents asked) in %s; operator %.1f CPU s, %.0f MiB (peak %.0f), %d writes",
		len(b.cns), applied.Round(time.Millisecond), b.res.Eligible, took.Round(time.Millisecond),
		b.res.OperatorCPUSeconds, b.res.OperatorRSSMiB, b.res.OperatorHWMMiB, b.res.ConvergeWrites)
	return nil
}

// waitConverged waits until every CacheNode converged (see Result.ConvergedMs), and
// returns when they were first all applied and observed (see Result.AppliedMs), from start.
func (b *bench) waitConverged(ctx context.Context, start time.Time, timeout time.Duration) (time.Duration, error) {
	var applied time.Duration
	b.podsReady = 0
	var last error
	lastChange := time.Now()
	wait, cancel := testkit.WithTimeout(ctx, timeout)
	defer cancel()
	err := testkit.Eventually(wait, 250*time.Millisecond, "the fleet to converge", func() error {
		allApplied, clusterReady, err := b.converged(ctx)
		if allApplied && applied == 0 {
			applied = time.Since(start)
		}
		if clusterReady && b.podsReady == 0 {
			b.podsReady = time.Since(start)
		}
		if err != nil && (last == nil || err.Error() != last.Error()) {
			if time.Since(lastChange) > 5*time.Second {
				b.logf("waited %s for: %v", time.Since(lastChange).Round(time.Millisecond), last)
			}
			last, lastChange = err, time.Now()
		}
		return err
	})
	if err != nil {
		return 0, err
	}
	if last != nil && time.Since(lastChange) > 5*time.Second {
		b.logf("waited %s for: %v", time.Since(lastChange).Round(time.Millisecond), last)
	}
	if applied == 0 {
		applied = time.Since(start)
	}
	return applied, b.operator.waitIdle(ctx)
}

// converged checks every CacheNode: applied says that every DaemonSet exists and every
// status was observed with the expected counts; a nil error that the fleet converged.
func (b *bench) converged(ctx context.Context) (applied, clusterReady bool, err error) {
	cns, dss := &v1alpha1.CacheNodeList{}, &appsv1.DaemonSetList{}
	if err := b.k8s.List(ctx, cns, client.InNamespace(namespace)); err != nil {
		return false, false, err
	}
	if err := b.k8s.List(ctx, dss, client.InNamespace(namespace)); err != nil {
		return false, false, err
	}
	live := map[string]*appsv1.DaemonSet{}
	for i := range dss.Items {
		live[dss.Items[i].Name] = &dss.Items[i]
	}
	// The running pods with an address, per CacheNode, and those whose agent answers or
	// hangs (not the dead).
	running, askable := map[string]int{}, map[string][]*corev1.Pod{}
	terminating, waiting := 0, map[string]string{}
	for _, obj := range b.pods.List() {
		pod := obj.(*corev1.Pod)
		if pod.DeletionTimestamp != nil {
			// Not converged until gone: its deletion is a pod event, and a reconcile.
			terminating++
			continue
		}
		cn := pod.Labels["app.kubernetes.io/instance"]
		if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
			waiting[cn] = describePod(pod) // what the wait is for, in the log
			continue
		}
		running[cn]++
		if i := nodeIndex(pod.Spec.NodeName); i >= 0 && b.behaviourOf(i) != dead {
			askable[cn] = append(askable[cn], pod)
		}
	}
	asks := b.agents.asksOf()
	applied = len(cns.Items) == len(b.cns)
	clusterReady = applied && terminating == 0
	var problems []string
	for _, cn := range cns.Items {
		e := b.expect(&cn)
		st := cn.Status
		ds := live[cn.Name]
		if ds == nil || st.ObservedGeneration != cn.Generation || int(st.SelectedNodes) != e.selected || int(st.EligibleNodes) != e.eligible {
			applied, clusterReady = false, false
			problems = append(problems, fmt.Sprintf("%s: DaemonSet %v, observed %d/%d, selected %d/%d, eligible %d/%d", cn.Name, ds != nil,
				st.ObservedGeneration, cn.Generation, st.SelectedNodes, e.selected, st.EligibleNodes, e.eligible))
			continue
		}
		ready := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionConfigApplied)
		// Asked, and the answer (or the operator's giving up) half a second old: the
		// report is in, and a status that changes with it is being written.
		unasked, unaskedExample := 0, ""
		for _, p := range askable[cn.Name] {
			if len(asks[p.Name]) == 0 || time.Since(asks[p.Name][0].ended) < 500*time.Millisecond {
				if unasked++; unasked == 1 {
					// What the fake agents hold at its address: a bench fault shows there.
					unaskedExample = fmt.Sprintf(", e.g. %s at %s", p.Name, b.agents.describe(p.Status.PodIP))
				}
			}
		}
		podsReady := int(ds.Status.DesiredNumberScheduled) == e.eligible && int(ds.Status.NumberReady) == e.eligible && running[cn.Name] == e.eligible
		clusterReady = clusterReady && podsReady
		if !podsReady || int(st.ReadyNodes) != e.eligible || ready == nil || ready.Status != metav1.ConditionTrue || unasked > 0 {
			problems = append(problems, fmt.Sprintf("%s: DaemonSet %d desired, %d ready; %d pods running%s; status %d ready, ConfigApplied %v; %d agents not asked yet (of %d eligible)%s",
				cn.Name, ds.Status.DesiredNumberScheduled, ds.Status.NumberReady, running[cn.Name], waiting[cn.Name], st.ReadyNodes, ready != nil && ready.Status == metav1.ConditionTrue, unasked, e.eligible, unaskedExample))
		}
	}
	if terminating > 0 {
		problems = append(problems, fmt.Sprintf("%d pods terminating", terminating))
	}
	if len(problems) > 0 {
		sort.Strings(problems)
		return applied, clusterReady, fmt.Errorf("%d CacheNodes not converged, e.g. %s", len(problems), problems[0])
	}
	return applied, clusterReady, nil
}

// describePod says where a pod that is not running yet stands: its phase, node and the
// conditions that are not true.
func describePod(pod *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, " (%s %s on %q, created %s", pod.Name, pod.Status.Phase, pod.Spec.NodeName,
		pod.CreationTimestamp.Format(time.TimeOnly))
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			fmt.Fprintf(&b, "; %s %s: %s", c.Type, c.Reason, c.Message)
		}
	}
	b.WriteString(")")
	return b.String()
}

// apiWrites counts the apiserver's writes to what only the operator writes: CacheNodes
// (and their status), server-side applies, and pod patches (kwok writes pods' status).
func (b *bench) apiWrites(ctx context.Context) (int, error) {
	m, err := b.cluster.Metrics(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	m.Each("apiserver_request_total", func(l map[string]string, v float64) {
		switch {
		case l["resource"] == "cachenodes" && l["verb"] != "GET" && l["verb"] != "LIST" && l["verb"] != "WATCH",
			l["verb"] == "APPLY",
			l["resource"] == "pods" && l["subresource"] == "" && l["verb"] == "PATCH":
			n += int(v)
		}
	})
	return n, nil
}

// noOpSweep waits a poll interval in which every live agent is asked again, with nothing
// changed, and counts the writes and reconciles it caused.
func (b *bench) noOpSweep(ctx context.Context) error {
	logPath := b.operator.logPath
	offset := logSize(logPath)
	ow0, err := b.operator.writes(ctx)
	if err != nil {
		return err
	}
	aw0, err := b.apiWrites(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	live := b.livePods()
	wait, cancel := testkit.WithTimeout(ctx, 2*b.opts.PollInterval+time.Minute)
	defer cancel()
	if err := testkit.Eventually(wait, 500*time.Millisecond, "every live agent asked again", func() error {
		asks := b.agents.asksOf()
		left := 0
		for _, p := range live {
			if !askedSince(asks[p], start) {
				left++
			}
		}
		if left > 0 {
			return fmt.Errorf("%d of %d agents not asked again yet", left, len(live))
		}
		return nil
	}); err != nil {
		return err
	}
	// Any reconcile a changed report enqueued has had time to run.
	time.Sleep(2 * time.Second)
	if err := b.operator.waitIdle(ctx); err != nil {
		return err
	}
	ow1, err := b.operator.writes(ctx)
	if err != nil {
		return err
	}
	aw1, err := b.apiWrites(ctx)
	if err != nil {
		return err
	}
	recs, err := reconcilesSince(logPath, offset)
	if err != nil {
		return err
	}
	b.res.NoOp = NoOpSweep{WindowMs: testkit.Millis(time.Since(start)), AgentsAsked: len(live),
		OperatorWrites: ow1 - ow0, APIWrites: aw1 - aw0, Reconciles: len(recs)}
	b.logf("no-op sweep: %d agents asked again in %s: %d operator writes, %d API writes, %d reconciles",
		len(live), time.Since(start).Round(time.Millisecond), ow1-ow0, aw1-aw0, len(recs))
	return nil
}

// askedSince says whether an ask arrived after t and is over.
func askedSince(asks []ask, t time.Time) bool {
	for _, a := range asks {
		if a.arrived.After(t) {
			return true
		}
	}
	return false
}

// livePods names the running cache pods whose agents answer or hang (not the dead).
func (b *bench) livePods() []string {
	var out []string
	for _, obj := range b.pods.List() {
		pod := obj.(*corev1.Pod)
		if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
			continue
		}
		if i := nodeIndex(pod.Spec.NodeName); i >= 0 && b.behaviourOf(i) != dead {
			out = append(out, pod.Name)
		}
	}
	return out
}

// churnEvent is one label change on one node.
type churnEvent struct {
	name string
	// pick says whether a node may take the change; change changes its labels.
	pick   func(l map[string]string) bool
	change func(l map[string]string)
}

func (b *bench) churnEvents() []churnEvent {
	edge := func(l map[string]string) bool {
		return l[tierLabel] == "edge" && l[cachenode.DiskLabel(v1alpha1.MediaNVMe)] == "2"
	}
	return []churnEvent{
		{"an edge node becomes a core node (tier label)", edge, func(l map[string]string) {
			l[tierLabel] = "core"
			l[cachenode.DiskLabel(v1alpha1.MediaHDD)] = "4"
		}},
		{"an edge node moves to the next region", edge, func(l map[string]string) {
			r, _ := strconv.Atoi(strings.TrimPrefix(l[regionLabel], "r"))
			l[regionLabel] = fmt.Sprintf("r%d", (r+1)%b.regions())
		}},
		{"an edge node loses its NVMe disks (disk label)", edge, func(l map[string]string) {
			l[cachenode.DiskLabel(v1alpha1.MediaNVMe)] = "0"
		}},
		{"an edge node gets a label no CacheNode selects on", edge, func(l map[string]string) {
			l["edgepool.bench/rack"] = "a1"
		}},
	}
}

// churn makes each churn event on a node of its own, and waits for the fleet to converge
// after each.
func (b *bench) churn(ctx context.Context) error {
	used := map[string]bool{}
	for _, ev := range b.churnEvents() {
		var n *node
		// The lowest-numbered node not changed yet, alive after any shrink, and with a
		// healthy agent, so that convergence does not wait for a poll interval.
		for i := range b.opts.Nodes {
			c := b.nodes[nodeName(i)]
			if c != nil && !c.changed && ev.pick(c.labels) && b.behaviourOf(i) == healthy && !used[c.name] {
				n = c
				break
			}
		}
		if n == nil {
			return fmt.Errorf("no node for %q", ev.name)
		}
		used[n.name] = true
		n.changed = true
		before := maps.Clone(n.labels)
		ev.change(n.labels)
		affected := b.affected(before, n.labels)

		// The last step's late events (a DaemonSet's status once its deleted pods are
		// gone, say) may reach the operator after the fleet converged: they must not be
		// counted as this change's reconciles.
		quiet, cancel := testkit.WithTimeout(ctx, time.Minute)
		err := b.operator.waitQuiet(quiet, quietPeriod)
		cancel()
		if err != nil {
			return err
		}
		offset := logSize(b.operator.logPath)
		start := time.Now()
		live := &corev1.Node{}
		if err := b.k8s.Get(ctx, client.ObjectKey{Name: n.name}, live); err != nil {
			return err
		}
		patch := client.MergeFrom(live.DeepCopy())
		live.Labels = maps.Clone(n.labels)
		if err := b.k8s.Patch(ctx, live, patch); err != nil {
			return fmt.Errorf("label Node %s: %w", n.name, err)
		}
		observed, err := b.waitConverged(ctx, start, 2*time.Minute+b.opts.PollInterval)
		if err != nil {
			return fmt.Errorf("after %q on %s: %w", ev.name, n.name, err)
		}
		took := time.Since(start)
		time.Sleep(time.Second) // a late reconcile shows in the log
		if err := b.operator.waitIdle(ctx); err != nil {
			return err
		}
		recs, err := reconcilesSince(b.operator.logPath, offset)
		if err != nil {
			return err
		}
		c := Churn{Nodes: len(b.nodes), Event: ev.name, Affected: affected, Reconciled: map[string]int{},
			ObservedMs: testkit.Millis(observed), ConvergedMs: testkit.Millis(took)}
		for _, r := range recs {
			c.Reconciled[r.cacheNode]++
			c.ReconcileMs = append(c.ReconcileMs, testkit.Millis(r.took))
		}
		b.res.Churn = append(b.res.Churn, c)
		b.logf("%d nodes, %s (%s): CacheNodes affected %v, reconciled %v, reconciles took %v ms; converged in %s",
			len(b.nodes), ev.name, n.name, affected, c.Reconciled, c.ReconcileMs, took.Round(time.Millisecond))
	}
	return nil
}

// sweep starts a new operator, as after a failover: all agents are due at once. It
// measures its first round of every agent at the fake agents.
func (b *bench) sweep(ctx context.Context) error {
	if err := b.operator.stop(); err != nil {
		return err
	}
	live := map[string]behaviour{}
	for _, obj := range b.pods.List() {
		pod := obj.(*corev1.Pod)
		if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
			continue
		}
		if i := nodeIndex(pod.Spec.NodeName); i >= 0 {
			live[pod.Name] = b.behaviourOf(i)
		}
	}
	start := time.Now()
	var err error
	if b.operator, err = startOperator(ctx, b.manager, b.cluster.Kubeconfig, filepath.Join(b.work, "operator-2.log"), b.opts); err != nil {
		return err
	}
	s := Sweep{}
	var first, healthyDone, allDone time.Time
	wait, cancel := testkit.WithTimeout(ctx, 2*b.opts.PollInterval+time.Minute)
	defer cancel()
	err = testkit.Eventually(wait, 250*time.Millisecond, "the new operator's first sweep", func() error {
		asks := b.agents.asksOf()
		s = Sweep{}
		first, healthyDone, allDone = time.Time{}, time.Time{}, time.Time{}
		left := 0
		for pod, bh := range live {
			switch bh {
			case healthy:
				s.Healthy++
			case slow:
				s.Slow++
			case hung:
				s.Hung++
			case dead:
				s.Dead++
				continue
			}
			var mine *ask
			for i := range asks[pod] {
				if asks[pod][i].arrived.After(start) {
					mine = &asks[pod][i]
					break
				}
			}
			if mine == nil {
				left++
				continue
			}
			if first.IsZero() || mine.arrived.Before(first) {
				first = mine.arrived
			}
			if mine.ended.After(allDone) {
				allDone = mine.ended
			}
			if bh == healthy && mine.ended.After(healthyDone) {
				healthyDone = mine.ended
			}
		}
		if left > 0 {
			return fmt.Errorf("%d agents not asked yet", left)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.FirstAskMs = testkit.Millis(first.Sub(start))
	s.HealthyMs, s.AllMs = testkit.Millis(healthyDone.Sub(first)), testkit.Millis(allDone.Sub(first))
	b.res.Sweep = s
	b.logf("new operator's first sweep: %d healthy, %d slow, %d hung, %d dead agents; first ask %s after start, healthy ones done %s later, all %s later",
		s.Healthy, s.Slow, s.Hung, s.Dead, first.Sub(start).Round(time.Millisecond), healthyDone.Sub(first).Round(time.Millisecond), allDone.Sub(first).Round(time.Millisecond))
	// The new operator publishes its key; the fleet is as before once it settled.
	_, err = b.waitConverged(ctx, time.Now(), 2*time.Minute+b.opts.PollInterval)
	return err
}

// shrink deletes the nodes from ShrinkTo on and waits for the fleet to converge on the rest.
func (b *bench) shrink(ctx context.Context) error {
	start := time.Now()
	from, to := b.opts.ShrinkTo, b.opts.Nodes
	if err := parallel(ctx, 16, to-from, func(i int) error {
		err := b.k8s.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(from + i)}})
		return client.IgnoreNotFound(err)
	}); err != nil {
		return err
	}
	for i := from; i < to; i++ {
		delete(b.nodes, nodeName(i))
	}
	// The pods of deleted nodes go with the pod garbage collector, after its quarantine;
	// the bench deletes them at once, and any the DaemonSet controller made meanwhile, so
	// that none goes later, in a measured window.
	wait, cancel := testkit.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := testkit.Eventually(wait, time.Second, "no pod on a deleted node", func() error {
		var orphans []corev1.Pod
		for _, obj := range b.pods.List() {
			if pod := obj.(*corev1.Pod); pod.Spec.NodeName != "" && b.nodes[pod.Spec.NodeName] == nil {
				orphans = append(orphans, *pod)
			}
		}
		if len(orphans) == 0 {
			return nil
		}
		if err := parallel(ctx, 16, len(orphans), func(i int) error {
			return client.IgnoreNotFound(b.k8s.Delete(ctx, &orphans[i], client.GracePeriodSeconds(0)))
		}); err != nil {
			return err
		}
		return fmt.Errorf("%d pods on deleted nodes", len(orphans))
	}); err != nil {
		return err
	}
	if _, err := b.waitConverged(ctx, start, 5*time.Minute); err != nil {
		return err
	}
	b.logf("shrunk to %d nodes in %s", len(b.nodes), time.Since(start).Round(time.Millisecond))
	return nil
}

// operator is the manager binary as a process, with its metrics on a loopback port.
type operator struct {
	*testkit.Process
	logPath, metricsURL string
}

func startOperator(ctx context.Context, binary, kubeconfig, logPath string, opts Options) (*operator, error) {
	port, err := testkit.FreePort()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(binary, "--kubeconfig", kubeconfig, "--leader-elect=false",
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port), "--health-probe-bind-address=0",
		"--agent-poll-interval="+opts.PollInterval.String(), "--agent-timeout="+opts.AgentTimeout.String(),
		fmt.Sprintf("--agent-concurrency=%d", opts.AgentConcurrency),
		// At 5 controller-runtime names each reconcile's object; JSON, so the bench can read it.
		"--zap-log-level=5", "--zap-encoder=json", "--zap-time-encoding=rfc3339nano")
	cmd.Stdout, cmd.Stderr = log, log
	p, err := testkit.Start(cmd)
	if err != nil {
		return nil, err
	}
	o := &operator{Process: p, logPath: logPath, metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", port)}
	if err := o.Poll(ctx, 100*time.Millisecond, "the operator's /metrics", func() error {
		_, err := o.metrics(ctx)
		return err
	}); err != nil {
		_ = o.stop()
		return nil, err
	}
	return o, nil
}

var metricsClient = &http.Client{Timeout: 10 * time.Second}

func (o *operator) metrics(ctx context.Context) (testkit.Metrics, error) {
	body, err := testkit.Get(ctx, metricsClient, o.metricsURL)
	if err != nil {
		return nil, err
	}
	return testkit.ParseMetrics(body)
}

// writes counts the operator's write requests (its client's metrics).
func (o *operator) writes(ctx context.Context) (int, error) {
	m, err := o.metrics(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, verb := range []string{"POST", "PUT", "PATCH", "DELETE"} {
		n += int(m.Sum("rest_client_requests_total", map[string]string{"method": verb}))
	}
	return n, nil
}

// waitIdle waits until the CacheNode controller has nothing queued or running.
func (o *operator) waitIdle(ctx context.Context) error { return o.waitQuiet(ctx, 0) }

// quietPeriod is how long the operator reconciles nothing before a churn event.
const quietPeriod = 2 * time.Second

// waitQuiet waits until the CacheNode controller is idle and has started no reconcile for
// the last d.
func (o *operator) waitQuiet(ctx context.Context, d time.Duration) error {
	ctrl := map[string]string{"controller": "cachenode"}
	last, since := -1.0, time.Now()
	return o.Poll(ctx, 100*time.Millisecond, "an idle CacheNode controller", func() error {
		m, err := o.metrics(ctx)
		if err != nil {
			return err
		}
		if q, w := m.Sum("workqueue_depth", ctrl), m.Sum("controller_runtime_active_workers", ctrl); q+w > 0 {
			return fmt.Errorf("%v queued, %v running", q, w)
		}
		if total := m.Sum("controller_runtime_reconcile_total", ctrl); total != last {
			last, since = total, time.Now()
		}
		if quiet := time.Since(since); quiet < d {
			return fmt.Errorf("quiet for %s", quiet.Round(time.Millisecond))
		}
		return nil
	})
}

func (o *operator) cpuSeconds() (float64, error) {
	p, err := procfs.NewProc(o.Pid())
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return st.CPUTime(), nil
}

// memory reads the operator's VmRSS and VmHWM, in MiB.
func (o *operator) memory() (rss, hwm float64, err error) {
	p, err := procfs.NewProc(o.Pid())
	if err != nil {
		return 0, 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0, err
	}
	return float64(st.VmRSS) / (1 << 20), float64(st.VmHWM) / (1 << 20), nil
}

func (o *operator) stop() error { return o.Stop(20 * time.Second) }
