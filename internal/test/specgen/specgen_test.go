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

package specgen

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"regexp"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

const crdFile = "../../../config/crd/bases/cache.edgepool.io_cachenodes.yaml"

// TestDrawsFollowTheSchema: every drawn string matches its field's pattern, and every
// drawn field is one the schema has; the API server judges the rest (CEL).
func TestDrawsFollowTheSchema(t *testing.T) {
	g, err := Load(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	checked := 0
	for range 500 {
		spec := g.Draw(r, "x")["spec"]
		checked += check(t, "spec", g.spec, spec)
	}
	if checked < 5000 {
		t.Errorf("only %d strings checked", checked)
	}
}

func check(t *testing.T, path string, s *apiextensionsv1.JSONSchemaProps, v any) int {
	t.Helper()
	n := 0
	switch v := v.(type) {
	case map[string]any:
		for name, sub := range v {
			prop, ok := s.Properties[name]
			if !ok {
				t.Fatalf("%s.%s is not in the schema", path, name)
			}
			n += check(t, path+"."+name, &prop, sub)
		}
	case []any:
		for i, sub := range v {
			n += check(t, fmt.Sprintf("%s[%d]", path, i), s.Items.Schema, sub)
		}
	case string:
		if p := patternOf(s); p != "" && !regexp.MustCompile(p).MatchString(v) {
			t.Errorf("%s = %q does not match %s", path, v, p)
		}
		n++
	}
	return n
}

// TestSourceReadsItsInput: the same input draws the same manifest, and a changed byte
// changes it.
func TestSourceReadsItsInput(t *testing.T) {
	g, err := Load(crdFile)
	if err != nil {
		t.Fatal(err)
	}
	draw := func(data []byte) []byte { return g.Manifest(rand.New(NewSource(data)), "x") }
	in := []byte("0123456789abcdef")
	if !bytes.Equal(draw(in), draw(in)) {
		t.Error("one input drew two manifests")
	}
	if bytes.Equal(draw(in), draw([]byte("1123456789abcdef"))) {
		t.Error("a changed byte drew the same manifest")
	}
}
