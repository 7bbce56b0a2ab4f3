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
	"regexp"
	"strconv"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// A CacheNode with client limits on the real kubelet, behind a trusted proxy (this
// machine, whose X-Forwarded-For names the client): a client over its rate gets 429 from
// the cache pod while another is served, and the pod's agent counts the refusals.
func TestRealNodeClientLimits(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	origin, _ := newOrigin(t, "limits")
	cn := realCacheNode(t, ns, "limits", origin)
	cn.Spec.Listener.TrustedProxies = []string{linkHost + "/32"}
	const burst = 4
	cn.Spec.ClientLimits = &v1alpha1.ClientLimits{RequestsPerSecond: 1, Burst: burst}
	pod, base := runCache(t, g, cn)

	metric := regexp.MustCompile(`(?m)^edgepool_client_limited_total\{limit="rate",site=""\} ([0-9]+)$`)
	limited := func(g Gomega) int {
		r, err := testkit.Fetch(context.Background(), http.DefaultClient,
			fmt.Sprintf("http://%s:%d/metrics", pod.Status.PodIP, cn.Spec.Listener.AgentPort), nil)
		g.Expect(err).NotTo(HaveOccurred())
		m := metric.FindSubmatch(r.Body)
		g.Expect(m).NotTo(BeNil())
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	// Each refusal is counted before the next request: the agent's socket queues a few
	// lines, and a machine under load may schedule its reader later than nginx sends
	// them (nginx then drops a line rather than wait).
	refused := 0
	codes := func(client string, n int) map[int]int {
		got := map[int]int{}
		for range n {
			r, err := testkit.Fetch(context.Background(), http.DefaultClient, base+"/limited",
				http.Header{"Host": {siteHost}, "X-Forwarded-For": {client}})
			g.Expect(err).NotTo(HaveOccurred())
			got[r.Code]++
			if r.Code == http.StatusTooManyRequests {
				refused++
				g.Eventually(limited, timeout, interval).Should(Equal(refused), "the agent's count of refusals")
			}
		}
		return got
	}
	greedy := codes("198.51.100.1", 20)
	t.Logf("20 requests from one client, one after the other: %v", greedy)
	g.Expect(greedy[http.StatusTooManyRequests]).To(BeNumerically(">=", 5), "%v", greedy)
	g.Expect(greedy[http.StatusOK] + greedy[http.StatusTooManyRequests]).To(Equal(20))
	g.Expect(codes("198.51.100.2", burst)).To(Equal(map[int]int{http.StatusOK: burst}), "another client")
	g.Expect(limited(g)).To(Equal(greedy[http.StatusTooManyRequests]))
}
