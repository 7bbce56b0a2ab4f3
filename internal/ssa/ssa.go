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

// Package ssa applies the objects a controller owns with server-side apply, and writes
// nothing when the live object already carries the hash of the exact object it would
// apply: a converged fleet costs the API server no write per reconcile. An object of the
// same name that the owner does not control is never taken over.
package ssa

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// AppliedHashAnnotation records the hash of the object last applied, so that an
// unchanged object is not applied again.
const AppliedHashAnnotation = "edgepool.io/applied-hash"

// ErrNotControlled: an object of the name the owner would use belongs to someone else.
var ErrNotControlled = errors.New("exists and is not controlled by this CacheNode")

// Result says what Apply did.
type Result int

const (
	// Unchanged: the live object carries the desired object's hash; nothing was written.
	Unchanged Result = iota
	// Applied: the object was new or changed, and applied.
	Applied
	// Restored: the live object carries the desired object's hash, but Drifted said
	// someone changed what it holds since; it was applied again.
	Restored
)

// Applier applies desired objects owned by an owner.
type Applier struct {
	// Client reads the live object (from the manager's cache) and applies.
	Client client.Client
	// APIReader reads past the cache: whether an object the cache does not hold exists.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	// FieldOwner is the field manager of every apply.
	FieldOwner string
	// Drifted, if set, says whether live (which carries the desired hash) no longer holds
	// what desired holds: a ConfigMap's data edited behind the owner's back, say.
	Drifted func(live, desired client.Object) bool
}

// Apply server-side applies desired, controlled by owner, unless the live object already
// carries the hash of this exact desired object. live is an empty object of desired's type.
func (a *Applier) Apply(ctx context.Context, owner, desired, live client.Object) (Result, error) {
	kind := desired.GetObjectKind().GroupVersionKind().Kind
	if err := controllerutil.SetControllerReference(owner, desired, a.Scheme); err != nil {
		return Unchanged, fmt.Errorf("set owner of %s: %w", kind, err)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(desired)
	if err != nil {
		return Unchanged, fmt.Errorf("convert %s: %w", kind, err)
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	data, err := json.Marshal(u)
	if err != nil {
		return Unchanged, fmt.Errorf("hash %s: %w", kind, err)
	}
	hash := agentapi.Hash(data)

	result := Applied
	switch err := a.Client.Get(ctx, client.ObjectKeyFromObject(desired), live); {
	case apierrors.IsNotFound(err):
		if err := a.notSomeoneElses(ctx, owner, desired); err != nil {
			return Unchanged, err
		}
	case err != nil:
		return Unchanged, fmt.Errorf("get %s: %w", kind, err)
	case !metav1.IsControlledBy(live, owner):
		return Unchanged, fmt.Errorf("%s %s %w; delete or rename it", kind, desired.GetName(), ErrNotControlled)
	case live.GetAnnotations()[AppliedHashAnnotation] != hash:
	case a.Drifted == nil || !a.Drifted(live, desired):
		return Unchanged, nil
	default:
		result = Restored
	}

	obj := &unstructured.Unstructured{Object: u}
	// Beside the desired object's own annotations (a Service's for its load balancer).
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AppliedHashAnnotation] = hash
	obj.SetAnnotations(annotations)
	if err := a.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(a.FieldOwner), client.ForceOwnership); err != nil {
		return Unchanged, fmt.Errorf("apply %s: %w", kind, err)
	}
	return result, nil
}

// notSomeoneElses asks the API server whether an object of desired's name exists that
// owner does not control. The manager's cache holds only the objects the owner labelled,
// and only once their event arrived: an object missing from it may still exist, someone
// else's (unlabelled, or created a moment ago), and the forced apply would take it over.
// It costs a read only when the cache has no such object, i.e. before the first apply.
func (a *Applier) notSomeoneElses(ctx context.Context, owner, desired client.Object) error {
	gvk := desired.GetObjectKind().GroupVersionKind()
	live := &metav1.PartialObjectMetadata{}
	live.SetGroupVersionKind(gvk)
	reader := a.APIReader
	if reader == nil {
		reader = a.Client
	}
	switch err := reader.Get(ctx, client.ObjectKeyFromObject(desired), live); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("get %s: %w", gvk.Kind, err)
	case !metav1.IsControlledBy(live, owner):
		return fmt.Errorf("%s %s %w; delete or rename it", gvk.Kind, desired.GetName(), ErrNotControlled)
	}
	return nil
}
