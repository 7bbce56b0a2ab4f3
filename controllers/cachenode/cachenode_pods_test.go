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
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

var troubleNow = time.Date(2026, 11, 27, 8, 0, 0, 0, time.UTC)

// pendingPod is a cache pod for node, created age ago, Pending, its containers waiting.
func pendingPod(name, node string, age time.Duration, change ...func(*corev1.Pod)) corev1.Pod {
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(troubleNow.Add(-age))},
		Spec: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, c := range change {
		c(&pod)
	}
	return pod
}

func bound(pod *corev1.Pod) {
	pod.Spec.NodeName = pod.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields[0].Values[0]
}

// waiting has the cache container wait for reason.
func waiting(reason, msg string) func(*corev1.Pod) {
	return func(pod *corev1.Pod) {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: "cache",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}})
	}
}

func warning(pod, reason, msg string, ago time.Duration) corev1.Event {
	return corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: pod, UID: types.UID("uid-" + pod)},
		Type: corev1.EventTypeWarning, Reason: reason, Message: msg, LastTimestamp: metav1.NewTime(troubleNow.Add(-ago))}
}

func TestPodTroubles(t *testing.T) {
	spec := &v1alpha1.CacheNodeSpec{Disks: []v1alpha1.Disk{{Name: "hdd9", Path: "/mnt/edgepool/hdd9"}}}
	const mountFailed = `MountVolume.SetUp failed for volume "disk-hdd9" : hostPath type check failed: /mnt/edgepool/hdd9 is not a directory`
	cases := []struct {
		name     string
		pod      corev1.Pod
		warnings []corev1.Event
		want     string // node/pod: why, or "" for no trouble
	}{
		{name: "running", pod: pendingPod("a", "edge-1", time.Hour, bound, func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning })},
		{name: "starting, not yet stuck", pod: pendingPod("a", "edge-1", 5*time.Second, bound, waiting("ContainerCreating", "")),
			warnings: []corev1.Event{warning("a", "FailedMount", mountFailed, time.Second)}},
		{name: "stuck on a volume that does not mount", pod: pendingPod("a", "edge-1", time.Minute, bound, waiting("ContainerCreating", "")),
			warnings: []corev1.Event{warning("a", "FailedScheduling", "old news", 50*time.Second), warning("a", "FailedMount", mountFailed, 2*time.Second)},
			want:     "edge-1/a: FailedMount: " + mountFailed + " (disk hdd9 at /mnt/edgepool/hdd9: no such directory on the node; mount the disk there, or correct spec.disks' path)"},
		{name: "stuck with nothing said", pod: pendingPod("a", "edge-1", time.Minute, bound)},
		{name: "another pod's warning", pod: pendingPod("a", "edge-1", time.Minute, bound),
			warnings: []corev1.Event{warning("b", "FailedMount", mountFailed, time.Second)}},
		{name: "not schedulable", pod: pendingPod("a", "edge-2", 2*time.Second, func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/3 nodes are available: 1 Insufficient memory."}}
		}), want: "edge-2/a: not scheduled: 0/3 nodes are available: 1 Insufficient memory."},
		{name: "an image that does not pull, in the init step", pod: pendingPod("a", "edge-1", 3*time.Second, bound, func(p *corev1.Pod) {
			p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "adopt-disks", State: corev1.ContainerState{
				Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "edgepool/cache:v9"`}}}}
		}), want: `edge-1/a: container adopt-disks: ImagePullBackOff: Back-off pulling image "edgepool/cache:v9"`},
		{name: "a crash loop, with the last exit", pod: pendingPod("a", "edge-1", time.Hour, bound, func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "cache", RestartCount: 4,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 1m20s restarting failed container"}},
				LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "agent: no disk passed its checks\n"}}}}
		}), want: "edge-1/a: container cache: CrashLoopBackOff; it last exited with 1 (Error) after 4 restarts: agent: no disk passed its checks"},
		{name: "going away", pod: pendingPod("a", "edge-1", time.Hour, waiting("ImagePullBackOff", "x"), func(p *corev1.Pod) {
			p.DeletionTimestamp = &metav1.Time{Time: troubleNow}
		})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			warnings := map[string][]corev1.Event{}
			for _, e := range tc.warnings {
				warnings[string(e.InvolvedObject.UID)] = append(warnings[string(e.InvolvedObject.UID)], e)
			}
			var got []string
			for _, tr := range podTroubles(spec, []corev1.Pod{tc.pod}, warnings, troubleNow) {
				got = append(got, tr.node+"/"+tr.pod+": "+tr.why)
			}
			if want := strings.Join(nonEmpty(tc.want), "|"); strings.Join(got, "|") != want {
				t.Errorf("got  %q\nwant %q", strings.Join(got, "|"), want)
			}
		})
	}
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// A kubelet's message is clipped, and one pod per node is named.
func TestTroubleMessage(t *testing.T) {
	long := strings.Repeat("x", 2*maxTroubleLen)
	pods := []corev1.Pod{
		pendingPod("b", "edge-1", time.Minute, bound, waiting("CreateContainerError", long)),
		pendingPod("a", "edge-1", time.Minute, bound, waiting("CreateContainerError", "first")),
	}
	troubles := podTroubles(&v1alpha1.CacheNodeSpec{}, pods, nil, troubleNow)
	if len(troubles) != 2 || len(troubles[1].why) > maxTroubleLen+len("…") {
		t.Fatalf("troubles %+v", troubles)
	}
	if got, want := troubleMessage(troubles), "edge-1 (pod a: container cache: CreateContainerError: first)"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	// Pods the DaemonSet could not create are named by the DaemonSet.
	troubles = append(troubles, podTrouble{node: "DaemonSet edge", why: "1 of 2 cache pods not created: forbidden"})
	if got, want := troubleMessage(troubles), "DaemonSet edge (1 of 2 cache pods not created: forbidden), edge-1 (pod a: container cache: CreateContainerError: first)"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}
