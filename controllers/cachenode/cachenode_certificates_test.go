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
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/cachepod"
)

func certificate(ns, name, secret string) *unstructured.Unstructured {
	u := newCertificate()
	u.SetNamespace(ns)
	u.SetName(name)
	u.Object["spec"] = map[string]any{"secretName": secret, "dnsNames": []any{"shop.example.com"},
		"issuerRef": map[string]any{"name": "ca", "kind": "Issuer"}}
	return u
}

func TestCertificateRevisions(t *testing.T) {
	g := NewWithT(t)
	withRevision := func(secret string, revision int64) unstructured.Unstructured {
		u := certificate("ns", secret, secret)
		if revision > 0 {
			u.Object["status"] = map[string]any{"revision": revision}
		}
		return *u
	}
	certs := []unstructured.Unstructured{withRevision("shop-tls", 3), withRevision("blog-tls", 0), withRevision("other-tls", 7)}
	g.Expect(certificateRevisions(certs, []string{"blog-tls", "shop-tls"})).To(Equal("shop-tls=3"), "a Certificate not issued yet has no revision")
	certs[1] = withRevision("blog-tls", 1)
	g.Expect(certificateRevisions(certs, []string{"blog-tls", "shop-tls"})).To(Equal("blog-tls=1,shop-tls=3"))
	g.Expect(certificateRevisions(certs, nil)).To(BeEmpty())

	u := withRevision("shop-tls", 3)
	u.Object["status"].(map[string]any)["conditions"] = []any{map[string]any{"type": "Ready", "message": "long"}}
	trimCertificate(&u)
	g.Expect(u.Object).To(Equal(map[string]any{"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": "shop-tls", "namespace": "ns", "uid": "", "resourceVersion": ""},
		"spec":     map[string]any{"secretName": "shop-tls"}, "status": map[string]any{"revision": int64(3)}}))

	installed, err := certManagerInstalled(meta.NewDefaultRESTMapper(nil))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(installed).To(BeFalse(), "without the CRD the operator watches no Certificates")
}

// TestCertificateRenewalAnnotatesPods: where cert-manager is installed (here its CRD), a
// new revision of the Certificate that writes a site's Secret is announced on the cache
// pods, so that their kubelets swap the renewed Secret in at once; the operator reads
// the Certificate, never the Secret.
func TestCertificateRenewalAnnotatesPods(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	g.Expect(reconciler.certManager).To(BeTrue(), "the suite installs cert-manager's Certificate CRD")
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "renewal")
	cn.Spec.Origin = v1alpha1.Origin{}
	cn.Spec.Sites = []v1alpha1.Site{{Name: "shop", Hostnames: []string{"shop.example.com"},
		Origin: v1alpha1.Origin{Servers: []string{"127.0.0.1:9000"}}, TLS: &v1alpha1.SiteTLS{SecretName: "shop-tls"}}}
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "edge-abcde", Namespace: ns, Labels: cachepod.ObjectLabels(cn)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "cache", Image: "edgepool/cache:0.1.0"}}},
	}
	g.Expect(k8s.Create(ctx, pod)).To(Succeed())
	podKey := client.ObjectKeyFromObject(pod)
	// Until a Certificate writes shop-tls, nothing is announced of it.
	g.Consistently(func(g Gomega) {
		get(g, pod, podKey)
		g.Expect(pod.Annotations).NotTo(HaveKey(CertificateRevisionsAnnotation))
	}, "500ms", interval).Should(Succeed())

	shop, other := certificate(ns, "shop", "shop-tls"), certificate(ns, "other", "other-tls")
	g.Expect(k8s.Create(ctx, shop)).To(Succeed())
	g.Expect(k8s.Create(ctx, other)).To(Succeed())
	setRevision := func(u *unstructured.Unstructured, revision int64) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(u), u)).To(Succeed())
		u.Object["status"] = map[string]any{"revision": revision}
		g.Expect(k8s.Status().Update(ctx, u)).To(Succeed())
	}
	setRevision(other, 5)
	for _, revision := range []int64{1, 2} {
		setRevision(shop, revision)
		g.Eventually(func(g Gomega) {
			get(g, pod, podKey)
			g.Expect(pod.Annotations).To(HaveKeyWithValue(CertificateRevisionsAnnotation, fmt.Sprintf("shop-tls=%d", revision)))
		}, timeout, interval).Should(Succeed())
	}
	g.Expect(pod.Spec.Containers).To(HaveLen(1))
}

// TestOperatorHasNoSecretAccess: the operator's ClusterRole grants nothing on Secrets
// (nor any wildcard), and on cert-manager's Certificates only reads.
func TestOperatorHasNoSecretAccess(t *testing.T) {
	g := NewWithT(t)
	for _, file := range []string{
		filepath.Join("..", "..", "config", "rbac", "role.yaml"),
		filepath.Join("..", "..", "charts", "edgepool", "files", "role.yaml"),
	} {
		data, err := os.ReadFile(file)
		g.Expect(err).NotTo(HaveOccurred())
		var role struct {
			Rules []struct {
				APIGroups []string `json:"apiGroups"`
				Resources []string `json:"resources"`
				Verbs     []string `json:"verbs"`
			} `json:"rules"`
		}
		g.Expect(yaml.Unmarshal(data, &role)).To(Succeed())
		g.Expect(role.Rules).NotTo(BeEmpty(), file)
		certificates := false
		for _, r := range role.Rules {
			g.Expect(r.Resources).NotTo(ContainElement("secrets"), file)
			g.Expect(r.Resources).NotTo(ContainElement("*"), file)
			g.Expect(r.APIGroups).NotTo(ContainElement("*"), file)
			if slices.Contains(r.APIGroups, "cert-manager.io") {
				certificates = true
				g.Expect(r.Resources).To(Equal([]string{"certificates"}), file)
				g.Expect(r.Verbs).To(ConsistOf("get", "list", "watch"), file)
			}
		}
		g.Expect(certificates).To(BeTrue(), "%s: no rule for cert-manager's Certificates", file)
	}
}
