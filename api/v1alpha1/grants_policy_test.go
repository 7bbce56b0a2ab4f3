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

package v1alpha1_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// waitCtx bounds a wait for the API server to load a policy or its parameter.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := testkit.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A CacheNode in namespace ns, changed by each edit.
func grantee(ns string, edits ...func(*v1alpha1.CacheNodeSpec)) *v1alpha1.CacheNode {
	cn := minimal("grantee")
	cn.Namespace = ns
	for _, edit := range edits {
		edit(&cn.Spec)
	}
	return cn
}

func image(ref string) func(*v1alpha1.CacheNodeSpec) {
	return func(s *v1alpha1.CacheNodeSpec) { s.Image = ref }
}

func hostNetwork(s *v1alpha1.CacheNodeSpec) { s.HostNetwork = true }

func toleration(key string) func(*v1alpha1.CacheNodeSpec) {
	return func(s *v1alpha1.CacheNodeSpec) {
		s.Tolerations = append(s.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	}
}

func priorityClass(name string) func(*v1alpha1.CacheNodeSpec) {
	return func(s *v1alpha1.CacheNodeSpec) { s.PriorityClassName = name }
}

func serviceAnnotation(key string) func(*v1alpha1.CacheNodeSpec) {
	return func(s *v1alpha1.CacheNodeSpec) {
		s.Service = &v1alpha1.CacheNodeService{Annotations: map[string]string{key: "x"}}
	}
}

func diskPath(path string) func(*v1alpha1.CacheNodeSpec) {
	return func(s *v1alpha1.CacheNodeSpec) { s.Disks = s.Disks[:1]; s.Disks[0].Path = path }
}

// TestGrantsFenceWhatReachesPastThePod: a CacheNode's author may set the fields that reach
// past its pods (image, hostNetwork, tolerations, priorityClassName, Service annotations,
// disk prefixes) only as far as the cluster admin's ConfigMap grants them to its
// namespace; nothing is granted by default or without the ConfigMap, and the refusal names
// the field, the value and what is granted.
func TestGrantsFenceWhatReachesPastThePod(t *testing.T) {
	ctx := context.Background()
	installPolicies(t, "disk_paths_policy.yaml", "grants_policy.yaml", "grants.yaml")
	for _, ns := range []string{"team-a", "team-b", "team-c"} {
		if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	create := func(cn *v1alpha1.CacheNode) error { return k8s.Create(ctx, cn, client.DryRunAll) }
	if err := testkit.Eventually(waitCtx(t), 100*time.Millisecond, "the policy to refuse spec.image", func() error {
		if create(grantee("team-a", image("evil.example/cache:1"))) == nil {
			return errors.New("still admitted")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	type admission struct {
		cn      *v1alpha1.CacheNode
		refusal string // a part of the refusal; "" when admitted
	}
	check := func(when string, cases []admission) {
		t.Helper()
		for _, tc := range cases {
			err := create(tc.cn)
			switch {
			case tc.refusal == "" && err != nil:
				t.Errorf("%s: %s/%+v refused: %v", when, tc.cn.Namespace, tc.cn.Spec, err)
			case tc.refusal != "" && err == nil:
				t.Errorf("%s: %s/%+v admitted, want %q", when, tc.cn.Namespace, tc.cn.Spec, tc.refusal)
			case tc.refusal != "" && !strings.Contains(err.Error(), tc.refusal):
				t.Errorf("%s: the refusal does not say %q: %v", when, tc.refusal, err)
			}
		}
	}

	check("by default", []admission{
		{grantee("team-a"), ""},
		{grantee("team-a", image("evil.example/cache:1")), "spec.image: evil.example/cache:1 is not among the images the cluster admin grants namespace team-a (ConfigMap edgepool-system/edgepool-grants, key images): none; leave spec.image unset for the operator's cache image"},
		{grantee("team-a", hostNetwork), "spec.hostNetwork: the node's network is not among what the cluster admin grants namespace team-a (ConfigMap edgepool-system/edgepool-grants, key hostNetwork)"},
		{grantee("team-a", toleration("node-role.kubernetes.io/control-plane")), "spec.tolerations: node-role.kubernetes.io/control-plane is not among the taints the cluster admin grants namespace team-a (ConfigMap edgepool-system/edgepool-grants, key tolerations): none"},
		{grantee("team-a", priorityClass("system-node-critical")), "spec.priorityClassName: system-node-critical is not among the priority classes the cluster admin grants namespace team-a (ConfigMap edgepool-system/edgepool-grants, key priorityClasses): none"},
		{grantee("team-a", serviceAnnotation("metallb.universe.tf/loadBalancerIPs")), "spec.service.annotations: metallb.universe.tf/loadBalancerIPs is not among the annotations the cluster admin grants namespace team-a (ConfigMap edgepool-system/edgepool-grants, key serviceAnnotationPrefixes): none"},
	})

	param := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "edgepool-system", Name: "edgepool-grants"}, param); err != nil {
		t.Fatal(err)
	}
	param.Data = map[string]string{
		"diskPrefixes":              "/mnt,/data",
		"images":                    "registry.example/edge/,registry.example/cache@,registry.example/pinned:1.0",
		"tolerations":               "example.com/edge",
		"priorityClasses":           "edge-cache",
		"serviceAnnotationPrefixes": "service.beta.kubernetes.io/,metallb.universe.tf/address-pool",
		"team-a.hostNetwork":        "true",
		"team-a.tolerations":        "*",
		"team-c.diskPrefixes":       "/mnt/team-c",
		"team-a.images":             "",
	}
	if err := k8s.Update(ctx, param); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Eventually(waitCtx(t), 100*time.Millisecond, "the grants to apply", func() error {
		return create(grantee("team-b", toleration("example.com/edge")))
	}); err != nil {
		t.Fatal(err)
	}
	check("granted", []admission{
		{grantee("team-b", image("registry.example/edge/cache:2")), ""},
		{grantee("team-b", image("registry.example/cache@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")), ""},
		{grantee("team-b", image("registry.example/pinned:1.0")), ""},
		{grantee("team-b", image("registry.example/pinned:1.01")), "spec.image: registry.example/pinned:1.01 is not among the images"},
		{grantee("team-b", image("registry.example/edge-evil/cache:2")), "registry.example/edge/, registry.example/cache@, registry.example/pinned:1.0"},
		{grantee("team-b", image("registry.example/cache:2")), "spec.image: registry.example/cache:2"},
		{grantee("team-b", hostNetwork), "spec.hostNetwork"},
		{grantee("team-a", hostNetwork), ""},
		{grantee("team-b", toleration("example.com/edge"), toleration("example.com/other")), "spec.tolerations: example.com/other is not among the taints the cluster admin grants namespace team-b (ConfigMap edgepool-system/edgepool-grants, key tolerations): example.com/edge"},
		{grantee("team-b", toleration("")), "spec.tolerations: (every taint)"},
		{grantee("team-a", toleration(""), toleration("example.com/other")), ""},
		{grantee("team-b", priorityClass("edge-cache")), ""},
		{grantee("team-b", priorityClass("system-node-critical")), "spec.priorityClassName: system-node-critical"},
		{grantee("team-b", serviceAnnotation("service.beta.kubernetes.io/aws-load-balancer-type")), ""},
		{grantee("team-b", serviceAnnotation("metallb.universe.tf/address-pool")), ""},
		{grantee("team-b", serviceAnnotation("metallb.universe.tf/loadBalancerIPs")), "spec.service.annotations: metallb.universe.tf/loadBalancerIPs"},
		// A namespace's own key replaces the cluster-wide one: narrower for disks...
		{grantee("team-b", diskPath("/data/hdd0")), ""},
		{grantee("team-c", diskPath("/data/hdd0")), "spec.disks: /data/hdd0 must lie under a prefix the cluster admin allows: /mnt/team-c"},
		{grantee("team-c", diskPath("/mnt/hdd0")), "spec.disks: /mnt/hdd0 must lie under a prefix the cluster admin allows: /mnt/team-c"},
		{grantee("team-c", diskPath("/mnt/team-c/hdd0")), ""},
		// ...and empty for team-a's images.
		{grantee("team-a", image("registry.example/edge/cache:2")), "spec.image: registry.example/edge/cache:2 is not among the images the cluster admin grants namespace team-a (ConfigMap edgepool-system/edgepool-grants, key images): none"},
	})

	// Updates are checked when they change a granted field, so a grant taken back never
	// blocks the operator's own writes (its finalizer), but does block a new use.
	cn := grantee("team-b", toleration("example.com/edge"))
	if err := k8s.Create(ctx, cn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cn.Finalizers = nil
		_ = k8s.Update(context.Background(), cn)
		_ = k8s.Delete(context.Background(), cn)
	})
	delete(param.Data, "tolerations")
	if err := k8s.Update(ctx, param); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Eventually(waitCtx(t), 100*time.Millisecond, "the grant to be taken back", func() error {
		if create(grantee("team-b", toleration("example.com/edge"))) == nil {
			return errors.New("still admitted")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cn.Finalizers = []string{"cache.edgepool.io/test"}
	if err := k8s.Update(ctx, cn); err != nil {
		t.Errorf("an update that leaves the granted fields alone was refused: %v", err)
	}
	changed := cn.DeepCopy()
	changed.Spec.Tolerations[0].Key = "example.com/edge2"
	if err := k8s.Update(ctx, changed, client.DryRunAll); err == nil || !strings.Contains(err.Error(), "spec.tolerations: example.com/edge2") {
		t.Errorf("an update to a toleration no longer granted: %v, want refused", err)
	}

	// Without the ConfigMap nothing is granted: the API server refuses every CacheNode
	// write until it is back (the chart installs it before the policies and removes it after).
	if err := k8s.Delete(ctx, param); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Eventually(waitCtx(t), 100*time.Millisecond, "an image to be refused without the grants", func() error {
		if create(grantee("team-b", image("registry.example/edge/cache:2"))) == nil {
			return errors.New("still admitted")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	check("without the ConfigMap", []admission{
		{grantee("team-a", hostNetwork), "no params found for policy binding with `Deny` parameterNotFoundAction"},
	})
}
