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

package cachepurge

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/cachepod"
)

// fanOut asks, in parallel, the cache pod of every node that has not done the purge. A
// node is waited for if its pod is older than the purge; a pod that started after it
// applied the purge before serving (from the ConfigMap's list) and is asked only once it
// runs, so that a node joining late does not hold the purge up.
func (r *Reconciler) fanOut(ctx context.Context, p *v1alpha1.CachePurge, cn *v1alpha1.CacheNode, now time.Time) (map[string]answer, error) {
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(cn.Namespace), client.MatchingLabels(cachepod.SelectorLabels(cn))); err != nil {
		return nil, fmt.Errorf("list Pods: %w", err)
	}
	done := map[string]bool{}
	for _, n := range p.Status.Nodes {
		done[n.Node] = n.Phase != v1alpha1.PurgePending
	}
	answers := map[string]answer{}
	type ask struct {
		node, pod, endpoint string
	}
	var asks []ask
	for i := range pods.Items {
		pod := &pods.Items[i]
		node := pod.Spec.NodeName
		if node == "" || done[node] || !pod.DeletionTimestamp.IsZero() {
			continue
		}
		endpoint := cachepod.AgentEndpoint(pod)
		switch {
		case endpoint != "":
			asks = append(asks, ask{node, pod.Name, endpoint})
		case !p.CreationTimestamp.Before(&pod.CreationTimestamp): // by the second: the same one counts as older
			answers[node] = answer{pod: pod.Name, phase: v1alpha1.PurgePending, message: "cache pod not running"}
		}
	}
	// A node asked before whose pod is gone stays pending, and says so.
	for _, n := range p.Status.Nodes {
		if _, seen := answers[n.Node]; !seen && n.Phase == v1alpha1.PurgePending &&
			!slices.ContainsFunc(asks, func(a ask) bool { return a.node == n.Node }) {
			answers[n.Node] = answer{pod: n.Pod, phase: v1alpha1.PurgePending, message: "no cache pod on the node"}
		}
	}

	var mu sync.Mutex
	spec := cachepod.PurgeSpec(&p.Spec)
	workqueue.ParallelizeUntil(ctx, r.Concurrency, len(asks), func(i int) {
		a := asks[i]
		res, err := r.Agents.Purge(ctx, a.endpoint, r.OperatorKey, agentapi.PurgeRequest{
			UID: string(p.UID), Audience: p.Namespace + "/" + a.pod, IssuedAt: now.Unix(), Spec: spec})
		ans := answer{pod: a.pod, phase: v1alpha1.PurgePending}
		switch {
		case err != nil:
			ans.message = clip(err.Error())
		case res.State == agentapi.PurgeDone:
			ans.phase, ans.removed = v1alpha1.PurgeDone, res.Removed
		case res.State == agentapi.PurgeRunning:
			ans.message, ans.running = "purging", true
		default:
			ans.message = clip(fmt.Sprintf("the agent could not purge (asked again until the deadline): %s", res.Message))
		}
		mu.Lock()
		answers[a.node] = ans
		mu.Unlock()
	})
	return answers, nil
}

// forget moves the CacheNode's list of purges past a purge about to be deleted: a node
// whose disks' record is older did not necessarily apply it, and empties its disks when it
// starts again, since the list will no longer name it.
func (r *Reconciler) forget(ctx context.Context, p *v1alpha1.CachePurge) error {
	cm := &corev1.ConfigMap{}
	cn := &v1alpha1.CacheNode{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Spec.CacheNode}}
	switch err := r.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: cachepod.ConfigMapName(cn)}, cm); {
	case apierrors.IsNotFound(err):
		return nil // no cache: nothing to remember
	case err != nil:
		return fmt.Errorf("get ConfigMap: %w", err)
	}
	since := p.CreationTimestamp.UTC()
	if old, err := time.Parse(time.RFC3339, cm.Annotations[cachepod.PurgesSinceAnnotation]); err == nil && !old.Before(since) {
		return nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	metav1.SetMetaDataAnnotation(&cm.ObjectMeta, cachepod.PurgesSinceAnnotation, since.Format(time.RFC3339))
	if err := r.Patch(ctx, cm, patch, client.FieldOwner("edgepool-cachepurge")); err != nil {
		return fmt.Errorf("move the purges list of ConfigMap %s past the purge: %w", cm.Name, err)
	}
	return nil
}
