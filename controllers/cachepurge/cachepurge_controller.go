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

// Package cachepurge reconciles CachePurges: it sends each purge, signed with the
// operator's key, to every cache pod of its CacheNode, records how far it got per node,
// asks the pending nodes again until the purge's deadline, and deletes finished purges
// after their TTL.
package cachepurge

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// Reconciler reconciles a CachePurge.
type Reconciler struct {
	client.Client
	// OperatorKey signs the purge requests; the CacheNode controller publishes its public
	// half to the cache pods.
	OperatorKey ed25519.PrivateKey
	// Agents asks the agents; its timeout bounds one answer.
	Agents *agentapi.Client
	// Concurrency bounds the agents one purge asks at once (default 32).
	Concurrency int
	// RetryInterval is how soon pending nodes are asked again (default 2s); a node that
	// is purging is asked again sooner.
	RetryInterval time.Duration
	// MaxConcurrentReconciles is the number of purges reconciled in parallel (default 4).
	MaxConcurrentReconciles int
	// Now is the clock (time.Now unless a test replaces it).
	Now func() time.Time
}

// +kubebuilder:rbac:groups=cache.edgepool.io,resources=cachepurges,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=cache.edgepool.io,resources=cachepurges/status,verbs=get;patch
// +kubebuilder:rbac:groups=cache.edgepool.io,resources=cachenodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;patch

// Requeue intervals: a node purging is asked again soon; a conflict on the status patch
// is a newer copy about to arrive.
const (
	runningRetry  = 500 * time.Millisecond
	conflictRetry = 250 * time.Millisecond
)

// Finalizer keeps a deleted purge until the CacheNode's list of purges has been moved
// past it (forget): whoever deletes it, finished or not, a cache pod that restarts later
// with disks older than the purge must not take the list's silence for "nothing to do".
const Finalizer = "cache.edgepool.io/purge-horizon"

// Reconcile sends the purge to the cache pods that have not done it, and writes the
// status once, from a defer, when it changed. A finished purge is deleted after its TTL.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	p := &v1alpha1.CachePurge{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.release(ctx, p)
	}
	if !controllerutil.ContainsFinalizer(p, Finalizer) {
		patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(p, Finalizer)
		if err := r.Patch(ctx, p, patch); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}
	now := r.Now()
	if finished(p) {
		return r.expire(ctx, p, now)
	}

	before := p.DeepCopy()
	obs := observation{now: now}
	defer func() {
		setStatus(p, obs)
		if equality.Semantic.DeepEqual(before.Status, p.Status) {
			return
		}
		patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
		switch err := r.Status().Patch(ctx, p, patch); {
		case err == nil:
			if finished(p) {
				log.FromContext(ctx).Info("CachePurge finished", "cachePurge", klog.KObj(p),
					"done", p.Status.DoneNodes, "failed", p.Status.FailedNodes, "objectsRemoved", p.Status.ObjectsRemoved)
				res = ctrl.Result{RequeueAfter: ttl(p)}
			}
		case apierrors.IsNotFound(err):
		case apierrors.IsConflict(err) && retErr == nil:
			res = ctrl.Result{RequeueAfter: conflictRetry}
		default:
			retErr = errors.Join(retErr, fmt.Errorf("patch CachePurge status: %w", err))
		}
	}()

	cn := &v1alpha1.CacheNode{}
	switch err := r.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.CacheNode}, cn); {
	case apierrors.IsNotFound(err):
		obs.cacheNodeMissing = true
	case err != nil:
		return ctrl.Result{}, fmt.Errorf("get CacheNode: %w", err)
	default:
		answers, err := r.fanOut(ctx, p, cn, now)
		if err != nil {
			return ctrl.Result{}, err
		}
		obs.answers = answers
	}
	return ctrl.Result{RequeueAfter: r.retry(p, obs, now)}, nil
}

// retry is how soon the purge is reconciled again while nodes are pending: sooner while
// a node purges, never past the deadline.
func (r *Reconciler) retry(p *v1alpha1.CachePurge, obs observation, now time.Time) time.Duration {
	after := r.RetryInterval
	for _, a := range obs.answers {
		if a.running {
			after = min(after, runningRetry)
		}
	}
	if left := deadline(p).Sub(now); left > 0 {
		return min(after, left)
	}
	return after
}

func ttl(p *v1alpha1.CachePurge) time.Duration {
	if p.Spec.TTLSecondsAfterFinished == nil {
		return 24 * time.Hour // the schema's default
	}
	return time.Duration(*p.Spec.TTLSecondsAfterFinished) * time.Second
}

// expire deletes a finished purge once its TTL has passed.
func (r *Reconciler) expire(ctx context.Context, p *v1alpha1.CachePurge, now time.Time) (ctrl.Result, error) {
	if left := p.Status.CompletionTime.Add(ttl(p)).Sub(now); left > 0 {
		return ctrl.Result{RequeueAfter: left}, nil
	}
	// The finalizer moves the list past it (release), as for any other deletion.
	if err := r.Delete(ctx, p, client.Preconditions{UID: &p.UID}); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("delete CachePurge: %w", err)
	}
	log.FromContext(ctx).Info("Deleted CachePurge after its TTL", "cachePurge", klog.KObj(p))
	return ctrl.Result{}, nil
}

// release lets a deleted purge go once the CacheNode's list of purges no longer reaches
// back to it. Until then the purge stays listed, so no cache pod loses track of it.
func (r *Reconciler) release(ctx context.Context, p *v1alpha1.CachePurge) error {
	if !controllerutil.ContainsFinalizer(p, Finalizer) {
		return nil
	}
	if err := r.forget(ctx, p); err != nil {
		return err
	}
	patch := client.MergeFromWithOptions(p.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(p, Finalizer)
	if err := r.Patch(ctx, p, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove the finalizer of CachePurge: %w", err)
	}
	if !finished(p) {
		log.FromContext(ctx).Info("CachePurge deleted before it finished; the purges list was moved past it", "cachePurge", klog.KObj(p))
	}
	return nil
}

// SetupWithManager registers the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.OperatorKey == nil || r.Agents == nil {
		return errors.New("the CachePurge controller needs the operator's key and an HTTP client")
	}
	if r.Concurrency <= 0 {
		r.Concurrency = 32
	}
	if r.RetryInterval <= 0 {
		r.RetryInterval = 2 * time.Second
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		// Status writes enqueue nothing: pending nodes are asked again by RequeueAfter. A
		// deletion does (the apiserver bumps the generation when it sets deletionTimestamp
		// on an object with finalizers; the second predicate does not rely on it).
		For(&v1alpha1.CachePurge{}, builder.WithPredicates(predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, deletionStarted()))).
		Named("cachepurge").
		WithOptions(controller.Options{MaxConcurrentReconciles: max(1, r.MaxConcurrentReconciles)}).
		Complete(r)
}

// deletionStarted passes the update that sets an object's deletionTimestamp.
func deletionStarted() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp() == nil && e.ObjectNew.GetDeletionTimestamp() != nil
		},
	}
}
