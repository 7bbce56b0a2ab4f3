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

// Package cachenode reconciles CacheNodes into a ConfigMap holding the rendered nginx.conf,
// a DaemonSet that runs the cache on the nodes with the declared disks, a NetworkPolicy
// that says who may connect to the cache pods and, when asked for, a Service in front of them.
package cachenode

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"k8s.io/utils/ptr"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/cachepod"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/ssa"
)

const (
	// FieldOwner is the server-side apply field manager of everything edgepool writes.
	FieldOwner = "edgepool"
	// ConfigHashAnnotation on a cache pod names what its ConfigMap volume should hold: the
	// hash of the whole ConfigMap data the pod reads (nginx.conf, its facts, operator.pub and
	// purges.json; see volumeHash), not only nginx.conf's, so that a new leader's key or a
	// purge's list reaches the pod as fast as a configuration does. Changing it makes the
	// kubelet sync the pod, and so refresh the volume, at once instead of at its next
	// periodic sync (up to a minute and more).
	ConfigHashAnnotation = "edgepool.io/config-hash"
	// observedDataHashAnnotation is set by the manager's cache, never written: the hash of
	// a live ConfigMap's data (dataHash), which the cache does not keep. The applied hash
	// says what edgepool wrote; this says what the ConfigMap holds now, so an edit that
	// kept the applied hash is seen and undone.
	observedDataHashAnnotation = "edgepool.io/observed-data-hash"
)

// Reconciler reconciles a CacheNode.
type Reconciler struct {
	client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	// Render renders nginx.conf with a sharded spec's ring members; render.NginxConfRing
	// unless a test replaces it.
	Render func(*v1alpha1.CacheNodeSpec, []render.Member) (string, error)
	// DiskPrefixes are where the cluster admin allows disk paths (default
	// render.DefaultDiskPrefixes); a CacheNode with a disk elsewhere is refused.
	DiskPrefixes []string
	// CacheImage is the cluster admin's cache image, used unless a CacheNode's spec.image
	// (granted by the edgepool-grants admission policy) names another; default
	// DefaultCacheImage.
	CacheImage string
	// MaxConcurrentReconciles is the number of CacheNodes reconciled in parallel (default 1).
	MaxConcurrentReconciles int
	// Agents holds the latest reports of the cache pods' agents, which become QueueOverflow,
	// DisksReady and ConfigApplied; SetupWithManager runs it beside the controller. Without
	// it those conditions stay Unknown.
	Agents *AgentWatcher
	// AgentAccess names who, besides the kubelet, may reach the cache pods' agent port in
	// their NetworkPolicy. Its zero value admits no one.
	AgentAccess AgentAccess
	// OperatorKey signs the purges the CachePurge controller sends; its public half is
	// published in every CacheNode's ConfigMap. It lives in memory only.
	OperatorKey ed25519.PrivateKey
	// PurgeAnnounceInterval spaces the announcements of a CacheNode's purge list alone on
	// its pods (default DefaultPurgeAnnounceInterval); a configuration is announced at once.
	PurgeAnnounceInterval time.Duration
	announcements         *announcements
	// RingInterval spaces a sharded CacheNode's ring changes (default DefaultRingInterval).
	RingInterval time.Duration
	rings        *rings

	// certManager says that the API server serves cert-manager's Certificates, whose
	// renewals are announced on the cache pods (SetupWithManager finds out).
	certManager bool

	// APIReader reads past the manager's cache, which holds only the objects edgepool
	// labelled: before a Service is created, it tells whether one of the name exists,
	// someone else's. Unset, the Client is used.
	APIReader client.Reader
}

// +kubebuilder:rbac:groups=cache.edgepool.io,resources=cachenodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=cache.edgepool.io,resources=cachenodes/status,verbs=get;patch
// +kubebuilder:rbac:groups=cache.edgepool.io,resources=cachepurges,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=apps,resources=daemonsets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=list

// conflictRetry is how soon a reconcile whose status patch met a newer CacheNode runs
// again: the cache is about to deliver that version, and nothing else would enqueue it
// (status writes do not change the generation).
const conflictRetry = 250 * time.Millisecond

// Reconcile renders the CacheNode's configuration, applies its ConfigMap, NetworkPolicy and DaemonSet,
// and writes its status once, from a defer, only when the status changed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, retErr error) {
	cn := &v1alpha1.CacheNode{}
	if err := r.Get(ctx, req.NamespacedName, cn); err != nil {
		if apierrors.IsNotFound(err) {
			r.announcements.forget(req.NamespacedName)
			r.rings.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !cn.DeletionTimestamp.IsZero() {
		// Being deleted: the garbage collector removes what it owns; recreating it would
		// race the deletion (and fail in a terminating namespace).
		return ctrl.Result{}, nil
	}
	before := cn.DeepCopy()
	var obs observation
	defer func() {
		setStatus(cn, obs)
		// A certificate or a disk in trouble is said in an event too, once per cause.
		for _, typ := range []string{v1alpha1.ConditionCertificatesReady, v1alpha1.ConditionDisksReady} {
			if c, bad := turnedBad(before.Status.Conditions, cn.Status.Conditions, typ); bad {
				r.Recorder.Eventf(cn, nil, corev1.EventTypeWarning, c.Reason, "Observe", "%s", c.Message)
			}
		}
		if c, bad := turnedBad(before.Status.Conditions, cn.Status.Conditions, v1alpha1.ConditionReady); bad && c.Reason == v1alpha1.ReasonPodsFailing {
			r.Recorder.Eventf(cn, nil, corev1.EventTypeWarning, c.Reason, "Observe", "%s", c.Message)
		}
		// A spec that cannot be rendered, or objects the API server refuses, are a final
		// answer for this generation, so it is observed; a passing API error is not.
		if retErr == nil || obs.applyFinal {
			cn.Status.ObservedGeneration = cn.Generation
		}
		if equality.Semantic.DeepEqual(before.Status, cn.Status) {
			return
		}
		// The optimistic lock keeps a status computed from a stale copy from overwriting
		// a newer one. Meeting a newer copy is expected right after our own status write:
		// it is retried, not reported as an error.
		patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
		switch err := r.Status().Patch(ctx, cn, patch); {
		case err == nil, apierrors.IsNotFound(err):
		case apierrors.IsConflict(err) && retErr == nil:
			log.FromContext(ctx).V(1).Info("CacheNode changed since it was read; reconciling again", "error", err.Error())
			res = ctrl.Result{RequeueAfter: conflictRetry}
		default:
			retErr = errors.Join(retErr, fmt.Errorf("patch CacheNode status: %w", err))
		}
	}()

	obs, err := r.reconcileObjects(ctx, cn)
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return ctrl.Result{}, nil // the CacheNode goes with its namespace
	}
	return ctrl.Result{RequeueAfter: soonest(obs.announceAfter, obs.ringAfter, obs.troublesAfter)}, err
}

// reconcileObjects renders the configuration, reads the nodes, applies the ConfigMap,
// NetworkPolicy and DaemonSet unless an earlier CacheNode has the same disks there, and
// observes the pods.
func (r *Reconciler) reconcileObjects(ctx context.Context, cn *v1alpha1.CacheNode) (observation, error) {
	var obs observation
	ds := desiredDaemonSet(cn, r.DiskPrefixes, r.CacheImage)

	var errs []error
	// The pods first: a sharded CacheNode's ring is rendered from them.
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(cn.Namespace), client.MatchingLabels(cachepod.SelectorLabels(cn))); err != nil {
		errs = append(errs, fmt.Errorf("list Pods: %w", err))
		pods = nil
	}
	var members []render.Member
	if cn.Spec.Sharding != nil && pods != nil {
		members, obs.ringAfter = r.rings.render(client.ObjectKeyFromObject(cn), ringMembers(pods.Items, cn.Spec.Listener.Families()[0]), r.RingInterval, time.Now())
		obs.ringMembers = ptr.To(int32(len(members)))
		obs.ringPods = ringPods(pods.Items, members)
	}

	conf, err := r.Render(&cn.Spec, members)
	if errs := render.DiskPathsAllowed(&cn.Spec, r.DiskPrefixes); err == nil && len(errs) > 0 {
		err = fmt.Errorf("invalid CacheNode: %w", errs.ToAggregate())
	}
	if err != nil {
		// Keep the last good ConfigMap: the running caches keep serving it.
		obs.renderErr = err
		r.Recorder.Eventf(cn, nil, corev1.EventTypeWarning, "RenderFailed", "Render", "Render nginx.conf: %v", err)
	} else {
		obs.configHash = agentapi.Hash([]byte(conf))
	}

	// Only the nodes the CacheNode selects, uncopied (they are only read): the cache
	// matches the labels before it copies, so a reconcile copies its own share of a large
	// fleet, not every node.
	nodes := &corev1.NodeList{}
	if err := r.List(ctx, nodes, client.MatchingLabels(cn.Spec.NodeSelector), client.UnsafeDisableDeepCopy); err != nil {
		errs = append(errs, fmt.Errorf("list Nodes: %w", err))
	} else {
		eligibility := evaluateNodes(cn, ds, nodes.Items)
		obs.nodes = &eligibility
	}

	// A sharded CacheNode whose pods could not be read keeps its last ring: one rendered
	// without members would make every pod the owner of every key.
	ringKnown := cn.Spec.Sharding == nil || pods != nil
	if obs.renderErr == nil && obs.nodes != nil && ringKnown {
		others := &v1alpha1.CacheNodeList{}
		// Read only: the cache's own objects, not a copy of every CacheNode per reconcile.
		if err := r.List(ctx, others, client.UnsafeDisableDeepCopy); err != nil {
			errs = append(errs, fmt.Errorf("list CacheNodes: %w", err))
		} else if obs.conflict = diskConflict(cn, obs.nodes, others.Items, nodes.Items, r.DiskPrefixes, r.running(ctx)); obs.conflict != "" {
			r.Recorder.Eventf(cn, nil, corev1.EventTypeWarning, "DiskPathConflict", "Apply", "Not applied: %s", obs.conflict)
		} else if obs.volumeHash, err = r.applyObjects(ctx, cn, conf, ds); err != nil {
			// Reported as it is, and the rest still observed: the status says what failed,
			// not what could not be seen because of it.
			obs.applyErr = err
			obs.applyFinal = apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || errors.Is(err, ssa.ErrNotControlled)
			r.Recorder.Eventf(cn, nil, corev1.EventTypeWarning, "ApplyFailed", "Apply", "%v", err)
		}
	}

	r.observe(ctx, cn, ds, pods, &obs, errs)
	// An apply error is returned even when final, so the reconcile is retried (with
	// backoff): a conflicting object its owner deletes enqueues nothing.
	return obs, errors.Join(obs.applyErr, obs.observeErr)
}

// running says whether a CacheNode's DaemonSet exists (as the cache knows it).
func (r *Reconciler) running(ctx context.Context) func(*v1alpha1.CacheNode) bool {
	return func(cn *v1alpha1.CacheNode) bool {
		ds := &appsv1.DaemonSet{}
		err := r.Get(ctx, types.NamespacedName{Namespace: cn.Namespace, Name: cachepod.DaemonSetName(cn)}, ds)
		return err == nil && metav1.IsControlledBy(ds, cn)
	}
}

// observe reads the cache pods' agents' latest reports and the DaemonSet into obs, and
// nudges the pods' kubelets. Each is read on its own: one that cannot be read leaves only
// its own part of the observation unset. pods are the cache pods, nil when they could not
// be listed (among errs, the reads that failed before).
func (r *Reconciler) observe(ctx context.Context, cn *v1alpha1.CacheNode, ds *appsv1.DaemonSet, pods *corev1.PodList, obs *observation, errs []error) {
	if pods != nil {
		// A renewed Secret is announced even when the newest spec does not render (and
		// nothing was applied): the running configuration serves it.
		revisions, err := r.revisionsOf(ctx, cn)
		if err != nil {
			// Only the nudge waits: the kubelets sync the renewed Secrets anyway.
			log.FromContext(ctx).Error(err, "Could not read the Certificates of the sites' Secrets")
		}
		// A purge list alone (the running pods got each purge by request already) is
		// announced at most every PurgeAnnounceInterval: one purge a second on a fleet
		// would otherwise patch every cache pod every second.
		key, now := client.ObjectKeyFromObject(cn), time.Now()
		volumeHash := obs.volumeHash
		if wait := r.announcements.wait(key, obs.configHash, volumeHash, r.PurgeAnnounceInterval, now); volumeHash != "" && wait > 0 {
			volumeHash, obs.announceAfter = "", wait
		}
		if r.nudgeKubelets(ctx, cn, pods.Items, volumeHash, revisions) && volumeHash != "" {
			r.announcements.record(key, obs.configHash, volumeHash, now)
		}
		warnings, after, err := r.readWarnings(ctx, pods.Items, now)
		if err != nil {
			// The pods' own status still says most of what is wrong with them.
			log.FromContext(ctx).Error(err, "Could not read the warnings about stuck cache pods")
		}
		obs.troubles, obs.troublesAfter = podTroubles(&cn.Spec, pods.Items, warnings, now), after
		var running []corev1.Pod
		for _, pod := range pods.Items {
			if cachepod.Pollable(&pod) {
				running = append(running, pod)
			}
		}
		obs.agents, obs.agentsSeen = r.Agents.Reports(running), true
	}

	live := &appsv1.DaemonSet{}
	switch err := r.Get(ctx, client.ObjectKeyFromObject(ds), live); {
	case err == nil:
		obs.daemonSetSeen = true
		if metav1.IsControlledBy(live, cn) {
			obs.daemonSet = live
			trouble, after, err := r.creationTrouble(ctx, live, time.Now())
			if err != nil {
				log.FromContext(ctx).Error(err, "Could not read the DaemonSet's warnings")
			}
			if trouble != nil {
				obs.troubles = append(obs.troubles, *trouble)
			}
			obs.troublesAfter = soonest(obs.troublesAfter, after)
		}
	case apierrors.IsNotFound(err):
		obs.daemonSetSeen = true
	default:
		errs = append(errs, fmt.Errorf("get DaemonSet: %w", err))
	}
	if err := r.observeService(ctx, cn, obs); err != nil {
		errs = append(errs, err)
	}
	obs.observeErr = errors.Join(errs...)
}

// applyObjects applies the ConfigMap, the NetworkPolicy, then the DaemonSet: the pods
// never run before the policy that guards their agent port exists. Then the Service, or
// its deletion (see reconcileService). It returns the volumeHash of the ConfigMap once that
// is applied (or already was), "" before.
func (r *Reconciler) applyObjects(ctx context.Context, cn *v1alpha1.CacheNode, conf string, ds *appsv1.DaemonSet) (string, error) {
	live := &corev1.ConfigMap{}
	switch err := r.Get(ctx, types.NamespacedName{Namespace: cn.Namespace, Name: cachepod.ConfigMapName(cn)}, live); {
	case apierrors.IsNotFound(err):
		live = nil
	case err != nil:
		return "", fmt.Errorf("get ConfigMap: %w", err)
	}
	purges := &v1alpha1.CachePurgeList{}
	if err := r.List(ctx, purges, client.InNamespace(cn.Namespace)); err != nil {
		return "", fmt.Errorf("list CachePurges: %w", err)
	}
	cm, err := desiredConfigMap(cn, conf, publishedKeys(live, r.OperatorKey.Public().(ed25519.PublicKey)),
		activePurges(cn, purges.Items, purgesSince(live)))
	if err != nil {
		return "", err
	}
	switch applied, err := r.apply(ctx, cn, cm, &corev1.ConfigMap{}); {
	case err != nil:
		return "", err
	case applied:
		log.FromContext(ctx).Info("Applied ConfigMap", "configMap", klog.KObj(cm))
	}
	hash := volumeHash(cm)
	np := desiredNetworkPolicy(cn, r.AgentAccess)
	switch applied, err := r.apply(ctx, cn, np, &networkingv1.NetworkPolicy{}); {
	case err != nil:
		return hash, err
	case applied:
		log.FromContext(ctx).Info("Applied NetworkPolicy", "networkPolicy", klog.KObj(np))
	}
	switch applied, err := r.apply(ctx, cn, ds, &appsv1.DaemonSet{}); {
	case err != nil:
		return hash, err
	case applied:
		log.FromContext(ctx).Info("Applied DaemonSet", "daemonSet", klog.KObj(ds))
	}
	return hash, r.reconcileService(ctx, cn)
}

// volumeHash is the hash of what a cache pod reads from its ConfigMap volume
// (agentapi.VolumeHash), which the agent checks against this announcement.
func volumeHash(cm *corev1.ConfigMap) string {
	return agentapi.VolumeHash(cm.Data)
}

// nudgeKubelets tells each cache pod's kubelet that its ConfigMap changed (volumeHash,
// in ConfigHashAnnotation) or that a site's Secret was renewed (revisions, when
// cert-manager says, in CertificateRevisionsAnnotation); either may be empty, and is then
// left as it is. A pod update makes the kubelet sync the pod and swap its ConfigMap and
// Secret volumes in, where the agent sees them (and reloads nginx in place). The pod
// template never carries either, so no pod is restarted. A pod that already names both
// costs no write. The nudge only hastens what the kubelet does anyway, so a failed patch
// is reported as an event and does not fail the reconcile. Up to nudgeConcurrency pods are
// patched at once. It says whether it announced volumeHash on a pod.
func (r *Reconciler) nudgeKubelets(ctx context.Context, cn *v1alpha1.CacheNode, pods []corev1.Pod, volumeHash, revisions string) (announced bool) {
	var due []*corev1.Pod
	for i := range pods {
		pod := &pods[i]
		newConfig := volumeHash != "" && pod.Annotations[ConfigHashAnnotation] != volumeHash
		newRevisions := revisions != "" && pod.Annotations[CertificateRevisionsAnnotation] != revisions
		if pod.DeletionTimestamp != nil || (!newConfig && !newRevisions) {
			continue
		}
		announced = announced || newConfig
		due = append(due, pod)
	}
	workqueue.ParallelizeUntil(ctx, nudgeConcurrency, len(due), func(i int) {
		r.nudgeKubelet(ctx, cn, due[i], volumeHash, revisions)
	})
	return announced
}

// soonest is the shortest of the waits that are not zero, zero if none.
func soonest(waits ...time.Duration) time.Duration {
	var d time.Duration
	for _, w := range waits {
		if w > 0 && (d == 0 || w < d) {
			d = w
		}
	}
	return d
}

// announcements remembers, per CacheNode, the configuration last announced on its pods
// and when, so that a purge list alone is announced at most every interval. A nil one
// remembers nothing: every announcement is made at once.
type announcements struct {
	mu   sync.Mutex
	last map[types.NamespacedName]announcement
}

type announcement struct {
	configHash, volumeHash string
	at                     time.Time
}

// DefaultPurgeAnnounceInterval: at one purge a second on 5,000 nodes, 1,000 pod writes a
// second instead of 5,000; the running pods have each purge by request at once, and a pod
// that starts reads the list from its volume.
const DefaultPurgeAnnounceInterval = 5 * time.Second

// wait says how long to hold an announcement of configHash (with volumeHash) on key's
// pods: until interval after the last one, if that announced the same configuration with
// another volume (so only the purge list, or the keys, changed). A new configuration
// never waits, nor does the volume last announced (a pod that came since gets it at once,
// and nothing is held for a reconcile to announce later).
func (a *announcements) wait(key types.NamespacedName, configHash, volumeHash string, interval time.Duration, now time.Time) time.Duration {
	if a == nil {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	last, ok := a.last[key]
	if !ok || configHash == "" || last.configHash != configHash || last.volumeHash == volumeHash {
		return 0
	}
	return max(0, last.at.Add(interval).Sub(now))
}

func (a *announcements) record(key types.NamespacedName, configHash, volumeHash string, now time.Time) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		a.last = map[types.NamespacedName]announcement{}
	}
	a.last[key] = announcement{configHash: configHash, volumeHash: volumeHash, at: now}
}

func (a *announcements) forget(key types.NamespacedName) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.last, key)
}

// nudgeConcurrency bounds the pod patches of one reconcile in flight: a CacheNode's
// rollout over hundreds of nodes announces its configuration on every new pod, and one
// patch after the other held the reconcile, and the status it writes last, for as many
// round trips (seconds per CacheNode at 5,000 nodes, on a busy API server).
const nudgeConcurrency = 16

func (r *Reconciler) nudgeKubelet(ctx context.Context, cn *v1alpha1.CacheNode, pod *corev1.Pod, volumeHash, revisions string) {
	patch := client.MergeFrom(pod.DeepCopy())
	if volumeHash != "" {
		metav1.SetMetaDataAnnotation(&pod.ObjectMeta, ConfigHashAnnotation, volumeHash)
	}
	if revisions != "" {
		metav1.SetMetaDataAnnotation(&pod.ObjectMeta, CertificateRevisionsAnnotation, revisions)
	}
	if err := r.Patch(ctx, pod, patch); client.IgnoreNotFound(err) != nil {
		r.Recorder.Eventf(cn, pod, corev1.EventTypeWarning, "AnnounceConfigFailed", "Annotate",
			"Could not announce configuration %s (certificates %q) on Pod %s; its kubelet picks it up at its next sync: %v",
			short(volumeHash), revisions, pod.Name, err)
		return
	}
	log.FromContext(ctx).V(1).Info("Annotated Pod with the configuration", "pod", klog.KObj(pod), "volumeHash", volumeHash,
		"certificateRevisions", revisions)
}

// apply server-side applies desired, controlled by cn, through internal/ssa: nothing is
// written when the live object carries the hash of this exact desired object, and an
// object of the same name that cn does not control is left alone. live is an empty object
// of desired's type. It reports whether it wrote, and says so in an event when it
// restored data someone else edited.
func (r *Reconciler) apply(ctx context.Context, cn *v1alpha1.CacheNode, desired, live client.Object) (bool, error) {
	applier := ssa.Applier{Client: r.Client, APIReader: r.apiReader(), Scheme: r.Scheme, FieldOwner: FieldOwner, Drifted: dataDrifted}
	result, err := applier.Apply(ctx, cn, desired, live)
	if err == nil && result == ssa.Restored {
		r.Recorder.Eventf(cn, live, corev1.EventTypeWarning, "ConfigMapRestored", "Apply",
			"%s %s held data edgepool did not write; restored it (edit the CacheNode, not what it owns)",
			desired.GetObjectKind().GroupVersionKind().Kind, desired.GetName())
	}
	return result != ssa.Unchanged, err
}

// dataHash is the hash of what the cache pods read of a ConfigMap (configKeys; a key
// missing and an empty one differ), as the cache records it in observedDataHashAnnotation.
// Other keys reach no pod.
func dataHash(cm *corev1.ConfigMap) string {
	read := make([]*string, len(configKeys))
	for i, k := range configKeys {
		if v, ok := cm.Data[k]; ok {
			read[i] = &v
		}
	}
	data, _ := json.Marshal(read) // strings always marshal
	return agentapi.Hash(data)
}

// dataDrifted says whether live, read from the manager's cache, is a ConfigMap whose data
// is no longer desired's. A live object read past the cache carries no observed hash and
// counts as drifted: applying again is always safe.
func dataDrifted(live, desired client.Object) bool {
	cm, ok := desired.(*corev1.ConfigMap)
	if !ok {
		return false
	}
	return live.GetAnnotations()[observedDataHashAnnotation] != dataHash(cm)
}

// CacheOptions limits the manager's cache to what this controller reads, so that its
// memory stays small at a thousand CacheNodes: only the ConfigMaps, DaemonSets,
// NetworkPolicies and Services edgepool creates, and of those only what decides whether to
// apply again (annotations, owner, a ConfigMap's data as its hash), the DaemonSet's
// generation and status and the Service's status, not the nginx.conf, the pod template, the policy's rules or the Service's spec;
// the cache pods trimmed (trimPod), as thousands of them are at 5,000 nodes; Nodes
// without their status; no object's managedFields (server-side apply does not need them
// client-side). Read those fields from the API server if ever needed.
func CacheOptions() cache.Options {
	managed := func(strip func(obj any)) cache.ByObject {
		return cache.ByObject{
			Label: labels.SelectorFromSet(cachepod.ManagedObjectsSelector()),
			Transform: func(obj any) (any, error) {
				strip(obj)
				return cache.TransformStripManagedFields()(obj)
			},
		}
	}
	return cache.Options{
		// cert-manager's Certificates are read as unstructured, and only where its CRD is
		// installed: no ByObject entry (the cache would fail to start without the CRD).
		DefaultTransform: func(obj any) (any, error) {
			if u, ok := obj.(*unstructured.Unstructured); ok && u.GroupVersionKind() == CertificateGVK {
				trimCertificate(u)
				return u, nil
			}
			return cache.TransformStripManagedFields()(obj)
		},
		ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: managed(func(obj any) {
				if cm, ok := obj.(*corev1.ConfigMap); ok {
					metav1.SetMetaDataAnnotation(&cm.ObjectMeta, observedDataHashAnnotation, dataHash(cm))
					cm.Data, cm.BinaryData = nil, nil
				}
			}),
			&appsv1.DaemonSet{}: managed(func(obj any) {
				if ds, ok := obj.(*appsv1.DaemonSet); ok {
					ds.Spec = appsv1.DaemonSetSpec{}
				}
			}),
			&networkingv1.NetworkPolicy{}: managed(func(obj any) {
				if np, ok := obj.(*networkingv1.NetworkPolicy); ok {
					np.Spec = networkingv1.NetworkPolicySpec{}
				}
			}),
			// The status keeps the load balancer's addresses, which the CacheNode's status shows.
			&corev1.Service{}: managed(func(obj any) {
				if svc, ok := obj.(*corev1.Service); ok {
					svc.Spec = corev1.ServiceSpec{}
				}
			}),
			// Of a cache pod only what says where its agent listens and what it was told: a
			// fleet's thousands of pods would otherwise hold their whole spec and status here.
			&corev1.Pod{}: managed(func(obj any) {
				if pod, ok := obj.(*corev1.Pod); ok {
					trimPod(pod)
				}
			}),
			&corev1.Node{}: {Transform: func(obj any) (any, error) {
				if node, ok := obj.(*corev1.Node); ok {
					node.Status = corev1.NodeStatus{}
				}
				return cache.TransformStripManagedFields()(obj)
			}},
		},
	}
}

// trimPod keeps of a cache pod its metadata, its node, its containers' ports, and its
// phase, addresses and conditions: what the watcher, the purges and the kubelet nudges read.
func trimPod(pod *corev1.Pod) {
	containers := make([]corev1.Container, len(pod.Spec.Containers))
	for i, c := range pod.Spec.Containers {
		containers[i] = corev1.Container{Name: c.Name, Ports: c.Ports}
	}
	pod.Spec = corev1.PodSpec{NodeName: pod.Spec.NodeName, HostNetwork: pod.Spec.HostNetwork, Containers: containers}
	pod.Status = corev1.PodStatus{Phase: pod.Status.Phase, Conditions: pod.Status.Conditions,
		HostIP: pod.Status.HostIP, HostIPs: pod.Status.HostIPs, PodIP: pod.Status.PodIP, PodIPs: pod.Status.PodIPs}
}

// SetupWithManager registers the controller: it watches CacheNodes, the objects they own,
// and the labels and taints of Nodes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.OperatorKey == nil {
		return errors.New("the CacheNode controller needs the operator's key")
	}
	if r.Render == nil {
		r.Render = render.NginxConfRing
	}
	if _, clipped := r.Recorder.(clippingRecorder); r.Recorder != nil && !clipped {
		r.Recorder = clippingRecorder{r.Recorder}
	}
	if r.CacheImage == "" {
		r.CacheImage = DefaultCacheImage
	}
	if r.PurgeAnnounceInterval == 0 {
		r.PurgeAnnounceInterval = DefaultPurgeAnnounceInterval
	}
	r.announcements = &announcements{}
	r.rings = &rings{}
	if r.RingInterval == 0 {
		r.RingInterval = DefaultRingInterval
	}
	if r.DiskPrefixes == nil {
		r.DiskPrefixes = render.DefaultDiskPrefixes
	}
	b := ctrl.NewControllerManagedBy(mgr)
	installed, err := certManagerInstalled(mgr.GetRESTMapper())
	if err != nil {
		return err
	}
	r.certManager = installed
	if installed {
		mgr.GetLogger().Info("Watching cert-manager's Certificates: a renewed Secret of a site is announced on its cache pods")
		b = b.Watches(newCertificate(), handler.EnqueueRequestsFromMapFunc(r.cacheNodesOfCertificate),
			builder.WithPredicates(certificateRenewed()))
	} else {
		mgr.GetLogger().Info("cert-manager's Certificate API is not installed: renewed Secrets reach the cache pods at their kubelets' next sync (up to a minute)")
	}
	if r.Agents != nil {
		if err := mgr.Add(r.Agents); err != nil {
			return err
		}
		b = b.WatchesRawSource(source.Channel(r.Agents.Changed(), &handler.EnqueueRequestForObject{}))
	}
	return b.
		For(&v1alpha1.CacheNode{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Owns(&corev1.ConfigMap{}).
		Owns(&appsv1.DaemonSet{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&corev1.Service{}).
		Watches(&corev1.Node{}, r.nodeHandler(), builder.WithPredicates(nodePlacementChanged())).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(cacheNodeOfPod)).
		// A purge created or deleted changes the ConfigMap's list (its spec never changes).
		Watches(&v1alpha1.CachePurge{}, handler.EnqueueRequestsFromMapFunc(cacheNodeOfPurge),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		Watches(&v1alpha1.CacheNode{}, handler.EnqueueRequestsFromMapFunc(r.cacheNodesSharingDisks),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("cachenode").
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// cacheNodeOfPod maps a cache pod to its CacheNode through the instance label.
func cacheNodeOfPod(_ context.Context, obj client.Object) []reconcile.Request {
	name := obj.GetLabels()[cachepod.LabelInstance]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: name}}}
}

// cacheNodesSharingDisks maps a CacheNode's creation, change or deletion to the other
// CacheNodes with a disk path in common, which it may block or release.
func (r *Reconciler) cacheNodesSharingDisks(ctx context.Context, obj client.Object) []reconcile.Request {
	changed, ok := obj.(*v1alpha1.CacheNode)
	if !ok {
		return nil
	}
	list := &v1alpha1.CacheNodeList{}
	if err := r.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Failed to list CacheNodes for a CacheNode event")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		o := &list.Items[i]
		if (o.Namespace != changed.Namespace || o.Name != changed.Name) && len(sharedDiskPaths(o, changed)) > 0 {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
	}
	return reqs
}

// nodeHandler maps a Node event to the CacheNodes whose nodeSelector matches the node's
// labels, before or after an update: only those count it (or may start or stop counting
// it) among their selected nodes, and a node none of them selects cannot change their
// status, objects or disk conflicts (those are settled on nodes both CacheNodes select).
// In a fleet of thousands of nodes a label change thus costs the few CacheNodes it can
// affect a reconcile, not every CacheNode.
func (r *Reconciler) nodeHandler() handler.TypedEventHandler[client.Object, reconcile.Request] {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], nodes ...client.Object) {
		for _, req := range r.cacheNodesSelecting(ctx, nodes...) {
			q.Add(req)
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		GenericFunc: func(ctx context.Context, e event.TypedGenericEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
	}
}

// cacheNodesSelecting lists the CacheNodes whose nodeSelector matches the labels of any
// of nodes.
func (r *Reconciler) cacheNodesSelecting(ctx context.Context, nodes ...client.Object) []reconcile.Request {
	list := &v1alpha1.CacheNodeList{}
	// Read only: the cache's own objects, not a copy of every CacheNode per Node event.
	if err := r.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Failed to list CacheNodes for a Node event")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		cn := &list.Items[i]
		selector := labels.SelectorFromSet(cn.Spec.NodeSelector)
		for _, node := range nodes {
			if node != nil && selector.Matches(labels.Set(node.GetLabels())) {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cn)})
				break
			}
		}
	}
	return reqs
}

// nodePlacementChanged passes Node creations, deletions, and updates of labels or taints;
// status heartbeats are ignored.
func nodePlacementChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			oldNode, okOld := e.ObjectOld.(*corev1.Node)
			newNode, okNew := e.ObjectNew.(*corev1.Node)
			if !okOld || !okNew {
				return true
			}
			return !equality.Semantic.DeepEqual(oldNode.Labels, newNode.Labels) ||
				!equality.Semantic.DeepEqual(oldNode.Spec.Taints, newNode.Spec.Taints)
		},
	}
}

// clippingRecorder records events whose note fits what the API takes (events.k8s.io: 1 KiB):
// a note that echoes a long spec value or a kubelet's message is clipped, not refused.
type clippingRecorder struct{ events.EventRecorder }

// maxEventNote is the API's bound on an event's note, less room for the ellipsis.
const maxEventNote = 1024 - 4

func (c clippingRecorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	c.EventRecorder.Eventf(regarding, related, eventtype, reason, action, "%s", clip(fmt.Sprintf(note, args...), maxEventNote))
}
