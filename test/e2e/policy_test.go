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
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/cachepod"
)

// The operator's ClusterRole may patch pods, to announce a new configuration on its cache
// pods; the ValidatingAdmissionPolicy in config/rbac lets its ServiceAccount change nothing
// of a pod but that one annotation, and only on the pods edgepool manages.
func TestOperatorMayOnlyAnnounceConfigOnItsPods(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	for _, f := range []string{"role.yaml", "role_binding.yaml", "pod_annotation_policy.yaml"} {
		file := filepath.Join(root, "config", "rbac", f)
		out, err := kubectl("apply", "--server-side", "-f", file)
		g.Expect(err).NotTo(HaveOccurred(), out)
		t.Cleanup(func() { _, _ = kubectl("delete", "--ignore-not-found", "-f", file) })
	}
	newNode(t, "policy-node", "policy", nil)
	pod := func(name string, labels map[string]string) string {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{
				NodeName:                     "policy-node",
				Containers:                   []corev1.Container{{Name: "c", Image: "edgepool/cache:0.1.0"}},
				Tolerations:                  []corev1.Toleration{{Key: realNodeTaint.Key, Operator: corev1.TolerationOpExists}},
				AutomountServiceAccountToken: ptr.To(false),
			},
		}
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
		return "pod/" + name
	}
	cache := pod("cache", map[string]string{"app.kubernetes.io/managed-by": "edgepool", "app.kubernetes.io/name": "edgepool-cache"})
	other := pod("other", map[string]string{"app": "someone-else"})
	// The ServiceAccount of config/manager, as the operator's requests arrive.
	asOperator := func(args ...string) (string, error) {
		return kubectl(append([]string{"--as=system:serviceaccount:edgepool-system:edgepool-manager", "-n", ns}, args...)...)
	}

	// The policy takes effect once the API server has loaded it: until then a probe (a new
	// value each time, so no try is a no-op) goes through.
	probe := 0
	g.Eventually(func() string {
		probe++
		out, _ := asOperator("annotate", cache, "--overwrite", fmt.Sprintf("edgepool.test/probe=%d", probe))
		return out
	}, timeout, interval).Should(ContainSubstring("may change only the edgepool.io/config-hash and edgepool.io/certificate-revisions annotations"))

	out, err := asOperator("annotate", cache, "--overwrite", "edgepool.io/config-hash=abc123")
	g.Expect(err).NotTo(HaveOccurred(), "announcing a configuration must be allowed: %s", out)
	out, err = asOperator("annotate", cache, "--overwrite", "edgepool.io/certificate-revisions=shop-tls=2")
	g.Expect(err).NotTo(HaveOccurred(), "announcing a renewed certificate must be allowed: %s", out)

	for _, denied := range [][]string{
		{"patch", cache, "--type=merge", "-p", `{"spec":{"activeDeadlineSeconds":5}}`},
		{"annotate", cache, "--overwrite", "something.else/x=y"},
		{"label", cache, "--overwrite", "app.kubernetes.io/managed-by=someone"},
		{"patch", cache, "--type=json", "-p", `[{"op":"replace","path":"/spec/containers/0/image","value":"evil/image:1"}]`},
		{"annotate", other, "--overwrite", "edgepool.io/config-hash=abc123"},
	} {
		out, err := asOperator(denied...)
		g.Expect(err).To(HaveOccurred(), "%v was allowed: %s", denied, out)
		g.Expect(out).To(ContainSubstring("ValidatingAdmissionPolicy"), "%v", denied)
	}
	// Anyone else is not this policy's business.
	out, err = kubectl("-n", ns, "annotate", other, "--overwrite", "something.else/x=y")
	g.Expect(err).NotTo(HaveOccurred(), out)
}

// What the operator rendered is what runs: a user who may edit everything in a namespace
// (the edit ClusterRole) may not create, change or delete what edgepool manages there
// (config/rbac/managed_objects_policy.yaml), nor forge an object as a CacheNode's; the
// operator (here the suite's, with the cluster admin's identity) still writes it.
func TestOnlyTheOperatorWritesWhatEdgepoolManages(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	file := filepath.Join(root, "config", "rbac", "managed_objects_policy.yaml")
	out, err := kubectl("apply", "--server-side", "-f", file)
	g.Expect(err).NotTo(HaveOccurred(), out)
	t.Cleanup(func() { _, _ = kubectl("delete", "--ignore-not-found", "-f", file) })
	out, err = kubectl("-n", ns, "create", "rolebinding", "alice-edits", "--clusterrole=edit", "--user=alice")
	g.Expect(err).NotTo(HaveOccurred(), out)
	asAlice := func(args ...string) (string, error) {
		return kubectl(append([]string{"--as=alice", "-n", ns}, args...)...)
	}

	cn := nvmeCacheNode(ns, "guarded", "managed-policy") // selects no node: it only owns
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	cm := &corev1.ConfigMap{}
	g.Eventually(func() error {
		return k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "guarded-nginx"}, cm)
	}, timeout, interval).Should(Succeed())

	// The policy takes effect once the API server has loaded it.
	probe := 0
	g.Eventually(func() string {
		probe++
		out, _ := asAlice("annotate", "configmap", "guarded-nginx", "--overwrite", fmt.Sprintf("edgepool.test/probe=%d", probe))
		return out
	}, timeout, interval).Should(ContainSubstring("configmaps guarded-nginx is managed by edgepool, from a CacheNode: change the CacheNode instead"))

	forged := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "forged", "namespace": ns, "ownerReferences": []map[string]any{{"apiVersion": "cache.edgepool.io/v1alpha1",
			"kind": "CacheNode", "name": cn.Name, "uid": string(cn.UID), "controller": true}}},
		"data": map[string]string{"nginx.conf": "evil"}}
	data, err := json.Marshal(forged)
	g.Expect(err).NotTo(HaveOccurred())
	forgedFile := filepath.Join(t.TempDir(), "forged.json")
	g.Expect(os.WriteFile(forgedFile, data, 0o644)).To(Succeed())
	out, err = asAlice("create", "configmap", "plain", "--from-literal=k=v")
	g.Expect(err).NotTo(HaveOccurred(), "an object of the user's own: %s", out)
	for _, denied := range [][]string{
		{"patch", "configmap", "guarded-nginx", "--type=merge", "-p", `{"data":{"nginx.conf":"evil"}}`},
		{"delete", "configmap", "guarded-nginx"},
		{"patch", "daemonset", "guarded", "--type=merge", "-p", `{"spec":{"template":{"spec":{"hostNetwork":true}}}}`},
		{"delete", "networkpolicy", "guarded-cache"},
		{"label", "configmap", "guarded-nginx", "app.kubernetes.io/managed-by-"},
		{"create", "-f", forgedFile},
		{"label", "configmap", "plain", "app.kubernetes.io/managed-by=edgepool"},
	} {
		out, err := asAlice(denied...)
		g.Expect(err).To(HaveOccurred(), "%v was allowed: %s", denied, out)
		g.Expect(out).To(ContainSubstring("is managed by edgepool"), "%v", denied)
	}
	out, err = asAlice("patch", "configmap", "plain", "--type=merge", "-p", `{"data":{"k":"x"}}`)
	g.Expect(err).NotTo(HaveOccurred(), "the user's own object: %s", out)

	// Its pods too, which only their DaemonSet's controller makes (here the suite makes one:
	// the CacheNode selects no node). The user may not run another image with a cache pod's
	// disks, forge the operator's annotation or put a pod of their own among the CacheNode's
	// (its ring, its NetworkPolicy's peers); deleting one stays open.
	cachePod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "guarded-cache", Namespace: ns, Labels: cachepod.ObjectLabels(cn)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cache", Image: "edgepool/cache:0.1.0"}}}}
	g.Expect(k8s.Create(ctx, cachePod)).To(Succeed())
	out, err = asAlice("run", "plain-pod", "--image=edgepool/cache:0.1.0", "--restart=Never")
	g.Expect(err).NotTo(HaveOccurred(), "a pod of the user's own: %s", out)
	var labels []string
	for k, v := range cachepod.ObjectLabels(cn) {
		labels = append(labels, k+"="+v)
	}
	for _, denied := range [][]string{
		{"set", "image", "pod/guarded-cache", "cache=evil.example/cache:1"},
		{"annotate", "pod", "guarded-cache", "--overwrite", "edgepool.io/config-hash=forged"},
		{"run", "forged-member", "--image=evil.example/cache:1", "--restart=Never", "--labels=" + strings.Join(labels, ",")},
		{"label", "pod", "plain-pod", "app.kubernetes.io/managed-by=edgepool"},
	} {
		out, err := asAlice(denied...)
		g.Expect(err).To(HaveOccurred(), "%v was allowed: %s", denied, out)
		g.Expect(out).To(ContainSubstring("is managed by edgepool"), "%v", denied)
	}
	out, err = asAlice("delete", "pod", "guarded-cache", "--wait=false")
	g.Expect(err).NotTo(HaveOccurred(), "deleting a cache pod: %s", out)

	// The operator writes on: a new origin reaches the ConfigMap.
	g.Eventually(func() error {
		latest := &v1alpha1.CacheNode{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(cn), latest); err != nil {
			return err
		}
		latest.Spec.Origin.Servers = []string{"127.0.0.1:9001"}
		return k8s.Update(ctx, latest)
	}, timeout, interval).Should(Succeed())
	g.Eventually(func() string {
		_ = k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "guarded-nginx"}, cm)
		return cm.Data["nginx.conf"]
	}, timeout, interval).Should(ContainSubstring("server 127.0.0.1:9001;"))
}

// TestPodSecurityOfTheNamespaceHolds: cache pods are created by the DaemonSet controller
// in the CacheNode's namespace, so the cluster admin's Pod Security level for it holds. In
// a namespace at the baseline level none is created (they mount host paths, and the
// refusal says so on the DaemonSet); once the admin lets the namespace run privileged
// pods, they come.
func TestPodSecurityOfTheNamespaceHolds(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespaceAt(t, "baseline")
	newNode(t, "psa-one", "psa", map[string]string{"disk.edgepool.io/nvme": "2"})
	cn := nvmeCacheNode(ns, "edge", "psa")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	g.Eventually(func() string { return podEvents(ctx, ns, cachepod.DaemonSetName(cn)) }, timeout, interval).Should(And(
		ContainSubstring("FailedCreate"), ContainSubstring(`violates PodSecurity "baseline:latest"`), ContainSubstring("hostPath volumes")))
	g.Expect(podNodes(g, ns, "edge")).To(BeEmpty())

	namespace := &corev1.Namespace{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Name: ns}, namespace)).To(Succeed())
	patch := client.MergeFrom(namespace.DeepCopy())
	namespace.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
	g.Expect(k8s.Patch(ctx, namespace, patch)).To(Succeed())
	g.Eventually(func(g Gomega) []string { return podNodes(g, ns, "edge") }, timeout, interval).Should(Equal([]string{"psa-one"}))
}
