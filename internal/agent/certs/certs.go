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

// Package certs keeps the sites' TLS certificates nginx reads: from the mounted Secrets
// into the run dir, checked, with a placeholder until a site's Secret holds a good pair.
package certs

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/edgepool/edgepool/internal/agent/atomicfile"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
)

// The keys of a kubernetes.io/tls Secret, the files of its volume.
const (
	secretCertKey = "tls.crt"
	secretKeyKey  = "tls.key"
)

// placeholderCN starts the common name of the self-signed certificate a site serves
// until its Secret first holds a good pair.
const placeholderCN = "edgepool placeholder"

// placeholderValidity is short: a placeholder is no certificate anyone should keep.
const placeholderValidity = 24 * time.Hour

// certPair is a certificate chain and its key, as nginx reads them.
type certPair struct {
	crt, key    []byte
	leaf        *x509.Certificate
	fingerprint string // SHA-256 of the leaf's DER, hex
	placeholder bool
}

func (p *certPair) same(crt, key []byte) bool {
	return p != nil && bytes.Equal(p.crt, crt) && bytes.Equal(p.key, key)
}

// parsePair accepts a pair nginx can serve: crt holds only PEM certificates, the leaf
// first and each one signed by the next (the order TLS sends them in), and key is the
// leaf's private key. Validity dates are not checked here: an expired pair still
// serves, and is reported.
func parsePair(crt, key []byte) (*certPair, error) {
	var chain []*x509.Certificate
	rest := crt
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s holds a PEM block of type %q, want only CERTIFICATE blocks", secretCertKey, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", secretCertKey, len(chain)+1, err)
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("%s holds no PEM certificate", secretCertKey)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, fmt.Errorf("%s has data after its last PEM certificate", secretCertKey)
	}
	for i := 0; i+1 < len(chain); i++ {
		if err := chain[i].CheckSignatureFrom(chain[i+1]); err != nil {
			return nil, fmt.Errorf("%s: the chain is out of order: certificate %d (%s) is not signed by certificate %d (%s): %w",
				secretCertKey, i+1, chain[i].Subject, i+2, chain[i+1].Subject, err)
		}
	}
	// X509KeyPair parses the key and checks it against the leaf's public key; its errors
	// never quote the key.
	if _, err := tls.X509KeyPair(crt, key); err != nil {
		return nil, fmt.Errorf("%s does not go with the certificate: %w", secretKeyKey, err)
	}
	sum := sha256.Sum256(chain[0].Raw)
	return &certPair{crt: crt, key: key, leaf: chain[0], fingerprint: hex.EncodeToString(sum[:]),
		placeholder: strings.HasPrefix(chain[0].Subject.CommonName, placeholderCN)}, nil
}

// placeholderPair makes a self-signed pair for site: nginx needs some certificate to
// start, and with it the other sites serve.
func placeholderPair(site string, now time.Time) (*certPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 63))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: placeholderCN + " for site " + site},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(placeholderValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return parsePair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
}

// readSecret reads a mounted kubernetes.io/tls Secret. The kubelet swaps a Secret volume
// by repointing its ..data symlink, so both files are read from one target of it, and
// read again if it moved meanwhile: a certificate from one version and a key from the
// next would not match. A Secret that is missing or empty (an optional volume of a
// Secret that does not exist is an empty directory) gives nil, nil, nil.
func readSecret(dir string) (crt, key []byte, err error) {
	for range 5 {
		target, linkErr := os.Readlink(filepath.Join(dir, "..data"))
		base := dir
		if linkErr == nil {
			base = filepath.Join(dir, target)
			if filepath.IsAbs(target) {
				base = target
			}
		}
		crt, crtErr := os.ReadFile(filepath.Join(base, secretCertKey))
		key, keyErr := os.ReadFile(filepath.Join(base, secretKeyKey))
		if again, _ := os.Readlink(filepath.Join(dir, "..data")); linkErr == nil && again != target {
			continue
		}
		for _, e := range []error{crtErr, keyErr} {
			if e != nil && !errors.Is(e, os.ErrNotExist) {
				return nil, nil, e
			}
		}
		switch crtEmpty, keyEmpty := len(bytes.TrimSpace(crt)) == 0, len(bytes.TrimSpace(key)) == 0; {
		case crtEmpty && keyEmpty:
			return nil, nil, nil
		case crtEmpty:
			return nil, nil, fmt.Errorf("%s is missing or empty", secretCertKey)
		case keyEmpty:
			return nil, nil, fmt.Errorf("%s is missing or empty", secretKeyKey)
		}
		return crt, key, nil
	}
	return nil, nil, errors.New("the Secret volume kept changing while it was read")
}

// siteCert is what the agent knows of one site's certificate.
type siteCert struct {
	agentapi.Certificate
	// mounted tells the Secret's files last looked at (their SHA-256, or why they could not
	// be read), so that a Secret that did not change is not checked (nor logged about) again.
	mounted string
	// problem says what is wrong with the mounted Secret ("" when it is good), in state.
	problem      string
	problemState agentapi.CertificateState
	// written is the pair in the run dir, which the next nginx -t and reload read; served
	// the one nginx loaded last. They differ between a rotation and its reload.
	written, served *certPair
}

// Store keeps the pairs nginx reads, in the run dir, from the mounted Secrets.
type Store struct {
	secretsDir, tlsDir string
	now                func() time.Time
	log                *slog.Logger
	// loaded counts the new pairs nginx loaded with a reload (n is 0 or 1), per site.
	loaded func(site string, n float64)

	mu    sync.Mutex
	sites map[string]*siteCert
	order []agentapi.Certificate // the facts last synced
}

// New makes a Store of the Secrets mounted under secretsDir for nginx's runDir; loaded
// counts, per site, the new pairs nginx loaded.
func New(secretsDir, runDir string, now func() time.Time, log *slog.Logger, loaded func(string, float64)) *Store {
	return &Store{secretsDir: secretsDir, tlsDir: filepath.Join(runDir, nginxconf.TLSDir), now: now, log: log,
		loaded: loaded, sites: map[string]*siteCert{}}
}

// Dirs are the mounted Secrets' directories of the sites last synced.
func (c *Store) Dirs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	dirs := make([]string, len(c.order))
	for i, cert := range c.order {
		dirs[i] = filepath.Join(c.secretsDir, cert.Site)
	}
	return dirs
}

// Sync brings the run dir's pair of each site in certs up to its mounted Secret: a good
// pair that differs from the one written is written; a missing or malformed Secret
// leaves the last good pair; a site that never had one gets a placeholder. It reports
// whether it wrote anything (nginx reads it at its next reload).
func (c *Store) Sync(certs []agentapi.Certificate) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order = append([]agentapi.Certificate(nil), certs...)
	if len(certs) > 0 {
		if err := os.MkdirAll(c.tlsDir, 0o700); err != nil {
			return false, fmt.Errorf("certificates: %w", err)
		}
	}
	wrote := false
	for _, cert := range certs {
		s := c.sites[cert.Site]
		if s == nil {
			s = &siteCert{}
			c.sites[cert.Site] = s
			// A container restart keeps the run dir: its pair is the last good one.
			s.written = c.readWritten(cert.Site)
		}
		s.Certificate = cert
		w, err := c.syncSite(s)
		if err != nil {
			return wrote, fmt.Errorf("certificate of site %s: %w", cert.Site, err)
		}
		wrote = wrote || w
	}
	return wrote, nil
}

func (c *Store) syncSite(s *siteCert) (bool, error) {
	crt, key, err := readSecret(filepath.Join(c.secretsDir, s.Site))
	seen := "missing"
	switch {
	case err != nil:
		seen = "error: " + err.Error()
	case crt != nil:
		h := sha256.New()
		h.Write(crt)
		h.Write([]byte{0})
		h.Write(key)
		seen = hex.EncodeToString(h.Sum(nil))
	}
	wrote := false
	if seen != s.mounted {
		s.mounted = seen
		var pair *certPair
		switch {
		case err != nil:
			s.problem, s.problemState = fmt.Sprintf("Secret %s: %v", s.SecretName, err), agentapi.CertificateInvalid
		case crt == nil:
			s.problem, s.problemState = fmt.Sprintf("Secret %s is missing or empty", s.SecretName), agentapi.CertificateMissing
		default:
			if pair, err = parsePair(crt, key); err != nil {
				s.problem, s.problemState = fmt.Sprintf("Secret %s: %v", s.SecretName, err), agentapi.CertificateInvalid
			} else {
				s.problem, s.problemState = "", ""
			}
		}
		if pair != nil && !s.written.same(crt, key) {
			if err := c.write(s.Site, pair); err != nil {
				return false, err
			}
			s.written, wrote = pair, true
			c.log.Info("Installed certificate", "site", s.Site, "secret", s.SecretName, "fingerprint", pair.fingerprint,
				"notAfter", pair.leaf.NotAfter.UTC().Format(time.RFC3339))
		} else if pair == nil {
			c.log.Error("Certificate Secret not usable; the last good certificate keeps serving", "site", s.Site, "secret", s.SecretName,
				"problem", s.problem)
		}
	}
	if s.written == nil {
		pair, err := placeholderPair(s.Site, c.now())
		if err != nil {
			return wrote, fmt.Errorf("make a placeholder: %w", err)
		}
		if err := c.write(s.Site, pair); err != nil {
			return wrote, err
		}
		s.written, wrote = pair, true
		c.log.Error("No good certificate yet; serving a self-signed placeholder so that the other sites serve", "site", s.Site,
			"secret", s.SecretName, "problem", s.problem)
	}
	return wrote, nil
}

func (c *Store) write(site string, p *certPair) error {
	if err := atomicfile.Write(filepath.Join(c.tlsDir, site+".key"), p.key, 0o600); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(c.tlsDir, site+".crt"), p.crt, 0o644); err != nil {
		return fmt.Errorf("write certificate: %w", err)
	}
	return nil
}

// readWritten reads the pair a previous container of the pod left for site, if good.
func (c *Store) readWritten(site string) *certPair {
	crt, err := os.ReadFile(filepath.Join(c.tlsDir, site+".crt"))
	if err != nil {
		return nil
	}
	key, err := os.ReadFile(filepath.Join(c.tlsDir, site+".key"))
	if err != nil {
		return nil
	}
	p, err := parsePair(crt, key)
	if err != nil {
		return nil
	}
	return p
}

// Pending says whether a pair was written that nginx has not loaded.
func (c *Store) Pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cert := range c.order {
		if s := c.sites[cert.Site]; s != nil && s.written != s.served {
			return true
		}
	}
	return false
}

// Committed records that nginx loaded the pairs written; reload says it loaded them with
// a reload, not at its start. It returns the sites whose certificate changed.
func (c *Store) Committed(reload bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var changed []string
	for _, cert := range c.order {
		s := c.sites[cert.Site]
		if s == nil {
			continue
		}
		if reload && s.served != nil && s.served.fingerprint != s.written.fingerprint {
			changed = append(changed, cert.Site)
			c.loaded(cert.Site, 1)
		} else {
			c.loaded(cert.Site, 0) // the counter starts at 0, so that its first increase shows
		}
		s.served = s.written
	}
	return changed
}

// Revert puts back the pairs nginx serves where others were written, after nginx
// refused them (why): they stay refused until their Secret changes.
func (c *Store) Revert(why error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cert := range c.order {
		s := c.sites[cert.Site]
		if s == nil || s.served == nil || s.written == s.served {
			continue
		}
		if err := c.write(cert.Site, s.served); err != nil {
			c.log.Error("Could not put back the certificate nginx serves", "site", cert.Site, "err", err)
			continue
		}
		s.written = s.served
		s.problem, s.problemState = fmt.Sprintf("Secret %s: nginx refused the pair: %v", s.SecretName, why), agentapi.CertificateInvalid
	}
}

// Status reports the certificates of the sites last synced.
func (c *Store) Status() []agentapi.CertificateStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	out := make([]agentapi.CertificateStatus, 0, len(c.order))
	for _, cert := range c.order {
		if s := c.sites[cert.Site]; s != nil {
			out = append(out, certificateStatus(s, now))
		}
	}
	return out
}

// certificateStatus says what serves for a site and what is wrong with it: the state is
// the worst that applies, the message names each problem.
func certificateStatus(s *siteCert, now time.Time) agentapi.CertificateStatus {
	st := agentapi.CertificateStatus{Site: s.Site, SecretName: s.SecretName, State: agentapi.CertificateServing}
	p := s.served
	if p == nil {
		p = s.written
	}
	var problems []string
	worse := func(state agentapi.CertificateState, msg string) {
		if rank(state) < rank(st.State) {
			st.State = state
		}
		problems = append(problems, msg)
	}
	if s.problem != "" {
		worse(s.problemState, s.problem)
	}
	switch {
	case p == nil:
		worse(agentapi.CertificateMissing, "no certificate installed yet")
	case p.placeholder:
		st.Fingerprint, st.NotAfter = p.fingerprint, p.leaf.NotAfter.UTC()
		worse(agentapi.CertificatePlaceholder, "serving a self-signed placeholder: no good certificate was seen since the pod started")
	default:
		st.Fingerprint, st.NotAfter = p.fingerprint, p.leaf.NotAfter.UTC()
		if s.problem != "" {
			problems[len(problems)-1] += "; serving the last good certificate"
		}
		switch {
		case now.After(p.leaf.NotAfter):
			worse(agentapi.CertificateExpired, "the certificate serving expired at "+p.leaf.NotAfter.UTC().Format(time.RFC3339))
		case now.Before(p.leaf.NotBefore):
			worse(agentapi.CertificateNotYetValid, "the certificate serving is valid only from "+p.leaf.NotBefore.UTC().Format(time.RFC3339))
		}
		if len(s.Hostnames) > 0 {
			var uncovered []string
			for _, h := range s.Hostnames {
				if !covers(p.leaf, h) {
					uncovered = append(uncovered, h)
				}
			}
			switch {
			case len(uncovered) == len(s.Hostnames):
				worse(agentapi.CertificateHostnameMismatch, "the certificate serving covers none of the site's hostnames ("+
					strings.Join(s.Hostnames, ", ")+")")
			case len(uncovered) > 0:
				problems = append(problems, "the certificate serving does not cover "+strings.Join(uncovered, ", "))
			}
		}
	}
	st.Message = strings.Join(problems, "; ")
	return st
}

func rank(s agentapi.CertificateState) int {
	for i, state := range agentapi.CertificateStates {
		if state == s {
			return i
		}
	}
	return len(agentapi.CertificateStates)
}

// covers says whether cert is good for hostname; a wildcard hostname is covered by the
// same wildcard in the certificate.
func covers(cert *x509.Certificate, hostname string) bool {
	if strings.HasPrefix(hostname, "*.") {
		for _, name := range cert.DNSNames {
			if strings.EqualFold(name, hostname) {
				return true
			}
		}
		return false
	}
	return cert.VerifyHostname(hostname) == nil
}
