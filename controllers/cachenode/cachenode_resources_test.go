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

package cachenode

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/render"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestDesiredDaemonSetGolden pins the cache pods the sample CacheNode gets: the init step,
// the security contexts, the mounts and their propagation, the probes and the requests.
// A change shows in review as a diff of testdata/daemonset-sample.golden.yaml
// (go test -update refreshes it).
func TestDesiredDaemonSetGolden(t *testing.T) {
	data, err := os.ReadFile("../../config/samples/cache_v1alpha1_cachenode.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cn, err := render.DecodeCacheNode(data)
	if err != nil {
		t.Fatal(err)
	}
	cn.Namespace = "edge-system"
	got, err := yaml.Marshal(desiredDaemonSet(cn, render.DefaultDiskPrefixes))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "daemonset-sample.golden.yaml")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("desiredDaemonSet differs from %s (go test -update refreshes it):\n%s", golden, got)
	}
}

func TestCacheResourcesDefaultRequests(t *testing.T) {
	q := resource.MustParse
	disk := func(keysZone string) v1alpha1.Disk {
		return v1alpha1.Disk{Name: "d", KeysZoneSize: ptr.To(q(keysZone))}
	}
	for _, tc := range []struct {
		name      string
		disks     []v1alpha1.Disk
		resources corev1.ResourceRequirements
		want      corev1.ResourceRequirements
	}{{
		name:  "nothing set: every request from the spec, no limits",
		disks: []v1alpha1.Disk{disk("64Mi"), disk("256Mi")},
		want: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceMemory: q("448Mi"), corev1.ResourceCPU: q("500m"), corev1.ResourceEphemeralStorage: q("128Mi"),
		}},
	}, {
		name:      "a request set is kept; the others are defaulted",
		disks:     []v1alpha1.Disk{disk("64Mi")},
		resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: q("2Gi")}},
		want: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceMemory: q("2Gi"), corev1.ResourceCPU: q("500m"), corev1.ResourceEphemeralStorage: q("128Mi"),
		}},
	}, {
		name:      "a limit without a request is left to the API server, which requests the limit",
		disks:     []v1alpha1.Disk{disk("64Mi")},
		resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("1Gi")}},
		want: corev1.ResourceRequirements{
			Limits:   corev1.ResourceList{corev1.ResourceCPU: q("4"), corev1.ResourceMemory: q("1Gi")},
			Requests: corev1.ResourceList{corev1.ResourceEphemeralStorage: q("128Mi")},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			spec := &v1alpha1.CacheNodeSpec{Disks: tc.disks, Resources: tc.resources}
			before := spec.Resources.DeepCopy()
			got := cacheResources(spec)
			g.Expect(got.Limits).To(HaveLen(len(tc.want.Limits)))
			for name, want := range tc.want.Limits {
				have := got.Limits[name]
				g.Expect(have.Cmp(want)).To(BeZero(), "limit %s = %s", name, have.String())
			}
			g.Expect(got.Requests).To(HaveLen(len(tc.want.Requests)))
			for name, want := range tc.want.Requests {
				have := got.Requests[name]
				g.Expect(have.Cmp(want)).To(BeZero(), "request %s = %s", name, have.String())
			}
			g.Expect(spec.Resources).To(Equal(*before), "the spec must not be changed")
		})
	}
}
