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

package agentapi

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// How the operator asks an agent to purge. Only the operator may: it holds an ed25519 key
// pair made in memory when it starts (no Secret), publishes the public half in each
// CacheNode's ConfigMap (OperatorKeysKey, beside nginx.conf: not part of the configuration
// nginx runs), and signs every request. A request names the purge's UID, the pod it is for,
// when it was issued and what to purge; the agent checks the signature against the
// published keys (the current operator's and the previous one's, so that a new leader does
// not break purges in flight), the audience, the time, and the purge against the same
// allowlist as the CachePurge's schema. The endpoint takes purges and nothing else: no
// configuration, no file path.
const (
	// PurgePath is the agent's purge endpoint (POST a SignedPurge; the answer is a
	// PurgeResult). Sending the same purge again asks how far it got.
	PurgePath = "/purge"
	// OperatorKeysKey is the ConfigMap key (a file of the agent's config dir) holding the
	// operator's public keys: PEM "PUBLIC KEY" blocks, newest first.
	OperatorKeysKey = "operator.pub"
	// MaxOperatorKeys bounds the published keys: the current and previous operators'.
	MaxOperatorKeys = 4
	// MaxClockSkew bounds how far a request's issue time may be from the agent's clock,
	// either way: a captured request is refused after it.
	MaxClockSkew = 2 * time.Minute
	// MaxSignedPurgeBytes bounds a request's body.
	MaxSignedPurgeBytes = 1 << 20
	// signingContext separates these signatures from any other use of the key.
	signingContext = "edgepool purge request v1\x00"
)

// The states of a purge on one agent.
const (
	PurgeRunning = "Running"
	PurgeDone    = "Done"
	PurgeFailed  = "Failed"
)

// uidRE is a Kubernetes UID (a UUID).
var uidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// PurgeRequest is what the operator signs.
type PurgeRequest struct {
	// UID is the CachePurge's UID: the agent does a purge once, and answers a repeat with
	// its result.
	UID string `json:"uid"`
	// Audience is the cache pod the request is for, namespace/name.
	Audience string `json:"audience"`
	// IssuedAt is when the operator signed the request, in Unix seconds.
	IssuedAt int64 `json:"issuedAt"`
	// Spec is what to purge.
	Spec PurgeSpec `json:"spec"`
}

// SignedPurge is a PurgeRequest on the wire: its exact JSON bytes, and the operator's
// signature of them.
type SignedPurge struct {
	Payload   []byte `json:"payload"`
	Signature []byte `json:"signature"`
}

// PurgeResult is the agent's answer: how far the purge got on this pod.
type PurgeResult struct {
	UID   string `json:"uid"`
	State string `json:"state"`
	// Removed is the number of cache files removed, over every disk.
	Removed int64 `json:"removed"`
	// Message says why the purge failed.
	Message string `json:"message,omitempty"`
	// Finished is when it finished; zero while it runs.
	Finished time.Time `json:"finished,omitzero"`
}

// SignPurge signs r with the operator's key.
func SignPurge(key ed25519.PrivateKey, r PurgeRequest) (SignedPurge, error) {
	payload, err := json.Marshal(r)
	if err != nil {
		return SignedPurge{}, err
	}
	return SignedPurge{Payload: payload, Signature: ed25519.Sign(key, signed(payload))}, nil
}

func signed(payload []byte) []byte {
	return append([]byte(signingContext), payload...)
}

// Why a request is refused.
var (
	ErrPurgeSignature = errors.New("not signed by a key the operator published")
	ErrPurgeAudience  = errors.New("meant for another pod")
	ErrPurgeStale     = errors.New("issued too long ago, or in the future")
	ErrPurgeMalformed = errors.New("malformed purge request")
)

// VerifyPurge parses a request's body and returns the request it carries if one of keys
// signed it, it is for audience, it was issued within MaxClockSkew of now, and its purge
// is valid. Nothing of the payload is read before its signature is checked.
func VerifyPurge(body []byte, keys []ed25519.PublicKey, audience string, now time.Time) (PurgeRequest, error) {
	var sp SignedPurge
	if err := DecodeStrict(body, &sp); err != nil {
		return PurgeRequest{}, fmt.Errorf("%w: %w", ErrPurgeMalformed, err)
	}
	if len(sp.Signature) != ed25519.SignatureSize {
		return PurgeRequest{}, fmt.Errorf("%w: signature of %d bytes", ErrPurgeSignature, len(sp.Signature))
	}
	verified := false
	for _, k := range keys {
		if len(k) == ed25519.PublicKeySize && ed25519.Verify(k, signed(sp.Payload), sp.Signature) {
			verified = true
			break
		}
	}
	if !verified {
		return PurgeRequest{}, ErrPurgeSignature
	}
	var r PurgeRequest
	if err := DecodeStrict(sp.Payload, &r); err != nil {
		return PurgeRequest{}, fmt.Errorf("%w: %w", ErrPurgeMalformed, err)
	}
	if audience == "" || r.Audience != audience {
		return PurgeRequest{}, fmt.Errorf("%w: it names %.64q, this is %q", ErrPurgeAudience, r.Audience, audience)
	}
	if skew := now.Sub(time.Unix(r.IssuedAt, 0)); skew > MaxClockSkew || skew < -MaxClockSkew {
		return PurgeRequest{}, fmt.Errorf("%w: issued %s from this pod's clock, at most %s allowed", ErrPurgeStale, skew.Round(time.Second), MaxClockSkew)
	}
	if !uidRE.MatchString(r.UID) {
		return PurgeRequest{}, fmt.Errorf("%w: uid %.64q is not a UID", ErrPurgeMalformed, r.UID)
	}
	if err := r.Spec.Validate(); err != nil {
		return PurgeRequest{}, fmt.Errorf("%w: %w", ErrPurgeMalformed, err)
	}
	return r, nil
}

// DecodeStrict decodes exactly one JSON value with no unknown fields.
func DecodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON value")
	}
	return nil
}

// EncodeOperatorKeys writes public keys, newest first, as the ConfigMap's OperatorKeysKey.
func EncodeOperatorKeys(keys []ed25519.PublicKey) ([]byte, error) {
	var b bytes.Buffer
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			return nil, err
		}
		if err := pem.Encode(&b, &pem.Block{Type: "PUBLIC KEY", Bytes: der}); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// ParseOperatorKeys reads the published keys: at most MaxOperatorKeys ed25519 keys in PEM
// "PUBLIC KEY" blocks, and nothing else.
func ParseOperatorKeys(data []byte) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	rest := bytes.TrimSpace(data)
	for len(rest) > 0 {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("operator keys: not PEM")
		}
		if block.Type != "PUBLIC KEY" || len(block.Headers) > 0 {
			return nil, fmt.Errorf("operator keys: a %.32q block, want PUBLIC KEY", block.Type)
		}
		pub, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("operator keys: %w", err)
		}
		k, ok := pub.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("operator keys: a %T, want ed25519", pub)
		}
		if keys = append(keys, k); len(keys) > MaxOperatorKeys {
			return nil, fmt.Errorf("operator keys: more than %d", MaxOperatorKeys)
		}
		rest = bytes.TrimSpace(rest)
	}
	if len(keys) == 0 {
		return nil, errors.New("operator keys: none published")
	}
	return keys, nil
}
