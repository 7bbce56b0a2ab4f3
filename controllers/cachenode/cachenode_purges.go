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
	"crypto/ed25519"
	"encoding/base64"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/cachepod"
)

// What a CacheNode's ConfigMap carries for purges, beside nginx.conf (none of it is part of
// the configuration nginx runs: the config hash and nginx ignore it):
//   - operator.pub, the public keys the agents check the operator's purge requests
//     against: this operator's, and the one it found published before (a new leader
//     publishes its key first, and purges the previous one signed still verify);
//   - purges.json, the CacheNode's purges, which a cache pod applies before it serves
//     again after a restart (agentapi.ActivePurges).
const (
	// OperatorKeysAnnotation on the ConfigMap lists the published keys (base64, newest
	// first): the manager's cache drops ConfigMaps' data, and keeps annotations.
	OperatorKeysAnnotation = "edgepool.io/operator-keys"
	// maxPurgesBytes bounds purges.json, well inside a ConfigMap's 1 MiB with nginx.conf.
	// The largest purge the CachePurge schema admits (MaxPurgeCharacters) fits alone, so
	// none is ever left out of the list, and the horizon moved past it, for its size.
	maxPurgesBytes = 256 << 10
)

// publishedKeys are the keys to publish: mine, then the key published before mine (the
// previous leader's), so that the purges it signed still verify. What this operator
// published already stays as it is: a restart changes the ConfigMap once.
func publishedKeys(live *corev1.ConfigMap, mine ed25519.PublicKey) []ed25519.PublicKey {
	keys := []ed25519.PublicKey{mine}
	if live == nil {
		return keys
	}
	var published []ed25519.PublicKey
	for _, s := range strings.SplitN(live.Annotations[OperatorKeysAnnotation], ",", 2) {
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(k) != ed25519.PublicKeySize {
			break
		}
		published = append(published, k)
	}
	switch {
	case len(published) == 0:
	case !mine.Equal(published[0]):
		keys = append(keys, published[0])
	case len(published) > 1:
		keys = append(keys, published[1])
	}
	return keys
}

func keysAnnotation(keys []ed25519.PublicKey) string {
	s := make([]string, len(keys))
	for i, k := range keys {
		s[i] = base64.StdEncoding.EncodeToString(k)
	}
	return strings.Join(s, ",")
}

// purgesSince reads cachepod.PurgesSinceAnnotation; a missing or unreadable one reaches back to
// the beginning.
func purgesSince(live *corev1.ConfigMap) time.Time {
	if live == nil {
		return time.Time{}
	}
	t, _ := time.Parse(time.RFC3339, live.Annotations[cachepod.PurgesSinceAnnotation])
	return t
}

// activePurges lists cn's purges, oldest first, for its ConfigMap: all of them since
// since, unless they would not fit (MaxActivePurges, maxPurgesBytes), when the oldest are
// left out and Since moves past them. Generated is the newest purge's creation (or Since,
// or the CacheNode's creation), so that an unchanged set of purges writes nothing.
func activePurges(cn *v1alpha1.CacheNode, purges []v1alpha1.CachePurge, since time.Time) agentapi.ActivePurges {
	var mine []v1alpha1.CachePurge
	for _, p := range purges {
		if p.Spec.CacheNode == cn.Name && p.Namespace == cn.Namespace && !p.CreationTimestamp.Time.Before(since) {
			mine = append(mine, p)
		}
	}
	slices.SortStableFunc(mine, func(a, b v1alpha1.CachePurge) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(string(a.UID), string(b.UID))
	})
	list := agentapi.ActivePurges{Since: since.UTC()}
	size := 0
	for i := len(mine) - 1; i >= 0; i-- {
		p := agentapi.ActivePurge{UID: string(mine[i].UID), Spec: cachepod.PurgeSpec(&mine[i].Spec)}
		n := p.Size()
		if len(list.Purges) == agentapi.MaxActivePurges || size+n > maxPurgesBytes {
			// Left out: every purge listed was created after it.
			list.Since = mine[i].CreationTimestamp.Add(time.Second).UTC()
			break
		}
		size += n
		list.Purges = append(list.Purges, p)
	}
	slices.Reverse(list.Purges)
	list.Generated = cn.CreationTimestamp.UTC()
	if list.Since.After(list.Generated) {
		list.Generated = list.Since
	}
	for _, p := range mine {
		if t := p.CreationTimestamp.UTC(); t.After(list.Generated) {
			list.Generated = t
		}
	}
	return list
}

// cacheNodeOfPurge maps a CachePurge to the CacheNode it targets.
func cacheNodeOfPurge(_ context.Context, obj client.Object) []reconcile.Request {
	p, ok := obj.(*v1alpha1.CachePurge)
	if !ok || p.Spec.CacheNode == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.CacheNode}}}
}
