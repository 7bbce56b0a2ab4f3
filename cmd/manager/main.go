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

// Command manager runs the edgepool operator.
package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"flag"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/controllers/cachenode"
	"github.com/edgepool/edgepool/controllers/cachepurge"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
)

// scrapers is the repeatable --agent-scraper flag.
type scrapers []cachenode.Peer

func (s *scrapers) String() string {
	terms := make([]string, len(*s))
	for i, p := range *s {
		terms[i] = p.String()
	}
	return strings.Join(terms, " ")
}

func (s *scrapers) Set(v string) error {
	p, err := cachenode.ParsePeer(v)
	if err != nil {
		return err
	}
	*s = append(*s, p)
	return nil
}

func main() {
	var metricsAddr, probeAddr, operatorNamespace, operatorPodLabels string
	var agentScrapers scrapers
	var leaderElect bool
	var concurrency, agentConcurrency, purgeConcurrency int
	var pollInterval, agentTimeout, purgeAnnounceInterval time.Duration
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "The address the metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the health probe endpoint binds to.")
	flag.BoolVar(&leaderElect, "leader-elect", false, "Enable leader election, so only one replica reconciles at a time.")
	flag.IntVar(&concurrency, "max-concurrent-reconciles", 4, "The number of CacheNodes reconciled in parallel.")
	flag.DurationVar(&pollInterval, "agent-poll-interval", 30*time.Second, "How often each cache pod's agent is asked for its status (a new pod is asked within a second).")
	flag.DurationVar(&agentTimeout, "agent-timeout", 2*time.Second, "How long one agent may take to answer.")
	flag.IntVar(&agentConcurrency, "agent-concurrency", 16, "Agents asked at once.")
	flag.IntVar(&purgeConcurrency, "purge-concurrency", 32, "Cache pods one CachePurge is sent to at once.")
	flag.DurationVar(&purgeAnnounceInterval, "purge-announce-interval", cachenode.DefaultPurgeAnnounceInterval, "How often at most a CacheNode's purge list alone is announced on its cache pods (a pod write each); a configuration is announced at once.")
	diskPrefixes := render.DefaultDiskPrefixes
	flag.Func("allowed-disk-prefixes", "Comma-separated prefixes disk paths must lie under, e.g. /mnt,/data,/srv (keep it in step with the ValidatingAdmissionPolicy's parameter).", func(v string) (err error) {
		diskPrefixes, err = render.ParseDiskPrefixes(v)
		return err
	})
	cacheImage := cachenode.DefaultCacheImage
	flag.Func("cache-image", "The cache pods' image (a tag or a digest; default "+cachenode.DefaultCacheImage+"), unless a CacheNode's spec.image, where the edgepool-grants admission policy allows it, names another.", func(v string) error {
		cacheImage = v
		return cachenode.CheckImage(v)
	})
	flag.StringVar(&operatorNamespace, "operator-namespace", "", "The namespace of the operator's pods, admitted to the cache pods' agent port by their NetworkPolicy. Empty: the operator runs outside the cluster and no operator pod is admitted.")
	flag.StringVar(&operatorPodLabels, "operator-pod-labels", "", "Labels of the operator's pods, key=value[,key=value...], admitted to the cache pods' agent port within --operator-namespace.")
	flag.Var(&agentScrapers, "agent-scraper", "Pods admitted to the cache pods' agent port (/metrics, /status) besides the operator's, as namespace:KEY=VALUE[,namespace:KEY=VALUE...][,pod:KEY=VALUE...] (at least one namespace label); repeat for more scrapers.")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	setupLog := ctrl.Log.WithName("setup")
	podLabels, err := cachenode.ParseLabels(operatorPodLabels)
	if err != nil {
		setupLog.Error(err, "Invalid --operator-pod-labels")
		os.Exit(2)
	}
	access := cachenode.AgentAccess{OperatorNamespace: operatorNamespace, OperatorPodLabels: podLabels, Scrapers: agentScrapers}
	setupLog.Info("Cache pods run", "image", cacheImage, "diskPrefixes", diskPrefixes)
	setupLog.Info("Cache pods' agent port admits", "operatorNamespace", operatorNamespace, "operatorPodLabels", operatorPodLabels, "scrapers", agentScrapers.String())

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cachenode.CacheOptions(),
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       "edgepool.cache.edgepool.io",
	})
	if err != nil {
		setupLog.Error(err, "Failed to create manager")
		os.Exit(1)
	}
	// The key that signs purges lives in this process only: the operator reads no Secret.
	// Its public half reaches the cache pods in each CacheNode's ConfigMap; a new leader
	// publishes its own, and the previous one for the purges it signed.
	_, operatorKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		setupLog.Error(err, "Failed to make the operator's key")
		os.Exit(1)
	}
	if err := (&cachenode.Reconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		Scheme:                  mgr.GetScheme(),
		Recorder:                mgr.GetEventRecorder("edgepool"),
		MaxConcurrentReconciles: concurrency,
		DiskPrefixes:            diskPrefixes,
		CacheImage:              cacheImage,
		PurgeAnnounceInterval:   purgeAnnounceInterval,
		AgentAccess:             access,
		OperatorKey:             operatorKey,
		Agents: &cachenode.AgentWatcher{
			Pods: mgr.GetClient(), Agents: agentapi.NewClient(agentTimeout),
			Interval: pollInterval, Concurrency: agentConcurrency,
		},
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "Failed to set up controller", "controller", "CacheNode")
		os.Exit(1)
	}
	if err := (&cachepurge.Reconciler{
		Client:                  mgr.GetClient(),
		OperatorKey:             operatorKey,
		Agents:                  agentapi.NewClient(agentTimeout),
		Concurrency:             purgeConcurrency,
		MaxConcurrentReconciles: concurrency,
	}).SetupWithManager(mgr); err != nil {
		setupLog.Error(err, "Failed to set up controller", "controller", "CachePurge")
		os.Exit(1)
	}
	utilruntime.Must(mgr.AddHealthzCheck("healthz", healthz.Ping))
	utilruntime.Must(mgr.AddReadyzCheck("readyz", healthz.Ping))

	setupLog.Info("Starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "Manager stopped with an error")
		os.Exit(1)
	}
}
