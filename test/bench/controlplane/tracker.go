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

package controlplane

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// tracker timestamps, from watch events, when each CacheNode's objects first appeared:
// its DaemonSet, each content of its ConfigMap's nginx.conf, and each generation its
// status observed. Objects are matched to CacheNodes by their controller reference.
type tracker struct {
	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every event
	daemonSet map[string]time.Time
	config    map[string]map[string]time.Time // CacheNode -> hash of nginx.conf -> first seen
	observed  map[string]generationSeen
}

type generationSeen struct {
	generation int64
	at         time.Time
}

func newTracker() *tracker {
	return &tracker{
		changed:   make(chan struct{}),
		daemonSet: map[string]time.Time{},
		config:    map[string]map[string]time.Time{},
		observed:  map[string]generationSeen{},
	}
}

// watch feeds the tracker from informers on ConfigMaps, DaemonSets and CacheNodes of c.
func (t *tracker) watch(ctx context.Context, c cache.Cache) error {
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.observe(obj, time.Now()) },
		UpdateFunc: func(_, obj any) { t.observe(obj, time.Now()) },
	}
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &appsv1.DaemonSet{}, &v1alpha1.CacheNode{}} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			return fmt.Errorf("informer for %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return fmt.Errorf("watch %T: %w", obj, err)
		}
	}
	return nil
}

func (t *tracker) observe(obj any, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		owner := metav1.GetControllerOf(o)
		if owner == nil {
			return
		}
		hash := agentapi.Hash([]byte(o.Data[agentapi.ConfigKey]))
		if t.config[owner.Name] == nil {
			t.config[owner.Name] = map[string]time.Time{}
		}
		if _, ok := t.config[owner.Name][hash]; !ok {
			t.config[owner.Name][hash] = now
		}
	case *appsv1.DaemonSet:
		if owner := metav1.GetControllerOf(o); owner != nil {
			if _, ok := t.daemonSet[owner.Name]; !ok {
				t.daemonSet[owner.Name] = now
			}
		}
	case *v1alpha1.CacheNode:
		gen := o.Status.ObservedGeneration
		if gen == o.Generation && gen > t.observed[o.Name].generation {
			t.observed[o.Name] = generationSeen{generation: gen, at: now}
		}
	default:
		return
	}
	close(t.changed)
	t.changed = make(chan struct{})
}

// applied returns when both the DaemonSet and a ConfigMap carrying nginx.conf with the
// given hash were first seen for the CacheNode.
func (t *tracker) applied(name, hash string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.appliedLocked(name, hash)
}

func (t *tracker) appliedLocked(name, hash string) (time.Time, bool) {
	ds, okDS := t.daemonSet[name]
	cm, okCM := t.config[name][hash]
	if !okDS || !okCM {
		return time.Time{}, false
	}
	return later(ds, cm), true
}

// configSeen returns when the CacheNode's ConfigMap first carried nginx.conf with hash.
func (t *tracker) configSeen(name, hash string) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.config[name][hash]
	return at, ok
}

// converged returns when the CacheNode had its DaemonSet, its ConfigMap with hash, and a
// status that observed generation gen (or a later one).
func (t *tracker) converged(name, hash string, gen int64) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	at, ok := t.appliedLocked(name, hash)
	obs := t.observed[name]
	if !ok || obs.generation < gen {
		return time.Time{}, false
	}
	return later(at, obs.at), true
}

// wait blocks until cond holds, rechecking it after every event, or fails when ctx ends.
func (t *tracker) wait(ctx context.Context, what string, cond func() bool) error {
	for {
		t.mu.Lock()
		ch := t.changed
		t.mu.Unlock()
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, context.Cause(ctx))
		case <-ch:
		}
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
