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
	"net"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestRealNodeKubeletRefusesPods: the test node's kubelet takes anonymous requests (the
// local API server has no client certificate for it), so its port answers the API server
// over the node's link and the node itself, and resets a pod's connection: from a cache
// pod's network namespace, no listing or exec of the node's pods.
func TestRealNodeKubeletRefusesPods(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	origin, _ := newOrigin(t, "origin")
	pod, _ := runCache(t, g, realCacheNode(t, ns, "kubelet", origin))

	curl := "curl -sSk --max-time 3 -o /dev/null -w %{http_code} https://" + net.JoinHostPort(node.slot.LinkNode, "10250") + "/pods"
	g.Expect(node.exec(t, "sh", "-c", curl)).To(Equal("200"), "the kubelet's port from the node")

	agent := strings.Fields(node.exec(t, "pgrep", "-o", "-f", "pod="+ns+"/"+pod.Name))
	g.Expect(agent).To(HaveLen(1), "the agent of pod %s", pod.Name)
	out, err := node.run("exec", "nsenter", "-t", agent[0], "-n", "sh", "-c", curl)
	g.Expect(err).To(HaveOccurred(), "the kubelet's port from pod %s answered: %s", pod.Name, out)
	g.Expect(strings.TrimSpace(out)).To(HaveSuffix("000"), "no HTTP answer from the kubelet's port to pod %s", pod.Name)
	t.Logf("the kubelet's port from the node: 200; from pod %s: %s", pod.Name, strings.Join(strings.Fields(out), " "))
}
