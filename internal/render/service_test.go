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

package render_test

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/render"
)

// sampleCacheNode is the sample CacheNode of config/samples, as the CLI decodes it.
func sampleCacheNode(t *testing.T) *v1alpha1.CacheNode {
	t.Helper()
	data, err := os.ReadFile("../../config/samples/cache_v1alpha1_cachenode.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cn, err := render.DecodeCacheNode(data)
	if err != nil {
		t.Fatal(err)
	}
	return cn
}

// TestServiceDoesNotReachNginxConf: spec.service is the operator's Service alone; adding,
// changing or removing it renders the same nginx.conf and facts, so no cache reloads.
func TestServiceDoesNotReachNginxConf(t *testing.T) {
	cn := sampleCacheNode(t)
	without, err := render.NginxConf(&cn.Spec)
	if err != nil {
		t.Fatal(err)
	}
	factsWithout := render.Facts(&cn.Spec, without)
	cn.Spec.Service = &v1alpha1.CacheNodeService{Type: v1alpha1.ServiceTypeLoadBalancer,
		Ports:                    v1alpha1.ServicePorts{HTTP: 8080, HTTPS: 8443, HTTPNodePort: 30080},
		Annotations:              map[string]string{"lb.example.com/x": "y"},
		LoadBalancerSourceRanges: []string{"203.0.113.0/24"}, LoadBalancerClass: "example.com/lb"}
	with, err := render.NginxConf(&cn.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(without, with); diff != "" {
		t.Errorf("spec.service changed nginx.conf:\n%s", diff)
	}
	if diff := cmp.Diff(factsWithout, render.Facts(&cn.Spec, with)); diff != "" {
		t.Errorf("spec.service changed the facts:\n%s", diff)
	}
}
