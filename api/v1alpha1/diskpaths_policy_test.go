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
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// installPolicies creates these files of config/policy (ValidatingAdmissionPolicies, their
// bindings, their parameter), and removes what they hold when the test ends.
func installPolicies(t *testing.T, files ...string) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "edgepool-system"}}
	if err := k8s.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(filepath.Join("..", "..", "config", "policy", file))
		if err != nil {
			t.Fatal(err)
		}
		decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			obj := &unstructured.Unstructured{}
			if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			if err := k8s.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = k8s.Delete(context.Background(), obj) })
		}
	}
}

func withDiskPaths(name string, paths ...string) *v1alpha1.CacheNode {
	cn := minimal(name)
	cn.Spec.Disks = cn.Spec.Disks[:0]
	for i, p := range paths {
		d := minimal(name).Spec.Disks[0]
		d.Name, d.Path = "d"+string(rune('0'+i)), p
		cn.Spec.Disks = append(cn.Spec.Disks, d)
	}
	return cn
}

// TestDiskPathAllowlist: the admission policy admits disk paths only under the prefixes
// its parameter lists, names the refused paths, follows the parameter when the cluster
// admin changes it, and leaves the check to the operator without it.
func TestDiskPathAllowlist(t *testing.T) {
	ctx := context.Background()
	installPolicies(t, "disk_paths_policy.yaml", "grants.yaml")
	create := func(cn *v1alpha1.CacheNode) error { return k8s.Create(ctx, cn, client.DryRunAll) }
	// The API server takes a moment to load a new policy.
	if err := testkit.Eventually(waitCtx(t), 100*time.Millisecond, "the policy to refuse /var/cache", func() error {
		if create(withDiskPaths("probe", "/var/cache")) == nil {
			return errors.New("still admitted")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		paths   []string
		refused string // the paths named in the refusal; "" when admitted
	}{
		{[]string{"/mnt/nvme0", "/data/hdd1", "/srv/cache/ssd"}, ""},
		{[]string{"/var"}, "/var"},
		{[]string{"/var/lib/etcd"}, "/var/lib/etcd"},
		{[]string{"/var/lib/containerd"}, "/var/lib/containerd"},
		{[]string{"/lib32"}, "/lib32"},
		{[]string{"/etc/cache"}, "/etc/cache"},
		{[]string{"/mnt"}, "/mnt"},             // the prefix itself is the node's, not a disk
		{[]string{"/mntx/disk"}, "/mntx/disk"}, // a prefix is a directory, not a string prefix
		{[]string{"/mnt/ok", "/var/lock", "/proc/x"}, "/var/lock, /proc/x"},
	} {
		err := create(withDiskPaths("paths", tc.paths...))
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%v refused: %v", tc.paths, err)
		case tc.refused != "" && err == nil:
			t.Errorf("%v admitted, want refused", tc.paths)
		case tc.refused != "" && !strings.Contains(err.Error(), "spec.disks: "+tc.refused+" must lie under a prefix the cluster admin allows: /mnt, /data, /srv"):
			t.Errorf("%v: the refusal does not name the paths and the allowlist: %v", tc.paths, err)
		}
	}

	// The cluster admin allows one more prefix.
	param := &corev1.ConfigMap{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: "edgepool-system", Name: "edgepool-grants"}, param); err != nil {
		t.Fatal(err)
	}
	param.Data["diskPrefixes"] = "/mnt,/cache"
	if err := k8s.Update(ctx, param); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Eventually(waitCtx(t), 100*time.Millisecond, "the new prefix to be allowed", func() error {
		return create(withDiskPaths("more", "/cache/nvme0"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := create(withDiskPaths("fewer", "/data/hdd1")); err == nil {
		t.Error("/data/hdd1 admitted after /data left the allowlist")
	}

	// Without its parameter the policy admits: the operator and the agent still check.
	if err := k8s.Delete(ctx, param); err != nil {
		t.Fatal(err)
	}
	if err := testkit.Eventually(waitCtx(t), 100*time.Millisecond, "a CacheNode to be admitted without the parameter", func() error {
		return create(withDiskPaths("none", "/var/cache"))
	}); err != nil {
		t.Fatal(err)
	}
}
