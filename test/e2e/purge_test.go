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
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/edgepool/edgepool/internal/testkit"
)

// A purge made with `edgepool purge` reaches the real cache pod: the operator signs it
// with the key it published in the CacheNode's ConfigMap, which the kubelet delivered to
// the pod, and the agent removes the object from nginx's cache on the real disk. The
// command returns when the CachePurge is Complete; the purged object is a MISS next,
// refilled from the origin, and the others are still HITs.
func TestRealNodePurgeWithTheCLI(t *testing.T) {
	g := NewWithT(t)
	ns := newNamespace(t)
	origin, hits := newOrigin(t, "origin")
	cn := realCacheNode(t, ns, "purged", origin)
	_, base := runCache(t, g, cn)
	for _, o := range []string{"/p/1", "/p/2"} {
		get(g, base+o)
		_, status := get(g, base+o)
		g.Expect(status).To(Equal("HIT"), o)
	}
	before := hits()

	cli := filepath.Join(t.TempDir(), "edgepool")
	g.Expect(testkit.GoBuild(context.Background(), root, cli, "./cmd/edgepool")).To(Succeed())
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	started := time.Now()
	out, err := exec.CommandContext(ctx, cli, "purge", "--kubeconfig", kubeconfig, "-n", ns, cn.Name,
		"--url", fmt.Sprintf("http://%s/p/1", siteHost), "--timeout", "2m").CombinedOutput()
	g.Expect(err).NotTo(HaveOccurred(), "edgepool purge: %s", out)
	t.Logf("edgepool purge returned after %s:\n%s", time.Since(started).Round(time.Millisecond), out)
	g.Expect(string(out)).To(ContainSubstring("1/1 nodes done"))

	_, status := get(g, base+"/p/1")
	g.Expect(status).To(Equal("MISS"), "the purged object")
	g.Expect(hits()).To(Equal(before+1), "the purged object is refilled from the origin, once")
	_, status = get(g, base+"/p/2")
	g.Expect(status).To(Equal("HIT"), "an object the purge did not name")
}
