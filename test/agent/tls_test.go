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
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/certs"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// tlsSite is a site with a certificate, for a hand-written nginx.conf: the renderer for
// sites is not here yet, and the agent's part does not depend on it.
type tlsSite struct{ name, hostname string }

// writeTLSConf writes the rendered configuration of spec with one TLS server per site on
// tlsPort, each answering its name, and the facts naming the sites' certificates.
func writeTLSConf(t *testing.T, cfg configDir, spec *v1alpha1.CacheNodeSpec, tlsPort int32, sites ...tlsSite) {
	t.Helper()
	conf, facts := tlsConf(t, spec, tlsPort, sites...)
	if err := cfg.Write(map[string][]byte{agentapi.ConfigKey: []byte(conf), agentapi.FactsKey: facts}); err != nil {
		t.Fatal(err)
	}
}

// tlsConf is the rendered configuration of spec with one TLS server per site on tlsPort,
// and its facts.
func tlsConf(t testing.TB, spec *v1alpha1.CacheNodeSpec, tlsPort int32, sites ...tlsSite) (conf string, facts []byte) {
	t.Helper()
	conf = renderConf(t, spec)
	end := strings.LastIndex(conf, "}")
	var servers strings.Builder
	f := render.Facts(spec, "")
	for i, s := range sites {
		reuseport := ""
		if i == 0 {
			reuseport = " reuseport"
		}
		fmt.Fprintf(&servers, `
    server {
        listen 127.0.0.1:%d ssl%s;
        server_name %s;
        ssl_certificate %s;
        ssl_certificate_key %s;
        location / {
            return 200 "%s";
        }
    }
`, tlsPort, reuseport, s.hostname, nginxconf.NginxCertificateFile(s.name), nginxconf.NginxCertificateKeyFile(s.name), s.name)
		f.Certificates = append(f.Certificates, agentapi.Certificate{Site: s.name, SecretName: s.name + "-tls", Hostnames: []string{s.hostname}})
	}
	conf = conf[:end] + servers.String() + conf[end:]
	f.ConfigHash = agentapi.Hash([]byte(conf))
	facts, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return conf, facts
}

// secretVolumes are the sites' mounted Secrets, each swapped the way the kubelet swaps a
// Secret volume: a new timestamped directory, then the ..data symlink flipped.
type secretVolumes struct {
	root string
	dirs map[string]*testkit.ConfigDir
}

// newSecretVolumes makes an empty volume per site, as the kubelet mounts an optional
// Secret that does not exist.
func newSecretVolumes(t testing.TB, sites ...string) *secretVolumes {
	t.Helper()
	v := &secretVolumes{root: sharedDir(t), dirs: map[string]*testkit.ConfigDir{}}
	for _, s := range sites {
		dir := filepath.Join(v.root, s)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		v.dirs[s] = &testkit.ConfigDir{Dir: dir}
	}
	return v
}

func (v *secretVolumes) write(t testing.TB, site string, files map[string][]byte) {
	t.Helper()
	if err := v.dirs[site].Write(files); err != nil {
		t.Fatal(err)
	}
}

func newCA(t testing.TB) *certs.CA {
	t.Helper()
	ca, err := certs.NewCA("edgepool test")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issueLeaf(t testing.TB, ca *certs.CA, hosts ...string) *certs.Leaf {
	t.Helper()
	l, err := ca.IssueNow(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// servedLeaf is the leaf certificate nginx sends for serverName on a new connection.
func servedLeaf(addr, serverName string) (*x509.Certificate, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}) //nolint:gosec // reads what is served
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

func (p *agentProc) certificate(t *testing.T, site string) agentapi.CertificateStatus {
	t.Helper()
	for _, c := range p.status(t).Certificates {
		if c.Site == site {
			return c
		}
	}
	t.Fatalf("/status has no certificate for site %s", site)
	return agentapi.CertificateStatus{}
}

// httpsLoad sends requests for site until stop closes, counting those that did not
// return the site's answer. keepAlive chooses one client that reuses its connections
// or one that opens a new connection (and TLS handshake) per request.
type httpsLoad struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	firstErr   error
}

func (l *httpsLoad) run(ca *certs.CA, addr, serverName, want string, keepAlive bool, stop <-chan struct{}) {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Root)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: roots, ServerName: serverName},
		DisableKeepAlives: !keepAlive,
	}}
	defer client.CloseIdleConnections()
	for {
		select {
		case <-stop:
			return
		default:
		}
		body, err := testkit.Get(context.Background(), client, "https://"+addr+"/")
		if err == nil && body != want {
			err = fmt.Errorf("got %q, want %q", body, want)
		}
		if err != nil {
			l.failed.Add(1)
			l.mu.Lock()
			if l.firstErr == nil {
				l.firstErr = err
			}
			l.mu.Unlock()
			continue
		}
		l.ok.Add(1)
	}
}

// TestCertificateRotationUnderLoad: renewed certificates, swapped in the way the kubelet
// swaps a Secret volume, reach nginx with graceful reloads while a keep-alive client and
// a new-connection client hammer HTTPS, and no request fails.
func TestCertificateRotationUnderLoad(t *testing.T) {
	const rotations = 5
	spec := testSpec(t, originAddr(origin(t, "A")), disk("d0", diskDir(t, "d0"), "SSD"))
	tlsPort := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", tlsPort)
	ca := newCA(t)
	secrets := newSecretVolumes(t, "shop")
	leaf := issueLeaf(t, ca, "shop.example")
	secrets.write(t, "shop", leaf.SecretFiles())
	cfg := newConfigDir(t)
	writeTLSConf(t, cfg, spec, tlsPort, tlsSite{"shop", "shop.example"})
	agent := startAgent(t, cfg, spec, "--allow-unmounted", "--tls-secrets-dir", secrets.root)
	agent.waitReady(t)
	if c, err := servedLeaf(addr, "shop.example"); err != nil || fingerprint(c) != leaf.Fingerprint {
		t.Fatalf("nginx serves %v (%v), want the Secret's certificate", c, err)
	}
	if c := agent.certificate(t, "shop"); c.State != agentapi.CertificateServing || c.Fingerprint != leaf.Fingerprint ||
		!c.NotAfter.Equal(leaf.NotAfter) {
		t.Errorf("/status reports %+v, want Serving with the Secret's fingerprint and notAfter", c)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	loads := map[string]*httpsLoad{"keep-alive": {}, "new-connection": {}}
	for name, l := range loads {
		wg.Go(func() { l.run(ca, addr, "shop.example", "shop", name == "keep-alive", stop) })
	}
	for i := range rotations {
		leaf = issueLeaf(t, ca, "shop.example")
		secrets.write(t, "shop", leaf.SecretFiles())
		eventually(t, 15*time.Second, fmt.Sprintf("renewal %d to be served", i+1), func() bool {
			c, err := servedLeaf(addr, "shop.example")
			return err == nil && fingerprint(c) == leaf.Fingerprint
		})
	}
	close(stop)
	wg.Wait()
	for name, l := range loads {
		t.Logf("%s client: %d requests, %d failed", name, l.ok.Load()+l.failed.Load(), l.failed.Load())
		if l.failed.Load() != 0 {
			t.Errorf("%s client: %d requests failed across %d rotations, first: %v", name, l.failed.Load(), rotations, l.firstErr)
		}
		if l.ok.Load() < 20 {
			t.Errorf("%s client: only %d requests succeeded: the load did not run", name, l.ok.Load())
		}
	}
	if got := agent.metric("edgepool_certificate_reloads_total", map[string]string{"site": "shop"}); got != rotations {
		t.Errorf("edgepool_certificate_reloads_total{site=shop} = %v, want %d", got, rotations)
	}
	if got := agent.metric("edgepool_certificate_expiry_timestamp_seconds", map[string]string{"site": "shop"}); got != float64(leaf.NotAfter.Unix()) {
		t.Errorf("edgepool_certificate_expiry_timestamp_seconds{site=shop} = %v, want %d", got, leaf.NotAfter.Unix())
	}
	if c := agent.certificate(t, "shop"); c.State != agentapi.CertificateServing || c.Fingerprint != leaf.Fingerprint {
		t.Errorf("/status reports %+v, want the last renewal Serving", c)
	}
	if got := agent.metric("edgepool_config_reloads_total", nil); got != 0 {
		t.Errorf("edgepool_config_reloads_total = %v: a rotation is not a configuration change", got)
	}
}

// TestCertificateMissingAndMalformed: a site whose Secret is missing at the first start
// serves a placeholder while the other sites serve theirs, and picks the Secret up once
// it appears; a malformed Secret keeps the last good certificate and is reported.
func TestCertificateMissingAndMalformed(t *testing.T) {
	spec := testSpec(t, originAddr(origin(t, "A")), disk("d0", diskDir(t, "d0"), "SSD"))
	tlsPort := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", tlsPort)
	ca := newCA(t)
	secrets := newSecretVolumes(t, "shop", "blog")
	shop := issueLeaf(t, ca, "shop.example")
	secrets.write(t, "shop", shop.SecretFiles())
	cfg := newConfigDir(t)
	writeTLSConf(t, cfg, spec, tlsPort, tlsSite{"shop", "shop.example"}, tlsSite{"blog", "blog.example"})
	agent := startAgent(t, cfg, spec, "--allow-unmounted", "--tls-secrets-dir", secrets.root)
	agent.waitReady(t)

	// shop serves its own certificate, verified; blog a placeholder.
	roots := x509.NewCertPool()
	roots.AddCert(ca.Root)
	verified := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "shop.example"}}}
	if body, err := testkit.Get(context.Background(), verified, "https://"+addr+"/"); err != nil || body != "shop" {
		t.Errorf("https://shop.example: %q, %v; want shop's answer over a verified connection", body, err)
	}
	c, err := servedLeaf(addr, "blog.example")
	if err != nil || !strings.Contains(c.Subject.CommonName, "placeholder") {
		t.Fatalf("blog.example serves %v (%v), want the placeholder", c, err)
	}
	placeholder := fingerprint(c)
	if st := agent.certificate(t, "blog"); st.State != agentapi.CertificatePlaceholder || st.Fingerprint != placeholder ||
		!strings.Contains(st.Message, "Secret blog-tls is missing or empty") {
		t.Errorf("/status reports %+v for blog, want Placeholder naming its Secret", st)
	}
	if got := agent.metric("edgepool_certificate_state", map[string]string{"site": "blog", "state": "Placeholder"}); got != 1 {
		t.Errorf("edgepool_certificate_state{site=blog,state=Placeholder} = %v, want 1", got)
	}
	if got := agent.metric("edgepool_certificate_state", map[string]string{"site": "shop", "state": "Serving"}); got != 1 {
		t.Errorf("edgepool_certificate_state{site=shop,state=Serving} = %v, want 1", got)
	}

	// A key that is not the certificate's: refused, reported, and the last good pair serves.
	other := issueLeaf(t, ca, "shop.example")
	secrets.write(t, "shop", map[string][]byte{"tls.crt": shop.Chain, "tls.key": other.Key})
	eventually(t, 10*time.Second, "the malformed Secret to be reported", func() bool {
		return agent.certificate(t, "shop").State == agentapi.CertificateInvalid
	})
	st := agent.certificate(t, "shop")
	if st.Fingerprint != shop.Fingerprint || !strings.Contains(st.Message, "Secret shop-tls: tls.key does not go with the certificate") ||
		strings.Contains(st.Message, "PRIVATE KEY") {
		t.Errorf("/status reports %+v for shop, want Invalid naming the Secret and the last good fingerprint", st)
	}
	if c, err := servedLeaf(addr, "shop.example"); err != nil || fingerprint(c) != shop.Fingerprint {
		t.Errorf("after a malformed Secret, shop.example serves %v (%v), want the last good certificate", c, err)
	}
	if got := agent.metric("edgepool_certificate_reloads_total", map[string]string{"site": "shop"}); got != 0 {
		t.Errorf("edgepool_certificate_reloads_total{site=shop} = %v after a malformed Secret, want 0", got)
	}

	// blog's Secret appears: picked up with a reload, shop unchanged.
	blog := issueLeaf(t, ca, "blog.example")
	secrets.write(t, "blog", blog.SecretFiles())
	eventually(t, 10*time.Second, "blog's certificate to be served", func() bool {
		c, err := servedLeaf(addr, "blog.example")
		return err == nil && fingerprint(c) == blog.Fingerprint
	})
	if st := agent.certificate(t, "blog"); st.State != agentapi.CertificateServing || st.Fingerprint != blog.Fingerprint {
		t.Errorf("/status reports %+v for blog, want Serving", st)
	}
	if c, err := servedLeaf(addr, "shop.example"); err != nil || fingerprint(c) != shop.Fingerprint {
		t.Errorf("shop.example serves %v (%v), want its last good certificate still", c, err)
	}
	if code, _ := agent.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d: a site's certificate must not take the cache out", code)
	}
	log := agent.log.String()
	for _, key := range [][]byte{shop.Key, other.Key, blog.Key} {
		if strings.Contains(log, strings.Split(string(key), "\n")[1]) {
			t.Error("the agent's log holds a private key")
		}
	}
}
