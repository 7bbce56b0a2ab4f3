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
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	. "github.com/onsi/gomega"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/test/certs"
)

// tlsSecret creates a kubernetes.io/tls Secret for hosts and returns its certificate pool.
func tlsSecret(t *testing.T, g Gomega, ns, name string, hosts ...string) *x509.CertPool {
	t.Helper()
	cert, key, err := certs.SelfSigned(nil, hosts...)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: cert, corev1.TLSPrivateKeyKey: key},
	})).To(Succeed())
	pool := x509.NewCertPool()
	g.Expect(pool.AppendCertsFromPEM(cert)).To(BeTrue())
	return pool
}

// httpsClient connects to addr whatever the URL's host, verifying the server's
// certificate against roots, over HTTP/2 when the server offers it.
func httpsClient(addr string, roots *x509.CertPool) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
}

// Two sites on the real cache pod, each with its own origin and its own certificate from a
// Secret the pod mounts (the operator reads none): HTTPS with SNI gets each site's
// certificate (verified) and its origin's objects over HTTP/2, cached on the node's disks;
// site a also over HTTP/3 (QUIC on UDP), advertised in Alt-Svc; site b compresses (gzip,
// brotli: the image's module) once per encoding; plain HTTP serves the same sites by
// Host; a host no site names is refused on both.
func TestRealNodeServesTwoSitesOverTLS(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	originA, hitsA := newOrigin(t, "origin-a")
	originB, hitsB := newOrigin(t, "origin-b")
	const hostA, hostB = "a.edgepool.test", "b.edgepool.test"
	rootsA := tlsSecret(t, g, ns, "site-a-tls", hostA)
	rootsB := tlsSecret(t, g, ns, "site-b-tls", "*.b.edgepool.test", hostB)

	cn := realCacheNode(t, ns, "sites", originA)
	cn.Spec.Origin = v1alpha1.Origin{}
	cn.Spec.Sites = []v1alpha1.Site{
		{Name: "a", Hostnames: []string{hostA}, Origin: v1alpha1.Origin{Servers: []string{originA}},
			TLS: &v1alpha1.SiteTLS{SecretName: "site-a-tls", HTTP3: v1alpha1.HTTP3On}},
		{Name: "b", Hostnames: []string{hostB, "*.b.edgepool.test"}, Origin: v1alpha1.Origin{Servers: []string{originB}},
			TLS: &v1alpha1.SiteTLS{SecretName: "site-b-tls"}, Compression: &v1alpha1.Compression{}},
	}
	pod, base := runCache(t, g, cn)
	tlsAddr := fmt.Sprintf("%s:%d", pod.Status.PodIP, cn.Spec.Listener.TLSPort)

	for _, site := range []struct {
		host, origin string
		roots        *x509.CertPool
	}{{hostA, "origin-a", rootsA}, {hostB, "origin-b", rootsB}, {"img.b.edgepool.test", "origin-b", rootsB}} {
		c := httpsClient(tlsAddr, site.roots)
		for _, want := range []string{"MISS", "HIT"} {
			started := time.Now()
			resp, err := c.Get("https://" + site.host + "/page")
			g.Expect(err).NotTo(HaveOccurred(), site.host)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
			g.Expect(string(body)).To(Equal("object /page from " + site.origin + "\n"))
			g.Expect(resp.Header.Get("X-Cache-Status")).To(Equal(want))
			g.Expect(resp.Proto).To(Equal("HTTP/2.0"))
			g.Expect(resp.TLS.PeerCertificates[0].VerifyHostname(site.host)).To(Succeed())
			t.Logf("https://%s/page: %s over %s, %s, %s, in %s", site.host, want, resp.Proto,
				tls.VersionName(resp.TLS.Version), tls.CipherSuiteName(resp.TLS.CipherSuite), time.Since(started).Round(time.Millisecond))
		}
	}
	g.Expect(hitsA()).To(Equal(1))
	g.Expect(hitsB()).To(Equal(2)) // two hosts of site b, two keys

	// Site a also speaks HTTP/3, over UDP through the pod network, and says so over TCP.
	h3 := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: rootsA, ServerName: hostA},
		Dial: func(ctx context.Context, _ string, tlsConf *tls.Config, conf *quic.Config) (*quic.Conn, error) {
			return quic.DialAddr(ctx, tlsAddr, tlsConf, conf)
		}}
	defer h3.Close()
	started := time.Now()
	resp, err := (&http.Client{Timeout: 10 * time.Second, Transport: h3}).Get("https://" + hostA + "/page")
	g.Expect(err).NotTo(HaveOccurred())
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	g.Expect(resp.Proto).To(Equal("HTTP/3.0"))
	g.Expect(string(body)).To(Equal("object /page from origin-a\n"))
	g.Expect(resp.Header.Get("X-Cache-Status")).To(Equal("HIT"))
	t.Logf("https://%s/page over %s: HIT in %s", hostA, resp.Proto, time.Since(started).Round(time.Millisecond))
	for host, want := range map[string]string{hostA: `h3=":443"; ma=86400`, hostB: ""} {
		roots := rootsA
		if host == hostB {
			roots = rootsB
		}
		resp, err := httpsClient(tlsAddr, roots).Get("https://" + host + "/page")
		g.Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		g.Expect(resp.Header.Get("Alt-Svc")).To(Equal(want), host)
	}

	// Site b compresses: gzip for a client that accepts it, once, then from the cache; a
	// client that does not gets the origin's bytes, a response of its own.
	long := strings.Repeat("object /long/page from origin-b\n", 64)
	gzipClient, identityClient := httpsClient(tlsAddr, rootsB), httpsClient(tlsAddr, rootsB)
	identityClient.Transport.(*http.Transport).DisableCompression = true
	for _, step := range []struct {
		client *http.Client
		gzip   bool
		want   string
	}{{gzipClient, true, "MISS"}, {gzipClient, true, "HIT"}, {identityClient, false, "MISS"}, {identityClient, false, "HIT"}} {
		resp, err := step.client.Get("https://" + hostB + "/long/page")
		g.Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		g.Expect(string(body)).To(Equal(long))
		g.Expect(resp.Uncompressed).To(Equal(step.gzip), "Go's client asked for gzip and decoded it")
		g.Expect(resp.Header.Get("Content-Encoding")).To(BeEmpty())
		g.Expect(resp.Header.Get("Vary")).To(Equal("Accept-Encoding"))
		g.Expect(resp.Header.Get("X-Cache-Status")).To(Equal(step.want))
		t.Logf("https://%s/long/page: %s, gzip %t, %d bytes", hostB, step.want, step.gzip, len(body))
	}

	// And brotli, for a client that asks for it: a response of its own, then a HIT.
	for _, want := range []string{"MISS", "HIT"} {
		req, _ := http.NewRequest(http.MethodGet, "https://"+hostB+"/long/page", nil)
		req.Header.Set("Accept-Encoding", "br, gzip")
		resp, err := identityClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(brotli.NewReader(resp.Body))
		resp.Body.Close()
		g.Expect(resp.Header.Get("Content-Encoding")).To(Equal("br"))
		g.Expect(string(body)).To(Equal(long))
		g.Expect(resp.Header.Get("X-Cache-Status")).To(Equal(want))
		t.Logf("https://%s/long/page: %s, brotli", hostB, want)
	}

	// Plain HTTP, by Host.
	req, _ := http.NewRequest(http.MethodGet, base+"/page", nil)
	req.Host = hostB
	resp, err = http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	g.Expect(string(body)).To(Equal("object /page from origin-b\n"))
	g.Expect(resp.Header.Get("X-Cache-Status")).To(Equal("HIT"))

	// A host no site names: 421 on plain HTTP, no handshake on TLS.
	req.Host = "other.example"
	resp, err = http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusMisdirectedRequest))
	conn, err := tls.Dial("tcp", tlsAddr, &tls.Config{ServerName: "other.example", InsecureSkipVerify: true}) //nolint:gosec // the handshake must fail before any certificate
	if err == nil {
		conn.Close()
	}
	g.Expect(err).To(HaveOccurred(), "a TLS handshake for a host no site names")
	t.Logf("other.example: 421 over HTTP, handshake refused over TLS (%v)", err)
	g.Expect(hitsA() + hitsB()).To(Equal(6)) // and /long/page thrice: one per encoding
}
