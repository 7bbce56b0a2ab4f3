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
	"flag"
	"fmt"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

var controlPlaneAway = flag.Duration("control-plane-away", time.Minute, "how long TestRealNodeServesWithTheControlPlaneAway keeps the control plane stopped")

// TestRealNodeServesWithTheControlPlaneAway: the operator, then the whole control plane
// (etcd, the API server, the controllers) stop for a minute. The cache pod on the real
// node keeps serving from its cache, with its last configuration, every request answered,
// and is not restarted. Once the API server is back, a purge created while the operator
// is still away is Complete when the operator returns.
// Serial, as TestOperatorRestartMidStream: it stops what every other test needs, and Go
// runs it before the parallel ones.
func TestRealNodeServesWithTheControlPlaneAway(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	origin, hits := newOrigin(t, "origin")
	cn := realCacheNode(t, ns, "away", origin)
	pod, base := runCache(t, g, cn)
	for _, o := range []string{"/a/1", "/a/2"} {
		get(g, base+o)
		_, status := get(g, base+o)
		g.Expect(status).To(Equal("HIT"), o)
	}
	restarts := pod.Status.ContainerStatuses[0].RestartCount
	before := hits()

	operator.kill()
	operatorAway := true
	t.Cleanup(func() {
		if operatorAway {
			_ = operator.start()
		}
	})
	g.Expect(controlPlane.Pause(ctx)).To(Succeed())
	paused := true
	t.Cleanup(func() {
		if paused {
			_ = controlPlane.Resume(ctx)
		}
	})
	stopped := time.Now()
	c := &http.Client{Timeout: 5 * time.Second}
	var requests, failed int
	for time.Since(stopped) < *controlPlaneAway {
		for _, o := range []string{"/a/1", "/a/2"} {
			requests++
			r, err := testkit.Fetch(ctx, c, base+o, http.Header{"Host": {siteHost}})
			if err != nil || r.Code != http.StatusOK || r.Header.Get("X-Cache-Status") != "HIT" {
				failed++
				if failed <= 5 {
					t.Errorf("GET %s with the control plane away: %v %v", o, err, r)
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("control plane away for %s: %d requests, %d not a HIT", time.Since(stopped).Round(time.Second), requests, failed)
	g.Expect(hits()).To(Equal(before), "the origin was asked while the cache held everything")
	resumed := time.Now()
	g.Expect(controlPlane.Resume(ctx)).To(Succeed())
	paused = false
	t.Logf("the control plane answered again %s after its start", time.Since(resumed).Round(time.Millisecond))

	// The operator is still away: a purge created now waits for it.
	p := &v1alpha1.CachePurge{ObjectMeta: metav1.ObjectMeta{Name: "while-away", Namespace: ns},
		Spec: v1alpha1.CachePurgeSpec{CacheNode: cn.Name, Scope: v1alpha1.PurgeURLs, URLs: []string{fmt.Sprintf("http://%s/a/1", siteHost)}}}
	g.Expect(k8s.Create(ctx, p)).To(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		g.Expect(p.Status.Conditions).To(BeEmpty())
	}, 2*time.Second, interval).Should(Succeed())
	_, status := get(g, base+"/a/1")
	g.Expect(status).To(Equal("HIT"), "no purge without the operator")

	g.Expect(operator.start()).To(Succeed())
	operatorAway = false
	back := time.Now()
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionComplete)).To(BeTrue(), "%+v", p.Status)
	}, timeout, interval).Should(Succeed())
	t.Logf("the purge created while the operator was away: Complete %s after it returned", time.Since(back).Round(time.Millisecond))
	_, status = get(g, base+"/a/1")
	g.Expect(status).To(Equal("MISS"), "the purged object")
	_, status = get(g, base+"/a/2")
	g.Expect(status).To(Equal("HIT"), "an object the purge did not name")
	// A minute after the kubelet reached the API server again, its report is current.
	pod = cachePod(g, ns, cn.Name)
	g.Expect(pod.Status.ContainerStatuses[0].RestartCount).To(Equal(restarts), "the cache container restarted")
}
