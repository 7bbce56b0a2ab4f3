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

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The operator's ClusterRole may patch pods, to announce a new configuration on its cache
// pods; the ValidatingAdmissionPolicy in config/rbac lets its ServiceAccount change nothing
// of a pod but that one annotation, and only on the pods edgepool manages.
func TestOperatorMayOnlyAnnounceConfigOnItsPods(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	for _, f := range []string{"role.yaml", "role_binding.yaml", "pod_annotation_policy.yaml"} {
		file := filepath.Join(root, "config", "rbac", f)
		out, err := kubectl("apply", "--server-side", "-f", file)
		g.Expect(err).NotTo(HaveOccurred(), out)
		t.Cleanup(func() { _, _ = kubectl("delete", "--ignore-not-found", "-f", file) })
	}
	newNode(t, "policy-node", "policy", nil)
	pod := func(name string, labels map[string]string) string {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{
				NodeName:                     "policy-node",
				Containers:                   []corev1.Container{{Name: "c", Image: "edgepool/cache:0.1.0"}},
				Tolerations:                  []corev1.Toleration{{Key: realNodeTaint.Key, Operator: corev1.TolerationOpExists}},
				AutomountServiceAccountToken: ptr.To(false),
			},
		}
		g.Expect(k8s.Create(ctx, p)).To(Succeed())
		return "pod/" + name
	}
	cache := pod("cache", map[string]string{"app.kubernetes.io/managed-by": "edgepool", "app.kubernetes.io/name": "edgepool-cache"})
	other := pod("other", map[string]string{"app": "someone-else"})
	// The ServiceAccount of config/manager, as the operator's requests arrive.
	asOperator := func(args ...string) (string, error) {
		return kubectl(append([]string{"--as=system:serviceaccount:edgepool-system:edgepool-manager", "-n", ns}, args...)...)
	}

	// The policy takes effect once the API server has loaded it: until then a probe (a new
	// value each time, so no try is a no-op) goes through.
	probe := 0
	g.Eventually(func() string {
		probe++
		out, _ := asOperator("annotate", cache, "--overwrite", fmt.Sprintf("edgepool.test/probe=%d", probe))
		return out
	}, timeout, interval).Should(ContainSubstring("may change only the edgepool.io/config-hash and edgepool.io/certificate-revisions annotations"))

	out, err := asOperator("annotate", cache, "--overwrite", "edgepool.io/config-hash=abc123")
	g.Expect(err).NotTo(HaveOccurred(), "announcing a configuration must be allowed: %s", out)
	out, err = asOperator("annotate", cache, "--overwrite", "edgepool.io/certificate-revisions=shop-tls=2")
	g.Expect(err).NotTo(HaveOccurred(), "announcing a renewed certificate must be allowed: %s", out)

	for _, denied := range [][]string{
		{"patch", cache, "--type=merge", "-p", `{"spec":{"activeDeadlineSeconds":5}}`},
		{"annotate", cache, "--overwrite", "something.else/x=y"},
		{"label", cache, "--overwrite", "app.kubernetes.io/managed-by=someone"},
		{"patch", cache, "--type=json", "-p", `[{"op":"replace","path":"/spec/containers/0/image","value":"evil/image:1"}]`},
		{"annotate", other, "--overwrite", "edgepool.io/config-hash=abc123"},
	} {
		out, err := asOperator(denied...)
		g.Expect(err).To(HaveOccurred(), "%v was allowed: %s", denied, out)
		g.Expect(out).To(ContainSubstring("ValidatingAdmissionPolicy"), "%v", denied)
	}
	// Anyone else is not this policy's business.
	out, err = kubectl("-n", ns, "annotate", other, "--overwrite", "something.else/x=y")
	g.Expect(err).NotTo(HaveOccurred(), out)
}
