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

// Package v1alpha1 contains the v1alpha1 API of the cache.edgepool.io group.
// +kubebuilder:object:generate=true
// +groupName=cache.edgepool.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group version used to register these objects.
	GroupVersion = schema.GroupVersion{Group: "cache.edgepool.io", Version: "v1alpha1"}

	// SchemeBuilder adds the types of this group-version to a scheme. It is apimachinery's,
	// not controller-runtime's (deprecated there), so the API package does not pull in
	// controller-runtime.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types in this group-version to the given scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes registers the kinds of this group-version and the meta types
// (ListOptions, WatchEvent, ...) that clients use with them.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &CacheNode{}, &CacheNodeList{}, &CachePurge{}, &CachePurgeList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
