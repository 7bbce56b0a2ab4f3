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

// Package crd holds the CustomResourceDefinitions controller-gen writes (make manifests),
// for the Go code that must judge a manifest as the API server does.
package crd

import _ "embed"

// CacheNodes is the CacheNode CRD.
//
//go:embed bases/cache.edgepool.io_cachenodes.yaml
var CacheNodes []byte
