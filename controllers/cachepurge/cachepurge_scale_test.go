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

package cachepurge

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

var (
	scaleNodes  = flag.Int("purge-nodes", 10, "Cache pods (test agents) TestFanOutScale purges.")
	scalePurges = flag.Int("purges", 3, "CachePurges TestFanOutScale creates one after the other.")
)

// TestFanOutScale creates CachePurges one after the other for a CacheNode of -purge-nodes
// pods whose agents check each signature, and logs how long each took from creation to
// Complete (p50, p99): the operator's side of a purge (the agents answer at once). Run
// with -purge-nodes 100 -purges 20 -v for the figures.
func TestFanOutScale(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	cn := newCacheNode(t, ns)
	for i := range *scaleNodes {
		cachePod(t, cn, fmt.Sprintf("node-%03d", i), startTestAgent(t, 1))
	}
	var took []time.Duration
	for i := range *scalePurges {
		p := newPurge(ns, 3600)
		p.Name = fmt.Sprintf("scale-%d", i)
		start := time.Now()
		g.Expect(k8s.Create(context.Background(), p)).To(Succeed())
		g.Eventually(func(g Gomega) {
			getPurge(g, p)
			g.Expect(conditionOf(p, v1alpha1.ConditionComplete).Status).To(Equal(metav1.ConditionTrue))
		}, timeout, 5*time.Millisecond).Should(Succeed())
		took = append(took, time.Since(start))
		g.Expect(p.Status.DoneNodes).To(BeEquivalentTo(*scaleNodes))
	}
	t.Logf("CachePurge created -> Complete on %d nodes, %d purges: p50 %.0fms, p99 %.0fms", *scaleNodes, len(took),
		testkit.Millis(testkit.Percentile(took, 50)), testkit.Millis(testkit.Percentile(took, 99)))
}
