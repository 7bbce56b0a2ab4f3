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
	"errors"
	"net"
	"reflect"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/cachepod"
)

// agentReport is what one cache pod's agent said, or why it could not be asked.
type agentReport struct {
	pod, node string
	status    *agentapi.Status
	err       error
}

// errNotAskedYet stands for the report of a pod the watcher has not asked yet.
var errNotAskedYet = errors.New("not asked yet")

// AgentWatcher asks every running cache pod's agent for its /status, outside any
// reconcile, and keeps each pod's latest report. When a report changes it enqueues the
// pod's CacheNode, whose reconcile then reads the reports: a slow or dead agent never
// delays a reconcile, and a report that did not change costs nothing.
type AgentWatcher struct {
	// Pods lists the cache pods: the manager's cache.
	Pods client.Reader
	// Agents asks them, with a short timeout: an agent that does not answer is reported,
	// not waited for.
	Agents *agentapi.Client
	// Interval is how often each pod is asked (default 30s); a new pod is asked within
	// Tick (default a second, at most Interval).
	Interval, Tick time.Duration
	// Concurrency bounds the agents asked at once.
	Concurrency int

	changed chan event.GenericEvent
	mu      sync.Mutex
	pods    map[types.UID]*watchedPod
}

// watchedPod is the watcher's record of one cache pod.
type watchedPod struct {
	report  *agentReport // nil before the first answer
	asked   time.Time    // when the last question was sent
	asking  bool
	present bool // seen in the latest list
}

// Changed delivers, for the controller's source.Channel, the CacheNodes whose pods' reports changed.
func (w *AgentWatcher) Changed() <-chan event.GenericEvent {
	w.init()
	return w.changed
}

func (w *AgentWatcher) init() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.changed == nil {
		w.changed = make(chan event.GenericEvent, 64)
		w.pods = map[types.UID]*watchedPod{}
		if w.Interval <= 0 {
			w.Interval = 30 * time.Second
		}
		if w.Tick <= 0 {
			w.Tick = min(w.Interval, time.Second)
		}
	}
}

// Reports returns the latest report of each given pod; a nil watcher has asked none.
func (w *AgentWatcher) Reports(pods []corev1.Pod) []agentReport {
	reports := make([]agentReport, len(pods))
	for i := range pods {
		reports[i] = agentReport{pod: pods[i].Name, node: pods[i].Spec.NodeName, err: errNotAskedYet}
	}
	if w == nil {
		return reports
	}
	w.init()
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range pods {
		if wp := w.pods[pods[i].UID]; wp != nil && wp.report != nil {
			reports[i] = *wp.report
		}
	}
	return reports
}

// Start asks the agents until ctx ends; the manager runs it on the leader only. A fixed
// pool of Concurrency askers takes the due pods in turn: a sweep of thousands of pods waits
// in a queue, not in a goroutine each, and an agent that does not answer holds one asker
// for Client.Timeout at most.
func (w *AgentWatcher) Start(ctx context.Context) error {
	w.init()
	work := make(chan corev1.Pod)
	var wg sync.WaitGroup
	for range max(1, w.Concurrency) {
		wg.Go(func() {
			for pod := range work {
				w.ask(ctx, pod)
			}
		})
	}
	defer wg.Wait()
	defer close(work)
	ticker := time.NewTicker(w.Tick)
	defer ticker.Stop()
	for {
		for _, pod := range w.due(ctx) {
			select {
			case work <- pod:
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// due lists the running cache pods, forgets the pods that are gone, and returns those
// to ask now: never asked, or asked Interval ago and not being asked.
func (w *AgentWatcher) due(ctx context.Context) []corev1.Pod {
	list := &corev1.PodList{}
	// Read only, every tick: the cache's own objects, not copies of thousands of pods.
	if err := w.Pods.List(ctx, list, client.MatchingLabels{cachepod.LabelName: cachepod.AppName}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Failed to list cache pods")
		return nil
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wp := range w.pods {
		wp.present = false
	}
	var due []corev1.Pod
	for _, pod := range list.Items {
		if !cachepod.Pollable(&pod) {
			continue
		}
		wp := w.pods[pod.UID]
		if wp == nil {
			wp = &watchedPod{}
			w.pods[pod.UID] = wp
		}
		wp.present = true
		if !wp.asking && (wp.asked.IsZero() || now.Sub(wp.asked) >= w.Interval) {
			wp.asking, wp.asked = true, now
			due = append(due, pod)
		}
	}
	for uid, wp := range w.pods {
		if !wp.present && !wp.asking {
			delete(w.pods, uid)
		}
	}
	return due
}

// ask asks one pod's agent and, when its answer differs from the last, enqueues its CacheNode.
func (w *AgentWatcher) ask(ctx context.Context, pod corev1.Pod) {
	report := agentReport{pod: pod.Name, node: pod.Spec.NodeName}
	report.status, report.err = w.Agents.Status(ctx, net.JoinHostPort(cachepod.Address(&pod), strconv.Itoa(int(cachepod.AgentPort(&pod)))))
	if ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	wp := w.pods[pod.UID]
	wp.asking = false
	same := wp.report != nil && reflect.DeepEqual(wp.report.status, report.status) && errorText(wp.report.err) == errorText(report.err)
	wp.report = &report
	w.mu.Unlock()
	if same {
		return
	}
	owner := &v1alpha1.CacheNode{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Labels[cachepod.LabelInstance]}}
	select {
	case w.changed <- event.GenericEvent{Object: owner}:
	case <-ctx.Done():
	}
}

func errorText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
