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
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

var chart = filepath.Join("..", "..", "charts", "edgepool")

// helm runs helm against the e2e cluster, with its caches in the run's folder.
func helm(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(envOr("HELM_BIN", filepath.Join(root, "bin", "k8s-v1.36.3")), "helm")
	home := filepath.Join(filepath.Dir(kubeconfig), "helm")
	cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	// HOME too: helm's Kubernetes client keeps a discovery cache under $HOME/.kube.
	cmd.Env = append(os.Environ(), "HOME="+home, "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func namedNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := k8s.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
}

// serverDryRun applies manifests with a server-side dry-run: the API server checks them
// against its schemas (the CRD's included) and admission, and stores nothing.
func serverDryRun(t *testing.T, manifests string, extra ...string) {
	t.Helper()
	cmd := exec.Command(kubectlBin, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(filepath.Dir(kubeconfig), "kube-cache"),
		"apply", "--server-side", "--dry-run=server", "--field-manager=e2e"}, extra...)...)
	cmd.Stdin = strings.NewReader(manifests)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("server-side dry-run failed: %v\n%s", err, out)
	} else {
		t.Logf("server-side dry-run:\n%s", out)
	}
}

func TestHelmLint(t *testing.T) {
	t.Parallel()
	for _, values := range []string{"", "testdata/values-full.yaml"} {
		args := []string{"lint", "--strict", chart}
		if values != "" {
			args = append(args, "-f", values)
		}
		if out, err := helm(t, "", args...); err != nil {
			t.Errorf("helm lint %s: %v\n%s", values, err, out)
		}
	}
}

// TestHelmTemplateAgainstAPIServer renders the chart with default and with full values
// and has the API server check every object.
func TestHelmTemplateAgainstAPIServer(t *testing.T) {
	t.Parallel()
	namedNamespace(t, "helm-default")
	namedNamespace(t, "helm-full")
	namedNamespace(t, "helm-full-other")
	for ns, values := range map[string]string{"helm-default": "", "helm-full": "testdata/values-full.yaml"} {
		args := []string{"template", "edgepool", chart, "--kube-version", "v1.36.3", "--namespace", ns, "--include-crds"}
		if values != "" {
			args = append(args, "-f", values)
		}
		out, err := helm(t, "", args...)
		if err != nil {
			t.Fatalf("helm template %s: %v\n%s", values, err, out)
		}
		serverDryRun(t, out, "-f", "-")
	}

	out, err := helm(t, "", "template", "edgepool", chart, "--kube-version", "v1.36.3",
		"--set", "metrics.serviceMonitor.enabled=true,metrics.podMonitor.enabled=true,metrics.prometheusRule.enabled=true")
	for _, kind := range []string{"ServiceMonitor", "PodMonitor", "PrometheusRule"} {
		if err != nil || !strings.Contains(out, "kind: "+kind) {
			t.Errorf("a %s was not rendered: %v\n%s", kind, err, out)
		}
	}
	// The alerts reach Prometheus as written: Helm leaves their {{ $labels }} alone.
	if !strings.Contains(out, "{{ $labels.cachenode }}") || !strings.Contains(out, "replacement: edgepool-cache") {
		t.Errorf("the PrometheusRule or the PodMonitor lost their content:\n%s", out)
	}
	out, err = helm(t, "", "template", "edgepool", chart, "--kube-version", "v1.36.3", "--set", "networkPolicy.enabled=false,podDisruptionBudget.enabled=false")
	if err != nil || strings.Contains(out, "kind: NetworkPolicy") || strings.Contains(out, "kind: PodDisruptionBudget") {
		t.Errorf("disabled objects were rendered: %v", err)
	}
}

// TestHelmTemplatePassesAgentAccess: the operator is told its namespace, its pods' labels
// and the scrapers of the values, which its CacheNodes' NetworkPolicies admit to the cache
// pods' agent port.
func TestHelmTemplatePassesAgentAccess(t *testing.T) {
	t.Parallel()
	out, err := helm(t, "", "template", "edge", chart, "--kube-version", "v1.36.3", "--namespace", "edge-system", "-f", "testdata/values-full.yaml")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	for _, want := range []string{
		"- --operator-namespace=edge-system\n",
		"- --operator-pod-labels=app.kubernetes.io/component=manager,app.kubernetes.io/instance=edge,app.kubernetes.io/name=edgepool\n",
		`- "--agent-scraper=namespace:kubernetes.io/metadata.name=monitoring,pod:app.kubernetes.io/name=prometheus"` + "\n",
		`- "--agent-scraper=namespace:edgepool.example/scrape=true"` + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the Deployment lacks %q", strings.TrimSpace(want))
		}
	}
	out, err = helm(t, "", "template", "edge", chart, "--kube-version", "v1.36.3")
	if err != nil || strings.Contains(out, "--agent-scraper") || !strings.Contains(out, "--operator-namespace=default") {
		t.Errorf("default values: want the operator's namespace and no scraper: %v\n%s", err, out)
	}
}

// TestHelmValuesSchemaRejectsBadValues: values.schema.json stops bad values with a message
// naming them.
func TestHelmValuesSchemaRejectsBadValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ values, want string }{
		{"replicas: two", "replicas"},
		{"replicas: 0", "replicas"},
		{"replica: 2", "replica"},
		{"operator: {logLevel: verbose}", "logLevel"},
		{"operator: {agentPollInterval: soon}", "agentPollInterval"},
		{"metrics: {port: 80}", "port"},
		{"cacheNodes: [{name: edge}]", "spec"},
		{"cacheNodes: [{name: Edge_1, spec: {disks: [], origin: {}}}]", "name"},
		{"operator: {agentScrapers: [{podLabels: {app: prometheus}}]}", "namespaceLabels"},
		{"operator: {agentScrapers: [{namespaceLabels: {}}]}", "namespaceLabels"},
		{"operator: {agentScrapers: [{namespaceLabels: {team: 'a,pod:x=y'}}]}", "namespaceLabels"},
	} {
		out, err := helm(t, tc.values, "template", "edgepool", chart, "--kube-version", "v1.36.3", "-f", "-")
		if err == nil {
			t.Errorf("values %q were accepted", tc.values)
			continue
		}
		if !strings.Contains(out, "values don't meet the specifications of the schema") || !strings.Contains(out, tc.want) {
			t.Errorf("values %q: the message does not name %q:\n%s", tc.values, tc.want, out)
		}
	}
}

// TestHelmInstallUpgradeUninstall installs the chart for real, with a CacheNode from
// values, upgrades it and uninstalls it.
func TestHelmInstallUpgradeUninstall(t *testing.T) {
	// Not in parallel: while the release installs or uninstalls, its cluster-wide grants
	// binding may exist without its parameters, and then denies every CacheNode write in
	// the cluster (another test's CacheNode failed so).
	g := NewWithT(t)
	ctx := context.Background()
	newNode(t, "helm-node", "helm", map[string]string{"disk.edgepool.io/nvme": "1", "disk.edgepool.io/hdd": "1"})
	const ns = "helm-release"
	t.Cleanup(func() {
		_, _ = helm(t, "", "uninstall", "edge", "--namespace", ns)
		_ = k8s.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	values := `cacheNodes:
  - name: from-helm
    spec:
      nodeSelector: {edgepool.test/group: helm}
      disks:
        - {name: nvme0, path: /mnt/nvme0, media: NVMe, size: 10Gi}
        - {name: hdd0, path: /mnt/hdd0, media: HDD, size: 100Gi}
      origin: {servers: ["127.0.0.1:9000"]}
`
	out, err := helm(t, values, "install", "edge", chart, "--namespace", ns, "--create-namespace", "-f", "-", "--wait", "--timeout", "2m")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(out).To(ContainSubstring("This release created 1 CacheNode(s)"))
	deploy := &appsv1.Deployment{}
	// helm's --wait watches the pods; the Deployment's status follows when its controller
	// next writes it.
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "edge-edgepool"}, deploy)).To(Succeed())
		g.Expect(deploy.Status.AvailableReplicas).To(BeEquivalentTo(1), "the operator Deployment is available")
	}, timeout, interval).Should(Succeed())
	g.Expect(deploy.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--cache-image=edgepool/cache:0.1.0"),
		"the cache image is the chart's, at its appVersion")
	// Leader election records an event in the release's namespace when it takes the lead
	// (refused, the operator logged "events is forbidden"); nothing more there.
	for verb, want := range map[string]string{"create": "yes", "patch": "yes", "delete": "no", "update": "no"} {
		out, _ := kubectl("auth", "can-i", verb, "events", "-n", ns, "--as=system:serviceaccount:"+ns+":edge-edgepool")
		g.Expect(strings.TrimSpace(out)).To(Equal(want), "%s events", verb)
	}
	// The release's grants: by default a CacheNode may not pick its image.
	g.Eventually(func() string {
		cn := &v1alpha1.CacheNode{ObjectMeta: metav1.ObjectMeta{Name: "own-image", Namespace: ns}, Spec: v1alpha1.CacheNodeSpec{
			Image:  "evil.example/cache:1",
			Disks:  []v1alpha1.Disk{{Name: "nvme0", Path: "/mnt/nvme0", Media: v1alpha1.MediaNVMe, Size: resource.MustParse("10Gi")}},
			Origin: v1alpha1.Origin{Servers: []string{"127.0.0.1:9000"}},
		}}
		if err := k8s.Create(ctx, cn, client.DryRunAll); err != nil {
			return err.Error()
		}
		return "admitted"
	}, timeout, interval).Should(ContainSubstring("spec.image: evil.example/cache:1 is not among the images the cluster admin grants namespace " + ns +
		" (ConfigMap " + ns + "/edge-edgepool-grants, key images): none"))
	g.Eventually(func(g Gomega) {
		cn := &v1alpha1.CacheNode{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "from-helm"}, cn)).To(Succeed())
		g.Expect(cn.Status.ReadyNodes).To(BeEquivalentTo(1))
	}, timeout, interval).Should(Succeed(), "the CacheNode from values is reconciled (by the e2e suite's operator)")

	// Scale out and change the NetworkPolicy: an upgrade that needs no pod to terminate
	// (kwok, like a kubelet, lets each one take its grace period).
	out, err = helm(t, values, "upgrade", "edge", chart, "--namespace", ns, "-f", "-",
		"--set", "replicas=2,networkPolicy.apiServerPorts={6443}", "--wait", "--timeout", "2m")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "edge-edgepool"}, deploy)).To(Succeed())
	g.Expect(deploy.Status.AvailableReplicas).To(BeEquivalentTo(2))
	policy := &networkingv1.NetworkPolicy{}
	g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "edge-edgepool"}, policy)).To(Succeed())
	g.Expect(policy.Spec.Egress[0].Ports).To(HaveLen(1))

	out, err = helm(t, "", "uninstall", "edge", "--namespace", ns, "--timeout", "2m")
	g.Expect(err).NotTo(HaveOccurred(), out)
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "edge-edgepool"}, &appsv1.Deployment{}))
	}, timeout, interval).Should(BeTrue())
	g.Expect(apierrors.IsNotFound(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "from-helm"}, &v1alpha1.CacheNode{}))).To(BeTrue())
}

// TestKustomizeAgainstAPIServer: config/default (what `make deploy` applies) passes a
// server-side dry-run.
func TestKustomizeAgainstAPIServer(t *testing.T) {
	t.Parallel()
	namedNamespace(t, "edgepool-system")
	serverDryRun(t, "", "-k", filepath.Join(root, "config", "default"))
	serverDryRun(t, "", "-k", filepath.Join(root, "config", "samples"), "--namespace", "edgepool-system")
}
