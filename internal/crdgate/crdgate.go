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

// Package crdgate judges a CacheNode manifest as the API server does on create: the CRD's
// defaults, its OpenAPI schema, its list types and its CEL rules, with the API server's own
// validators. `edgepool render` uses it, so that what it renders is what the cluster takes.
package crdgate

import (
	"context"
	"fmt"
	"sync"

	apiextensionsinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/config/crd"
)

// Gate holds one CRD version's validators.
type Gate struct {
	structural *structuralschema.Structural
	schema     validation.SchemaValidator
	rules      *cel.Validator // nil when the schema has no CEL rules
}

// CacheNodes is the gate of the CacheNode CRD this binary was built with.
var CacheNodes = sync.OnceValues(func() (*Gate, error) { return New(crd.CacheNodes) })

// New builds the gate of a CRD's single served version from its YAML.
func New(crdYAML []byte) (*Gate, error) {
	var def apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(crdYAML, &def); err != nil {
		return nil, fmt.Errorf("read CRD: %w", err)
	}
	if len(def.Spec.Versions) != 1 || def.Spec.Versions[0].Schema == nil {
		return nil, fmt.Errorf("CRD %s: want one version with a schema, got %d versions", def.Name, len(def.Spec.Versions))
	}
	var internal apiextensionsinternal.CustomResourceValidation
	if err := apiextensionsv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(def.Spec.Versions[0].Schema, &internal, nil); err != nil {
		return nil, fmt.Errorf("CRD %s: %w", def.Name, err)
	}
	structural, err := structuralschema.NewStructural(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("CRD %s: %w", def.Name, err)
	}
	if err := structuraldefaulting.PruneDefaults(structural); err != nil {
		return nil, fmt.Errorf("CRD %s: %w", def.Name, err)
	}
	schema, _, err := validation.NewSchemaValidator(internal.OpenAPIV3Schema)
	if err != nil {
		return nil, fmt.Errorf("CRD %s: %w", def.Name, err)
	}
	return &Gate{
		structural: structural,
		schema:     schema,
		rules:      cel.NewValidator(structural, true, celconfig.PerCallLimit),
	}, nil
}

// Validate judges obj, a decoded manifest, as the API server judges a create, after
// applying the schema's defaults to a copy of it, as the API server does first. Fields
// the schema does not know are the caller's to refuse (the API server prunes them).
func (g *Gate) Validate(ctx context.Context, obj map[string]any) field.ErrorList {
	obj = runtime.DeepCopyJSON(obj)
	structuraldefaulting.Default(obj, g.structural)
	errs := validation.ValidateCustomResource(nil, obj, g.schema)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, g.structural, obj)...)
	if g.rules == nil {
		return errs
	}
	// As the API server: the rules run only on an object whose shape they can read.
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return append(errs, field.Invalid(nil, nil, "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"))
		}
	}
	ruleErrs, _ := g.rules.Validate(ctx, nil, g.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, ruleErrs...)
}
