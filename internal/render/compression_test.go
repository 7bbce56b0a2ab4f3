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

package render

import (
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// The sites sample compresses (spec.compression): www fills through its compressor, with
// the encoding in its key; media caches in slices, so it is left as its origin sends it.
// nginx loads brotli's module only while a site compresses with it.
func TestCompressionSkipsSlicedSites(t *testing.T) {
	spec := loadSpec(t, goldenCases["sites"])
	conf, err := NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"server_name gzip.www.edgepool.invalid;",
		"server_name origin.www.edgepool.invalid;",
		`proxy_cache_key "$edgepool_encoding:$host$request_uri";`,
		`proxy_cache_key "$host$request_uri$slice_range";`,
		"load_module modules/ngx_http_brotli_filter_module.so;",
		"brotli on;",
		"gzip on;",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q", want)
		}
	}
	if strings.Contains(conf, "media.edgepool.invalid") {
		t.Error("the sliced site media has a compressor")
	}
	if got := len(compressors(spec)); got != 1 {
		t.Errorf("%d compressing sites, want www alone", got)
	}
	spec.Compression.Brotli = v1alpha1.CompressionOff
	conf, err = NginxConf(spec)
	if err != nil || strings.Contains(conf, "load_module") || strings.Contains(conf, "brotli") || !strings.Contains(conf, `"$edgepool_encoding_gzip:$host$request_uri"`) {
		t.Errorf("brotli off: %v, or nginx.conf loads or configures brotli, or keys by another variable", err)
	}
	spec.Sites[0].Compression = &v1alpha1.Compression{Gzip: v1alpha1.CompressionOff, Brotli: v1alpha1.CompressionOff}
	if conf, _ := NginxConf(spec); strings.Contains(conf, "edgepool_encoding") {
		t.Error("www's gzip Off still compresses")
	}
}

// A compression of text/html alone (which each filter compresses without being told)
// renders no empty types directive.
func TestCompressionOfHTMLAlone(t *testing.T) {
	spec := loadSpec(t, goldenCases["sites"])
	spec.Compression.Types = []string{"text/html"}
	conf, err := NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(conf, "_types ;") {
		t.Error("an empty types directive")
	}
	if err := nginxTest(t, nginxBinary(t), conf, Facts(spec, conf).Certificates...); err != nil {
		t.Error(err)
	}
}

func TestValidateRejectsCompression(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.Compression)
		field  string
	}{
		{"gzip unknown", func(c *v1alpha1.Compression) { c.Gzip = "Yes" }, "spec.compression.gzip"},
		{"brotli unknown", func(c *v1alpha1.Compression) { c.Brotli = "on" }, "spec.compression.brotli"},
		{"brotli level 12", func(c *v1alpha1.Compression) { c.BrotliLevel = ptr.To[int32](12) }, "spec.compression.brotliLevel"},
		{"brotli level unset", func(c *v1alpha1.Compression) { c.BrotliLevel = nil }, "spec.compression.brotliLevel"},
		{"level 0", func(c *v1alpha1.Compression) { c.GzipLevel = 0 }, "spec.compression.gzipLevel"},
		{"level 10", func(c *v1alpha1.Compression) { c.GzipLevel = 10 }, "spec.compression.gzipLevel"},
		{"min length negative", func(c *v1alpha1.Compression) { c.MinLength = ptr.To[int32](-1) }, "spec.compression.minLength"},
		{"no types", func(c *v1alpha1.Compression) { c.Types = nil }, "spec.compression.types"},
		{"type injection", func(c *v1alpha1.Compression) { c.Types = []string{"text/css; gzip off"} }, "spec.compression.types[0]"},
		{"type with a variable", func(c *v1alpha1.Compression) { c.Types = []string{"text/$host"} }, "spec.compression.types[0]"},
		{"type with a quote", func(c *v1alpha1.Compression) { c.Types = []string{`text/"css`} }, "spec.compression.types[0]"},
		{"type wildcard", func(c *v1alpha1.Compression) { c.Types = []string{"*"} }, "spec.compression.types[0]"},
		{"type upper case", func(c *v1alpha1.Compression) { c.Types = []string{"Text/CSS"} }, "spec.compression.types[0]"},
		{"type too long", func(c *v1alpha1.Compression) { c.Types = []string{"application/" + strings.Repeat("x", 35)} }, "spec.compression.types[0]"},
		{"type twice", func(c *v1alpha1.Compression) { c.Types = []string{"text/css", "text/css"} }, "spec.compression.types[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := loadSpec(t, goldenCases["sites"])
			tc.mutate(spec.Compression)
			conf, err := NginxConf(spec)
			if err == nil {
				t.Fatalf("rendered an invalid spec:\n%s", conf)
			}
			if !strings.Contains(err.Error(), tc.field+":") {
				t.Errorf("error does not name %s: %v", tc.field, err)
			}
		})
	}
}
