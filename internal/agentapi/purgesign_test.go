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
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

const testUID = "0b5e3c1a-7f7e-4c55-9a39-1f0a2c3d4e5f"

func newKey(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func body(t testing.TB, sp SignedPurge) []byte {
	t.Helper()
	b, err := json.Marshal(sp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sign(t testing.TB, key ed25519.PrivateKey, r PurgeRequest) SignedPurge {
	t.Helper()
	sp, err := SignPurge(key, r)
	if err != nil {
		t.Fatal(err)
	}
	return sp
}

func TestVerifyPurge(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	current, currentKey := newKey(t)
	previous, previousKey := newKey(t)
	_, strangerKey := newKey(t)
	published := []ed25519.PublicKey{current, previous}
	const pod = "edge/edge-abcde"
	good := PurgeRequest{UID: testUID, Audience: pod, IssuedAt: now.Unix(), Spec: PurgeSpec{Scope: "URLs", URLs: []string{"https://a.example/x"}}}
	with := func(f func(*PurgeRequest)) PurgeRequest { r := good; f(&r); return r }

	for _, tc := range []struct {
		name string
		body []byte
		keys []ed25519.PublicKey
		want error // nil: accepted
		msg  string
	}{
		{"signed by the current operator", body(t, sign(t, currentKey, good)), published, nil, ""},
		{"signed by the previous operator", body(t, sign(t, previousKey, good)), published, nil, ""},
		{"issued a minute ago", body(t, sign(t, currentKey, with(func(r *PurgeRequest) { r.IssuedAt -= 60 }))), published, nil, ""},
		{"issued a minute ahead", body(t, sign(t, currentKey, with(func(r *PurgeRequest) { r.IssuedAt += 60 }))), published, nil, ""},
		{"signed by another key", body(t, sign(t, strangerKey, good)), published, ErrPurgeSignature, ""},
		{"signed by a key no longer published", body(t, sign(t, previousKey, good)), published[:1], ErrPurgeSignature, ""},
		{"no keys published", body(t, sign(t, currentKey, good)), nil, ErrPurgeSignature, ""},
		{"a tampered payload", func() []byte {
			sp := sign(t, currentKey, good)
			sp.Payload = bytes.Replace(sp.Payload, []byte("a.example/x"), []byte("a.example/y"), 1)
			return body(t, sp)
		}(), published, ErrPurgeSignature, ""},
		{"a tampered signature", func() []byte {
			sp := sign(t, currentKey, good)
			sp.Signature[0] ^= 1
			return body(t, sp)
		}(), published, ErrPurgeSignature, ""},
		{"a short signature", func() []byte {
			sp := sign(t, currentKey, good)
			sp.Signature = sp.Signature[:10]
			return body(t, sp)
		}(), published, ErrPurgeSignature, "signature of 10 bytes"},
		{"no signature", []byte(`{"payload":"e30="}`), published, ErrPurgeSignature, ""},
		{"for another pod", body(t, sign(t, currentKey, with(func(r *PurgeRequest) { r.Audience = "edge/edge-fghij" }))), published, ErrPurgeAudience, `"edge/edge-fghij"`},
		{"for no pod", body(t, sign(t, currentKey, with(func(r *PurgeRequest) { r.Audience = "" }))), published, ErrPurgeAudience, ""},
		{"issued three minutes ago", body(t, sign(t, currentKey, with(func(r *PurgeRequest) { r.IssuedAt -= 180 }))), published, ErrPurgeStale, "3m0s"},
		{"issued three minutes ahead", body(t, sign(t, currentKey, with(func(r *PurgeRequest) { r.IssuedAt += 180 }))), published, ErrPurgeStale, "-3m0s"},
		{"not a UID", body(t, sign(t, currentKey, with(func(r *PurgeRequest) { r.UID = "../../etc" }))), published, ErrPurgeMalformed, "not a UID"},
		{"a purge the schema refuses", body(t, sign(t, currentKey, with(func(r *PurgeRequest) { r.Spec.URLs = []string{"/etc/passwd"} }))), published, ErrPurgeMalformed, "urls[0]"},
		{"a signed payload with an unknown field", func() []byte {
			payload := []byte(`{"uid":"` + testUID + `","audience":"` + pod + `","issuedAt":1800000000,"spec":{"scope":"All"},"config":"x"}`)
			return body(t, SignedPurge{Payload: payload, Signature: ed25519.Sign(currentKey, signed(payload))})
		}(), published, ErrPurgeMalformed, "unknown field"},
		{"a signed payload of two values", func() []byte {
			payload := []byte(`{"uid":"` + testUID + `","audience":"` + pod + `","issuedAt":1800000000,"spec":{"scope":"All"}} {}`)
			return body(t, SignedPurge{Payload: payload, Signature: ed25519.Sign(currentKey, signed(payload))})
		}(), published, ErrPurgeMalformed, "after the JSON value"},
		{"an unknown field beside the signature", []byte(`{"payload":"e30=","signature":"","path":"/etc"}`), published, ErrPurgeMalformed, "unknown field"},
		{"not JSON", []byte("GET / HTTP/1.1"), published, ErrPurgeMalformed, ""},
		{"empty", nil, published, ErrPurgeMalformed, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := VerifyPurge(tc.body, tc.keys, pod, now)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == nil && (r.UID != testUID || r.Spec.URLs[0] != "https://a.example/x"):
				t.Errorf("accepted %+v", r)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("got %v, want %v", err, tc.want)
			case tc.want != nil && !strings.Contains(err.Error(), tc.msg):
				t.Errorf("error %q lacks %q", err, tc.msg)
			}
		})
	}
	if _, err := VerifyPurge(body(t, sign(t, currentKey, good)), published, "", now); !errors.Is(err, ErrPurgeAudience) {
		t.Errorf("an agent that does not know its pod accepted a purge: %v", err)
	}
}

// FuzzVerifyPurge: no body makes VerifyPurge panic, and none is accepted that the key did
// not sign (the seeds include signed ones, which the fuzzer mutates).
func FuzzVerifyPurge(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	pub, priv := newKey(f)
	const pod = "edge/edge-abcde"
	f.Add(body(f, sign(f, priv, PurgeRequest{UID: testUID, Audience: pod, IssuedAt: now.Unix(), Spec: PurgeSpec{Scope: "All"}})))
	f.Add(body(f, sign(f, priv, PurgeRequest{UID: testUID, Audience: pod, IssuedAt: now.Unix(),
		Spec: PurgeSpec{Scope: "Prefixes", Prefixes: []PurgeHost{{Host: "a.example", Paths: []string{"/"}}}}})))
	f.Add([]byte(`{"payload":null,"signature":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := VerifyPurge(b, []ed25519.PublicKey{pub}, pod, now)
		if err != nil {
			return
		}
		var sp SignedPurge
		if json.Unmarshal(b, &sp) != nil || !ed25519.Verify(pub, signed(sp.Payload), sp.Signature) {
			t.Fatalf("accepted a body the key did not sign: %q", b)
		}
		if r.Audience != pod || r.Spec.Validate() != nil {
			t.Fatalf("accepted %+v", r)
		}
	})
}

func TestOperatorKeys(t *testing.T) {
	a, _ := newKey(t)
	b, _ := newKey(t)
	data, err := EncodeOperatorKeys([]ed25519.PublicKey{a, b})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := ParseOperatorKeys(data)
	if err != nil || len(keys) != 2 || !keys[0].Equal(a) || !keys[1].Equal(b) {
		t.Fatalf("round trip: %v, %v", keys, err)
	}
	five, _ := EncodeOperatorKeys([]ed25519.PublicKey{a, b, a, b, a})
	for name, data := range map[string][]byte{
		"empty":         nil,
		"not PEM":       []byte("ssh-ed25519 AAAA"),
		"a private key": []byte("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"),
		"garbage after": append(append([]byte{}, data...), "junk"...),
		"five keys":     five,
		"not a key":     []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"),
	} {
		if _, err := ParseOperatorKeys(data); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParseOperatorKeys(f *testing.F) {
	a, _ := newKey(f)
	data, _ := EncodeOperatorKeys([]ed25519.PublicKey{a})
	f.Add(data)
	f.Add([]byte("-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := ParseOperatorKeys(b)
		if err == nil && (len(keys) == 0 || len(keys) > MaxOperatorKeys) {
			t.Fatalf("%d keys", len(keys))
		}
		for _, k := range keys {
			if len(k) != ed25519.PublicKeySize {
				t.Fatalf("a key of %d bytes", len(k))
			}
		}
	})
}
