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

package testkit

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// EnvOptions configure StartEnv.
type EnvOptions struct {
	// CRDs is the folder of the CRDs to install: config/crd/bases. Required.
	CRDs string
	// MoreCRDs are more folders of CRDs, such as stand-ins for other projects' APIs.
	MoreCRDs []string
	// Controllers, if set, adds controllers to a manager that StartEnv then starts, with
	// metrics off and Cache as its cache's options, and waits for its cache to sync.
	Controllers func(ctrl.Manager) error
	Cache       cache.Options
}

// Env is a real kube-apiserver and etcd (envtest) with the CRDs installed, and the
// manager of EnvOptions.Controllers if there is one.
type Env struct {
	Envtest *envtest.Environment
	Config  *rest.Config
	Scheme  *runtime.Scheme // client-go's types and the API's
	Client  client.Client   // a direct client, without a cache

	stopManager func() error
}

// StartEnv starts the control plane (KUBEBUILDER_ASSETS names the folder of kube-apiserver
// and etcd) and the manager, which runs until Stop or until ctx ends.
func StartEnv(ctx context.Context, opts EnvOptions) (*Env, error) {
	e := &Env{
		Envtest: &envtest.Environment{CRDDirectoryPaths: append([]string{opts.CRDs}, opts.MoreCRDs...), ErrorIfCRDPathMissing: true},
		Scheme:  runtime.NewScheme(),
	}
	if err := errors.Join(clientgoscheme.AddToScheme(e.Scheme), v1alpha1.AddToScheme(e.Scheme)); err != nil {
		return nil, err
	}
	var err error
	if e.Config, err = e.Envtest.Start(); err != nil {
		return nil, fmt.Errorf("start envtest (run `make test`, which builds kube-apiserver and sets KUBEBUILDER_ASSETS): %w", err)
	}
	if err := e.start(ctx, opts); err != nil {
		return nil, errors.Join(err, e.Envtest.Stop())
	}
	return e, nil
}

func (e *Env) start(ctx context.Context, opts EnvOptions) error {
	var err error
	if e.Client, err = client.New(e.Config, client.Options{Scheme: e.Scheme}); err != nil {
		return err
	}
	if opts.Controllers == nil {
		return nil
	}
	mgr, err := ctrl.NewManager(e.Config, ctrl.Options{
		Scheme:     e.Scheme,
		Cache:      opts.Cache,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		return err
	}
	if err := opts.Controllers(mgr); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx); cancel() }() // a manager that fails ends the wait for its cache
	e.stopManager = func() error {
		cancel()
		if err := <-done; err != nil {
			return fmt.Errorf("manager: %w", err)
		}
		return nil
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.Join(errors.New("the manager's cache did not sync"), e.stopManager())
	}
	return nil
}

// Stop stops the manager, then the control plane.
func (e *Env) Stop() error {
	var err error
	if e.stopManager != nil {
		err = e.stopManager()
	}
	return errors.Join(err, e.Envtest.Stop())
}
