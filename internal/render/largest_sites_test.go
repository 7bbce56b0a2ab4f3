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
	"fmt"
	"strings"
	"testing"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// TestLargestSitesPassNginxT: the most sites and hostnames the schema allows (16 sites of
// 16 hostnames of 253 characters) make a configuration nginx takes without a warning (its
// server_names hash, sized by default for far fewer and shorter names, warned).
func TestLargestSitesPassNginxT(t *testing.T) {
	nginx, err := testkit.NginxBinary()
	if err != nil {
		t.Fatal(err)
	}
	spec := &sampleCacheNode(t).Spec
	origin := spec.Origin
	spec.Origin = v1alpha1.Origin{} // each site has its own
	for s := range 16 {
		site := v1alpha1.Site{Name: fmt.Sprintf("site%d", s), Origin: origin}
		for h := range 16 {
			// 253 characters: labels of 63, 63, 63, 61, the first naming the site and host.
			first := fmt.Sprintf("s%02dh%02d", s, h)
			name := first + strings.Repeat("a", 63-len(first)) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)
			if h == 0 { // a wildcard, as long
				name = "*." + first + strings.Repeat("w", 61-len(first)) + name[63:]
			}
			site.Hostnames = append(site.Hostnames, name)
		}
		spec.Sites = append(spec.Sites, site)
	}
	for i := range spec.Sites {
		spec.Sites[i].TLS = &v1alpha1.SiteTLS{SecretName: fmt.Sprintf("site%d-tls", i)}
	}
	spec.Sharding = &v1alpha1.Sharding{}
	spec.Default()
	if n := len(spec.Sites[0].Hostnames[1]); n != 253 {
		t.Fatalf("a hostname of %d characters, want 253", n)
	}
	conf, err := render.NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := testkit.NginxT(nginx, conf, t.TempDir(), render.Facts(spec, conf).Certificates...); err != nil {
		t.Fatal(err)
	}
}
