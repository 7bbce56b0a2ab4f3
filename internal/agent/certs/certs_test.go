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

package certs

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
	"github.com/edgepool/edgepool/internal/test/certs"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

func testCA(t *testing.T) *certs.CA {
	t.Helper()
	ca, err := certs.NewCA("test")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issue(t *testing.T, ca *certs.CA, hosts ...string) *certs.Leaf {
	t.Helper()
	l, err := ca.IssueNow(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestParsePair(t *testing.T) {
	ca := testCA(t)
	good, other := issue(t, ca, "shop.example"), issue(t, ca, "shop.example")
	leafPEM, interPEM, _ := bytes.Cut(good.Chain, []byte("-----END CERTIFICATE-----\n"))
	leafPEM = append(leafPEM, []byte("-----END CERTIFICATE-----\n")...)
	for _, tc := range []struct {
		name     string
		crt, key []byte
		err      string
	}{
		{"leaf then intermediate", good.Chain, good.Key, ""},
		{"leaf alone", leafPEM, good.Key, ""},
		{"chain out of order", append(append([]byte{}, interPEM...), leafPEM...), good.Key, "out of order"},
		{"another certificate's key", good.Chain, other.Key, "does not go with the certificate"},
		{"garbage", []byte("not a certificate"), good.Key, "holds no PEM certificate"},
		{"a key among the certificates", append(append([]byte{}, good.Chain...), good.Key...), good.Key, `type "EC PRIVATE KEY"`},
		{"data after the chain", append(append([]byte{}, good.Chain...), "junk"...), good.Key, "data after its last PEM certificate"},
		{"a truncated key", good.Chain, good.Key[:len(good.Key)/2], "does not go with the certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := parsePair(tc.crt, tc.key)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if p.fingerprint != good.Fingerprint || p.placeholder {
					t.Errorf("fingerprint %s, placeholder %v; want %s, false", p.fingerprint, p.placeholder, good.Fingerprint)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want one containing %q", err, tc.err)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY-----") || strings.Contains(err.Error(), string(good.Key[40:80])) {
				t.Errorf("the error quotes the key: %v", err)
			}
		})
	}
}

// secretDir is a site's mounted Secret, swapped the way the kubelet swaps it.
func secretDir(t *testing.T, root, site string) *testkit.ConfigDir {
	t.Helper()
	dir := filepath.Join(root, site)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return &testkit.ConfigDir{Dir: dir}
}

func TestCertificatesLifecycle(t *testing.T) {
	g := NewWithT(t)
	ca := testCA(t)
	secrets, run := t.TempDir(), t.TempDir()
	reloads := map[string]float64{}
	certs := New(secrets, run, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(site string, n float64) { reloads[site] += n })
	facts := []agentapi.Certificate{{Site: "shop", SecretName: "shop-tls", Hostnames: []string{"shop.example"}}}
	shop := secretDir(t, secrets, "shop") // optional: the kubelet mounts an empty directory
	files := func() (crt, key []byte) {
		crt, _ = os.ReadFile(filepath.Join(run, nginxconf.CertificateFile("shop")))
		key, _ = os.ReadFile(filepath.Join(run, nginxconf.CertificateKeyFile("shop")))
		return crt, key
	}

	// No Secret at the first start: a placeholder, so that nginx starts.
	wrote, err := certs.Sync(facts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(wrote).To(BeTrue())
	placeholder, err := parsePair(files())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(placeholder.placeholder).To(BeTrue())
	g.Expect(placeholder.leaf.PublicKeyAlgorithm.String()).To(Equal("ECDSA"))
	certs.Committed(false)
	st := certs.Status()
	g.Expect(st).To(HaveLen(1))
	g.Expect(st[0].State).To(Equal(agentapi.CertificatePlaceholder))
	g.Expect(st[0].Message).To(ContainSubstring("Secret shop-tls is missing or empty"))
	g.Expect(certs.Pending()).To(BeFalse())
	g.Expect(reloads).To(Equal(map[string]float64{"shop": 0}))
	// Nothing changed: nothing written.
	g.Expect(certs.Sync(facts)).To(BeFalse())

	// The Secret appears.
	first := issue(t, ca, "shop.example")
	g.Expect(shop.Write(first.SecretFiles())).To(Succeed())
	g.Expect(certs.Sync(facts)).To(BeTrue())
	crt, key := files()
	g.Expect(crt).To(Equal(first.Chain))
	g.Expect(key).To(Equal(first.Key))
	info, err := os.Stat(filepath.Join(run, nginxconf.CertificateKeyFile("shop")))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(info.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	g.Expect(certs.Pending()).To(BeTrue())
	g.Expect(certs.Committed(true)).To(Equal([]string{"shop"}))
	g.Expect(reloads["shop"]).To(Equal(1.0))
	st = certs.Status()
	g.Expect(st[0]).To(Equal(agentapi.CertificateStatus{Site: "shop", SecretName: "shop-tls", State: agentapi.CertificateServing,
		NotAfter: first.NotAfter.UTC(), Fingerprint: first.Fingerprint}))

	// A malformed Secret keeps the last good pair and is reported.
	g.Expect(shop.Write(map[string][]byte{"tls.crt": first.Chain, "tls.key": issue(t, ca, "shop.example").Key})).To(Succeed())
	g.Expect(certs.Sync(facts)).To(BeFalse())
	g.Expect(certs.Pending()).To(BeFalse())
	crt, _ = files()
	g.Expect(crt).To(Equal(first.Chain))
	st = certs.Status()
	g.Expect(st[0].State).To(Equal(agentapi.CertificateInvalid))
	g.Expect(st[0].Fingerprint).To(Equal(first.Fingerprint))
	g.Expect(st[0].Message).To(And(ContainSubstring("Secret shop-tls: tls.key does not go with the certificate"),
		ContainSubstring("serving the last good certificate")))

	// An emptied Secret too.
	g.Expect(shop.Write(map[string][]byte{})).To(Succeed())
	g.Expect(certs.Sync(facts)).To(BeFalse())
	g.Expect(certs.Status()[0].State).To(Equal(agentapi.CertificateMissing))

	// A renewal is written; nginx refusing it puts the last good pair back, and it stays
	// refused until the Secret changes.
	second := issue(t, ca, "shop.example")
	g.Expect(shop.Write(second.SecretFiles())).To(Succeed())
	g.Expect(certs.Sync(facts)).To(BeTrue())
	certs.Revert(errors.New("nginx -t: SSL_CTX_use_PrivateKey failed"))
	crt, _ = files()
	g.Expect(crt).To(Equal(first.Chain))
	g.Expect(certs.Pending()).To(BeFalse())
	g.Expect(certs.Sync(facts)).To(BeFalse())
	st = certs.Status()
	g.Expect(st[0].State).To(Equal(agentapi.CertificateInvalid))
	g.Expect(st[0].Message).To(ContainSubstring("nginx refused the pair"))

	third := issue(t, ca, "shop.example")
	g.Expect(shop.Write(third.SecretFiles())).To(Succeed())
	g.Expect(certs.Sync(facts)).To(BeTrue())
	g.Expect(certs.Committed(true)).To(Equal([]string{"shop"}))
	g.Expect(certs.Status()[0].Fingerprint).To(Equal(third.Fingerprint))
	g.Expect(reloads["shop"]).To(Equal(2.0))

	// A new agent in the same pod (a container restart) starts from the pair in the run
	// dir while the Secret is missing.
	g.Expect(shop.Write(map[string][]byte{})).To(Succeed())
	again := New(secrets, run, time.Now, slog.New(slog.NewTextHandler(io.Discard, nil)), func(string, float64) {})
	g.Expect(again.Sync(facts)).To(BeFalse())
	again.Committed(false)
	st = again.Status()
	g.Expect(st[0].State).To(Equal(agentapi.CertificateMissing))
	g.Expect(st[0].Fingerprint).To(Equal(third.Fingerprint))
}

func TestCertificateStatus(t *testing.T) {
	ca := testCA(t)
	now := time.Now()
	pair := func(hosts []string, from, to time.Time) *certPair {
		l, err := ca.Issue(hosts, from, to)
		if err != nil {
			t.Fatal(err)
		}
		p, err := parsePair(l.Chain, l.Key)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	valid := pair([]string{"shop.example", "*.shop.example"}, now.Add(-time.Hour), now.Add(time.Hour))
	for _, tc := range []struct {
		name      string
		hostnames []string
		served    *certPair
		problem   string
		state     agentapi.CertificateState
		message   string
	}{
		{"valid", []string{"shop.example", "*.shop.example", "a.shop.example"}, valid, "", agentapi.CertificateServing, ""},
		{"partly covered", []string{"shop.example", "other.example"}, valid, "", agentapi.CertificateServing, "does not cover other.example"},
		{"covers none", []string{"other.example", "*.example"}, valid, "", agentapi.CertificateHostnameMismatch, "covers none of the site's hostnames (other.example, *.example)"},
		{"expired", []string{"shop.example"}, pair([]string{"shop.example"}, now.Add(-2*time.Hour), now.Add(-time.Hour)), "",
			agentapi.CertificateExpired, "the certificate serving expired at"},
		{"not yet valid", []string{"shop.example"}, pair([]string{"shop.example"}, now.Add(time.Hour), now.Add(2*time.Hour)), "",
			agentapi.CertificateNotYetValid, "valid only from"},
		{"missing, expired", []string{"shop.example"}, pair([]string{"shop.example"}, now.Add(-2*time.Hour), now.Add(-time.Hour)),
			"Secret shop-tls is missing or empty", agentapi.CertificateMissing, "Secret shop-tls is missing or empty; serving the last good certificate; the certificate serving expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &siteCert{Certificate: agentapi.Certificate{Site: "shop", SecretName: "shop-tls", Hostnames: tc.hostnames},
				served: tc.served, problem: tc.problem, problemState: agentapi.CertificateMissing}
			st := certificateStatus(s, now)
			if st.State != tc.state || !strings.Contains(st.Message, tc.message) || (tc.message == "" && st.Message != "") {
				t.Errorf("state %s, message %q; want %s and a message containing %q", st.State, st.Message, tc.state, tc.message)
			}
			if st.Fingerprint != tc.served.fingerprint || !st.NotAfter.Equal(tc.served.leaf.NotAfter) {
				t.Errorf("fingerprint %s, notAfter %s: not the serving certificate's", st.Fingerprint, st.NotAfter)
			}
		})
	}
}
