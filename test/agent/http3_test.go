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
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// TestSiteOverHTTP3: a site with http3 On answers a real HTTP/3 client (quic-go) over
// QUIC on UDP tlsPort, from the cache; its HTTPS responses over TCP advertise it in
// Alt-Svc, and a site without http3 advertises nothing.
func TestSiteOverHTTP3(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=600")
		fmt.Fprintf(w, "%s of %s", r.URL.Path, r.Host)
	}))
	t.Cleanup(origin.Close)
	spec := testSpec(t, originAddr(origin), disk("ssd0", diskDir(t, "ssd0"), "SSD"))
	spec.Origin = v1alpha1.Origin{}
	spec.Listener.TLSPort = freePort(t)
	site := func(name string, h3 v1alpha1.HTTP3) v1alpha1.Site {
		return v1alpha1.Site{Name: name, Hostnames: []string{name + ".example"}, Origin: v1alpha1.Origin{Servers: []string{originAddr(origin)}},
			TLS: &v1alpha1.SiteTLS{SecretName: name + "-tls", HTTP3: h3}}
	}
	spec.Sites = []v1alpha1.Site{site("shop", v1alpha1.HTTP3On), site("blog", v1alpha1.HTTP3Off)}
	spec.Default()
	ca := newCA(t)
	secrets := newSecretVolumes(t, "shop", "blog")
	secrets.write(t, "shop", issueLeaf(t, ca, "shop.example").SecretFiles())
	secrets.write(t, "blog", issueLeaf(t, ca, "blog.example").SecretFiles())
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec, "--allow-unmounted", "--tls-secrets-dir", secrets.root)
	agent.waitReady(t)

	roots := x509.NewCertPool()
	roots.AddCert(ca.Root)
	addr := fmt.Sprintf("127.0.0.1:%d", spec.Listener.TLSPort)
	h3 := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "shop.example"}}
	t.Cleanup(func() { _ = h3.Close() })
	overQUIC := &http.Client{Timeout: 10 * time.Second, Transport: h3}
	for i, want := range []string{"MISS", "HIT"} {
		r, err := testkit.Fetch(context.Background(), overQUIC, "https://"+addr+"/page", http.Header{"Host": {"shop.example"}})
		if err != nil {
			t.Fatalf("GET /page over HTTP/3 (%d): %v", i, err)
		}
		if r.Code != http.StatusOK || string(r.Body) != "/page of shop.example" || r.Header.Get("X-Cache-Status") != want {
			t.Errorf("GET /page over HTTP/3 (%d): %d %q, cache status %q; want 200 from the origin's, %s", i, r.Code, r.Body, r.Header.Get("X-Cache-Status"), want)
		}
	}

	// A name no site has: the first site with HTTP/3 answers the handshake with its
	// certificate, which the client refuses.
	other := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "other.example"}}
	t.Cleanup(func() { _ = other.Close() })
	if r, err := testkit.Fetch(context.Background(), &http.Client{Timeout: 10 * time.Second, Transport: other}, "https://"+addr+"/page", nil); err == nil {
		t.Errorf("GET https://other.example/page over HTTP/3: %d %q, want the handshake refused", r.Code, r.Body)
	} else {
		t.Logf("a name no site has, over HTTP/3: %v", err)
	}

	for name, want := range map[string]string{"shop.example": `h3=":443"; ma=86400`, "blog.example": ""} {
		overTCP := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: name}}}
		r, err := testkit.Fetch(context.Background(), overTCP, "https://"+addr+"/page", http.Header{"Host": {name}})
		if err != nil {
			t.Fatalf("GET https://%s/page: %v", name, err)
		}
		if got := r.Header.Get("Alt-Svc"); got != want || r.Code != http.StatusOK {
			t.Errorf("https://%s/page: %d, Alt-Svc %q; want 200 and %q", name, r.Code, got, want)
		}
	}
	// Plain HTTP is not where HTTP/3 is advertised.
	r, err := testkit.Fetch(context.Background(), http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/page", spec.Listener.Port), http.Header{"Host": {"shop.example"}})
	if err != nil || r.Header.Get("Alt-Svc") != "" {
		t.Errorf("http://shop.example/page: %v, Alt-Svc %q; want none", err, r.Header.Get("Alt-Svc"))
	}
}
