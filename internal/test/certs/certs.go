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

// Package certs makes throwaway certificates for tests: a CA with an intermediate that
// issues leaves, self-signed pairs, and the pairs the node agent would write for nginx.
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
)

// CA issues test certificates: a root, and an intermediate that signs the leaves, so
// that a chain has an order to get wrong.
type CA struct {
	Root         *x509.Certificate
	intermediate *x509.Certificate
	interKey     *ecdsa.PrivateKey
	// RootPEM is the root, for a client's RootCAs.
	RootPEM  []byte
	interPEM []byte
}

// Leaf is an issued certificate: Chain is the leaf then the intermediate, in PEM, as a
// kubernetes.io/tls Secret's tls.crt holds them.
type Leaf struct {
	Chain, Key  []byte
	Fingerprint string // SHA-256 of the leaf's DER, hex
	NotAfter    time.Time
}

func newCert(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer) (*x509.Certificate, []byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), err
}

// NewCA makes a root and an intermediate named name.
func NewCA(name string) (*CA, error) {
	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &CA{}
	ca.Root, ca.RootPEM, err = newCert(&x509.Certificate{Subject: pkix.Name{CommonName: name + " root"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}, nil, &rootKey.PublicKey, rootKey)
	if err != nil {
		return nil, err
	}
	if ca.interKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, err
	}
	ca.intermediate, ca.interPEM, err = newCert(&x509.Certificate{Subject: pkix.Name{CommonName: name + " intermediate"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}, ca.Root, &ca.interKey.PublicKey, rootKey)
	return ca, err
}

// Issue issues a leaf for hosts valid from notBefore to notAfter.
func (ca *CA) Issue(hosts []string, notBefore, notAfter time.Time) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leaf, leafPEM, err := newCert(&x509.Certificate{Subject: pkix.Name{CommonName: hosts[0]}, DNSNames: hosts,
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca.intermediate, &key.PublicKey, ca.interKey)
	if err != nil {
		return nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(leaf.Raw)
	return &Leaf{Chain: append(leafPEM, ca.interPEM...), Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		Fingerprint: hex.EncodeToString(sum[:]), NotAfter: leaf.NotAfter}, nil
}

// IssueNow issues a leaf for hosts valid from an hour ago for a day.
func (ca *CA) IssueNow(hosts ...string) (*Leaf, error) {
	now := time.Now()
	return ca.Issue(hosts, now.Add(-time.Hour), now.Add(24*time.Hour))
}

// SecretFiles are the files of a kubernetes.io/tls Secret's volume holding l, for
// ConfigDir.Write.
func (l *Leaf) SecretFiles() map[string][]byte {
	return map[string][]byte{"tls.crt": l.Chain, "tls.key": l.Key}
}

// ServedFingerprint connects to addr with TLS for serverName (not verifying: the test
// asks what is served, not whether it is trusted) and returns the SHA-256 of the leaf.
func ServedFingerprint(addr, serverName string) (string, error) {
	conn, err := tls.Dial("tcp", addr, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}) //nolint:gosec // reads what is served
	if err != nil {
		return "", err
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return "", fmt.Errorf("%s sent no certificate", addr)
	}
	sum := sha256.Sum256(certs[0].Raw)
	return hex.EncodeToString(sum[:]), nil
}

// SelfSigned is a certificate for hosts (exact or *. wildcards), valid for a day, signed
// by its own key, and the key, in PEM (the tls.crt and tls.key of a kubernetes.io/tls
// Secret). key nil: a new ECDSA P-256 key.
func SelfSigned(key crypto.Signer, hosts ...string) (certPEM, keyPEM []byte, err error) {
	if key == nil {
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			return nil, nil, err
		}
	}
	now := time.Now()
	// Its own root too, for the tests' clients to trust.
	_, certPEM, err = newCert(&x509.Certificate{Subject: pkix.Name{CommonName: hosts[0]}, DNSNames: hosts,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}, nil, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// WriteCertificates writes, as the node agent does, a pair for each certificate under
// nginx's prefix (nginxconf.CertificateFile, CertificateKeyFile): here a self-signed one.
func WriteCertificates(prefix string, certs []agentapi.Certificate) error {
	for _, c := range certs {
		cert, key, err := SelfSigned(nil, c.Hostnames...)
		if err != nil {
			return err
		}
		if err := WriteCertificate(prefix, c.Site, cert, key); err != nil {
			return err
		}
	}
	return nil
}

// WriteCertificate writes site's pair under nginx's prefix.
func WriteCertificate(prefix, site string, cert, key []byte) error {
	if err := os.MkdirAll(filepath.Join(prefix, nginxconf.TLSDir), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(prefix, nginxconf.CertificateFile(site)), cert, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(prefix, nginxconf.CertificateKeyFile(site)), key, 0o600)
}
