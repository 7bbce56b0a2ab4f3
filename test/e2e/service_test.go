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
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// nodeCurl fetches url from inside the node (its network namespace, where kube-proxy's
// rules are) and returns X-Cache-Status, or the error curl gave.
func nodeCurl(url string) (string, error) {
	out, err := node.run("exec", "curl", "-sS", "-o", "/dev/null", "-D", "-", "--max-time", "2",
		"-H", "Host: "+siteHost, url)
	if err != nil {
		return "", fmt.Errorf("%v: %s", err, strings.TrimSpace(out))
	}
	if !strings.HasPrefix(out, "HTTP/1.1 200") {
		return "", fmt.Errorf("not a 200: %s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "X-Cache-Status") {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("no X-Cache-Status: %s", out)
}

// hostGet fetches url from this machine, as a client outside the cluster would, and
// returns X-Cache-Status.
func hostGet(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	r, err := testkit.Fetch(ctx, http.DefaultClient, url, http.Header{"Host": {siteHost}})
	if err != nil {
		return "", err
	}
	if r.Code != http.StatusOK {
		return "", fmt.Errorf("status %d", r.Code)
	}
	return r.Header.Get("X-Cache-Status"), nil
}

// sliceReady says whether the Service's EndpointSlices list pod ip, and as ready.
func sliceReady(g Gomega, ns, service, ip string) (listed, ready bool) {
	slices := &discoveryv1.EndpointSliceList{}
	g.Expect(k8s.List(context.Background(), slices, client.InNamespace(ns),
		client.MatchingLabels{discoveryv1.LabelServiceName: service})).To(Succeed())
	for _, s := range slices.Items {
		for _, e := range s.Endpoints {
			for _, a := range e.Addresses {
				if a == ip {
					return true, e.Conditions.Ready != nil && *e.Conditions.Ready
				}
			}
		}
	}
	return false, false
}

// TestRealNodeService: a NodePort Service with externalTrafficPolicy Local in front of a
// real cache pod, with kube-proxy (iptables mode) in the node's network namespace. The
// ClusterIP (from inside the node) and the node port (from this machine, a client outside
// the cluster) answer from the cache, the client's address kept; with every disk out the
// pod turns unready, its EndpointSlice says so, and the Service stops routing to it while
// the pod itself still answers, from the origin; with the disks back, it routes again.
func TestRealNodeService(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	origin, _ := newOrigin(t, "origin")
	cn := realCacheNode(t, ns, "svc", origin)
	cn.Spec.Service = &v1alpha1.CacheNodeService{Type: v1alpha1.ServiceTypeNodePort,
		ExternalTrafficPolicy: v1alpha1.ExternalTrafficPolicyLocal}
	cn.Spec.AccessLogPercent = 100           // the access lines name the client's address
	cn.Spec.DiskFailover.CooldownSeconds = 5 // disks back in 5 s instead of a minute
	created := time.Now()
	pod, direct := runCache(t, g, cn)
	t.Logf("CacheNode created -> cache pod Ready: %s", time.Since(created).Round(10*time.Millisecond))

	svc := &corev1.Service{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: cn.Name}, svc)).To(Succeed())
		got := getCacheNode(g, ns, cn.Name)
		g.Expect(got.Status.Service.Name).To(Equal(cn.Name))
	}, timeout, interval).Should(Succeed())
	g.Expect(svc.Spec.ExternalTrafficPolicy).To(Equal(corev1.ServiceExternalTrafficPolicyLocal))
	clusterIP := fmt.Sprintf("http://%s:%d", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port)
	nodePort := fmt.Sprintf("http://%s:%d", linkNode, svc.Spec.Ports[0].NodePort)
	t.Logf("Service %s: ClusterIP %s, node port %s, pod %s at %s", svc.Name, clusterIP, nodePort, pod.Name, direct)

	// Both ways in reach the cache: a MISS filled from the origin, then HITs.
	var first string
	g.Eventually(func() error { var err error; first, err = nodeCurl(clusterIP + "/via-service"); return err },
		timeout, interval).Should(Succeed(), "kube-proxy's log: %s", kubeProxyLog())
	t.Logf("ClusterIP answers from inside the node %s after the CacheNode was created: %s", time.Since(created).Round(10*time.Millisecond), first)
	g.Expect(first).To(Equal("MISS"))
	g.Expect(nodeCurl(clusterIP + "/via-service")).To(Equal("HIT"))
	g.Eventually(func() (string, error) { return hostGet(nodePort + "/via-service") }, timeout, interval).Should(Equal("HIT"))
	t.Logf("node port answers from this machine: HIT")

	// externalTrafficPolicy Local: no SNAT, so the cache saw this machine's address.
	g.Eventually(func(g Gomega) {
		logs, err := kubectl("logs", "-n", ns, pod.Name, "-c", "cache")
		g.Expect(err).NotTo(HaveOccurred(), logs)
		var line string
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, `"remote_addr":"`+linkHost+`"`) && strings.Contains(l, "/via-service") {
				line = l
			}
		}
		g.Expect(line).NotTo(BeEmpty(), "no access line from %s", linkHost)
		t.Logf("access line of the request through the node port: %s", line)
	}, timeout, interval).Should(Succeed())

	// kube-proxy's chains are the node's; the machine's tables hold none.
	rules := node.exec(t, "iptables-save", "-t", "nat")
	g.Expect(rules).To(ContainSubstring("KUBE-NODEPORTS"))
	g.Expect(rules).To(ContainSubstring(ns + "/" + cn.Name + ":http"))
	g.Expect(node.checkIsolation()).To(Succeed())

	listed, ready := sliceReady(g, ns, cn.Name, pod.Status.PodIP)
	g.Expect(listed && ready).To(BeTrue(), "EndpointSlice: listed %v, ready %v", listed, ready)

	// Every disk out: the agent's readiness fails, the pod and its endpoint turn unready.
	out := time.Now()
	remount := func(mode string) {
		for _, d := range cn.Spec.Disks {
			// The kernel refuses while a file is open for writing (the agent's probe): retried.
			g.Eventually(func() error { _, err := node.run("exec", "mount", "-o", "remount,"+mode, d.Path); return err },
				10*time.Second, 20*time.Millisecond).Should(Succeed())
		}
	}
	remount("ro")
	t.Cleanup(func() {
		for _, d := range cn.Spec.Disks {
			_, _ = node.run("exec", "mount", "-o", "remount,rw", d.Path)
		}
	})
	var podUnready, sliceUnready, serviceStopped time.Duration
	g.Eventually(func(g Gomega) {
		p := cachePod(g, ns, cn.Name)
		if podUnready == 0 && !podReady(p) {
			podUnready = time.Since(out)
		}
		listed, ready := sliceReady(g, ns, cn.Name, pod.Status.PodIP)
		if sliceUnready == 0 && listed && !ready {
			sliceUnready = time.Since(out)
		}
		g.Expect(podUnready).NotTo(BeZero())
		g.Expect(sliceUnready).NotTo(BeZero(), "the EndpointSlice lists the pod, not ready")
	}, timeout, interval).Should(Succeed())
	var viaClusterIP, viaNodePort error
	g.Eventually(func(g Gomega) {
		_, viaClusterIP = nodeCurl(clusterIP + "/while-unready")
		_, viaNodePort = hostGet(nodePort + "/while-unready")
		g.Expect(viaClusterIP).To(HaveOccurred())
		g.Expect(viaNodePort).To(HaveOccurred())
	}, timeout, interval).Should(Succeed())
	serviceStopped = time.Since(out)
	t.Logf("disks remounted read-only -> pod unready %.1fs, EndpointSlice not ready %.1fs, Service not routing %.1fs",
		podUnready.Seconds(), sliceUnready.Seconds(), serviceStopped.Seconds())
	t.Logf("  ClusterIP from the node: %v", viaClusterIP)
	t.Logf("  node port from this machine: %v", viaNodePort)
	// The pod still accepts connections at its own address: the Service, not the pod,
	// stopped taking them.
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(direct, "http://"), 2*time.Second)
	g.Expect(err).NotTo(HaveOccurred(), "the unready pod's own address")
	_ = conn.Close()
	// And answers what reaches it from the origin, uncached (the agent mapped every key to
	// no disk): never less available than the origin.
	g.Eventually(func() error {
		status, err := hostGet(direct + "/while-unready")
		if err == nil && status != "" {
			err = fmt.Errorf("X-Cache-Status %q, want none: nothing is cached with every disk out", status)
		}
		return err
	}, 15*time.Second, interval).Should(Succeed(), "a request at the unready pod's own address")

	// Disks back: ready again after the cool-down, and routed to again.
	back := time.Now()
	remount("rw")
	var podReadyAgain, sliceReadyAgain time.Duration
	g.Eventually(func(g Gomega) {
		if podReadyAgain == 0 && podReady(cachePod(g, ns, cn.Name)) {
			podReadyAgain = time.Since(back)
		}
		if _, ready := sliceReady(g, ns, cn.Name, pod.Status.PodIP); sliceReadyAgain == 0 && ready {
			sliceReadyAgain = time.Since(back)
		}
		g.Expect(podReadyAgain).NotTo(BeZero())
		g.Expect(sliceReadyAgain).NotTo(BeZero())
	}, timeout, interval).Should(Succeed())
	g.Eventually(func() error { _, err := nodeCurl(clusterIP + "/after"); return err }, timeout, interval).Should(Succeed())
	g.Eventually(func() error { _, err := hostGet(nodePort + "/after"); return err }, timeout, interval).Should(Succeed())
	t.Logf("disks writable again (cool-down 5s) -> pod Ready %.1fs, EndpointSlice ready %.1fs, Service routing %.1fs",
		podReadyAgain.Seconds(), sliceReadyAgain.Seconds(), time.Since(back).Seconds())
	g.Expect(cachePod(g, ns, cn.Name).UID).To(Equal(pod.UID), "the pod was replaced")

	// spec.service removed: the operator deletes its Service, and kube-proxy its rules.
	updateCacheNode(g, ns, cn.Name, func(cn *v1alpha1.CacheNode) { cn.Spec.Service = nil })
	g.Eventually(func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(svc), &corev1.Service{}))
	}, timeout, interval).Should(BeTrue())
	g.Eventually(func() string { return node.exec(t, "iptables-save", "-t", "nat") }, timeout, interval).
		ShouldNot(ContainSubstring(ns + "/" + cn.Name + ":http"))
}

// kubeProxyLog is the end of the node's kube-proxy log, to say why a Service did not answer.
func kubeProxyLog() string {
	data, err := os.ReadFile(filepath.Join(node.dir, "logs", "kube-proxy.log"))
	if err != nil {
		return err.Error()
	}
	if len(data) > 3000 {
		data = data[len(data)-3000:]
	}
	return string(data)
}

// The operator's ClusterRole may create, patch and delete ConfigMaps, DaemonSets,
// NetworkPolicies and Services, for its CacheNodes; the ValidatingAdmissionPolicy in
// config/rbac lets its ServiceAccount write only such objects labelled as edgepool's and
// controlled by a CacheNode, and change or delete only those that were edgepool's.
func TestOperatorMayOnlyWriteItsServices(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	for _, f := range []string{"role.yaml", "role_binding.yaml", "owned_objects_policy.yaml"} {
		file := filepath.Join(root, "config", "rbac", f)
		out, err := kubectl("apply", "--server-side", "-f", file)
		g.Expect(err).NotTo(HaveOccurred(), out)
		t.Cleanup(func() { _, _ = kubectl("delete", "--ignore-not-found", "-f", file) })
	}
	// The ServiceAccount of config/manager, as the operator's requests arrive.
	asOperator := func(args ...string) (string, error) {
		return kubectl(append([]string{"--as=system:serviceaccount:edgepool-system:edgepool-manager", "-n", ns}, args...)...)
	}
	theirs := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: ns},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	g.Expect(k8s.Create(ctx, theirs)).To(Succeed())
	cn := nvmeCacheNode(ns, "owner", "service-policy") // selects no node: it only owns
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())

	// The policy takes effect once the API server has loaded it: until then a probe (a new
	// Service each time) goes through.
	probe := 0
	g.Eventually(func() string {
		probe++
		out, _ := asOperator("create", "service", "clusterip", fmt.Sprintf("probe-%d", probe), "--tcp=80")
		return out
	}, timeout, interval).Should(ContainSubstring("may write only services labelled app.kubernetes.io/managed-by=edgepool and controlled by a CacheNode"))

	manifest := func(name string, owned bool) string {
		svc := map[string]any{"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]string{"app.kubernetes.io/managed-by": "edgepool"}},
			"spec":     map[string]any{"ports": []map[string]any{{"port": 80}}}}
		if owned {
			svc["metadata"].(map[string]any)["ownerReferences"] = []map[string]any{{"apiVersion": "cache.edgepool.io/v1alpha1",
				"kind": "CacheNode", "name": cn.Name, "uid": string(cn.UID), "controller": true}}
		}
		data, err := json.Marshal(svc)
		g.Expect(err).NotTo(HaveOccurred())
		file := filepath.Join(t.TempDir(), name+".json")
		g.Expect(os.WriteFile(file, data, 0o644)).To(Succeed())
		return file
	}
	// The other kinds it writes: a DaemonSet and a ConfigMap of someone else's.
	theirDS := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: ns}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "theirs"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "theirs"}},
			Spec: corev1.PodSpec{NodeSelector: map[string]string{"edgepool.test/group": "none"}, Containers: []corev1.Container{{Name: "c", Image: "theirs:1"}}}},
	}}
	g.Expect(k8s.Create(ctx, theirDS)).To(Succeed())
	theirCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Namespace: ns}, Data: map[string]string{"k": "v"}}
	g.Expect(k8s.Create(ctx, theirCM)).To(Succeed())
	for _, denied := range [][]string{
		{"delete", "service", "theirs"},
		{"label", "service", "theirs", "app.kubernetes.io/managed-by=edgepool"},
		{"annotate", "service", "theirs", "edgepool.io/applied-hash=x"},
		{"apply", "--server-side", "-f", manifest("labelled-not-owned", false)},
		// (RBAC already keeps it from deleting DaemonSets and ConfigMaps.)
		{"patch", "daemonset", "theirs", "--type=merge", "-p", `{"spec":{"template":{"spec":{"hostNetwork":true}}}}`},
		{"patch", "configmap", "theirs", "--type=merge", "-p", `{"data":{"k":"x"}}`},
	} {
		out, err := asOperator(denied...)
		g.Expect(err).To(HaveOccurred(), "%v was allowed: %s", denied, out)
		g.Expect(out).To(ContainSubstring("ValidatingAdmissionPolicy"), "%v", denied)
	}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(theirs), theirs)).To(Succeed())
	g.Expect(theirs.Labels).To(BeEmpty())

	// What the operator does to its own Services goes through.
	ours := manifest("ours", true)
	for _, allowed := range [][]string{
		{"apply", "--server-side", "--field-manager=edgepool", "-f", ours},
		{"annotate", "service", "ours", "edgepool.io/applied-hash=x"},
		{"delete", "service", "ours"},
	} {
		out, err := asOperator(allowed...)
		g.Expect(err).NotTo(HaveOccurred(), "%v was denied: %s", allowed, out)
	}
}
