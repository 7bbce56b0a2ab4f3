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
	"slices"
	"strings"
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
	for name, sample := range map[string]string{"sample": "cache_v1alpha1_cachenode.yaml", "sites": "cache_v1alpha1_cachenode_sites.yaml", "sharded": "cache_v1alpha1_cachenode_sharded.yaml"} {
		t.Run(name, func(t *testing.T) { daemonSetGolden(t, name, sample) })
	}
}

func daemonSetGolden(t *testing.T, name, sample string) {
	data, err := os.ReadFile("../../config/samples/" + sample)
	if err != nil {
		t.Fatal(err)
	}
	cn, err := render.DecodeCacheNode(data)
	if err != nil {
		t.Fatal(err)
	}
	cn.Namespace = "edge-system"
	got, err := yaml.Marshal(desiredDaemonSet(cn, render.DefaultDiskPrefixes, DefaultCacheImage))
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "daemonset-"+name+".golden.yaml")
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

// TestCacheImageIsTheAdmins: the cache pods run the operator's --cache-image, in the
// cache container and in the root init step alike, unless spec.image (which only the
// edgepool-grants admission policy lets through) names another.
func TestCacheImageIsTheAdmins(t *testing.T) {
	const admins = "registry.example/edge/cache@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	images := func(cn *v1alpha1.CacheNode) []string {
		pod := desiredDaemonSet(cn, render.DefaultDiskPrefixes, admins).Spec.Template.Spec
		return []string{pod.InitContainers[0].Image, pod.Containers[0].Image}
	}
	cn := newCacheNode("default", "image", "image")
	if got := images(cn); !slices.Equal(got, []string{admins, admins}) {
		t.Errorf("without spec.image the pods run %v, want the operator's %s", got, admins)
	}
	cn.Spec.Image = "registry.example/granted/cache:2"
	if got := images(cn); !slices.Equal(got, []string{cn.Spec.Image, cn.Spec.Image}) {
		t.Errorf("with spec.image the pods run %v, want %s", got, cn.Spec.Image)
	}
	for _, ref := range []string{DefaultCacheImage, admins, "localhost:5000/edgepool/cache:0.1.0"} {
		if err := CheckImage(ref); err != nil {
			t.Errorf("CheckImage(%q): %v", ref, err)
		}
	}
	for _, ref := range []string{"", "-evil", "a b", "a;b", "cache\n", strings.Repeat("a", 256)} {
		if CheckImage(ref) == nil {
			t.Errorf("CheckImage(%q) accepted it", ref)
		}
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
		edit      func(*v1alpha1.CacheNodeSpec)
		want      corev1.ResourceRequirements
	}{{
		name:  "nothing set: every request from the spec, no limits",
		disks: []v1alpha1.Disk{disk("64Mi"), disk("256Mi")},
		want: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceMemory: q("448Mi"), corev1.ResourceCPU: q("500m"), corev1.ResourceEphemeralStorage: q("128Mi"),
		}},
	}, {
		name:  "client limits: a table of 8 MiB per site and limit",
		disks: []v1alpha1.Disk{disk("64Mi")},
		edit: func(spec *v1alpha1.CacheNodeSpec) {
			spec.ClientLimits = &v1alpha1.ClientLimits{RequestsPerSecond: 10}
			spec.Sites = []v1alpha1.Site{{Name: "a"}, {Name: "b", ClientLimits: &v1alpha1.ClientLimits{RequestsPerSecond: 5, ConcurrentRequests: 2}}}
		},
		want: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceMemory: q("216Mi"), corev1.ResourceCPU: q("500m"), corev1.ResourceEphemeralStorage: q("128Mi"),
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
			if tc.edit != nil {
				tc.edit(spec)
			}
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

// TestSitesRollPodsOnlyWithTheirSecrets: a change of sites reaches the pods as a reload,
// without a new pod template, unless it changes the set of TLS Secrets they mount.
func TestSitesRollPodsOnlyWithTheirSecrets(t *testing.T) {
	g := NewWithT(t)
	data, err := os.ReadFile("../../config/samples/cache_v1alpha1_cachenode_sites.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	base, err := render.DecodeCacheNode(data)
	g.Expect(err).NotTo(HaveOccurred())
	template := func(cn *v1alpha1.CacheNode) corev1.PodTemplateSpec {
		return desiredDaemonSet(cn, render.DefaultDiskPrefixes, DefaultCacheImage).Spec.Template
	}
	for name, change := range map[string]func(*v1alpha1.CacheNode){
		"hostnames":   func(cn *v1alpha1.CacheNode) { cn.Spec.Sites[0].Hostnames = []string{"new.example.com"} },
		"origin":      func(cn *v1alpha1.CacheNode) { cn.Spec.Sites[1].Origin.Servers = []string{"10.9.9.9:80"} },
		"cache rules": func(cn *v1alpha1.CacheNode) { cn.Spec.Sites[1].Cache = nil },
		"plainHTTP":   func(cn *v1alpha1.CacheNode) { cn.Spec.Sites[0].TLS.PlainHTTP = v1alpha1.PlainHTTPServe },
		"defaultSite": func(cn *v1alpha1.CacheNode) { cn.Spec.DefaultSite = "media" },
		"order":       func(cn *v1alpha1.CacheNode) { slices.Reverse(cn.Spec.Sites) },
		"a site sans tls": func(cn *v1alpha1.CacheNode) {
			cn.Spec.Sites = append(cn.Spec.Sites, v1alpha1.Site{Name: "plain", Hostnames: []string{"plain.example.com"},
				Origin: v1alpha1.Origin{Servers: []string{"10.0.0.30:80"}, Keepalive: ptr.To[int32](32)}})
		},
	} {
		cn := base.DeepCopy()
		change(cn)
		g.Expect(template(cn)).To(Equal(template(base)), "changing %s changed the pod template", name)
	}
	for name, change := range map[string]func(*v1alpha1.CacheNode){
		"a Secret renamed": func(cn *v1alpha1.CacheNode) { cn.Spec.Sites[0].TLS.SecretName = "other" },
		"tls removed":      func(cn *v1alpha1.CacheNode) { cn.Spec.Sites[0].TLS = nil },
	} {
		cn := base.DeepCopy()
		change(cn)
		g.Expect(template(cn)).NotTo(Equal(template(base)), "changing %s kept the pod template", name)
	}
}

// A disk taken over tells the agent from which CacheNode (the agent parses the flag).
func TestDiskArgs(t *testing.T) {
	spec := &v1alpha1.CacheNodeSpec{Disks: []v1alpha1.Disk{
		{Name: "nvme0", Path: "/mnt/nvme0", Media: v1alpha1.MediaNVMe},
		{Name: "hdd0", Path: "/mnt/hdd0", Media: v1alpha1.MediaHDD, TakeOverFrom: "images"},
	}}
	want := []string{"--disk=name=nvme0,path=/mnt/nvme0,media=NVMe", "--disk=name=hdd0,path=/mnt/hdd0,media=HDD,takeOverFrom=images"}
	if got := diskArgs(spec); !slices.Equal(got, want) {
		t.Errorf("diskArgs = %q, want %q", got, want)
	}
}
