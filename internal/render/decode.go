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

package render

import (
	stdjson "encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// DecodeCacheNode reads one CacheNode manifest (YAML or JSON) as strictly as the API server
// and kubectl's strict field validation do: a key given twice, an unknown field, a field
// name in the wrong case are errors. It applies the schema's defaults, as the API server
// would, for offline rendering.
func DecodeCacheNode(data []byte) (*v1alpha1.CacheNode, error) {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, fmt.Errorf("decode CacheNode: %w", err)
	}
	var cn v1alpha1.CacheNode
	strict, err := json.UnmarshalStrict(j, &cn, json.DisallowDuplicateFields, json.DisallowUnknownFields)
	if err != nil {
		// A quantity's own error names neither the field nor the forms it takes.
		var doc any
		if stdjson.Unmarshal(j, &doc) == nil {
			if bad := badQuantities(doc, reflect.TypeFor[v1alpha1.CacheNode](), ""); len(bad) > 0 {
				return nil, fmt.Errorf("decode CacheNode: %s", strings.Join(bad, "; "))
			}
		}
		return nil, fmt.Errorf("decode CacheNode: %w", err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("decode CacheNode: %w", errors.Join(strict...))
	}
	if gvk := cn.GroupVersionKind(); gvk != v1alpha1.GroupVersion.WithKind("CacheNode") {
		return nil, fmt.Errorf("decode CacheNode: got apiVersion %q kind %q, want %s CacheNode", cn.APIVersion, cn.Kind, v1alpha1.GroupVersion)
	}
	cn.Spec.Default()
	return &cn, nil
}

// badQuantities names the fields of v, a decoded JSON value of Go type t at path, whose
// type is resource.Quantity and whose value does not parse as one.
func badQuantities(v any, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[resource.Quantity]() {
		var q resource.Quantity
		raw, _ := stdjson.Marshal(v)
		if q.UnmarshalJSON(raw) != nil {
			return []string{fmt.Sprintf("%s: %s is not a quantity: a number and a unit such as 512Mi, 100Gi or 2Ti (powers of 1024), or 500M, 100G (powers of 1000)", path, raw)}
		}
		return nil
	}
	var bad []string
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Anonymous && name == "" {
				bad = append(bad, badQuantities(v, f.Type, path)...)
				continue
			}
			if sub, ok := m[name]; ok && name != "" && name != "-" {
				bad = append(bad, badQuantities(sub, f.Type, strings.TrimPrefix(path+"."+name, "."))...)
			}
		}
	case reflect.Slice:
		items, _ := v.([]any)
		for i, item := range items {
			bad = append(bad, badQuantities(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	case reflect.Map:
		m, _ := v.(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			bad = append(bad, badQuantities(m[k], t.Elem(), path+"."+k)...)
		}
	}
	return bad
}
