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

// Package e2e runs the operator as a process against a real control plane (kwok's binary
// runtime: etcd, kube-apiserver, kube-controller-manager, kube-scheduler) with fake nodes,
// so placement, rollouts and garbage collection are done by the real Kubernetes components.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/internal/test/testkit"
	"github.com/edgepool/edgepool/internal/test/testkit/clusterslot"
	"github.com/edgepool/edgepool/internal/test/testkit/kwokcluster"
)

var (
	root       string // the repository
	kubectlBin string
	kubeconfig string
	k8s        client.Client
	operator   *operatorProc
	workDir    string // the suite's work folder (tmp/e2e)
	// controlPlane is the kwok cluster, for the one test that stops it.
	controlPlane *kwokcluster.Cluster
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	var err error
	if root, err = filepath.Abs(filepath.Join("..", "..")); err != nil {
		return 0, err
	}
	kubeBin := envOr("KUBE_BIN", filepath.Join(root, "bin", "k8s-v1.36.3"))
	kwokBin := envOr("KWOK_BIN", filepath.Join(root, "bin", "k8s-v1.36.3"))
	kubectlBin = filepath.Join(kubeBin, "kubectl")
	for _, f := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "etcd"} {
		if _, err := os.Stat(filepath.Join(kubeBin, f)); err != nil {
			return 0, fmt.Errorf("%v: run `make test` or `make cluster-tools`, which build the cluster's binaries", err)
		}
	}
	work := filepath.Join(root, "tmp", "e2e")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return 0, err
	}
	manager := filepath.Join(work, "manager")
	if err := testkit.GoBuild(context.Background(), root, manager, "./cmd/manager"); err != nil {
		return 0, err
	}

	// The stand-in for cert-manager's Certificate CRD (test/crds): the operator looks for it
	// when it starts, and announces renewals its Certificates record.
	cluster, err := kwokcluster.Start(context.Background(), kwokcluster.Options{Slot: clusterslot.E2E, Work: work,
		RepoRoot: root, KubeBin: kubeBin, KwokBin: kwokBin, CRDs: []string{filepath.Join(root, "test", "crds")}})
	if err != nil {
		return 0, err
	}
	defer cluster.Stop()
	kubeconfig, k8s, controlPlane = cluster.Kubeconfig, cluster.Client, cluster

	operator = &operatorProc{binary: manager, log: filepath.Join(work, "operator.log")}
	if err := operator.start(); err != nil {
		return 0, err
	}
	defer operator.stop()

	workDir = work
	if node, err = startRealNode(clusterslot.E2E.RealNodes[0], filepath.Join(work, "node")); err != nil {
		return 0, err
	}
	defer node.stop()
	fmt.Printf("e2e: real node %s Ready %s after node.sh up\n", realNodeName, node.readyAfter.Round(10*time.Millisecond))
	code := m.Run()
	// Checked again now that pods have come and gone on the node.
	if err := node.checkIsolation(); err != nil {
		return 0, err
	}
	return code, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// kubectl runs kubectl against the e2e cluster and returns its combined output.
func kubectl(args ...string) (string, error) {
	var out bytes.Buffer
	// The discovery cache stays in the run's folder, not in ~/.kube.
	cmd := exec.Command(kubectlBin, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", filepath.Join(filepath.Dir(kubeconfig), "kube-cache")}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// operatorProc is the operator, run as its own process so a test can kill it.
type operatorProc struct {
	binary, log string
	mu          sync.Mutex
	p           *testkit.Process
}

func (o *operatorProc) start() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	logFile, err := os.OpenFile(o.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the operator has a descriptor of its own
	cmd := exec.Command(o.binary, "--kubeconfig", kubeconfig, "--metrics-bind-address=0",
		"--health-probe-bind-address=0", "--agent-poll-interval=5s")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	o.p, err = testkit.Start(cmd)
	return err
}

// kill stops the operator abruptly, as a crash or an evicted pod would.
func (o *operatorProc) kill() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.p.Kill()
}

func (o *operatorProc) stop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	_ = o.p.Stop(20 * time.Second)
}

// newNamespace creates a namespace for one test and deletes it afterwards. Its Pod
// Security level is privileged, said rather than left to the cluster's default: cache pods
// mount their disks' host paths, which the baseline level refuses.
func newNamespace(t *testing.T) string {
	t.Helper()
	return newNamespaceAt(t, "privileged")
}

// newNamespaceAt creates a namespace whose pods Pod Security admission holds to level.
func newNamespaceAt(t *testing.T, level string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": level}}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), ns) })
	return ns.Name
}

// newNode creates a fake node managed by kwok in the test's group.
func newNode(t *testing.T, name, group string, labels map[string]string) {
	t.Helper()
	l := map[string]string{"type": "kwok", "edgepool.test/group": group, "kubernetes.io/hostname": name}
	for k, v := range labels {
		l[k] = v
	}
	// The capacity a kubelet would report (kwok keeps a status given at creation).
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("200Gi"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	if err := k8s.Create(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), node) })
}
