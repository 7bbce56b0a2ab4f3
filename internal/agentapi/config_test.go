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
	"crypto/sha256"
	"fmt"
	"testing"
)

func TestHash(t *testing.T) {
	conf := []byte("daemon off;\n")
	if got, want := Hash(conf), fmt.Sprintf("%x", sha256.Sum256(conf)); got != want {
		t.Fatalf("Hash = %q, want the hex SHA-256 %q", got, want)
	}
}

func TestFailoverPolicyValidate(t *testing.T) {
	good := FailoverPolicy{IOErrors: 5, CheckFailures: 2, ErrorWindowSeconds: 10, CooldownSeconds: 60, MaxCooldownSeconds: 60}
	if err := good.Validate(); err != nil {
		t.Errorf("%+v: %v", good, err)
	}
	for _, bad := range []func(*FailoverPolicy){
		func(p *FailoverPolicy) { p.IOErrors = 0 },
		func(p *FailoverPolicy) { p.CheckFailures = -1 },
		func(p *FailoverPolicy) { p.ErrorWindowSeconds = 0 },
		func(p *FailoverPolicy) { p.CooldownSeconds = 0 },
		func(p *FailoverPolicy) { p.MaxCooldownSeconds = 59 },
	} {
		p := good
		bad(&p)
		if p.Validate() == nil {
			t.Errorf("%+v passed", p)
		}
	}
}
