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

// Package controlplane is benchmark scenario C1: the real operator binary against a real
// kube-apiserver and etcd (envtest). It measures create and update latencies, the time a
// burst of CacheNodes takes to converge, the API writes of a no-op resync after a restart,
// and the operator's memory.
//
// envtest has no DaemonSet controller, scheduler or nodes: the operator's work here is
// rendering, applying and status, which is what scales with the number of CacheNodes.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// Options configure a run.
type Options struct {
	// CacheNodes is the size of the burst (c), also the fleet of the resync (d) and the
	// memory reading (e). Default 1000.
	CacheNodes int
	// Sequential is K, the CacheNodes created and then updated one at a time for the
	// latencies (a) and (b). Default 20.
	Sequential int
	// RepoRoot is the repository root, where ./cmd/manager is built and the CRDs are read.
	// Default: the current directory.
	RepoRoot string
	// Log receives progress lines and, on failure, the tail of the operator's log.
	Log io.Writer
}

// Result is what a run measured. Durations are in milliseconds, memory in MiB.
type Result struct {
	CacheNodes int `json:"cacheNodes"`
	Sequential int `json:"sequential"`

	// (a) CacheNode created -> its ConfigMap and DaemonSet both seen, one at a time.
	CreateP50Ms float64 `json:"createP50Ms"`
	CreateP99Ms float64 `json:"createP99Ms"`
	// (b) spec changed -> ConfigMap seen with the new nginx.conf, one at a time.
	UpdateP50Ms float64 `json:"updateP50Ms"`
	UpdateP99Ms float64 `json:"updateP99Ms"`

	// (c) CacheNodes created in a burst: the time to send the creates, and from the
	// first create to the last CacheNode having its ConfigMap, DaemonSet and a status of
	// its generation.
	// BurstWriteBreakdown is the apiserver's count of mutating requests from the burst's
	// first create to the operator going idle, per "VERB resource[/subresource]" (the
	// creates themselves are the POSTs of cachenodes).
	BurstSubmitMs       float64        `json:"burstSubmitMs"`
	BurstConvergeMs     float64        `json:"burstConvergeMs"`
	Converged           int            `json:"converged"`
	BurstWriteBreakdown map[string]int `json:"burstWriteBreakdown,omitempty"`

	// (d) the operator restarted with every CacheNode converged: the time from its start
	// to having reconciled all of them and gone idle, the reconciles it made, and the
	// writes. WritesPerNoopResync is the apiserver's count (apiserver_request_total) of
	// mutating requests in that window, except to leases and events; those are in
	// ExcludedWrites (with leader election off, the operator writes no leases: they are
	// the apiserver's own heartbeat). OperatorWrites is the restarted operator's own count
	// of the POST, PUT, PATCH and DELETE requests it sent (rest_client_requests_total).
	// WriteBreakdown lists the apiserver's count per "VERB resource[/subresource]".
	ResyncMs            float64        `json:"resyncMs"`
	ResyncReconciles    int            `json:"resyncReconciles"`
	WritesPerNoopResync int            `json:"writesPerNoopResync"`
	ExcludedWrites      int            `json:"excludedWrites"`
	OperatorWrites      int            `json:"operatorWrites"`
	WriteBreakdown      map[string]int `json:"writeBreakdown,omitempty"`

	// ReconcileErrors counts the failed reconciles of the first operator (changes and
	// burst), Conflicts its requests the apiserver refused with 409 Conflict (a status
	// patch from a stale cache; retried). ResyncReconcileErrors are those of the
	// restarted operator.
	ReconcileErrors       int `json:"reconcileErrors"`
	Conflicts             int `json:"conflicts"`
	ResyncReconcileErrors int `json:"resyncReconcileErrors"`

	// (e) the operator's VmRSS and VmHWM (peak, the burst included) once every CacheNode
	// converged and it went idle, and the same for the restarted operator after the resync.
	RSSMiB       float64 `json:"rssMiB"`
	HWMMiB       float64 `json:"hwmMiB"`
	ResyncRSSMiB float64 `json:"resyncRssMiB"`
	ResyncHWMMiB float64 `json:"resyncHwmMiB"`
}

// Timeouts: generous, since a pass is not slowed by them and a 2-core machine is slow.
const (
	startTimeout    = time.Minute      // operator ready, first CacheNode converged
	objectTimeout   = 30 * time.Second // one CacheNode created or updated
	burstTimeout    = 2 * time.Minute  // plus perCacheNode for each
	perCacheNode    = 200 * time.Millisecond
	burstWorkers    = 8 // concurrent creates of the burst
	operatorLogTail = 64 << 10
	benchNamespace  = "edgepool-bench"
)

func (o Options) withDefaults() (Options, error) {
	if o.CacheNodes == 0 {
		o.CacheNodes = 1000
	}
	if o.Sequential == 0 {
		o.Sequential = 20
	}
	if o.CacheNodes < 0 || o.Sequential < 0 {
		return o, errors.New("CacheNodes and Sequential must not be negative")
	}
	if o.RepoRoot == "" {
		o.RepoRoot = "."
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if _, err := os.Stat(filepath.Join(o.RepoRoot, "go.mod")); err != nil {
		return o, fmt.Errorf("RepoRoot is not the repository root: %w", err)
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return o, errors.New("KUBEBUILDER_ASSETS is not set: point it at the folder with kube-apiserver and etcd (`make test-tools` fills bin/k8s-v<version>)")
	}
	return o, nil
}

// Run starts envtest, builds and runs the operator, and measures C1. It returns an error
// when something does not converge in time; the Result's counts say whether the
// operator met its targets.
//
// envtest and the informers log through controller-runtime's logger: callers set it
// (log.SetLogger) if they want to silence its "never called" warning.
func Run(ctx context.Context, opts Options) (*Result, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "edgepool-bench-controlplane-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	// The build and the control plane start in parallel.
	manager := filepath.Join(work, "manager")
	built := make(chan error, 1)
	go func() { built <- testkit.GoBuild(ctx, opts.RepoRoot, manager, "./cmd/manager") }()
	env, err := testkit.StartEnv(ctx, testkit.EnvOptions{CRDs: filepath.Join(opts.RepoRoot, "config", "crd", "bases")})
	if err != nil {
		return nil, errors.Join(err, <-built)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(opts.Log, "stop envtest:", err)
		}
	}()
	if err := <-built; err != nil {
		return nil, err
	}

	b := &bench{opts: opts, manager: manager, opLog: &testkit.Buffer{Max: operatorLogTail}, tracker: newTracker()}
	res, err := b.run(ctx, env, work)
	if err != nil {
		fmt.Fprintf(opts.Log, "operator log (tail):\n%s\n", b.opLog)
		return nil, err
	}
	return res, nil
}

// bench is one run's state.
type bench struct {
	opts       Options
	manager    string // the operator binary
	kubeconfig string // the operator's credentials
	opLog      *testkit.Buffer
	k8s        client.Client
	apiserver  rest.Interface // the admin's client, for the apiserver's /metrics
	tracker    *tracker
	operator   *operator
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.opts.Log, format+"\n", args...)
}

func (b *bench) run(ctx context.Context, env *testkit.Env, work string) (*Result, error) {
	b.k8s = env.Client
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	if err != nil {
		return nil, err
	}
	b.apiserver = dc.RESTClient()
	// The operator has its own user, so its requests are its own in the apiserver's eyes.
	user, err := env.Envtest.AddUser(envtest.User{Name: "edgepool-operator", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, fmt.Errorf("add the operator's user: %w", err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	b.kubeconfig = filepath.Join(work, "kubeconfig")
	if err := os.WriteFile(b.kubeconfig, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	if err := b.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}); err != nil {
		return nil, err
	}

	// The benchmark's own informers timestamp what the operator writes.
	informers, err := cache.New(env.Config, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{benchNamespace: {}}})
	if err != nil {
		return nil, err
	}
	if err := b.tracker.watch(ctx, informers); err != nil {
		return nil, err
	}
	cacheCtx, stopCache := context.WithCancel(ctx)
	var cacheDone sync.WaitGroup
	cacheDone.Go(func() { _ = informers.Start(cacheCtx) })
	defer func() { stopCache(); cacheDone.Wait() }()
	if !informers.WaitForCacheSync(ctx) {
		return nil, errors.New("the benchmark's informers did not sync")
	}

	if err := b.startOperator(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if b.operator != nil {
			_ = b.operator.stop()
		}
	}()
	// Warm-up: the first CacheNode also waits for the operator's caches to sync.
	if _, err := b.createAndWait(ctx, "warmup", startTimeout); err != nil {
		return nil, err
	}

	res := &Result{CacheNodes: b.opts.CacheNodes, Sequential: b.opts.Sequential}
	if err := b.sequential(ctx, res); err != nil {
		return nil, err
	}
	if err := b.burst(ctx, res); err != nil {
		return nil, err
	}
	total := 1 + b.opts.Sequential + b.opts.CacheNodes
	if err := b.resync(ctx, res, total); err != nil {
		return nil, err
	}
	return res, nil
}

func (b *bench) startOperator(ctx context.Context) error {
	op, err := startOperator(b.manager, b.kubeconfig, b.opLog)
	if err != nil {
		return err
	}
	b.operator = op
	readyCtx, cancel := testkit.WithTimeout(ctx, startTimeout)
	defer cancel()
	return op.waitReady(readyCtx)
}

// testCacheNode is a CacheNode with two NVMe disks and an HDD, like the controller suite's.
func testCacheNode(name string) *v1alpha1.CacheNode {
	return &v1alpha1.CacheNode{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace},
		Spec: v1alpha1.CacheNodeSpec{
			Placement: v1alpha1.Placement{NodeSelector: map[string]string{"edgepool.bench/group": "bench"}},
			Disks: []v1alpha1.Disk{
				{Name: "nvme0", Path: "/mnt/nvme0", Media: v1alpha1.MediaNVMe, Size: resource.MustParse("100Gi"), Weight: 3},
				{Name: "nvme1", Path: "/mnt/nvme1", Media: v1alpha1.MediaNVMe, Size: resource.MustParse("100Gi"), Weight: 3},
				{Name: "hdd0", Path: "/mnt/hdd0", Media: v1alpha1.MediaHDD, Size: resource.MustParse("1Ti")},
			},
			Origin: v1alpha1.Origin{Servers: []string{"127.0.0.1:9000"}},
		},
	}
}

// expectedHash is the hash of the nginx.conf the operator renders for cn as the API
// server returned it (defaults applied).
func expectedHash(cn *v1alpha1.CacheNode) (string, error) {
	conf, err := render.NginxConf(&cn.Spec)
	if err != nil {
		return "", fmt.Errorf("render %s: %w", cn.Name, err)
	}
	return agentapi.Hash([]byte(conf)), nil
}

// create creates a CacheNode and returns the hash of its expected nginx.conf.
func (b *bench) create(ctx context.Context, name string) (string, error) {
	cn := testCacheNode(name)
	if err := b.k8s.Create(ctx, cn); err != nil {
		return "", fmt.Errorf("create CacheNode %s: %w", name, err)
	}
	return expectedHash(cn)
}

// createAndWait creates a CacheNode and waits until it converged; it returns the latency
// from the create to its ConfigMap and DaemonSet being seen.
func (b *bench) createAndWait(ctx context.Context, name string, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := testkit.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	hash, err := b.create(ctx, name)
	if err != nil {
		return 0, err
	}
	if err := b.tracker.wait(ctx, "CacheNode "+name+" to converge", func() bool {
		_, ok := b.tracker.converged(name, hash, 1)
		return ok
	}); err != nil {
		return 0, err
	}
	at, _ := b.tracker.applied(name, hash)
	return at.Sub(start), nil
}

// updateAndWait changes the origin of a CacheNode, which changes its nginx.conf, and
// waits until it converged; it returns the latency from the change to the ConfigMap
// carrying the new nginx.conf.
func (b *bench) updateAndWait(ctx context.Context, name, origin string) (time.Duration, error) {
	ctx, cancel := testkit.WithTimeout(ctx, objectTimeout)
	defer cancel()
	cn := &v1alpha1.CacheNode{}
	if err := b.k8s.Get(ctx, client.ObjectKey{Namespace: benchNamespace, Name: name}, cn); err != nil {
		return 0, err
	}
	patch := client.MergeFrom(cn.DeepCopy())
	cn.Spec.Origin.Servers = []string{origin}
	start := time.Now()
	if err := b.k8s.Patch(ctx, cn, patch); err != nil {
		return 0, fmt.Errorf("update CacheNode %s: %w", name, err)
	}
	hash, err := expectedHash(cn)
	if err != nil {
		return 0, err
	}
	if err := b.tracker.wait(ctx, "CacheNode "+name+" to converge on its new origin", func() bool {
		_, ok := b.tracker.converged(name, hash, cn.Generation)
		return ok
	}); err != nil {
		return 0, err
	}
	at, _ := b.tracker.configSeen(name, hash)
	return at.Sub(start), nil
}

// sequential measures (a) and (b): each CacheNode converges before the next change.
func (b *bench) sequential(ctx context.Context, res *Result) error {
	var creates, updates []time.Duration
	for i := range b.opts.Sequential {
		d, err := b.createAndWait(ctx, fmt.Sprintf("seq-%03d", i), objectTimeout)
		if err != nil {
			return err
		}
		creates = append(creates, d)
	}
	for i := range b.opts.Sequential {
		d, err := b.updateAndWait(ctx, fmt.Sprintf("seq-%03d", i), fmt.Sprintf("10.0.%d.%d:8080", i/250, i%250+1))
		if err != nil {
			return err
		}
		updates = append(updates, d)
	}
	res.CreateP50Ms, res.CreateP99Ms = p50p99(creates)
	res.UpdateP50Ms, res.UpdateP99Ms = p50p99(updates)
	b.logf("C1 (a) %d creates, one at a time: ConfigMap and DaemonSet after p50 %.1fms, p99 %.1fms", len(creates), res.CreateP50Ms, res.CreateP99Ms)
	b.logf("C1 (b) %d updates, one at a time: new nginx.conf after p50 %.1fms, p99 %.1fms", len(updates), res.UpdateP50Ms, res.UpdateP99Ms)
	return nil
}

// burst measures (c) and, once the operator is idle again, (e).
func (b *bench) burst(ctx context.Context, res *Result) error {
	n := b.opts.CacheNodes
	timeout := burstTimeout + time.Duration(n)*perCacheNode
	ctx, cancel := testkit.WithTimeout(ctx, timeout)
	defer cancel()

	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("burst-%04d", i)
	}
	before, err := b.apiserverWrites(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	hashes, err := b.createAll(ctx, names)
	if err != nil {
		return err
	}
	submitted := time.Since(start)

	var last time.Time
	converged := 0
	err = b.tracker.wait(ctx, fmt.Sprintf("%d CacheNodes to converge", n), func() bool {
		last, converged = time.Time{}, 0
		for _, name := range names {
			if at, ok := b.tracker.converged(name, hashes[name], 1); ok {
				last = later(last, at)
				converged++
			}
		}
		return converged == n
	})
	if err != nil {
		return fmt.Errorf("%w (%d of %d converged)", err, converged, n)
	}
	res.BurstSubmitMs, res.BurstConvergeMs, res.Converged = testkit.Millis(submitted), testkit.Millis(last.Sub(start)), converged
	b.logf("C1 (c) burst of %d CacheNodes: sent in %.0fms, all converged after %.0fms", n, res.BurstSubmitMs, res.BurstConvergeMs)

	st, err := b.operator.waitIdle(ctx, 1+b.opts.Sequential+n)
	if err != nil {
		return err
	}
	res.ReconcileErrors, res.Conflicts = st.errors, st.conflicts
	after, err := b.apiserverWrites(ctx)
	if err != nil {
		return err
	}
	res.BurstWriteBreakdown = writeDelta(before, after)
	if res.RSSMiB, res.HWMMiB, err = b.operator.memory(); err != nil {
		return fmt.Errorf("read the operator's memory: %w", err)
	}
	b.logf("C1 (c) writes of the burst: %v; %d reconciles so far, %d failed, %d conflicts", res.BurstWriteBreakdown, st.reconciles, st.errors, st.conflicts)
	b.logf("C1 (e) operator at %d CacheNodes, idle: VmRSS %.1f MiB, VmHWM %.1f MiB", 1+b.opts.Sequential+n, res.RSSMiB, res.HWMMiB)
	return nil
}

// createAll creates the named CacheNodes with burstWorkers in parallel and returns the
// hash of each one's expected nginx.conf.
func (b *bench) createAll(ctx context.Context, names []string) (map[string]string, error) {
	hashes := make([]string, len(names))
	errs := make([]error, len(names))
	next := make(chan int)
	var wg sync.WaitGroup
	for range burstWorkers {
		wg.Go(func() {
			for i := range next {
				hashes[i], errs[i] = b.create(ctx, names[i])
			}
		})
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(names))
	for i, name := range names {
		out[name] = hashes[i]
	}
	return out, nil
}

// resync measures (d): the operator restarts on a converged fleet of total CacheNodes;
// the apiserver counts the writes between its start and its going idle.
func (b *bench) resync(ctx context.Context, res *Result, total int) error {
	timeout := burstTimeout + time.Duration(total)*perCacheNode
	ctx, cancel := testkit.WithTimeout(ctx, timeout)
	defer cancel()

	err := b.operator.stop()
	b.operator = nil
	if err != nil {
		return err
	}
	before, err := b.apiserverWrites(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := b.startOperator(ctx); err != nil {
		return err
	}
	st, err := b.operator.waitIdle(ctx, total)
	if err != nil {
		return err
	}
	res.ResyncMs = testkit.Millis(time.Since(start))
	after, err := b.apiserverWrites(ctx)
	if err != nil {
		return err
	}
	res.WriteBreakdown = writeDelta(before, after)
	for key, n := range res.WriteBreakdown {
		if excludedResource(key) {
			res.ExcludedWrites += n
		} else {
			res.WritesPerNoopResync += n
		}
	}
	res.ResyncReconciles, res.OperatorWrites = st.reconciles, st.clientWrites
	res.ResyncReconcileErrors = st.errors
	if res.ResyncRSSMiB, res.ResyncHWMMiB, err = b.operator.memory(); err != nil {
		return fmt.Errorf("read the operator's memory: %w", err)
	}
	b.logf("C1 (d) restart on %d converged CacheNodes: %d reconciles in %.0fms; writes: %d (apiserver, without leases and events: %d more), %d (operator's client); %v",
		total, st.reconciles, res.ResyncMs, res.WritesPerNoopResync, res.ExcludedWrites, res.OperatorWrites, res.WriteBreakdown)
	b.logf("C1 (e) restarted operator, idle: VmRSS %.1f MiB, VmHWM %.1f MiB", res.ResyncRSSMiB, res.ResyncHWMMiB)
	return nil
}

// apiserverWrites reads the apiserver's count of mutating requests per resource.
func (b *bench) apiserverWrites(ctx context.Context) (map[string]int, error) {
	body, err := b.apiserver.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the apiserver's /metrics: %w", err)
	}
	m, err := testkit.ParseMetrics(string(body))
	if err != nil {
		return nil, fmt.Errorf("the apiserver's /metrics: %w", err)
	}
	return writesByResource(m), nil
}

// p50p99 are the median and 99th percentile of ds, in milliseconds.
func p50p99(ds []time.Duration) (p50, p99 float64) {
	return testkit.Millis(testkit.Percentile(ds, 50)), testkit.Millis(testkit.Percentile(ds, 99))
}
