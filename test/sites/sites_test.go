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

package sites_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// twoSites: alpha (alpha.test and its subdomains) from origin a, over HTTPS too; beta
// (beta.test) from origin b with the Host the origin expects, plain HTTP redirected to
// HTTPS; gamma (gamma.test), plain HTTP only, from origin a like alpha.
func twoSites(a, b *origin, defaultSite string) *v1alpha1.CacheNodeSpec {
	return &v1alpha1.CacheNodeSpec{
		Sites: []v1alpha1.Site{
			{Name: "alpha", Hostnames: []string{"alpha.test", "*.alpha.test"},
				Origin: v1alpha1.Origin{Servers: []string{a.addr}},
				TLS:    &v1alpha1.SiteTLS{SecretName: "alpha-tls"}},
			{Name: "beta", Hostnames: []string{"beta.test"},
				Origin: v1alpha1.Origin{Servers: []string{b.addr}, HostHeader: "bucket.beta.internal"},
				TLS:    &v1alpha1.SiteTLS{SecretName: "beta-tls", PlainHTTP: v1alpha1.PlainHTTPRedirect}},
			{Name: "gamma", Hostnames: []string{"gamma.test"},
				Origin: v1alpha1.Origin{Servers: []string{a.addr}}},
		},
		DefaultSite: defaultSite,
	}
}

// TestSitesBySNIAndHost: each site is served with its own certificate (the client
// verifies the name against it) from its own origin, which gets the Host the site says;
// an unmatched host gets 421 and an unmatched server name no handshake; plain HTTP of a
// redirecting site gets 308 to HTTPS; HTTP/2 works over TLS, hits included.
func TestSitesBySNIAndHost(t *testing.T) {
	a, b := startOrigin(t, "origin-a"), startOrigin(t, "origin-b")
	c := startCache(t, twoSites(a, b, ""))
	h1, h2 := c.client(false), c.client(true)

	for _, tc := range []struct {
		url, body, originHost string
		o                     *origin
	}{
		{"https://alpha.test/x", "origin-a alpha.test /x", "alpha.test", a},
		{"https://www.alpha.test/x", "origin-a www.alpha.test /x", "www.alpha.test", a},
		{"http://alpha.test/y", "origin-a alpha.test /y", "alpha.test", a},
		{"https://beta.test/x", "origin-b bucket.beta.internal /x", "bucket.beta.internal", b},
		{"http://gamma.test/x", "origin-a gamma.test /x", "gamma.test", a},
	} {
		r := get(t, h1, tc.url)
		if r.Code != 200 || string(r.Body) != tc.body {
			t.Errorf("GET %s: %d %q, want 200 %q", tc.url, r.Code, r.Body, tc.body)
		}
		if got := tc.o.lastHost(); got != tc.originHost {
			t.Errorf("GET %s: the origin got Host %q, want %q", tc.url, got, tc.originHost)
		}
	}

	if r := get(t, h1, "http://unknown.test/x"); r.Code != 421 {
		t.Errorf("unmatched host: %d %q, want 421", r.Code, r.Body)
	}
	if r := get(t, h1, "http://beta.test/p?q=1"); r.Code != 308 || r.Header.Get("Location") != "https://beta.test/p?q=1" {
		t.Errorf("beta over plain HTTP: %d, Location %q; want 308 to https://beta.test/p?q=1", r.Code, r.Header.Get("Location"))
	}
	for _, name := range []string{"unknown.test", "gamma.test", "alpha.test.evil"} {
		conn, err := c.handshake(&tls.Config{ServerName: name, InsecureSkipVerify: true})
		if err == nil {
			conn.Close()
			t.Errorf("TLS handshake for %s succeeded, want it refused", name)
		}
	}
	// A client that sends no server name at all is refused too.
	if conn, err := c.handshake(&tls.Config{InsecureSkipVerify: true}); err == nil {
		conn.Close()
		t.Error("TLS handshake without a server name succeeded, want it refused")
	}

	// HTTP/2 over TLS: a miss, then a hit read from the disk through the thread pool.
	for i, want := range []string{"MISS", "HIT"} {
		r, err := h2.Get("https://alpha.test/h2")
		if err != nil {
			t.Fatalf("HTTP/2 GET %d: %v", i, err)
		}
		r.Body.Close()
		if r.ProtoMajor != 2 || r.StatusCode != 200 || r.Header.Get("X-Cache-Status") != want {
			t.Errorf("HTTP/2 GET %d: %s %d, cache status %q; want HTTP/2 200 %s", i, r.Proto, r.StatusCode, r.Header.Get("X-Cache-Status"), want)
		}
	}
}

// TestSitesKeepTheirOwnResponses: alpha and gamma fill from one origin at one path; the
// host is in the key, so each site is answered its own response, from the cache too.
func TestSitesKeepTheirOwnResponses(t *testing.T) {
	a, b := startOrigin(t, "origin-a"), startOrigin(t, "origin-b")
	c := startCache(t, twoSites(a, b, ""))
	h1 := c.client(false)
	for round, want := range []string{"MISS", "HIT"} {
		for _, host := range []string{"alpha.test", "gamma.test"} {
			r := get(t, h1, "http://"+host+"/same")
			if body := "origin-a " + host + " /same"; string(r.Body) != body || r.Header.Get("X-Cache-Status") != want {
				t.Errorf("round %d, %s: %q (%s), want %q (%s)", round, host, r.Body, r.Header.Get("X-Cache-Status"), body, want)
			}
		}
	}
}

// TestDefaultSite: the default site answers hosts no site names over plain HTTP and, as
// it has tls, any server name over TLS, with its own certificate.
func TestDefaultSite(t *testing.T) {
	a, b := startOrigin(t, "origin-a"), startOrigin(t, "origin-b")
	c := startCache(t, twoSites(a, b, "alpha"))
	if r := get(t, c.client(false), "http://unknown.test/d"); r.Code != 200 || string(r.Body) != "origin-a unknown.test /d" {
		t.Errorf("unmatched host: %d %q, want alpha's origin", r.Code, r.Body)
	}
	conn, err := c.handshake(&tls.Config{ServerName: "unknown.test", InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("TLS handshake for an unmatched name: %v, want alpha's certificate", err)
	}
	defer conn.Close()
	if names := conn.ConnectionState().PeerCertificates[0].DNSNames; !slices.Contains(names, "alpha.test") {
		t.Errorf("unmatched name got a certificate for %v, want alpha's", names)
	}
}

// TestTLSVersionsAndCiphers: TLS 1.0 and 1.1 are refused, and TLS 1.2 without forward
// secrecy and AEAD (CBC suites); TLS 1.2 with ECDHE and AES-GCM or ChaCha20, and 1.3, work.
func TestTLSVersionsAndCiphers(t *testing.T) {
	a, b := startOrigin(t, "origin-a"), startOrigin(t, "origin-b")
	c := startCache(t, twoSites(a, b, ""))
	base := tls.Config{ServerName: "alpha.test", RootCAs: c.roots}
	refused := map[string]*tls.Config{}
	for _, v := range []uint16{tls.VersionTLS10, tls.VersionTLS11} {
		cfg := base.Clone()
		cfg.MinVersion, cfg.MaxVersion = v, v
		refused[tls.VersionName(v)] = cfg
	}
	cbc := base.Clone()
	cbc.MaxVersion = tls.VersionTLS12
	cbc.CipherSuites = []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256}
	refused["TLS 1.2 with CBC suites"] = cbc
	for name, cfg := range refused {
		if conn, err := c.handshake(cfg); err == nil {
			conn.Close()
			t.Errorf("%s: handshake succeeded, want it refused", name)
		}
	}
	for _, suite := range []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305} {
		cfg := base.Clone()
		cfg.MaxVersion, cfg.CipherSuites = tls.VersionTLS12, []uint16{suite}
		conn, err := c.handshake(cfg)
		if err != nil {
			t.Errorf("TLS 1.2 with %s: %v", tls.CipherSuiteName(suite), err)
			continue
		}
		conn.Close()
	}
	conn, err := c.handshake(base.Clone())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if v := conn.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("a default client negotiated %s, want TLS 1.3", tls.VersionName(v))
	}
}

// TestSessionsResumeAcrossWorkers: nginx runs two workers, each with its own listening
// socket (reuseport), and no session tickets of its own keys; a client's sessions resume
// from the shared cache whichever worker takes the next connection, over TLS 1.3 and 1.2.
// The worker of each connection is read from /proc.
func TestSessionsResumeAcrossWorkers(t *testing.T) {
	a, b := startOrigin(t, "origin-a"), startOrigin(t, "origin-b")
	c := startCache(t, twoSites(a, b, ""))
	for _, version := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		t.Run(tls.VersionName(version), func(t *testing.T) {
			if version == tls.VersionTLS12 {
				resumeTLS12(t, c)
				return
			}
			cfg := &tls.Config{
				ServerName: "alpha.test", RootCAs: c.roots, MinVersion: version, MaxVersion: version,
				ClientSessionCache: tls.NewLRUClientSessionCache(1),
			}
			first := -1
			resumedOn := map[int]int{} // worker: resumptions there of a session from another
			for i := 0; i < 200 && len(resumedOn) < 2; i++ {
				conn, err := c.handshake(cfg)
				if err != nil {
					t.Fatal(err)
				}
				worker, err := c.worker(conn)
				if err != nil {
					conn.Close()
					t.Fatal(err)
				}
				resumed := conn.ConnectionState().DidResume
				if _, err := request(conn, "alpha.test", "/resume"); err != nil {
					conn.Close()
					t.Fatal(err)
				}
				conn.Close()
				switch {
				case i == 0 && resumed:
					t.Fatal("the first connection resumed a session")
				case i == 0:
					first = worker
				case !resumed:
					t.Fatalf("connection %d (worker %d) did not resume the session of connection 0 (worker %d)", i, worker, first)
				default:
					resumedOn[worker]++
				}
			}
			if len(resumedOn) < 2 {
				t.Fatalf("resumptions only on workers %v of 2: reuseport spread no connections", resumedOn)
			}
			t.Logf("resumed by worker: %v (the session from worker %d)", resumedOn, first)
		})
	}
}

// resumeTLS12: Go's client resumes TLS 1.2 only from session tickets, which nginx does
// not send here; OpenSSL's (browsers' alike) resumes from the session ID. openssl
// s_client saves the first session and offers it on each next connection, held open
// until its worker is read.
func resumeTLS12(t *testing.T, c *cache) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatal("openssl not found: `make test` installs it")
	}
	session := filepath.Join(t.TempDir(), "session.pem")
	run := func(args ...string) (worker int, reused bool) {
		t.Helper()
		cmd := exec.Command(openssl, append([]string{"s_client", "-connect", c.tls, "-servername", "alpha.test",
			"-tls1_2", "-no_ign_eof"}, args...)...)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out := &testkit.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := testkit.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := testkit.Eventually(ctx, 10*time.Millisecond, "s_client's connection", func() error {
			p, err := clientPort(cmd.Process.Pid)
			if err == nil {
				worker, err = c.workerOf(p)
			}
			return err
		}); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("%v: %s", err, out)
		}
		fmt.Fprint(stdin, "GET / HTTP/1.1\r\nHost: alpha.test\r\nConnection: close\r\n\r\n")
		if err := cmd.Wait(); err != nil {
			t.Fatalf("s_client: %v: %s", err, out)
		}
		return worker, strings.Contains(out.String(), "\nReused, TLSv1.2")
	}
	first, _ := run("-sess_out", session)
	resumedOn := map[int]int{}
	for i := 1; i < 200 && len(resumedOn) < 2; i++ {
		worker, reused := run("-sess_in", session)
		if !reused {
			t.Fatalf("connection %d (worker %d) did not resume the session of connection 0 (worker %d)", i, worker, first)
		}
		resumedOn[worker]++
	}
	if len(resumedOn) < 2 {
		t.Fatalf("resumptions only on workers %v of 2: reuseport spread no connections", resumedOn)
	}
	t.Logf("resumed by worker: %v (the session from worker %d)", resumedOn, first)
}
