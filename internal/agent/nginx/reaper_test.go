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

package nginx

import (
	"context"
	"os/exec"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// The cache container's root filesystem is read-only, so running nginx -t must not need
// a temp directory: on a real kubelet the pod never became Ready when it did.
func TestReaperRunNeedsNoWritableFilesystem(t *testing.T) {
	g := NewWithT(t)
	t.Setenv("TMPDIR", "/nonexistent/read-only-root")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := NewReaper(ctx)
	g.Expect(err).NotTo(HaveOccurred())

	out, err := r.Run(ctx, exec.Command("sh", "-c", "echo to-stdout; echo to-stderr >&2"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(out)).To(Equal("to-stdout\nto-stderr\n"))

	out, err = r.Run(ctx, exec.Command("sh", "-c", "echo failed >&2; exit 3"))
	g.Expect(err).To(MatchError(ContainSubstring("exit status 3")))
	g.Expect(string(out)).To(Equal("failed\n"))
}
