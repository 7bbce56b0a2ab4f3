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
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/controllers/cachenode"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// startOperator runs the CacheNode controller against a real kube-apiserver (envtest).
func startOperator(t *testing.T) client.Client {
	t.Helper()
	env, err := testkit.StartEnv(context.Background(), testkit.EnvOptions{
		CRDs: filepath.Join("..", "..", "config", "crd", "bases"), Cache: cachenode.CacheOptions(), Controllers: addOperator,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return env.Client
}

// addOperator adds the CacheNode controller to mgr, asking agents every 200ms.
func addOperator(mgr ctrl.Manager) error {
	return (&cachenode.Reconciler{
		Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("edgepool"),
		Agents: &cachenode.AgentWatcher{Pods: mgr.GetClient(), Agents: agentapi.NewClient(time.Second), Interval: 200 * time.Millisecond, Concurrency: 4},
		// The test's disks are temporary directories (sharedDir).
		DiskPrefixes: []string{filepath.Clean(os.TempDir())},
		OperatorKey:  newOperatorKey(nil),
	}).SetupWithManager(mgr)
}

// TestQueueOverflowBecomesCondition: real overflows in a real nginx reach the CacheNode's
// status through the agent and the operator's status loop, and clear after the window.
// envtest has no kubelet, so the test creates the cache pod and reports it running at
// 127.0.0.1, where the agent listens.
func TestQueueOverflowBecomesCondition(t *testing.T) {
	k8s := startOperator(t)
	spec := testSpec(t, originAddr(bigOrigin(t)), disk("hdd0", diskDir(t, "hdd0"), "HDD"))
	spec.Disks[0].ThreadPool.Threads = 1
	spec.Disks[0].ThreadPool.MaxQueue = ptr.To[int32](0) // every read of a cached header overflows
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec, "--allow-unmounted", "--overflow-window", "3s")
	agent.waitReady(t)

	condition := reportedCacheNode(t, k8s, spec)
	eventually(t, 20*time.Second, "the agent's report to reach the CacheNode", func() bool {
		return condition(v1alpha1.ConditionQueueOverflow).Reason == "NoOverflow" &&
			condition(v1alpha1.ConditionDisksReady).Status == metav1.ConditionTrue &&
			condition(v1alpha1.ConditionConfigApplied).Status == metav1.ConditionTrue
	})

	saturate(t, spec.Listener.Port, func() bool { return condition(v1alpha1.ConditionQueueOverflow).Status == metav1.ConditionTrue },
		func(int, string, int64) {})
	c := condition(v1alpha1.ConditionQueueOverflow)
	if c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "edge-1 pool_hdd0: ") {
		t.Fatalf("QueueOverflow = %s %q, want True naming edge-1 and pool_hdd0", c.Status, c.Message)
	}
	if d := condition(v1alpha1.ConditionDegraded); d.Status != metav1.ConditionTrue {
		t.Errorf("Degraded = %s while queues overflow", d.Status)
	}
	t.Logf("QueueOverflow: %s", c.Message)

	eventually(t, 20*time.Second, "QueueOverflow to clear after the agent's 3s window", func() bool {
		return condition(v1alpha1.ConditionQueueOverflow).Status == metav1.ConditionFalse
	})
}

// reportedCacheNode creates a CacheNode of spec and its cache pod on node edge-1, running
// at 127.0.0.1 where the test's agent listens (envtest has no kubelet), and returns a
// reader of the CacheNode's conditions.
func reportedCacheNode(t *testing.T, k8s client.Client, spec *v1alpha1.CacheNodeSpec) func(string) metav1.Condition {
	t.Helper()
	ctx := context.Background()
	cn := &v1alpha1.CacheNode{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "default"}, Spec: *spec}
	must(k8s.Create(ctx, cn))
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-abcde", Namespace: "default", Labels: map[string]string{
			"app.kubernetes.io/name": "edgepool-cache", "app.kubernetes.io/instance": "edge", "app.kubernetes.io/managed-by": "edgepool",
		}},
		Spec: corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "cache", Image: cachenode.DefaultCacheImage,
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: spec.Listener.AgentPort}}}}},
	}
	must(k8s.Create(ctx, pod))
	// A patch, not an update: the operator may annotate the pod meanwhile (its nudge).
	running := client.MergeFrom(pod.DeepCopy())
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: "127.0.0.1", HostIP: "127.0.0.1",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
	}
	must(k8s.Status().Patch(ctx, pod, running))

	return func(typ string) metav1.Condition {
		got := &v1alpha1.CacheNode{}
		must(k8s.Get(ctx, client.ObjectKeyFromObject(cn), got))
		if c := meta.FindStatusCondition(got.Status.Conditions, typ); c != nil {
			return *c
		}
		return metav1.Condition{}
	}
}

// TestDiskOutBecomesCondition: a disk a real agent takes out of its node's split reaches
// the CacheNode's status: DisksReady is False naming the node, the disk and why, Degraded
// is True/DisksOut, and both clear when the disk is back.
func TestDiskOutBecomesCondition(t *testing.T) {
	k8s := startOperator(t)
	srv, _ := cacheableOrigin(t)
	_, d1, spec, _, _ := twoDisks(t, originAddr(srv), 1)
	// A node with the disks, so that Degraded reports the disks rather than no eligible node.
	must(k8s.Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-1", Labels: map[string]string{
		"disk.edgepool.io/nvme": "9", "disk.edgepool.io/ssd": "9", "disk.edgepool.io/hdd": "9"}}}))
	condition := reportedCacheNode(t, k8s, spec)
	eventually(t, 20*time.Second, "the agent's report to reach the CacheNode", func() bool {
		return condition(v1alpha1.ConditionDisksReady).Status == metav1.ConditionTrue
	})

	must(d1.ReadOnly())
	eventually(t, 20*time.Second, "DisksReady to name the disk out", func() bool {
		c := condition(v1alpha1.ConditionDisksReady)
		return c.Status == metav1.ConditionFalse && c.Reason == "DisksOut" &&
			strings.Contains(c.Message, "took disks out of their split (their keys go to the node's other disks): edge-1 (d1: read-only")
	})
	d := condition(v1alpha1.ConditionDegraded)
	if d.Status != metav1.ConditionTrue || d.Reason != "DisksOut" || !strings.Contains(d.Message, "edge-1 (d1)") {
		t.Errorf("Degraded = %s/%s %q, want True/DisksOut naming edge-1 and d1", d.Status, d.Reason, d.Message)
	}
	t.Logf("DisksReady: %s", condition(v1alpha1.ConditionDisksReady).Message)
	t.Logf("Degraded: %s", d.Message)

	must(d1.ReadWrite())
	eventually(t, 20*time.Second, "DisksReady to clear once the disk is back", func() bool {
		return condition(v1alpha1.ConditionDisksReady).Status == metav1.ConditionTrue &&
			condition(v1alpha1.ConditionDegraded).Reason != "DisksOut"
	})
}
