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
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/test/certs"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// tlsHost is the hostname of the TLS tests' site.
const tlsHost = "shop.edgepool.test"

// httpsCounter sends GETs for tlsHost until stop closes, verifying the certificate
// against the test's CA, and counts the requests that failed. keepAlive chooses one client
// that reuses its connections or one that makes a new connection (and handshake) per request.
type httpsCounter struct {
	ok, failed atomic.Int64
	retried    atomic.Int64 // requests Go's client sent again on a new connection
	mu         sync.Mutex
	errs       []error
}

func (c *httpsCounter) run(ca *certs.CA, url string, keepAlive bool, stop <-chan struct{}) {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Root)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: tlsHost},
		DisableKeepAlives: !keepAlive,
	}}
	defer client.CloseIdleConnections()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		conns := 0
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conns++ }})
		r, err := testkit.Fetch(ctx, client, fmt.Sprintf("%s/obj-%d", url, i%16), http.Header{"Host": {tlsHost}})
		if conns > 1 {
			c.retried.Add(1)
		}
		if err == nil && r.Code != http.StatusOK {
			err = fmt.Errorf("status %d: %s", r.Code, r.Body)
		}
		if err != nil {
			c.failed.Add(1)
			c.mu.Lock()
			c.errs = append(c.errs, err)
			c.mu.Unlock()
			continue
		}
		c.ok.Add(1)
	}
}

// TestRealNodeCertificateRotationUnderLoad: a site's kubernetes.io/tls Secret gets new
// data twice while a keep-alive client and a new-connection client send HTTPS requests to
// the cache pod: once with nothing announcing it (the kubelet's periodic sync swaps the
// Secret volume), once recorded by a cert-manager Certificate's new revision (the operator
// nudges the pods' kubelets). The agent checks each new pair and reloads nginx gracefully:
// the new certificate is served, the pod is neither replaced nor restarted, and no request
// fails. It logs the request counts and the time from each update to the new certificate.
func TestRealNodeCertificateRotationUnderLoad(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	origin, _ := newOrigin(t, "origin")
	ca, err := certs.NewCA("edgepool e2e")
	g.Expect(err).NotTo(HaveOccurred())
	first, err := ca.IssueNow(tlsHost)
	g.Expect(err).NotTo(HaveOccurred())
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-tls", Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: first.Chain, corev1.TLSPrivateKeyKey: first.Key},
	}
	g.Expect(k8s.Create(ctx, secret)).To(Succeed())

	cn := realCacheNode(t, ns, "tls", origin)
	cn.Spec.Origin = v1alpha1.Origin{}
	cn.Spec.Sites = []v1alpha1.Site{{Name: "shop", Hostnames: []string{tlsHost},
		Origin: v1alpha1.Origin{Servers: []string{origin}}, TLS: &v1alpha1.SiteTLS{SecretName: secret.Name}}}
	pod, _ := runCache(t, g, cn)
	port := cn.Spec.Listener.TLSPort
	if port == 0 {
		port = 8443 // the default the operator renders with
	}
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port)))
	served := func() string {
		fp, err := certs.ServedFingerprint(addr, tlsHost)
		if err != nil {
			return err.Error()
		}
		return fp
	}
	g.Eventually(served, timeout, interval).Should(Equal(first.Fingerprint), "the Secret's certificate is served")
	g.Eventually(func(g Gomega) {
		c := conditionOf(getCacheNode(g, ns, cn.Name), "CertificatesReady")
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
	}, timeout, interval).Should(Succeed())

	stop := make(chan struct{})
	var wg sync.WaitGroup
	clients := map[string]*httpsCounter{"keep-alive": {}, "new-connection": {}}
	for name, c := range clients {
		wg.Go(func() { c.run(ca, "https://"+addr, name == "keep-alive", stop) })
	}
	time.Sleep(2 * time.Second) // load before the rotation

	// rotate gives the Secret a new certificate, calls announce, and returns how long the
	// new certificate took to be served.
	rotate := func(announce func()) time.Duration {
		next, err := ca.IssueNow(tlsHost)
		g.Expect(err).NotTo(HaveOccurred())
		g.Eventually(func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
				return err
			}
			secret.Data = map[string][]byte{corev1.TLSCertKey: next.Chain, corev1.TLSPrivateKeyKey: next.Key}
			return k8s.Update(ctx, secret)
		}, timeout, interval).Should(Succeed())
		updated := time.Now()
		announce()
		g.Eventually(served, 3*time.Minute, 100*time.Millisecond).Should(Equal(next.Fingerprint), "the renewed certificate is served")
		return time.Since(updated)
	}
	// Without cert-manager nothing nudges the kubelet: its periodic sync brings the Secret.
	bySync := rotate(func() {})
	// With cert-manager, the Certificate's new revision is announced on the pods.
	certificate := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": "shop", "namespace": ns},
		"spec":     map[string]any{"secretName": secret.Name, "dnsNames": []any{tlsHost}},
	}}
	g.Expect(k8s.Create(ctx, certificate)).To(Succeed())
	revision := int64(1)
	setRevision := func() {
		g.Eventually(func() error {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(certificate), certificate); err != nil {
				return err
			}
			g.Expect(unstructured.SetNestedField(certificate.Object, revision, "status", "revision")).To(Succeed())
			return k8s.Status().Update(ctx, certificate)
		}, timeout, interval).Should(Succeed())
	}
	setRevision()
	time.Sleep(2 * time.Second) // the operator has seen revision 1: the next one is a renewal
	byCertManager := rotate(func() { revision++; setRevision() })
	time.Sleep(2 * time.Second) // load after the rotations
	close(stop)
	wg.Wait()

	logs, err := kubectl("logs", "-n", ns, pod.Name, "-c", "cache")
	g.Expect(err).NotTo(HaveOccurred())
	for name, c := range clients {
		t.Logf("two certificate rotations under load on the real node, %s client: %d requests, %d failed %v, %d sent again",
			name, c.ok.Load()+c.failed.Load(), c.failed.Load(), c.errs, c.retried.Load())
		g.Expect(c.ok.Load()).To(BeNumerically(">", 10), "%s client: the load did not run", name)
	}
	// nginx before 1.25.4 dropped a request waiting on a thread pool when its worker left
	// after a reload ("open socket #N left in connection M"; images/cache/packages.txt).
	left := regexp.MustCompile(`\[alert\] .* open socket #[0-9]+ left in connection`).FindAllString(logs, -1)
	g.Expect(left).To(BeEmpty(), "the cache pod's log:\n%s", logs)
	for name, c := range clients {
		g.Expect(c.errs).To(BeEmpty(), "%s client", name)
	}
	// An old worker closes its idle keep-alive connections as it leaves; a request sent on
	// one at that moment meets the close, and the client sends it again on a new
	// connection, as HTTP allows for idempotent requests (RFC 9112 §9.3.1): counted above,
	// not a failure. A request on a new connection is never sent again.
	g.Expect(clients["new-connection"].retried.Load()).To(BeZero())
	t.Logf("Secret updated -> renewed certificate served on the real node: %s at the kubelet's own sync, %s when cert-manager's Certificate records the renewal",
		bySync.Round(10*time.Millisecond), byCertManager.Round(10*time.Millisecond))

	after := cachePod(g, ns, cn.Name)
	g.Expect(after.UID).To(Equal(pod.UID), "a certificate rotation replaced the cache pod")
	g.Expect(after.Status.ContainerStatuses[0].RestartCount).To(BeZero(), "a certificate rotation restarted the cache container")
	g.Eventually(func(g Gomega) {
		c := conditionOf(getCacheNode(g, ns, cn.Name), "CertificatesReady")
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), c.Message)
	}, timeout, interval).Should(Succeed())
}

// A site whose Secret does not exist yet starts on a placeholder while the pod's other
// site serves its own certificate; CertificatesReady names the Secret. Once the Secret
// exists, its certificate is served. Deleted again, the kubelet empties the volume and the
// last good certificate keeps serving, the Secret named as missing: the pod never stops.
func TestRealNodeMissingSecretKeepsTheLastCertificate(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	origin, _ := newOrigin(t, "origin")
	ca, err := certs.NewCA("edgepool e2e")
	g.Expect(err).NotTo(HaveOccurred())
	const okHost, lateHost = "ok.edgepool.test", "late.edgepool.test"
	newSecret := func(name, host string) (*corev1.Secret, *certs.Leaf) {
		leaf, err := ca.IssueNow(host)
		g.Expect(err).NotTo(HaveOccurred())
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{corev1.TLSCertKey: leaf.Chain, corev1.TLSPrivateKeyKey: leaf.Key}}, leaf
	}
	okSecret, okLeaf := newSecret("ok-tls", okHost)
	g.Expect(k8s.Create(ctx, okSecret)).To(Succeed())

	cn := realCacheNode(t, ns, "late", origin)
	cn.Spec.Origin = v1alpha1.Origin{}
	cn.Spec.Sites = []v1alpha1.Site{
		{Name: "ok", Hostnames: []string{okHost}, Origin: v1alpha1.Origin{Servers: []string{origin}}, TLS: &v1alpha1.SiteTLS{SecretName: "ok-tls"}},
		{Name: "late", Hostnames: []string{lateHost}, Origin: v1alpha1.Origin{Servers: []string{origin}}, TLS: &v1alpha1.SiteTLS{SecretName: "late-tls"}},
	}
	pod, _ := runCache(t, g, cn)
	addr := net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(cn.Spec.Listener.TLSPort)))
	served := func(host string) func() string {
		return func() string {
			fp, err := certs.ServedFingerprint(addr, host)
			if err != nil {
				return err.Error()
			}
			return fp
		}
	}
	certificates := func(status metav1.ConditionStatus, message string) {
		g.Eventually(func(g Gomega) {
			c := conditionOf(getCacheNode(g, ns, cn.Name), "CertificatesReady")
			g.Expect(c.Status).To(Equal(status), c.Message)
			g.Expect(c.Message).To(ContainSubstring(message))
		}, timeout, interval).Should(Succeed())
	}
	g.Eventually(served(okHost), timeout, interval).Should(Equal(okLeaf.Fingerprint))
	g.Expect(served(lateHost)()).NotTo(Equal(okLeaf.Fingerprint), "the late site has a placeholder of its own")
	certificates(metav1.ConditionFalse, "Secret late-tls")
	t.Logf("before its Secret exists: the late site on a placeholder, the ok site serving its own; CertificatesReady False")

	// cert-manager issues the Secret, then records the Certificate's first revision, which
	// the operator announces on the pods.
	lateSecret, lateLeaf := newSecret("late-tls", lateHost)
	g.Expect(k8s.Create(ctx, lateSecret)).To(Succeed())
	created := time.Now()
	certificate := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": "late", "namespace": ns},
		"spec":     map[string]any{"secretName": lateSecret.Name, "dnsNames": []any{lateHost}},
	}}
	g.Expect(k8s.Create(ctx, certificate)).To(Succeed())
	g.Expect(unstructured.SetNestedField(certificate.Object, int64(1), "status", "revision")).To(Succeed())
	g.Expect(k8s.Status().Update(ctx, certificate)).To(Succeed())
	g.Eventually(served(lateHost), 3*time.Minute, 100*time.Millisecond).Should(Equal(lateLeaf.Fingerprint))
	t.Logf("the Secret created -> its certificate served: %s", time.Since(created).Round(10*time.Millisecond))
	certificates(metav1.ConditionTrue, "")

	// Deleted, nothing announces it: the kubelet's own sync empties the volume.
	g.Expect(k8s.Delete(ctx, lateSecret)).To(Succeed())
	deleted := time.Now()
	certificates(metav1.ConditionFalse, "Secret late-tls")
	t.Logf("the Secret deleted -> reported missing: %s", time.Since(deleted).Round(10*time.Millisecond))
	g.Expect(served(lateHost)()).To(Equal(lateLeaf.Fingerprint), "the last good certificate keeps serving")
	g.Expect(served(okHost)()).To(Equal(okLeaf.Fingerprint))
	after := cachePod(g, ns, cn.Name)
	g.Expect(after.UID).To(Equal(pod.UID))
	g.Expect(after.Status.ContainerStatuses[0].RestartCount).To(BeZero())
	t.Logf("the Secret deleted: the last good certificate serves; CertificatesReady: %s", conditionOf(getCacheNode(g, ns, cn.Name), "CertificatesReady").Message)
}
