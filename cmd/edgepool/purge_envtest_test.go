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

package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/controllers/cachenode"
	"github.com/edgepool/edgepool/controllers/cachepurge"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// TestPurgeCommand runs `edgepool purge` against a real kube-apiserver (envtest), as a user
// who holds only the chart's edgepool-cachepurge-editor role in the namespace. No operator
// runs: the test writes the status the CachePurge controller would, step by step.
func TestPurgeCommand(t *testing.T) {
	ctx := context.Background()
	env, err := testkit.StartEnv(ctx, testkit.EnvOptions{CRDs: filepath.Join("..", "..", "config", "crd", "bases")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	k8s := env.Client
	editor := &rbacv1.ClusterRole{}
	data, err := os.ReadFile("../../config/rbac/cachepurge_editor_role.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, editor); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(ctx, editor); err != nil {
		t.Fatal(err)
	}
	user, err := env.Envtest.AddUser(envtest.User{Name: "purger"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfigFile := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfigFile, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	// namespace is a new namespace where the purger may purge.
	namespace := func(t *testing.T) string {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "purge-"}}
		if err := k8s.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "purger", Namespace: ns.Name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: editor.Name},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "purger"}},
		}
		if err := k8s.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
		if err := k8s.Create(ctx, &v1alpha1.CacheNode{
			ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: ns.Name},
			Spec: v1alpha1.CacheNodeSpec{
				Disks:  []v1alpha1.Disk{{Name: "nvme0", Path: "/mnt/nvme0", Media: v1alpha1.MediaNVMe, Size: resource.MustParse("1Gi")}},
				Origin: v1alpha1.Origin{Servers: []string{"origin.example:80"}},
			},
		}); err != nil {
			t.Fatal(err)
		}
		return ns.Name
	}
	// start runs the command; the returned channel gets its error.
	start := func(out *testkit.Buffer, args ...string) <-chan error {
		done := make(chan error, 1)
		go func() { done <- run(append([]string{"purge", "--kubeconfig", kubeconfigFile}, args...), nil, out) }()
		return done
	}
	// created is the CachePurge the command created in ns.
	created := func(g Gomega, ns string) *v1alpha1.CachePurge {
		var list v1alpha1.CachePurgeList
		g.Eventually(func(g Gomega) {
			g.Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
		return &list.Items[0]
	}
	// report writes the status the controller would for nodes, with the Complete and
	// Failed conditions' status and message.
	report := func(g Gomega, p *v1alpha1.CachePurge, nodes []v1alpha1.PurgeNode, complete, failed metav1.ConditionStatus, msg string) {
		st := &p.Status
		st.ObservedGeneration, st.Nodes = p.Generation, nodes
		st.PendingNodes, st.DoneNodes, st.FailedNodes, st.ObjectsRemoved = 0, 0, 0, 0
		for _, n := range nodes {
			st.ObjectsRemoved += n.ObjectsRemoved
			switch n.Phase {
			case v1alpha1.PurgePending:
				st.PendingNodes++
			case v1alpha1.PurgeDone:
				st.DoneNodes++
			case v1alpha1.PurgeFailed:
				st.FailedNodes++
			}
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionComplete, Status: complete, Reason: "Test", Message: msg})
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionFailed, Status: failed, Reason: "Test", Message: msg})
		g.Expect(k8s.Status().Update(ctx, p)).To(Succeed())
	}
	node := func(name string, phase v1alpha1.PurgePhase, removed int64, msg string) v1alpha1.PurgeNode {
		return v1alpha1.PurgeNode{Node: name, Pod: "edge-" + name, Phase: phase, ObjectsRemoved: removed, Message: msg}
	}
	const waitFor = 10 * time.Second

	t.Run("complete", func(t *testing.T) {
		g := NewWithT(t)
		ns := namespace(t)
		var out testkit.Buffer
		done := start(&out, "-n", ns, "edge", "--url", "https://www.example.com/", "--url", "https://www.example.com/a.css")
		p := created(g, ns)
		g.Expect(p.Name).To(HavePrefix("edge-"))
		g.Expect(p.Spec).To(Equal(v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: v1alpha1.PurgeURLs,
			URLs: []string{"https://www.example.com/", "https://www.example.com/a.css"}, ActiveDeadlineSeconds: 3600, TTLSecondsAfterFinished: p.Spec.TTLSecondsAfterFinished}))
		g.Eventually(out.String, waitFor).Should(Equal("cachepurge/" + p.Name + " created\n"))

		report(g, p, []v1alpha1.PurgeNode{node("a", v1alpha1.PurgeDone, 5, ""), node("b", v1alpha1.PurgePending, 0, "cache pod not running")},
			metav1.ConditionFalse, metav1.ConditionFalse, "1 of 2 nodes pending: b (cache pod not running)")
		g.Eventually(out.String, waitFor).Should(HaveSuffix("cachepurge/" + p.Name + ": 1/2 nodes done, 0 failed, 5 objects removed\n"))
		g.Consistently(done, 300*time.Millisecond).ShouldNot(Receive(), "it returned while a node was pending")

		report(g, p, []v1alpha1.PurgeNode{node("a", v1alpha1.PurgeDone, 5, ""), node("b", v1alpha1.PurgeDone, 3, "")},
			metav1.ConditionTrue, metav1.ConditionFalse, "purged on 2 nodes: 8 objects removed")
		g.Eventually(done, waitFor).Should(Receive(BeNil()))
		g.Expect(out.String()).To(Equal("cachepurge/" + p.Name + " created\n" +
			"cachepurge/" + p.Name + ": 1/2 nodes done, 0 failed, 5 objects removed\n" +
			"cachepurge/" + p.Name + ": 2/2 nodes done, 0 failed, 8 objects removed\n" +
			"cachepurge/" + p.Name + " complete: purged on 2 nodes: 8 objects removed\n"))
	})

	t.Run("failed", func(t *testing.T) {
		g := NewWithT(t)
		ns := namespace(t)
		var out testkit.Buffer
		done := start(&out, "-n", ns, "--name", "images", "edge", "--prefix", "www.example.com/img/")
		p := created(g, ns)
		g.Expect(p.Name).To(Equal("images"))
		g.Expect(p.Spec.Prefixes).To(Equal([]v1alpha1.PurgeHost{{Host: "www.example.com", Paths: []string{"/img/"}}}))
		msg := "1 of 2 nodes failed: node-b (did not confirm the purge before its deadline: the agent refused the purge (503 Service Unavailable): not ready)"
		report(g, p, []v1alpha1.PurgeNode{node("node-a", v1alpha1.PurgeDone, 2, ""), node("node-b", v1alpha1.PurgeFailed, 0, "did not confirm")},
			metav1.ConditionFalse, metav1.ConditionTrue, msg)
		var err error
		g.Eventually(done, waitFor).Should(Receive(&err))
		g.Expect(err).To(MatchError("cachepurge/images failed: " + msg))
		g.Expect(out.String()).To(HaveSuffix("cachepurge/images: 1/2 nodes done, 1 failed, 2 objects removed\n"))
	})

	t.Run("timeout", func(t *testing.T) {
		g := NewWithT(t)
		ns := namespace(t)
		var out testkit.Buffer
		done := start(&out, "-n", ns, "edge", "--all", "--timeout", "2s")
		p := created(g, ns)
		missing := "CacheNode edge not found in namespace " + ns + "; waiting for it until the deadline"
		report(g, p, nil, metav1.ConditionFalse, metav1.ConditionFalse, missing)
		g.Eventually(out.String, waitFor).Should(HaveSuffix("cachepurge/" + p.Name + ": " + missing + "\n"))
		report(g, p, []v1alpha1.PurgeNode{node("node-a", v1alpha1.PurgePending, 0, "cache pod not running")},
			metav1.ConditionFalse, metav1.ConditionFalse, "1 of 1 nodes pending: node-a (cache pod not running)")
		var err error
		g.Eventually(done, waitFor).Should(Receive(&err))
		g.Expect(err).To(MatchError(ContainSubstring("timed out after 2s waiting for cachepurge/" + p.Name +
			" to complete (1 of 1 nodes pending: node-a (cache pod not running)); the operator goes on until its deadline")))
	})

	t.Run("no wait, in the context's namespace", func(t *testing.T) {
		g := NewWithT(t)
		ns := namespace(t)
		cfg, err := clientcmd.Load(kubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
		cfg.Contexts[cfg.CurrentContext].Namespace = ns
		g.Expect(clientcmd.WriteToFile(*cfg, kubeconfigFile+"-ns")).To(Succeed())
		var out testkit.Buffer
		g.Expect(run([]string{"purge", "--kubeconfig", kubeconfigFile + "-ns", "edge", "--all", "--wait=false", "--name", "all"}, nil, &out)).To(Succeed())
		g.Expect(out.String()).To(Equal("cachepurge/all created\n"))
		g.Expect(created(g, ns).Spec.Scope).To(Equal(v1alpha1.PurgeAll))
	})

	t.Run("refused by the API server", func(t *testing.T) {
		g := NewWithT(t)
		ns := namespace(t)
		var out testkit.Buffer
		// Where the purger may not purge.
		err := run([]string{"purge", "--kubeconfig", kubeconfigFile, "-n", "default", "edge", "--all"}, nil, &out)
		g.Expect(err).To(MatchError(ContainSubstring(`create CachePurge: cachepurges.cache.edgepool.io is forbidden: User "purger" cannot create resource "cachepurges"`)))
		// The same name twice.
		g.Expect(run([]string{"purge", "--kubeconfig", kubeconfigFile, "-n", ns, "edge", "--all", "--name", "x", "--wait=false"}, nil, &out)).To(Succeed())
		err = run([]string{"purge", "--kubeconfig", kubeconfigFile, "-n", ns, "edge", "--all", "--name", "x", "--wait=false"}, nil, &out)
		g.Expect(err).To(MatchError(ContainSubstring(`cachepurges.cache.edgepool.io "x" already exists`)))

		// What the flags cannot say, the schema refuses, naming the field.
		cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
		g.Expect(err).NotTo(HaveOccurred())
		c, err := client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
		g.Expect(err).NotTo(HaveOccurred())
		bad := &v1alpha1.CachePurge{
			ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns},
			Spec: v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: v1alpha1.PurgeURLs, URLs: []string{"https://www.example.com:8443/"},
				Prefixes: []v1alpha1.PurgeHost{{Host: "www.example.com", Paths: []string{"/"}}}},
		}
		err = createPurge(ctx, c, bad, true, time.Second, &out)
		g.Expect(err).To(MatchError(ContainSubstring(`create CachePurge: CachePurge.cache.edgepool.io "bad" is invalid: `)))
		g.Expect(err).To(MatchError(ContainSubstring(`spec.urls[0]: Invalid value: "https://www.example.com:8443/": spec.urls[0] in body should match`)))
		g.Expect(err).To(MatchError(ContainSubstring(`spec.prefixes: Invalid value: prefixes must be set when scope is Prefixes, and only then`)))
	})
}

// TestPurgeWithTheController runs the command against the real CachePurge controller,
// whose status it reads: a CacheNode without cache pods is purged at once, and a purge of
// a CacheNode that does not exist says so, then times out.
func TestPurgeWithTheController(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ctrl.SetLogger(logr.Discard())
	_, key, err := ed25519.GenerateKey(rand.Reader)
	g.Expect(err).NotTo(HaveOccurred())
	env, err := testkit.StartEnv(ctx, testkit.EnvOptions{
		CRDs: filepath.Join("..", "..", "config", "crd", "bases"), Cache: cachenode.CacheOptions(),
		Controllers: func(mgr ctrl.Manager) error {
			return (&cachepurge.Reconciler{Client: mgr.GetClient(), OperatorKey: key, Agents: agentapi.NewClient(time.Second)}).SetupWithManager(mgr)
		},
	})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(func() { g.Expect(env.Stop()).To(Succeed()) })
	user, err := env.Envtest.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := user.KubeConfig()
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfigFile := filepath.Join(t.TempDir(), "kubeconfig")
	g.Expect(os.WriteFile(kubeconfigFile, kubeconfig, 0o600)).To(Succeed())
	g.Expect(env.Client.Create(ctx, &v1alpha1.CacheNode{
		ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "default"},
		Spec: v1alpha1.CacheNodeSpec{
			Disks:  []v1alpha1.Disk{{Name: "nvme0", Path: "/mnt/nvme0", Media: v1alpha1.MediaNVMe, Size: resource.MustParse("1Gi")}},
			Origin: v1alpha1.Origin{Servers: []string{"origin.example:80"}},
		},
	})).To(Succeed())

	var out bytes.Buffer
	g.Expect(run([]string{"purge", "--kubeconfig", kubeconfigFile, "edge", "--all", "--name", "all"}, nil, &out)).To(Succeed())
	g.Expect(out.String()).To(Equal("cachepurge/all created\ncachepurge/all complete: no cache pod runs: nothing cached to purge\n"))

	// A typo is refused at once, and nothing is created.
	out.Reset()
	err = run([]string{"purge", "--kubeconfig", kubeconfigFile, "egde", "--all", "--name", "typo", "--timeout", "2s"}, nil, &out)
	g.Expect(err).To(MatchError("CacheNode egde not found in namespace default: nothing to purge (kubectl get cachenodes -n default lists them)"))
	g.Expect(out.String()).To(BeEmpty())
	g.Expect(apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "typo"}, &v1alpha1.CachePurge{}))).To(BeTrue())

	// A manifest applied before its CacheNode (as GitOps may) waits for it, and says so.
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	g.Expect(err).NotTo(HaveOccurred())
	early := &v1alpha1.CachePurge{ObjectMeta: metav1.ObjectMeta{Name: "early", Namespace: "default"},
		Spec: v1alpha1.CachePurgeSpec{CacheNode: "later", Scope: v1alpha1.PurgeAll}}
	g.Expect(c.Create(ctx, early)).To(Succeed())
	out.Reset()
	err = waitPurge(ctx, c, early, 2*time.Second, &out)
	missing := "CacheNode later not found in namespace default; waiting for it until the deadline"
	g.Expect(out.String()).To(Equal("cachepurge/early: " + missing + "\n"))
	g.Expect(err).To(MatchError(ContainSubstring("timed out after 2s waiting for cachepurge/early to complete (" + missing + ")")))
}
