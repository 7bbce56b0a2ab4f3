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

// Package kwokcluster starts a kwok cluster for the benchmarks: kwokctl's binary runtime
// (kube-apiserver, etcd, kube-controller-manager with the DaemonSet controller and the
// garbage collector, kube-scheduler, kwok), where fake nodes run fake pods on loopback
// addresses, with edgepool's CRDs installed.
package kwokcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/testkit"
)

// Options configure a cluster.
type Options struct {
	// Name is the kwokctl cluster's name; Work a folder of the caller's for its files.
	Name, Work string
	// RepoRoot holds config/crd/bases. KubeBin holds kube-apiserver,
	// kube-controller-manager, kube-scheduler, kubectl and etcd; KwokBin kwok and kwokctl.
	RepoRoot, KubeBin, KwokBin string
	// PodCIDR is where kwok takes pod addresses (a loopback range of the caller's own, so
	// that no other cluster's operator reaches its agents); NodeIP the nodes' address.
	PodCIDR, NodeIP string
	// Parallelism of kwok's pod and node stages (default 8).
	Parallelism int
	// NodeLeaseSeconds is the fake nodes' lease duration (default 40, as hack/kwok.yaml).
	// A fleet of thousands renews a quarter as often: a longer lease keeps the renewals off
	// the shared CPUs, and the node lifecycle controller is given as long to wait.
	NodeLeaseSeconds int
	// QPS lifts the client limits of the controller manager, the scheduler and kwok
	// (kwokctl's --disable-qps-limits), so that thousands of pods are not paced at 20/s.
	NoQPSLimits bool
}

// Cluster is a running kwok cluster.
type Cluster struct {
	Kubeconfig string
	Config     *rest.Config
	// Client reads and writes with the core and edgepool types.
	Client client.Client
	opts   Options
	env    []string
}

// Start creates the cluster and installs the CRDs; Stop deletes it.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Parallelism == 0 {
		opts.Parallelism = 8
	}
	if opts.NodeLeaseSeconds == 0 {
		opts.NodeLeaseSeconds = 40
	}
	c := &Cluster{opts: opts, Kubeconfig: filepath.Join(opts.Work, "kubeconfig"),
		env: append(os.Environ(), "KWOK_WORKDIR="+filepath.Join(opts.Work, "kwok"), "HOME="+filepath.Join(opts.Work, "home"))}
	// kwok as hack/kwok.yaml sets it up, on addresses of its own, managing only the fake nodes.
	config := fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  cidr: %s
  nodeIP: %s
  podPlayStageParallelism: %d
  nodePlayStageParallelism: %[3]d
  nodeLeaseParallelism: %[3]d
  nodeLeaseDurationSeconds: %d
---
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
componentsPatches:
  - name: kwok-controller
    extraArgs:
      - key: manage-all-nodes
        value: "false"
      - key: manage-nodes-with-annotation-selector
        value: kwok.x-k8s.io/node=fake
`, opts.PodCIDR, opts.NodeIP, opts.Parallelism, opts.NodeLeaseSeconds)
	configFile := filepath.Join(opts.Work, "kwok.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		return nil, err
	}
	_ = c.kwokctl(ctx, "delete", "cluster", "--name", opts.Name) // left by an interrupted run
	kb := opts.KubeBin
	args := []string{"create", "cluster", "--name", opts.Name, "--runtime", "binary", "--config", configFile,
		"--kube-apiserver-binary", filepath.Join(kb, "kube-apiserver"),
		"--kube-controller-manager-binary", filepath.Join(kb, "kube-controller-manager"),
		"--kube-scheduler-binary", filepath.Join(kb, "kube-scheduler"),
		"--kwok-controller-binary", filepath.Join(opts.KwokBin, "kwok"),
		"--etcd-binary", filepath.Join(kb, "etcd"),
		"--extra-args", "kube-controller-manager=flex-volume-plugin-dir=" + filepath.Join(opts.Work, "flexvolume"),
		"--kubeconfig", c.Kubeconfig, "--timeout", "2m"}
	if opts.NodeLeaseSeconds > 40 {
		// Renewals a quarter of the lease apart: the node lifecycle controller must not
		// call a node lost between two of them.
		args = append(args, "--extra-args", fmt.Sprintf("kube-controller-manager=node-monitor-grace-period=%ds", 2*opts.NodeLeaseSeconds))
	}
	if opts.NoQPSLimits {
		args = append(args, "--disable-qps-limits")
	}
	if err := c.kwokctl(ctx, args...); err != nil {
		return nil, err
	}
	if err := c.connect(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) kwokctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.opts.KwokBin, "kwokctl"), args...)
	cmd.Env = c.env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kwokctl %s: %v: %s", args[0], err, out)
	}
	return nil
}

// RESTConfig reads a kwok cluster's kubeconfig with its certificate, key and CA inlined:
// given files, client-go reloads them in a goroutine that outlives the cluster and logs
// every failed reload once the cluster is deleted.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	if err := rest.LoadTLSFiles(cfg); err != nil {
		return nil, err
	}
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = "", "", ""
	return cfg, nil
}

// connect waits for the apiserver and installs the CRDs.
func (c *Cluster) connect(ctx context.Context) error {
	cfg, err := RESTConfig(c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 1000, 2000
	c.Config = cfg
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	if c.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	ready, cancel := testkit.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := testkit.Eventually(ready, 100*time.Millisecond, "the apiserver's /readyz", func() error {
		_, err := c.Kubectl(ctx, "get", "--raw", "/readyz")
		return err
	}); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "apply", "--server-side", "-f", filepath.Join(c.opts.RepoRoot, "config", "crd", "bases")); err != nil {
		return fmt.Errorf("install the CRDs: %w", err)
	}
	if _, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "crd/cachenodes.cache.edgepool.io", "crd/cachepurges.cache.edgepool.io", "--timeout=60s"); err != nil {
		return fmt.Errorf("install the CRDs: %w", err)
	}
	return nil
}

// Kubectl runs kubectl against the cluster and returns its output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(c.opts.KubeBin, "kubectl"),
		append([]string{"--kubeconfig", c.Kubeconfig, "--cache-dir", filepath.Join(c.opts.Work, "kube-cache")}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Metrics scrapes the apiserver's /metrics.
func (c *Cluster) Metrics(ctx context.Context) (testkit.Metrics, error) {
	out, err := c.Kubectl(ctx, "get", "--raw", "/metrics")
	if err != nil {
		return nil, err
	}
	return testkit.ParseMetrics(out)
}

// Stop deletes the cluster and stops its processes.
func (c *Cluster) Stop() {
	cmd := exec.Command(filepath.Join(c.opts.KwokBin, "kwokctl"), "delete", "cluster", "--name", c.opts.Name)
	cmd.Env = c.env
	_ = cmd.Run()
}
