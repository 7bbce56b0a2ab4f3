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
	"fmt"

	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// DecodeCacheNode reads one CacheNode manifest strictly (unknown fields are errors) and
// applies the schema's defaults, as the API server would, for offline rendering.
func DecodeCacheNode(data []byte) (*v1alpha1.CacheNode, error) {
	var cn v1alpha1.CacheNode
	if err := yaml.UnmarshalStrict(data, &cn); err != nil {
		return nil, fmt.Errorf("decode CacheNode: %w", err)
	}
	if gvk := cn.GroupVersionKind(); gvk != v1alpha1.GroupVersion.WithKind("CacheNode") {
		return nil, fmt.Errorf("decode CacheNode: got apiVersion %q kind %q, want %s CacheNode", cn.APIVersion, cn.Kind, v1alpha1.GroupVersion)
	}
	cn.Spec.Default()
	return &cn, nil
}
