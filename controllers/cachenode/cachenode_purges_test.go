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
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/cachepod"
)

func TestPublishedKeys(t *testing.T) {
	mine, _, _ := ed25519.GenerateKey(rand.Reader)
	before, _, _ := ed25519.GenerateKey(rand.Reader)
	older, _, _ := ed25519.GenerateKey(rand.Reader)
	cm := func(keys ...ed25519.PublicKey) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{OperatorKeysAnnotation: keysAnnotation(keys)}}}
	}
	for _, tc := range []struct {
		name string
		live *corev1.ConfigMap
		want []ed25519.PublicKey
	}{
		{"a new ConfigMap", nil, []ed25519.PublicKey{mine}},
		{"published by me", cm(mine, before), []ed25519.PublicKey{mine, before}},
		{"published by me alone", cm(mine), []ed25519.PublicKey{mine}},
		{"published by the previous leader", cm(before, older), []ed25519.PublicKey{mine, before}},
		{"an unreadable annotation", &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{OperatorKeysAnnotation: "x,y"}}}, []ed25519.PublicKey{mine}},
	} {
		if got := publishedKeys(tc.live, mine); keysAnnotation(got) != keysAnnotation(tc.want) {
			t.Errorf("%s: %d keys, want %d", tc.name, len(got), len(tc.want))
		}
	}
}

func TestActivePurges(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cn := &v1alpha1.CacheNode{ObjectMeta: metav1.ObjectMeta{Name: "edge", Namespace: "ns", CreationTimestamp: metav1.NewTime(t0)}}
	purge := func(i int, node string, urlLen int) v1alpha1.CachePurge {
		return v1alpha1.CachePurge{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint(i), Namespace: "ns", UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i)),
				CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(i) * time.Minute))},
			Spec: v1alpha1.CachePurgeSpec{CacheNode: node, Scope: v1alpha1.PurgeURLs,
				URLs: []string{"https://a.example/" + strings.Repeat("x", urlLen)}},
		}
	}
	// Listed oldest first; another CacheNode's purges and those before since are not.
	got := activePurges(cn, []v1alpha1.CachePurge{purge(3, "edge", 1), purge(1, "edge", 1), purge(2, "other", 1), purge(0, "edge", 1)}, t0.Add(30*time.Second))
	if len(got.Purges) != 2 || got.Purges[0].UID != string(purge(1, "", 0).UID) || got.Purges[1].UID != string(purge(3, "", 0).UID) {
		t.Errorf("listed %+v", got.Purges)
	}
	if !got.Since.Equal(t0.Add(30*time.Second)) || !got.Generated.Equal(t0.Add(3*time.Minute)) || got.Validate() != nil {
		t.Errorf("since %v, generated %v, %v", got.Since, got.Generated, got.Validate())
	}
	if empty := activePurges(cn, nil, time.Time{}); !empty.Generated.Equal(t0) || len(empty.Purges) != 0 || empty.Validate() != nil {
		t.Errorf("no purges: %+v", empty)
	}
	// The largest purge the schema admits fits the list alone, even of characters JSON
	// could escape: it is never left out, nor the horizon moved past it, for its size.
	for _, largest := range []v1alpha1.CachePurgeSpec{
		func() v1alpha1.CachePurgeSpec {
			s := v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: v1alpha1.PurgeURLs}
			for i := range 100 {
				s.URLs = append(s.URLs, fmt.Sprintf("https://a.example/%03d", i)+strings.Repeat("&", v1alpha1.MaxPurgeCharacters/100-len("https://a.example/000")))
			}
			return s
		}(),
		func() v1alpha1.CachePurgeSpec {
			s := v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: v1alpha1.PurgePrefixes}
			for h := range 16 {
				host := v1alpha1.PurgeHost{Host: fmt.Sprintf("h%02d.example", h)}
				for i := range 32 {
					host.Paths = append(host.Paths, fmt.Sprintf("/%03d", i)+strings.Repeat("<", v1alpha1.MaxPurgeCharacters/(16*32)-len(host.Host)/32-5))
				}
				s.Prefixes = append(s.Prefixes, host)
			}
			return s
		}(),
	} {
		p := purge(5, "edge", 0)
		p.Spec = largest
		got := activePurges(cn, []v1alpha1.CachePurge{p}, time.Time{})
		if len(got.Purges) != 1 || !got.Since.IsZero() {
			t.Errorf("the largest %s purge was left out (%d listed, since %v)", largest.Scope, len(got.Purges), got.Since)
		}
		if n := len(got.Marshal()); n > maxPurgesBytes {
			t.Errorf("the largest %s purge takes %d bytes of purges.json, over %d", largest.Scope, n, maxPurgesBytes)
		}
	}

	// Too many to fit: the oldest are left out and since moves past them.
	var many []v1alpha1.CachePurge
	for i := range 300 {
		many = append(many, purge(i, "edge", 2000))
	}
	big := activePurges(cn, many, time.Time{})
	data, _ := json.Marshal(big)
	if len(data) > maxPurgesBytes+1024 || big.Validate() != nil {
		t.Errorf("%d bytes, %v", len(data), big.Validate())
	}
	oldest := big.Purges[0].UID
	n := 0
	if _, err := fmt.Sscanf(oldest[len(oldest)-12:], "%d", &n); err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(time.Duration(n-1)*time.Minute + time.Second); !big.Since.Equal(want) || n+len(big.Purges) != 300 {
		t.Errorf("kept %d from %d, since %v; want the newest and since %v", len(big.Purges), n, big.Since, want)
	}
}

// TestConfigMapPublishesKeysAndPurges: the ConfigMap carries the operator's key and the
// CacheNode's purges; a new purge changes the list and not the configuration.
func TestConfigMapPublishesKeysAndPurges(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	cn := newCacheNode(ns, "edge", "purges")
	g.Expect(k8s.Create(ctx, cn)).To(Succeed())
	key := client.ObjectKeyFromObject(cn)
	cmKey := types.NamespacedName{Namespace: ns, Name: cachepod.ConfigMapName(cn)}
	cm := &corev1.ConfigMap{}
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, cmKey, cm)).To(Succeed())
		g.Expect(cm.Data).To(HaveKey(agentapi.ActivePurgesKey))
	}, timeout, interval).Should(Succeed())
	keys, err := agentapi.ParseOperatorKeys([]byte(cm.Data[agentapi.OperatorKeysKey]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys).To(HaveLen(1))
	g.Expect(keys[0].Equal(operatorKey.Public())).To(BeTrue())
	g.Eventually(func(g Gomega) {
		get(g, cn, key)
		g.Expect(cn.Status.ConfigHash).NotTo(BeEmpty())
	}, timeout, interval).Should(Succeed())
	hash := cn.Status.ConfigHash

	p := &v1alpha1.CachePurge{ObjectMeta: metav1.ObjectMeta{Name: "home", Namespace: ns},
		Spec: v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: v1alpha1.PurgeURLs, URLs: []string{"https://www.example.com/"}}}
	g.Expect(k8s.Create(ctx, p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, cmKey, cm)).To(Succeed())
		var list agentapi.ActivePurges
		g.Expect(json.Unmarshal([]byte(cm.Data[agentapi.ActivePurgesKey]), &list)).To(Succeed())
		g.Expect(list.Validate()).To(Succeed())
		g.Expect(list.Purges).To(ConsistOf(agentapi.ActivePurge{UID: string(p.UID),
			Spec: agentapi.PurgeSpec{Scope: "URLs", URLs: []string{"https://www.example.com/"}}}))
	}, timeout, interval).Should(Succeed())
	get(g, cn, key)
	g.Expect(cn.Status.ConfigHash).To(Equal(hash), "a purge changed the configuration")

	// Deleted, with since moved past it (as the CachePurge controller does): not listed.
	patch := client.MergeFrom(cm.DeepCopy())
	metav1.SetMetaDataAnnotation(&cm.ObjectMeta, cachepod.PurgesSinceAnnotation, p.CreationTimestamp.UTC().Format(time.RFC3339))
	g.Expect(k8s.Patch(ctx, cm, patch)).To(Succeed())
	g.Expect(k8s.Delete(ctx, p)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, cmKey, cm)).To(Succeed())
		var list agentapi.ActivePurges
		g.Expect(json.Unmarshal([]byte(cm.Data[agentapi.ActivePurgesKey]), &list)).To(Succeed())
		g.Expect(list.Purges).To(BeEmpty())
		g.Expect(list.Since).To(Equal(p.CreationTimestamp.UTC()))
		g.Expect(cm.Annotations).To(HaveKey(cachepod.PurgesSinceAnnotation), "the CacheNode controller's apply removed the annotation")
	}, timeout, interval).Should(Succeed())
}

// The hash the pods are nudged with changes with the configuration and the purges, never
// with the operator's keys alone: a restarted operator costs no pod a write.
func TestVolumeHashLeavesOutTheOperatorKeys(t *testing.T) {
	cm := &corev1.ConfigMap{Data: map[string]string{agentapi.ConfigKey: "conf", agentapi.FactsKey: "{}",
		agentapi.OperatorKeysKey: "key 1", agentapi.ActivePurgesKey: `{"purges":[]}`}}
	base := volumeHash(cm)
	cm.Data[agentapi.OperatorKeysKey] = "key 2"
	if volumeHash(cm) != base {
		t.Error("a new operator key alone changed the announced hash")
	}
	for _, key := range []string{agentapi.ConfigKey, agentapi.FactsKey, agentapi.ActivePurgesKey} {
		changed := &corev1.ConfigMap{Data: maps.Clone(cm.Data)}
		changed.Data[key] += " "
		if volumeHash(changed) == base {
			t.Errorf("a change of %s left the announced hash as it was", key)
		}
	}
}
