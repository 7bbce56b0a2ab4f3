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

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// TestRealNodeShardedPodJoinsItsRing: a sharded cache pod on the real kubelet enters the
// ring once Ready (the operator renders its address, the agent reloads in place, and
// nginx as UID 101 listens on the peer port), and serves through the ring: the request
// goes to the key's owner, itself here, whose disks answer the second time, and the pod's
// hot tier (a memory volume) the third.
func TestRealNodeShardedPodJoinsItsRing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	origin, originHits := newOrigin(t, "origin")
	cn := realCacheNode(t, ns, "sharded", origin)
	cn.Spec.Sharding = &v1alpha1.Sharding{HotTier: &v1alpha1.HotTier{Size: resource.MustParse("8Mi")}}
	pod, base := runCache(t, g, cn)

	member := fmt.Sprintf("server %s:%d ", pod.Status.PodIP, v1alpha1.DefaultPeerPort)
	g.Eventually(func(g Gomega) {
		got := getCacheNode(g, ns, cn.Name)
		g.Expect(got.Status.Sharding).NotTo(BeNil())
		g.Expect(got.Status.Sharding.Members).To(BeEquivalentTo(1))
		cm := &corev1.ConfigMap{}
		g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: cn.Name + "-nginx"}, cm)).To(Succeed())
		g.Expect(cm.Data[agentapi.ConfigKey]).To(ContainSubstring(member))
		applied := conditionOf(got, "ConfigApplied")
		g.Expect(applied.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(applied.Message).To(ContainSubstring(got.Status.ConfigHash[:12]))
	}, timeout, interval).Should(Succeed())

	_, first := get(g, base+"/sharded")
	_, second := get(g, base+"/sharded")
	g.Expect([]string{first, second}).To(Equal([]string{"MISS", "HIT"}))
	g.Expect(originHits()).To(Equal(1))

	// The hot tier, a memory volume the cache user writes: the second request was copied.
	r, err := testkit.Fetch(ctx, http.DefaultClient, base+"/sharded", http.Header{"Host": {siteHost}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Header.Get("X-Hot-Cache-Status")).To(Equal("HIT"))
}
