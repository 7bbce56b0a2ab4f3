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
	"errors"
	"fmt"

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
