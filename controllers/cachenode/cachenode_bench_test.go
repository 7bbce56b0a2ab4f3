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

package cachenode

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

const benchCacheNodes = 200

// BenchmarkReconcile200CacheNodes measures, on envtest, the time from creating 200
// CacheNodes to each having its ConfigMap, its DaemonSet and an observed status, and the
// API writes one no-op resync of all of them makes (the target is 0).
func BenchmarkReconcile200CacheNodes(b *testing.B) {
	ctx := context.Background()
	var ns string
	for b.Loop() {
		b.StopTimer()
		ns = newNamespace(b)
		b.StartTimer()
		for i := range benchCacheNodes {
			if err := k8s.Create(ctx, newCacheNode(ns, fmt.Sprintf("edge-%03d", i), "bench")); err != nil {
				b.Fatal(err)
			}
		}
		waitConverged(b, ns)
	}

	list := &v1alpha1.CacheNodeList{}
	if err := k8s.List(ctx, list, client.InNamespace(ns)); err != nil {
		b.Fatal(err)
	}
	before := writes.Load()
	for i := range list.Items {
		req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
		if _, err := reconciler.Reconcile(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(writes.Load()-before), "writes/noop-resync")
}

// waitConverged polls until every CacheNode in ns has its ConfigMap, its DaemonSet and a
// status for its current generation.
func waitConverged(b *testing.B, ns string) {
	ctx := context.Background()
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		cms, dss, cns := &corev1.ConfigMapList{}, &appsv1.DaemonSetList{}, &v1alpha1.CacheNodeList{}
		for _, l := range []client.ObjectList{cms, dss, cns} {
			if err := k8s.List(ctx, l, client.InNamespace(ns)); err != nil {
				b.Fatal(err)
			}
		}
		observed := 0
		for _, cn := range cns.Items {
			if cn.Status.ObservedGeneration == cn.Generation {
				observed++
			}
		}
		if len(cms.Items) == benchCacheNodes && len(dss.Items) == benchCacheNodes && observed == benchCacheNodes {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.Fatalf("%d CacheNodes did not converge within 5 minutes", benchCacheNodes)
}
