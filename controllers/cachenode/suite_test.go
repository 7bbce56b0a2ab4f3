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

package cachenode

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// The suite runs the manager against a real kube-apiserver and etcd (envtest). envtest has
// no DaemonSet controller, scheduler or garbage collector: tests that need their effects
// write the DaemonSet status themselves or check owner references; the local-cluster e2e
// suite covers the rest with the real components.

var (
	k8s         client.Client // a direct client, for the tests' own reads and writes
	operatorKey = func() ed25519.PrivateKey {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		return key
	}()
	reconciler *Reconciler
	writes     atomic.Int64 // writes made by the reconciler's client
	// podPatchCounts counts the reconciler's pod patches (its announcements) by namespace.
	podPatchCounts sync.Map
)

// renderFailsOrigin makes the test renderer fail: the API schema rejects everything the
// real renderer rejects, so a render failure can only be shown by replacing it.
const renderFailsOrigin = "render-fails.test:1"

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	env, err := testkit.StartEnv(context.Background(), testkit.EnvOptions{
		CRDs: filepath.Join("..", "..", "config", "crd", "bases"), Cache: CacheOptions(), Controllers: addReconciler,
		// cert-manager's Certificate, so that the operator watches Certificates.
		MoreCRDs: []string{filepath.Join("..", "..", "test", "crds")},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s = env.Client
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// addReconciler adds the suite's reconciler to mgr: its writes are counted, and its
// renderer fails for renderFailsOrigin.
func addReconciler(mgr ctrl.Manager) error {
	reconciler = &Reconciler{
		Client:                  countWrites(mgr.GetClient(), &writes),
		APIReader:               mgr.GetAPIReader(),
		Scheme:                  mgr.GetScheme(),
		Recorder:                mgr.GetEventRecorder("edgepool"),
		MaxConcurrentReconciles: 4,
		AgentAccess:             chartAccess,
		OperatorKey:             operatorKey,
		Agents: &AgentWatcher{Pods: mgr.GetClient(), Agents: agentapi.NewClient(agentTimeout),
			Interval: 100 * time.Millisecond, Tick: 20 * time.Millisecond, Concurrency: 4},
		Render: func(spec *v1alpha1.CacheNodeSpec, members []render.Member) (string, error) {
			if len(spec.Origin.Servers) > 0 && spec.Origin.Servers[0] == renderFailsOrigin {
				return "", fmt.Errorf("invalid CacheNode: spec.origin.servers[0]: test renderer refuses %s", renderFailsOrigin)
			}
			return render.NginxConfRing(spec, members)
		},
	}
	return reconciler.SetupWithManager(mgr)
}

// writeCounter wraps a client so that every create, update, patch, apply and delete, of
// objects and of their status, adds one to n. Reads pass through.
type writeCounter struct {
	client.Client
	n *atomic.Int64
}

// podPatches is how many pods of namespace ns the reconciler has patched.
func podPatches(ns string) int {
	n, ok := podPatchCounts.Load(ns)
	if !ok {
		return 0
	}
	return int(n.(*atomic.Int64).Load())
}

func countWrites(c client.Client, n *atomic.Int64) client.Client { return writeCounter{c, n} }

func (c writeCounter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.n.Add(1)
	return c.Client.Create(ctx, obj, opts...)
}

func (c writeCounter) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.n.Add(1)
	return c.Client.Update(ctx, obj, opts...)
}

func (c writeCounter) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
	c.n.Add(1)
	if _, ok := obj.(*corev1.Pod); ok {
		n, _ := podPatchCounts.LoadOrStore(obj.GetNamespace(), &atomic.Int64{})
		n.(*atomic.Int64).Add(1)
	}
	return c.Client.Patch(ctx, obj, p, opts...)
}

func (c writeCounter) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	c.n.Add(1)
	return c.Client.Apply(ctx, obj, opts...)
}

func (c writeCounter) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.n.Add(1)
	return c.Client.Delete(ctx, obj, opts...)
}

func (c writeCounter) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	c.n.Add(1)
	return c.Client.DeleteAllOf(ctx, obj, opts...)
}

func (c writeCounter) Status() client.SubResourceWriter {
	return subResourceWriteCounter{c.Client.Status(), c.n}
}

type subResourceWriteCounter struct {
	client.SubResourceWriter
	n *atomic.Int64
}

func (c subResourceWriteCounter) Create(ctx context.Context, obj, sub client.Object, opts ...client.SubResourceCreateOption) error {
	c.n.Add(1)
	return c.SubResourceWriter.Create(ctx, obj, sub, opts...)
}

func (c subResourceWriteCounter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	c.n.Add(1)
	return c.SubResourceWriter.Update(ctx, obj, opts...)
}

func (c subResourceWriteCounter) Patch(ctx context.Context, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	c.n.Add(1)
	return c.SubResourceWriter.Patch(ctx, obj, p, opts...)
}

func (c subResourceWriteCounter) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	c.n.Add(1)
	return c.SubResourceWriter.Apply(ctx, obj, opts...)
}

// newNamespace creates a namespace of its own for one test.
func newNamespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	// envtest runs no namespace controller: the test's CacheNodes go explicitly, so that
	// none is left to share disk paths with a later test's (or a rerun's, -count=N).
	t.Cleanup(func() {
		_ = k8s.DeleteAllOf(context.Background(), &v1alpha1.CacheNode{}, client.InNamespace(ns.Name))
	})
	return ns.Name
}

// newNode creates a node with the given labels; the test's own selector label keeps
// tests apart since Nodes are cluster-scoped.
func newNode(t testing.TB, name string, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
	if err := k8s.Create(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), node) })
	return node
}

// newCacheNode is a valid CacheNode with an NVMe and an HDD disk, selecting the nodes
// labelled edgepool.test/group=<group>.
func newCacheNode(ns, name, group string) *v1alpha1.CacheNode {
	cn := &v1alpha1.CacheNode{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.CacheNodeSpec{
			Placement: v1alpha1.Placement{NodeSelector: map[string]string{"edgepool.test/group": group}},
			Disks: []v1alpha1.Disk{
				{Name: "nvme0", Path: "/mnt/nvme0", Media: v1alpha1.MediaNVMe, Size: resource.MustParse("10Gi"), Weight: 3},
				{Name: "nvme1", Path: "/mnt/nvme1", Media: v1alpha1.MediaNVMe, Size: resource.MustParse("10Gi"), Weight: 3},
				{Name: "hdd0", Path: "/mnt/hdd0", Media: v1alpha1.MediaHDD, Size: resource.MustParse("1Ti")},
			},
			Origin: v1alpha1.Origin{Servers: []string{"127.0.0.1:9000"}},
		},
	}
	return cn
}

const (
	timeout = 20 * time.Second
	// agentTimeout is how long the suite's watcher waits for one agent.
	agentTimeout = 3 * time.Second
	interval     = 50 * time.Millisecond
)
