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

package render_test

import (
	"encoding/binary"
	"flag"
	"math/rand/v2"
	"testing"

	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/specgen"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

var fuzzSeeds = flag.Int("fuzz-seeds", 100, "how many seed inputs FuzzNginxConf runs as a plain test")

// FuzzNginxConf: whatever the renderer's allowlists let through, nginx accepts. Each input
// drives specgen's draw of a CacheNode from the CRD's schema (the bytes are its random
// numbers); the drawn manifest is decoded and defaulted as `edgepool render` does, and a
// spec the renderer renders must pass `nginx -t`. Specs the renderer refuses are left to
// TestAcceptedSpecsRenderAndPassNginxT (api/v1alpha1), which checks that the API server
// refuses them first. `go test` runs -fuzz-seeds inputs; explore further with
// go test ./internal/render -run '^$' -fuzz FuzzNginxConf -fuzztime 5m.
func FuzzNginxConf(f *testing.F) {
	gen, err := specgen.Load("../../config/crd/bases/cache.edgepool.io_cachenodes.yaml")
	if err != nil {
		f.Fatal(err)
	}
	nginx, err := testkit.NginxBinary()
	if err != nil {
		f.Fatal(err)
	}
	for i := range *fuzzSeeds {
		f.Add(binary.LittleEndian.AppendUint64(nil, uint64(i)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		manifest := gen.Manifest(rand.New(specgen.NewSource(data)), "fuzz")
		cn, err := render.DecodeCacheNode(manifest)
		if err != nil {
			return // e.g. a quantity out of int64's range: the API server refuses it too
		}
		conf, err := render.NginxConf(&cn.Spec)
		if err != nil {
			return
		}
		if err := testkit.NginxT(nginx, conf, t.TempDir(), render.Facts(&cn.Spec, conf).Certificates...); err != nil {
			t.Fatalf("the renderer rendered a config nginx refuses: %v\nmanifest: %s\n%s", err, manifest, conf)
		}
	})
}
