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
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// AgentAccess says which pods, besides the kubelet on the pod's own node, may reach the cache
// pods' agent port (/metrics, /status): the operator's pods and the scrapers the cluster
// admin names. The cluster admin sets it through the operator's flags; a CacheNode author
// cannot widen it.
type AgentAccess struct {
	// OperatorNamespace is the namespace of the operator's pods. Empty (the operator runs
	// outside the cluster), no operator pod is admitted.
	OperatorNamespace string
	// OperatorPodLabels select the operator's pods within OperatorNamespace.
	OperatorPodLabels map[string]string
	// Scrapers are further peers, such as Prometheus.
	Scrapers []Peer
}

// Peer selects pods by the labels of their namespace and, optionally, their own labels.
// Namespace labels are required: pod labels alone would admit a pod so labelled in any
// namespace, and anyone who may create a pod may label it.
type Peer struct {
	NamespaceLabels map[string]string
	PodLabels       map[string]string
}

// NamespaceNameLabel is the label the API server sets on every namespace to its name.
const NamespaceNameLabel = "kubernetes.io/metadata.name"

// ParseLabels reads key=value[,key=value...] as label selector terms; "" is no labels.
func ParseLabels(s string) (map[string]string, error) {
	labels := map[string]string{}
	if s == "" {
		return labels, nil
	}
	for _, term := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(term, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not key=value", term)
		}
		if err := validateLabel(k, v); err != nil {
			return nil, err
		}
		if _, dup := labels[k]; dup {
			return nil, fmt.Errorf("label %q is given twice", k)
		}
		labels[k] = v
	}
	return labels, nil
}

// ParsePeer reads a scraper as comma-separated terms namespace:KEY=VALUE (at least one)
// and pod:KEY=VALUE, e.g.
// namespace:kubernetes.io/metadata.name=monitoring,pod:app.kubernetes.io/name=prometheus.
func ParsePeer(s string) (Peer, error) {
	p := Peer{NamespaceLabels: map[string]string{}, PodLabels: map[string]string{}}
	for _, term := range strings.Split(s, ",") {
		kind, kv, ok := strings.Cut(term, ":")
		var into map[string]string
		switch {
		case ok && kind == "namespace":
			into = p.NamespaceLabels
		case ok && kind == "pod":
			into = p.PodLabels
		default:
			return Peer{}, fmt.Errorf("%q is neither namespace:KEY=VALUE nor pod:KEY=VALUE", term)
		}
		labels, err := ParseLabels(kv)
		if err != nil {
			return Peer{}, err
		}
		for k, v := range labels {
			if _, dup := into[k]; dup {
				return Peer{}, fmt.Errorf("%s label %q is given twice", kind, k)
			}
			into[k] = v
		}
	}
	if len(p.NamespaceLabels) == 0 {
		return Peer{}, errors.New("a scraper needs at least one namespace:KEY=VALUE: pod labels alone admit pods of every namespace")
	}
	return p, nil
}

// String writes p back in ParsePeer's form, keys sorted.
func (p Peer) String() string {
	var terms []string
	for _, k := range slices.Sorted(maps.Keys(p.NamespaceLabels)) {
		terms = append(terms, "namespace:"+k+"="+p.NamespaceLabels[k])
	}
	for _, k := range slices.Sorted(maps.Keys(p.PodLabels)) {
		terms = append(terms, "pod:"+k+"="+p.PodLabels[k])
	}
	return strings.Join(terms, ",")
}

func validateLabel(k, v string) error {
	if errs := validation.IsQualifiedName(k); len(errs) > 0 {
		return fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
		return fmt.Errorf("label value %q: %s", v, strings.Join(errs, "; "))
	}
	return nil
}
