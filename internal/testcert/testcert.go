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

// Package testcert makes throwaway TLS certificates for tests, and writes them where the
// node agent puts the sites' pairs. It depends on agentapi only, so that the renderer's
// own tests can use it.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// SelfSigned makes a throwaway self-signed ECDSA P-256 certificate for hostnames (exact
// or *. wildcards), valid for a day: its PEM chain and PEM (PKCS #8) private key.
func SelfSigned(hostnames []string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "edgepool test"},
		DNSNames:              hostnames,
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // its own root, for the tests' clients to trust
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), nil
}

// WriteCertificates writes, as the node agent does, a pair for each certificate under
// nginx's prefix (agentapi.CertificateFile, CertificateKeyFile): here a self-signed one.
func WriteCertificates(prefix string, certs []agentapi.Certificate) error {
	for _, c := range certs {
		cert, key, err := SelfSigned(c.Hostnames)
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
	if err := os.MkdirAll(filepath.Join(prefix, agentapi.TLSDir), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(prefix, agentapi.CertificateFile(site)), cert, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(prefix, agentapi.CertificateKeyFile(site)), key, 0o600)
}
