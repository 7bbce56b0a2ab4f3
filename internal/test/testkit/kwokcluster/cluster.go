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

// Package kwokcluster starts a local kwok cluster for the tests, the benchmarks and the demo:
// kwokctl's binary runtime (kube-apiserver, etcd, kube-controller-manager with the DaemonSet
// controller and the garbage collector, kube-scheduler, kwok), where fake nodes run fake pods
// on loopback addresses, with edgepool's CRDs installed. Each cluster runs in a slot of its
// own (package clusterslot), so clusters started at once share no port and no address.
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
	"github.com/edgepool/edgepool/internal/test/testkit"
	"github.com/edgepool/edgepool/internal/test/testkit/clusterslot"
)

// Options configure a cluster.
type Options struct {
	// Slot is the cluster's name, ports and addresses on this machine.
	Slot clusterslot.Slot
	// Work is a folder of the caller's for the cluster's files.
	Work string
	// RepoRoot holds config/crd/bases. KubeBin holds kube-apiserver,
	// kube-controller-manager, kube-scheduler, kubectl and etcd; KwokBin kwok and kwokctl.
	RepoRoot, KubeBin, KwokBin string
	// CRDs are more folders or files of CRDs to install beside edgepool's.
	CRDs []string
	// Kwok tunes kwok for the cluster's size.
	Kwok clusterslot.KwokSettings
	// NoQPSLimits lifts the client limits of the controller manager, the scheduler and kwok
	// (kwokctl's --disable-qps-limits), so that thousands of pods are not paced at 20/s.
	NoQPSLimits bool
	// QPS and Burst of the returned client (default 1000 and 2000).
	QPS   float32
	Burst int
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
	c := &Cluster{opts: opts, Kubeconfig: filepath.Join(opts.Work, "kubeconfig"),
		// kwokctl keeps a discovery cache under $HOME/.kube: a home in the run's folder.
		env: append(os.Environ(), "KWOK_WORKDIR="+filepath.Join(opts.Work, "kwok"), "HOME="+filepath.Join(opts.Work, "home"))}
	configFile := filepath.Join(opts.Work, "kwok.yaml")
	if err := os.WriteFile(configFile, []byte(opts.Slot.KwokConfig(opts.Kwok)), 0o644); err != nil {
		return nil, err
	}
	_ = c.kwokctl(ctx, "delete", "cluster", "--name", opts.Slot.Name) // left by an interrupted run
	if err := opts.Slot.CheckPortsFree(); err != nil {
		return nil, err
	}
	kb := opts.KubeBin
	args := []string{"create", "cluster", "--name", opts.Slot.Name, "--runtime", "binary", "--config", configFile,
		"--kube-apiserver-binary", filepath.Join(kb, "kube-apiserver"),
		"--kube-controller-manager-binary", filepath.Join(kb, "kube-controller-manager"),
		"--kube-scheduler-binary", filepath.Join(kb, "kube-scheduler"),
		"--kwok-controller-binary", filepath.Join(opts.KwokBin, "kwok"),
		"--etcd-binary", filepath.Join(kb, "etcd"),
		// Not the default under /usr/libexec, which is the machine's.
		"--extra-args", "kube-controller-manager=flex-volume-plugin-dir=" + filepath.Join(opts.Work, "flexvolume"),
		"--kubeconfig", c.Kubeconfig, "--timeout", "2m"}
	if opts.Kwok.NodeLeaseSeconds > 40 {
		// Renewals a quarter of the lease apart: the node lifecycle controller must not
		// call a node lost between two of them.
		args = append(args, "--extra-args", fmt.Sprintf("kube-controller-manager=node-monitor-grace-period=%ds", 2*opts.Kwok.NodeLeaseSeconds))
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
	if c.opts.QPS != 0 {
		cfg.QPS, cfg.Burst = c.opts.QPS, c.opts.Burst
	}
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
	if err := c.waitReady(ctx); err != nil {
		return err
	}
	crds := append([]string{filepath.Join(c.opts.RepoRoot, "config", "crd", "bases")}, c.opts.CRDs...)
	for _, f := range crds {
		if _, err := c.Kubectl(ctx, "apply", "--server-side", "-f", f); err != nil {
			return fmt.Errorf("install the CRDs: %w", err)
		}
	}
	// A CRD created a moment ago may have no conditions yet, which `kubectl wait --all`
	// reports as an error ("accessor error: <nil>"): ask again until all are Established.
	established, cancel := testkit.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := testkit.Eventually(established, 200*time.Millisecond, "the CRDs Established", func() error {
		_, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "crd", "--all", "--timeout=10s")
		return err
	}); err != nil {
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

// Pause stops the cluster's processes (etcd, the API server, the controllers and kwok's),
// keeping its data: the control plane away. Resume starts them again.
func (c *Cluster) Pause(ctx context.Context) error {
	return c.kwokctl(ctx, "stop", "cluster", "--name", c.opts.Slot.Name)
}

// Resume starts a paused cluster's processes and waits until the API server is ready.
func (c *Cluster) Resume(ctx context.Context) error {
	if err := c.kwokctl(ctx, "start", "cluster", "--name", c.opts.Slot.Name, "--timeout", "2m"); err != nil {
		return err
	}
	return c.waitReady(ctx)
}

// waitReady waits up to a minute for the API server's /readyz.
func (c *Cluster) waitReady(ctx context.Context) error {
	ready, cancel := testkit.WithTimeout(ctx, time.Minute)
	defer cancel()
	return testkit.Eventually(ready, 100*time.Millisecond, "the apiserver's /readyz", func() error {
		_, err := c.Kubectl(ctx, "get", "--raw", "/readyz")
		return err
	})
}

// Stop deletes the cluster and stops its processes.
func (c *Cluster) Stop() {
	cmd := exec.Command(filepath.Join(c.opts.KwokBin, "kwokctl"), "delete", "cluster", "--name", c.opts.Slot.Name)
	cmd.Env = c.env
	_ = cmd.Run()
}
