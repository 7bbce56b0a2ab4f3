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

// Package cachepod is what the operator's controllers share about a CacheNode's cache
// pods and the objects around them: their names, labels and annotations, where a pod's
// node agent listens, and a CachePurge as the agents take it. The CacheNode controller
// builds the objects; the CachePurge controller finds them with this package, not by
// importing the other controller.
package cachepod

import (
	"net"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// Labels of the objects edgepool creates.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagerName    = "edgepool"
	AppName        = "edgepool-cache"
	// AgentPortName names the cache container's port where the agent serves /status and /metrics.
	AgentPortName = "metrics"
)

// PurgesSinceAnnotation on a CacheNode's ConfigMap says how far back purges.json reaches:
// the CachePurge controller moves it past a purge it deletes (agentapi.ActivePurges.Since).
const PurgesSinceAnnotation = "edgepool.io/purges-since"

// SelectorLabels select the pods of one CacheNode. They never change, since a DaemonSet's
// selector is immutable.
func SelectorLabels(cn *v1alpha1.CacheNode) map[string]string {
	return map[string]string{LabelName: AppName, LabelInstance: cn.Name}
}

// ObjectLabels are set on every object edgepool creates; the manager's cache watches only these.
func ObjectLabels(cn *v1alpha1.CacheNode) map[string]string {
	l := SelectorLabels(cn)
	l[LabelManagedBy] = ManagerName
	return l
}

// ManagedObjectsSelector selects the ConfigMaps, DaemonSets, NetworkPolicies and Services edgepool creates.
func ManagedObjectsSelector() map[string]string {
	return map[string]string{LabelManagedBy: ManagerName}
}

// Names of a CacheNode's objects.
func ConfigMapName(cn *v1alpha1.CacheNode) string     { return cn.Name + "-nginx" }
func DaemonSetName(cn *v1alpha1.CacheNode) string     { return cn.Name }
func NetworkPolicyName(cn *v1alpha1.CacheNode) string { return cn.Name + "-cache" }

// Pollable reports whether a pod runs an agent that can be asked: the pod runs and has
// an address. Pods that are not ready are asked too, since a failed disk check is what
// keeps them unready.
func Pollable(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil && Address(pod) != "" && AgentPort(pod) != 0
}

// Address is where the agent listens: the pod IP, which is the node's IP with hostNetwork.
func Address(pod *corev1.Pod) string {
	if pod.Status.PodIP != "" {
		return pod.Status.PodIP
	}
	return pod.Status.HostIP
}

// AgentPort is the port the pod's agent listens on, as its DaemonSet declared it: during
// a change of port, old and new pods are each asked on their own.
func AgentPort(pod *corev1.Pod) int32 {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == AgentPortName {
				return p.ContainerPort
			}
		}
	}
	return 0
}

// AgentEndpoint is where a running cache pod's agent listens, host:port, or "" when the pod
// cannot be asked (not running, no address, no agent port).
func AgentEndpoint(pod *corev1.Pod) string {
	if !Pollable(pod) {
		return ""
	}
	return net.JoinHostPort(Address(pod), strconv.Itoa(int(AgentPort(pod))))
}

// PurgeSpec is a CachePurge's spec as the agents take it.
func PurgeSpec(s *v1alpha1.CachePurgeSpec) agentapi.PurgeSpec {
	spec := agentapi.PurgeSpec{Scope: string(s.Scope), URLs: s.URLs, Tags: s.Tags, Soft: s.Soft}
	for _, h := range s.Prefixes {
		spec.Prefixes = append(spec.Prefixes, agentapi.PurgeHost{Host: h.Host, Paths: h.Paths})
	}
	return spec
}
