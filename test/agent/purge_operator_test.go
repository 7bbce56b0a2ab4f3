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
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/controllers/cachenode"
	"github.com/edgepool/edgepool/controllers/cachepurge"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// TestCachePurgeThroughTheOperator: the operator's two controllers against a real
// kube-apiserver (envtest), and a real agent and nginx whose config dir receives the
// CacheNode's ConfigMap as a kubelet would deliver it. A CachePurge is signed with the key
// the operator published, verified by the agent, and its object is a MISS next; the
// purge reaches the ConfigMap's list, and the agent, restarted on it, does not purge again.
func TestCachePurgeThroughTheOperator(t *testing.T) {
	key := newOperatorKey(t)
	env, err := testkit.StartEnv(context.Background(), testkit.EnvOptions{
		CRDs: filepath.Join("..", "..", "config", "crd", "bases"), Cache: cachenode.CacheOptions(),
		Controllers: func(mgr ctrl.Manager) error {
			if err := (&cachenode.Reconciler{
				Client: mgr.GetClient(), Scheme: mgr.GetScheme(), Recorder: mgr.GetEventRecorder("edgepool"),
				DiskPrefixes: []string{filepath.Clean(os.TempDir())}, OperatorKey: key,
			}).SetupWithManager(mgr); err != nil {
				return err
			}
			return (&cachepurge.Reconciler{Client: mgr.GetClient(), OperatorKey: key, Agents: agentapi.NewClient(2 * time.Second),
				RetryInterval: 200 * time.Millisecond}).SetupWithManager(mgr)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	k8s, ctx := env.Client, context.Background()

	srv, hits := smallOrigin(t)
	n := startCacheNodeFrom(t, originAddr(srv))
	cn := &v1alpha1.CacheNode{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "default"}, Spec: *n.spec}
	must(k8s.Create(ctx, cn))
	kubelet := func() { // delivers the ConfigMap to the agent's config dir
		t.Helper()
		cm := &corev1.ConfigMap{}
		eventually(t, 20*time.Second, "the ConfigMap", func() bool {
			return k8s.Get(ctx, types.NamespacedName{Namespace: "default", Name: "edge-nginx"}, cm) == nil
		})
		files := map[string][]byte{}
		for k, v := range cm.Data {
			files[k] = []byte(v)
		}
		must(n.cfg.Write(files))
	}
	kubelet()
	n.agent = startAgent(t, n.cfg, n.spec, "--pod", "default/edge-abcde")
	n.agent.waitReady(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-abcde", Namespace: "default", Labels: map[string]string{
			"app.kubernetes.io/name": "edgepool-cache", "app.kubernetes.io/instance": "edge", "app.kubernetes.io/managed-by": "edgepool",
		}},
		Spec: corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "cache", Image: cachenode.DefaultCacheImage,
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: n.spec.Listener.AgentPort}}}}},
	}
	must(k8s.Create(ctx, pod))
	// A patch, not an update: the operator annotates the pod meanwhile (its nudge).
	running := client.MergeFrom(pod.DeepCopy())
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1", HostIP: "127.0.0.1"}
	must(k8s.Status().Patch(ctx, pod, running))

	c := &http.Client{Timeout: 5 * time.Second}
	for i := range 10 {
		n.want(t, c, fmt.Sprintf("/obj/%d", i), "MISS")
		n.want(t, c, fmt.Sprintf("/obj/%d", i), "HIT")
	}
	p := &v1alpha1.CachePurge{ObjectMeta: metav1.ObjectMeta{Name: "obj3", Namespace: "default"},
		Spec: v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: v1alpha1.PurgeURLs, URLs: []string{"http://127.0.0.1/obj/3"}}}
	created := time.Now()
	must(k8s.Create(ctx, p))
	eventually(t, 20*time.Second, "the purge to complete", func() bool {
		must(k8s.Get(ctx, client.ObjectKeyFromObject(p), p))
		return meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionComplete)
	})
	t.Logf("CachePurge created -> Complete on 1 node: %v", time.Since(created).Round(time.Millisecond))
	if len(p.Status.Nodes) != 1 || p.Status.Nodes[0].Node != "edge-1" || p.Status.Nodes[0].Pod != "edge-abcde" || p.Status.ObjectsRemoved != 1 {
		t.Errorf("status: %+v", p.Status)
	}
	n.want(t, c, "/obj/3", "MISS")
	n.want(t, c, "/obj/4", "HIT")

	// The kubelet delivers the ConfigMap listing the purge; the agent restarts on it and
	// does not purge again what it refilled.
	n.pod = "default/edge-abcde"
	n.restart(t, kubelet)
	n.want(t, c, "/obj/3", "HIT")
	if got := originHits(hits, "/obj/3"); got != 2 {
		t.Errorf("/obj/3 reached the origin %d times, want 2", got)
	}
}

// startCacheNodeFrom makes the disks and spec of a cache node whose configuration the
// operator writes; the test starts the agent once the ConfigMap is there.
func startCacheNodeFrom(t *testing.T, origin string) *cacheNode {
	t.Helper()
	var disks []v1alpha1.Disk
	for _, name := range []string{"d0", "d1"} {
		d := faultDisk(t, name)
		disks = append(disks, disk(name, d.Dir, mediaOf(t, d.Dir)))
	}
	return &cacheNode{spec: testSpec(t, origin, disks...), cfg: newConfigDir(t)}
}
