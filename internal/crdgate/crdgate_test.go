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

package crdgate_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/internal/crdgate"
)

// The gate's agreement with the real API server is tested against one in api/v1alpha1
// (TestAcceptedSpecsRenderAndPassNginxT, TestBadQuantitiesAreNamedReadably); here, that it
// reads the CRD it embeds, and judges with the schema, the list types and the rules.
func TestCacheNodes(t *testing.T) {
	gate, err := crdgate.CacheNodes()
	if err != nil {
		t.Fatal(err)
	}
	sample, err := os.ReadFile("../../config/samples/cache_v1alpha1_cachenode.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, edit string
		want       []string
	}{
		{"the sample", "", nil},
		{"a schema bound", `{"spec": {"listener": {"backlog": 0}}}`, []string{"spec.listener.backlog: Invalid value: 0"}},
		{"a list type", `{"spec": {"listener": {"clientCIDRs": ["10.0.0.0/8", "10.0.0.0/8"]}}}`, []string{`spec.listener.clientCIDRs[1]: Duplicate value: "10.0.0.0/8"`}},
		{"a CEL rule", `{"spec": {"disks": [{"name": "a", "path": "/mnt/a", "media": "SSD", "size": "1Ki"}]}}`, []string{"spec.disks[0].size: Invalid value: \"1Ki\": size must be a whole number of bytes from 1Mi to 1Pi"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := decode(t, sample)
			if tc.edit != "" {
				merge(obj, decode(t, []byte(tc.edit)))
			}
			errs := gate.Validate(context.Background(), obj)
			if len(tc.want) == 0 && len(errs) > 0 {
				t.Fatalf("refused: %v", errs)
			}
			for _, want := range tc.want {
				if !strings.Contains(errs.ToAggregate().Error(), want) {
					t.Errorf("errors lack %q: %v", want, errs)
				}
			}
		})
	}
}

func TestNewRefusesWhatItCannotJudge(t *testing.T) {
	for _, crd := range []string{"", "kind: CustomResourceDefinition\nspec: {versions: []}\n", "nonsense: 1\n"} {
		if _, err := crdgate.New([]byte(crd)); err == nil {
			t.Errorf("New(%q) took it", crd)
		}
	}
}

func decode(t *testing.T, data []byte) map[string]any {
	t.Helper()
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(j, &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// merge sets what edit holds into obj: maps merged, anything else replaced.
func merge(obj, edit map[string]any) {
	for k, v := range edit {
		if sub, ok := v.(map[string]any); ok {
			if into, ok := obj[k].(map[string]any); ok {
				merge(into, sub)
				continue
			}
		}
		obj[k] = v
	}
}
