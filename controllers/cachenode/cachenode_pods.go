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
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// Why a cache pod does not run: what the scheduler and the kubelet say, brought to the
// CacheNode (Ready and Degraded name it), so its author need not look for the pod.

// stuckAfter is how long a pod may stay Pending with nothing failing in its status
// before its own warning events are read: pulling an image or setting up a volume takes
// seconds, a volume that cannot mount is retried for ever with only an event to say why.
const stuckAfter = 20 * time.Second

// troubleRecheck is how often a CacheNode with stuck pods reads their warnings again: a
// warning changes no pod, so nothing else would enqueue it.
const troubleRecheck = 30 * time.Second

// maxTroubleLen bounds what one pod's trouble adds to a condition's message.
const maxTroubleLen = 400

// failingWaits are the reasons of a waiting container that does not get better alone.
var failingWaits = []string{
	"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
	"CrashLoopBackOff", "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
	"PreCreateHookError", "PostStartHookError",
}

// podTrouble is why one cache pod does not run.
type podTrouble struct {
	node, pod, why string
}

// targetNode is the node a cache pod is for: where it was bound, or before that the node
// its DaemonSet's affinity names.
func targetNode(pod *corev1.Pod) string {
	if pod.Spec.NodeName != "" {
		return pod.Spec.NodeName
	}
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range term.MatchFields {
				if f.Key == "metadata.name" && len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	return ""
}

// statusTrouble is what a pod's own status says is wrong: not schedulable, or a
// container that cannot start or keeps crashing; "" when it says nothing is.
func statusTrouble(pod *corev1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return "not scheduled: " + c.Message
		}
	}
	statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
	for _, s := range statuses {
		w := s.State.Waiting
		if w == nil || !slices.Contains(failingWaits, w.Reason) {
			continue
		}
		why := fmt.Sprintf("container %s: %s", s.Name, w.Reason)
		if w.Message != "" && w.Reason != "CrashLoopBackOff" { // the back-off's message says only that
			why += ": " + w.Message
		}
		if t := s.LastTerminationState.Terminated; t != nil {
			why += fmt.Sprintf("; it last exited with %d (%s) after %d restarts", t.ExitCode, t.Reason, s.RestartCount)
			if msg := strings.TrimSpace(t.Message); msg != "" {
				why += ": " + msg
			}
		}
		return why
	}
	return ""
}

// stuckPending says whether a Pending pod has waited long enough for its warnings to be read.
func stuckPending(pod *corev1.Pod, now time.Time) bool {
	return pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodPending &&
		now.Sub(pod.CreationTimestamp.Time) >= stuckAfter
}

// podTroubles says why each cache pod that is not running is stuck: from its status, or
// for a pod stuck Pending with nothing in its status, from the newest of warnings (the
// pods' Warning events, keyed by pod UID) about it. spec names the disks behind a
// volume that does not mount. A pod that is starting, running or going away has none.
func podTroubles(spec *v1alpha1.CacheNodeSpec, pods []corev1.Pod, warnings map[string][]corev1.Event, now time.Time) []podTrouble {
	var troubles []podTrouble
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded {
			continue
		}
		why := statusTrouble(pod)
		if why == "" && stuckPending(pod, now) {
			if e := newest(warnings[string(pod.UID)]); e != nil {
				why = e.Reason + ": " + e.Message + diskHint(spec, e.Message)
			}
		}
		if why != "" {
			troubles = append(troubles, podTrouble{node: targetNode(pod), pod: pod.Name, why: clip(why, maxTroubleLen)})
		}
	}
	slices.SortFunc(troubles, func(a, b podTrouble) int { return strings.Compare(a.node+"/"+a.pod, b.node+"/"+b.pod) })
	return troubles
}

// newest is the most recent of events, nil if none.
func newest(events []corev1.Event) *corev1.Event {
	var last *corev1.Event
	for i := range events {
		if last == nil || lastSeen(&events[i]).After(lastSeen(last)) {
			last = &events[i]
		}
	}
	return last
}

func lastSeen(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil:
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// diskHint tells the author which disk of the spec a kubelet's volume message is about
// (the pod's volume "disk-NAME"), and what to do when its path is not on the node.
func diskHint(spec *v1alpha1.CacheNodeSpec, msg string) string {
	for _, d := range spec.Disks {
		if !strings.Contains(msg, `"disk-`+d.Name+`"`) {
			continue
		}
		hint := fmt.Sprintf(" (disk %s at %s", d.Name, d.Path)
		if strings.Contains(msg, "hostPath type check failed") {
			hint += ": no such directory on the node; mount the disk there, or correct spec.disks' path"
		}
		return hint + ")"
	}
	return ""
}

// troubleMessage names the nodes whose pods do not run and why, some of them.
func troubleMessage(troubles []podTrouble) string {
	byNode := map[string]string{}
	for _, t := range troubles {
		node := t.node
		if node == "" {
			node = "no node"
		}
		if _, ok := byNode[node]; ok { // one pod per node says enough
			continue
		}
		byNode[node] = "pod " + t.pod + ": " + t.why
		if t.pod == "" {
			byNode[node] = t.why
		}
	}
	return nameSome(byNode)
}

// creationWindow is how recent the DaemonSet's last failure to create a pod must be to
// say why pods are missing: the controller retries with a back-off of up to 5 minutes.
const creationWindow = 10 * time.Minute

// creationRecheck is how soon the DaemonSet's warnings are read again while it has pods
// missing and none says why yet: its controller records the failure after it updated
// the status that enqueued the reconcile.
const creationRecheck = 5 * time.Second

// creationTrouble says why the DaemonSet ds cannot create cache pods (a PriorityClass or
// an admission policy refused them, a quota is exhausted), from its newest FailedCreate
// warning, while it has fewer pods than nodes that should run one; nil otherwise. It also
// says when to read the warnings again while pods are missing.
func (r *Reconciler) creationTrouble(ctx context.Context, ds *appsv1.DaemonSet, now time.Time) (*podTrouble, time.Duration, error) {
	if ds.Status.CurrentNumberScheduled >= ds.Status.DesiredNumberScheduled {
		return nil, 0, nil
	}
	events := &corev1.EventList{}
	if err := r.apiReader().List(ctx, events, client.InNamespace(ds.Namespace), client.MatchingFields{
		"involvedObject.uid": string(ds.UID), "type": corev1.EventTypeWarning, "reason": "FailedCreate"}); err != nil {
		return nil, creationRecheck, fmt.Errorf("list the events of DaemonSet %s: %w", ds.Name, err)
	}
	e := newest(events.Items)
	if e == nil || now.Sub(lastSeen(e)) > creationWindow {
		return nil, creationRecheck, nil
	}
	return &podTrouble{node: "DaemonSet " + ds.Name, why: clip(fmt.Sprintf("%d of %d cache pods not created: %s",
		ds.Status.DesiredNumberScheduled-ds.Status.CurrentNumberScheduled, ds.Status.DesiredNumberScheduled, e.Message), maxTroubleLen)}, troubleRecheck, nil
}

// readWarnings reads the Warning events of the stuck pods among pods, the first
// maxNamedNodes of them by node (those the message names), keyed by pod UID. It also
// says when to read them again: once a pod still starting may be stuck, or troubleRecheck
// while any is.
func (r *Reconciler) readWarnings(ctx context.Context, pods []corev1.Pod, now time.Time) (map[string][]corev1.Event, time.Duration, error) {
	var stuckPods []*corev1.Pod
	var after time.Duration
	for i := range pods {
		pod := &pods[i]
		switch {
		case stuckPending(pod, now):
			if statusTrouble(pod) == "" {
				stuckPods = append(stuckPods, pod)
			}
			after = soonest(after, troubleRecheck)
		case pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodPending:
			after = soonest(after, pod.CreationTimestamp.Add(stuckAfter).Sub(now)+time.Second)
		}
	}
	slices.SortFunc(stuckPods, func(a, b *corev1.Pod) int { return strings.Compare(targetNode(a), targetNode(b)) })
	warnings := map[string][]corev1.Event{}
	for _, pod := range stuckPods[:min(len(stuckPods), maxNamedNodes)] {
		events := &corev1.EventList{}
		// Read from the API server: the operator keeps no cache of the cluster's events.
		if err := r.apiReader().List(ctx, events, client.InNamespace(pod.Namespace), client.MatchingFields{
			"involvedObject.uid": string(pod.UID), "type": corev1.EventTypeWarning}); err != nil {
			return warnings, after, fmt.Errorf("list the events of Pod %s: %w", pod.Name, err)
		}
		warnings[string(pod.UID)] = events.Items
	}
	return warnings, after, nil
}
