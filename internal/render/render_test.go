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
	"bytes"
	"flag"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
	"github.com/edgepool/edgepool/internal/test/certs"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenCases are the manifests rendered to testdata/<name>.golden.
var goldenCases = map[string]string{
	"sample":           "../../config/samples/cache_v1alpha1_cachenode.yaml",
	"sync-single-disk": "testdata/sync-single-disk.yaml",
	"sixteen-disks":    "testdata/sixteen-disks.yaml",
	"sites":            "../../config/samples/cache_v1alpha1_cachenode_sites.yaml",
	"sharded":          "../../config/samples/cache_v1alpha1_cachenode_sharded.yaml",
	"sharded-sites":    "testdata/sharded-sites.yaml",
	"dual-stack":       "testdata/dual-stack.yaml",
}

// goldenRing is the ring the sharded golden cases are rendered with: out of order and
// with a duplicate, as a pod list may give them.
var goldenRing = []Member{
	{Name: "edge-c", Addr: netip.MustParseAddr("10.244.2.9")}, {Name: "edge-a", Addr: netip.MustParseAddr("10.244.0.5")},
	{Name: "edge-b", Addr: netip.MustParseAddr("10.244.1.7")}, {Name: "edge-a", Addr: netip.MustParseAddr("10.244.0.5")},
}

func loadSpec(t testing.TB, file string) *v1alpha1.CacheNodeSpec {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cn, err := DecodeCacheNode(data)
	if err != nil {
		t.Fatal(err)
	}
	return &cn.Spec
}

// goldenRings are the rings of the golden cases whose ring is not goldenRing.
var goldenRings = map[string][]Member{
	"dual-stack": {
		{Name: "edge-b", Addr: netip.MustParseAddr("fd00:10:244:1::7")}, {Name: "edge-a", Addr: netip.MustParseAddr("fd00:10:244::5")},
	},
}

func TestGolden(t *testing.T) {
	for name, file := range goldenCases {
		t.Run(name, func(t *testing.T) {
			ring := goldenRing
			if r, ok := goldenRings[name]; ok {
				ring = r
			}
			conf, err := NginxConfRing(loadSpec(t, file), ring)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(conf), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if conf != string(want) {
				t.Errorf("rendered config differs from %s (go test -update refreshes it):\n%s", golden, conf)
			}
		})
	}
}

// TestGoldenFilesPassNginxT checks every golden file with the real `nginx -t`, with the
// cache paths moved under a temporary directory.
func TestGoldenFilesPassNginxT(t *testing.T) {
	nginx := nginxBinary(t)
	goldens, err := filepath.Glob("testdata/*.golden")
	if err != nil || len(goldens) != len(goldenCases) {
		t.Fatalf("found golden files %v (err %v), want one per golden case", goldens, err)
	}
	for _, golden := range goldens {
		t.Run(filepath.Base(golden), func(t *testing.T) {
			data, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			name := strings.TrimSuffix(filepath.Base(golden), ".golden")
			spec := loadSpec(t, goldenCases[name])
			if err := nginxTest(t, nginx, string(data), Facts(spec, string(data)).Certificates...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// nginxTest runs `nginx -t` on conf, as the node agent does (with its disk links'
// directory under nginx's prefix: nginx makes each link's entry as a plain directory),
// with a throwaway self-signed pair for each site with tls.
func nginxTest(t *testing.T, nginx, conf string, sites ...agentapi.Certificate) error {
	t.Helper()
	return nginxTestWith(t, nginx, conf, nil, sites...)
}

// nginxTestWith is nginxTest with the node agent's failover files beside nginx.conf, in
// a directory under the prefix, where the agent installs it.
func nginxTestWith(t *testing.T, nginx, conf string, failover map[string]string, sites ...agentapi.Certificate) error {
	t.Helper()
	prefix := filepath.Join(t.TempDir(), "prefix") + "/"
	dir := filepath.Join(prefix, "conf")
	for _, d := range []string{filepath.Join(prefix, "tmp"), filepath.Join(prefix, nginxconf.DiskLinkDir), dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The node agent's link to nginx's modules (testkit.LinkModules, which imports render).
	if err := os.Symlink(nginxconf.ModulesDir(nginx), filepath.Join(prefix, nginxconf.ModulesLink)); err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteCertificates(prefix, sites); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if len(failover) > 0 {
		if err := os.Mkdir(filepath.Join(dir, nginxconf.FailoverDir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range failover {
		if err := os.WriteFile(filepath.Join(dir, nginxconf.FailoverDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(nginx, "-t", "-q", "-e", "stderr", "-p", prefix, "-c", file).CombinedOutput()
	if err != nil {
		return &nginxError{err: err, out: string(out)}
	}
	return nil
}

type nginxError struct {
	err error
	out string
}

func (e *nginxError) Error() string { return "nginx -t: " + e.err.Error() + ": " + e.out }

// nginxBinary finds nginx built with thread pools; `make test` installs it. A missing
// nginx fails the test rather than skipping it.
func nginxBinary(t *testing.T) string {
	t.Helper()
	nginx := os.Getenv("NGINX_BIN")
	if nginx == "" {
		var err error
		if nginx, err = exec.LookPath("nginx"); err != nil {
			t.Fatal("nginx not found: run `make test` (it installs nginx) or set NGINX_BIN")
		}
	}
	out, err := exec.Command(nginx, "-V").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--with-threads")) {
		t.Fatalf("%s -V: want an nginx built --with-threads, got %v: %s", nginx, err, out)
	}
	return nginx
}

func TestDeterministic(t *testing.T) {
	spec := loadSpec(t, goldenCases["sixteen-disks"])
	first, err := NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := NginxConf(spec.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		if again != first {
			t.Fatal("same spec rendered different bytes")
		}
	}
}

// TestThreadsDefaultByMedia: an unset pool size is the media's default, 128 for HDD (whose
// slow reads pile up in the pool) and 32 for SSD and NVMe; a set one is kept.
func TestThreadsDefaultByMedia(t *testing.T) {
	spec := loadSpec(t, goldenCases["sample"])
	spec.Disks = []v1alpha1.Disk{
		{Name: "h", Path: "/mnt/h", Media: v1alpha1.MediaHDD},
		{Name: "s", Path: "/mnt/s", Media: v1alpha1.MediaSSD},
		{Name: "n", Path: "/mnt/n", Media: v1alpha1.MediaNVMe},
		{Name: "set", Path: "/mnt/set", Media: v1alpha1.MediaHDD, ThreadPool: v1alpha1.ThreadPool{Threads: 7}},
	}
	for i := range spec.Disks {
		spec.Disks[i].Size = resource.MustParse("10Gi")
	}
	spec.Default()
	conf, err := NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"pool_h threads=128 ", "pool_s threads=32 ", "pool_n threads=32 ", "pool_set threads=7 "} {
		if !strings.Contains(conf, "thread_pool "+want) {
			t.Errorf("config lacks %q", "thread_pool "+want)
		}
	}
}

func TestRenderedDirectives(t *testing.T) {
	spec := loadSpec(t, goldenCases["sample"])
	conf, err := NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, conf,
		"thread_pool pool_nvme0 threads=64 max_queue=65536;",
		"thread_pool pool_hdd0 threads=128 max_queue=65536;",
		"thread_pool pool_nvme0_io threads=64 max_queue=1048576;", // 4096 connections x 128 streams x 2
		"thread_pool pool_hdd0_io threads=128 max_queue=1048576;",
		"map $upstream_cache_status$upstream_addr $edgepool_pool_suffix {\n        volatile; # asked again for each task: nginx would keep a request's first answer\n        default _io;\n        \"\" \"\";\n        MISS \"\";\n    }",
		"proxy_cache_background_update on;",
		"proxy_cache_path disks/nvme0 levels=1:2 keys_zone=cache_nvme0:64m max_size=100g min_free=1g inactive=7d use_temp_path=off; # /mnt/nvme0/cache",
		"proxy_cache_path disks/hdd0 levels=1:2 keys_zone=cache_hdd0:64m max_size=1024g min_free=1g inactive=30d use_temp_path=off; # /mnt/hdd0/cache",
		"split_clients \"$host$request_uri\" $edgepool_split_disk {\n        75.00% nvme0;\n        * hdd0;\n    }",
		"include failover/*.conf;",
		"map $edgepool_split_disk $edgepool_disk {\n        default $edgepool_split_disk;\n        include failover/*.map;\n    }",
		"listen 8080 reuseport backlog=4096;",
		"proxy_cache $edgepool_cache_zone;", "\"-\" off;",
		"aio threads=pool_$edgepool_disk$edgepool_pool_suffix;",
		"aio_write on;",
		"sendfile_max_chunk 2m;",
		"listen 127.0.0.1:18081 default_server;",
		"error_log stderr warn;",
	)

	spec.IO = v1alpha1.IOSync
	conf, err = NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{"thread_pool", "aio", "edgepool_pool_suffix"} {
		if strings.Contains(conf, absent) {
			t.Errorf("io: sync config contains %q", absent)
		}
	}
}

// TestCachePolicyDefaults: the default CacheNode follows RFC 9111 (test/httpcache runs the
// rules against a real origin): no forced freshness, no stale responses beyond the
// origin's leave, requests with Authorization bypass the cache, stale responses are
// revalidated, and the origin's Date is kept.
func TestCachePolicyDefaults(t *testing.T) {
	spec := loadSpec(t, goldenCases["sample"])
	spec.Cache = v1alpha1.CachePolicy{}
	spec.Default()
	conf, err := NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, conf,
		"proxy_cache_key \"$host$request_uri\";",
		"proxy_cache_revalidate on;",
		"proxy_pass_header Date;",
		"proxy_cache_bypass $edgepool_authorization;",
		"proxy_no_cache $edgepool_authorization;",
	)
	for _, absent := range []string{"proxy_cache_valid", "proxy_cache_use_stale", "proxy_ignore_headers", "$upstream_http_"} {
		if strings.Contains(conf, absent) {
			t.Errorf("default config contains %q", absent)
		}
	}

	// The opt-ins, each checked by nginx -t.
	spec.Cache.AuthorizedRequests = v1alpha1.AuthorizedRequestsCacheIfAllowed
	spec.Cache.Valid = []v1alpha1.CacheValidity{{Codes: []string{"200"}, Duration: "1h"}}
	spec.Cache.UseStale = []v1alpha1.UseStaleCondition{"error", "updating"}
	if conf, err = NginxConf(spec); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"proxy_no_cache $edgepool_authorized_unshareable $edgepool_forced_unshareable;",
		"proxy_cache_valid 200 1h;",
		"proxy_cache_use_stale error updating;",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("config with the opt-ins lacks %q", want)
		}
	}
	if strings.Contains(conf, "proxy_cache_bypass") {
		t.Error("authorizedRequests: CacheIfAllowed still bypasses the cache")
	}
	if err := nginxTest(t, nginxBinary(t), conf); err != nil {
		t.Error(err)
	}
}

// TestCacheKeysAreSplitKeys: the agent accepts only agentapi.SplitKeys in the facts it
// renders its failover from, so every key the renderer writes must be one.
func TestCacheKeysAreSplitKeys(t *testing.T) {
	for key, expr := range cacheKeys {
		if !slices.Contains(agentapi.SplitKeys, expr) {
			t.Errorf("cache key %s renders %s, which agentapi.SplitKeys lacks", key, expr)
		}
	}
}

// TestCacheKeysTellRequestsApart: two requests that differ in scheme, host or URI never
// share a key. Each key is computed as nginx would expand it, for pairs that a key
// without separators would merge (http + sexample.com and https + example.com).
func TestCacheKeysTellRequestsApart(t *testing.T) {
	type request struct{ scheme, host, uri string }
	expand := func(expr string, r request) string {
		return strings.NewReplacer("$scheme", r.scheme, "$host", r.host, "$request_uri", r.uri).Replace(expr)
	}
	pairs := [][2]request{
		{{"http", "sexample.com", "/x"}, {"https", "example.com", "/x"}},
		{{"http", "a.example", "/x"}, {"https", "a.example", "/x"}},
	}
	expr := cacheKeys[v1alpha1.CacheKeySchemeHostURI]
	for _, p := range pairs {
		if expand(expr, p[0]) == expand(expr, p[1]) {
			t.Errorf("%s gives %+v and %+v one key, %q", expr, p[0], p[1], expand(expr, p[0]))
		}
	}
	// HostURI: the host ends where the URI's leading / begins, and nginx's $host has no /.
	host := cacheKeys[v1alpha1.CacheKeyHostURI]
	if a, b := expand(host, request{"http", "a.example", "/x"}), expand(host, request{"http", "b.example", "/x"}); a == b {
		t.Errorf("%s gives two hosts one key", host)
	}
}

// TestFailoverPassesNginxT: nginx.conf with the agent's failover files beside it, as the
// agent installs it with disks out, passes nginx -t (the goldens pass without them).
func TestFailoverPassesNginxT(t *testing.T) {
	spec := loadSpec(t, goldenCases["sixteen-disks"])
	conf, err := NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	s := Facts(spec, conf).Split
	files, err := nginxconf.FailoverFiles(s, []string{s.Disks[0].Name, s.Disks[3].Name})
	if err != nil || len(files) != 2 {
		t.Fatalf("FailoverFiles: %v, %v", files, err)
	}
	if err := nginxTestWith(t, nginxBinary(t), conf, files); err != nil {
		t.Fatal(err)
	}
}

// TestNginxSize: keys_zone and sendfile_max_chunk are read by ngx_parse_size, which takes k
// and m but not g; max_size by ngx_parse_offset, which takes g too.
func TestNginxSize(t *testing.T) {
	for in, want := range map[string][2]string{ // nginxSize, nginxOffset
		"0": {"0", "0"}, "1": {"1", "1"}, "1Ki": {"1k", "1k"}, "1536": {"1536", "1536"},
		"64Mi": {"64m", "64m"}, "1Gi": {"1024m", "1g"}, "16Gi": {"16384m", "16g"},
		"1Ti": {"1048576m", "1024g"}, "10G": {"9765625k", "9765625k"}, "1.5Gi": {"1536m", "1536m"},
	} {
		q := resource.MustParse(in)
		if got := nginxSize(&q); got != want[0] {
			t.Errorf("nginxSize(%s) = %s, want %s", in, got, want[0])
		}
		if got := nginxOffset(&q); got != want[1] {
			t.Errorf("nginxOffset(%s) = %s, want %s", in, got, want[1])
		}
	}
}

// TestWholeGibibytesPassNginxT renders sizes in whole GiB, the documented maximum of
// sendfileMaxChunk among them, and has nginx check them: nginx refuses "1g" for keys_zone
// and sendfile_max_chunk.
func TestWholeGibibytesPassNginxT(t *testing.T) {
	nginx := nginxBinary(t)
	spec := loadSpec(t, goldenCases["sample"])
	spec.SendfileMaxChunk = ptr.To(resource.MustParse("1Gi"))
	spec.Disks[0].KeysZoneSize = ptr.To(resource.MustParse("1Gi"))
	spec.Disks[1].KeysZoneSize = ptr.To(resource.MustParse("2Gi"))
	spec.Disks[1].Size = resource.MustParse("3Ti")
	conf, err := NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := nginxTest(t, nginx, conf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sendfile_max_chunk 1024m;", "keys_zone=cache_nvme0:1024m ", "keys_zone=cache_hdd0:2048m max_size=3072g "} {
		if !strings.Contains(conf, want) {
			t.Errorf("config lacks %q", want)
		}
	}
}

// TestMinFree: 1% of the size in whole MiB, from 1 MiB to 1 GiB.
func TestMinFree(t *testing.T) {
	for size, want := range map[string]string{
		"1Mi": "1m", "150Mi": "1m", "1Gi": "10m", "50Gi": "512m", "100Gi": "1g", "500Gi": "1g", "1Pi": "1g",
	} {
		q := resource.MustParse(size)
		if got := nginxOffset(minFree(&q)); got != want {
			t.Errorf("minFree(%s) = %s, want %s", size, got, want)
		}
	}
}

// TestValidateRejects checks that each bad value is refused with an error naming its field,
// including strings that would inject nginx directives if they reached the config.
func TestValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.CacheNodeSpec)
		field  string
	}{
		{"no disks", func(s *v1alpha1.CacheNodeSpec) { s.Disks = nil }, "spec.disks"},
		{"trusted proxy with host bits", func(s *v1alpha1.CacheNodeSpec) { s.Listener.TrustedProxies = []string{"10.0.0.1/8"} }, "spec.listener.trustedProxies[0]"},
		{"trusted proxy injection", func(s *v1alpha1.CacheNodeSpec) { s.Listener.TrustedProxies = []string{"10.0.0.0/8;"} }, "spec.listener.trustedProxies[0]"},
		{"trusted proxy not canonical", func(s *v1alpha1.CacheNodeSpec) { s.Listener.TrustedProxies = []string{"2001:DB8::/32"} }, "spec.listener.trustedProxies[0]"},
		{"disk name with underscore", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Name = "a_b" }, "spec.disks[0].name"},
		{"disk name injection", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Name = "a;b" }, "spec.disks[0].name"},
		{"duplicate disk name", func(s *v1alpha1.CacheNodeSpec) { s.Disks[1].Name = s.Disks[0].Name }, "spec.disks[1].name"},
		{"relative path", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Path = "mnt/a" }, "spec.disks[0].path"},
		{"dotdot path", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Path = "/mnt/../etc" }, "spec.disks[0].path"},
		{"path with space", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Path = "/mnt/a b" }, "spec.disks[0].path"},
		{"path with semicolon", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Path = "/mnt/a;load_module" }, "spec.disks[0].path"},
		{"path with newline", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Path = "/mnt/a\ninclude" }, "spec.disks[0].path"},
		{"path with variable", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Path = "/mnt/$host" }, "spec.disks[0].path"},
		{"path with brace", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Path = "/mnt/a{" }, "spec.disks[0].path"},
		{"trailing slash", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Path = "/mnt/a/" }, "spec.disks[0].path"},
		{"duplicate path", func(s *v1alpha1.CacheNodeSpec) { s.Disks[1].Path = s.Disks[0].Path }, "spec.disks[1].path"},
		{"nested path", func(s *v1alpha1.CacheNodeSpec) { s.Disks[1].Path = s.Disks[0].Path + "/sub" }, "spec.disks[1].path"},
		{"bad media", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Media = "Tape" }, "spec.disks[0].media"},
		{"tiny size", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Size = resource.MustParse("1Ki") }, "spec.disks[0].size"},
		{"fractional size", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Size = resource.MustParse("100m") }, "spec.disks[0].size"},
		{"size above 1Pi", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Size = resource.MustParse("1025Ti") }, "spec.disks[0].size"},
		{"size 1e100", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Size = resource.MustParse("1e100") }, "spec.disks[0].size"},
		{"tiny keys zone", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].KeysZoneSize = ptr.To(resource.MustParse("1Ki")) }, "spec.disks[0].keysZoneSize"},
		{"keys zone above 16Gi", func(s *v1alpha1.CacheNodeSpec) { s.Disks[1].KeysZoneSize = ptr.To(resource.MustParse("17Gi")) }, "spec.disks[1].keysZoneSize"},
		{"keys zones above 16Gi together", func(s *v1alpha1.CacheNodeSpec) {
			s.Disks[0].KeysZoneSize = ptr.To(resource.MustParse("8Gi"))
			s.Disks[1].KeysZoneSize = ptr.To(resource.MustParse("8193Mi"))
		}, "spec.disks"},
		{"weight 0", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Weight = 0 }, "spec.disks[0].weight"},
		{"weight 101", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Weight = 101 }, "spec.disks[0].weight"},
		{"threads negative", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].ThreadPool.Threads = -1 }, "spec.disks[0].threadPool.threads"},
		{"threads 513", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].ThreadPool.Threads = 513 }, "spec.disks[0].threadPool.threads"},
		{"maxQueue negative", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].ThreadPool.MaxQueue = ptr.To[int32](-1) }, "spec.disks[0].threadPool.maxQueue"},
		{"inactive injection", func(s *v1alpha1.CacheNodeSpec) { s.Disks[0].Inactive = "7d;" }, "spec.disks[0].inactive"},
		{"acceptMutex with reusePort", func(s *v1alpha1.CacheNodeSpec) { s.Listener.AcceptMutex = ptr.To(true) }, "spec.listener.acceptMutex"},
		{"access log sample negative", func(s *v1alpha1.CacheNodeSpec) { s.AccessLogPercent = -1 }, "spec.accessLogPercent"},
		{"access log sample 101", func(s *v1alpha1.CacheNodeSpec) { s.AccessLogPercent = 101 }, "spec.accessLogPercent"},
		{"statusPort equals port", func(s *v1alpha1.CacheNodeSpec) { s.Listener.StatusPort = s.Listener.Port }, "spec.listener.statusPort"},
		{"agentPort equals statusPort", func(s *v1alpha1.CacheNodeSpec) { s.Listener.AgentPort = s.Listener.StatusPort }, "spec.listener.agentPort"},
		{"peerPort equals port", func(s *v1alpha1.CacheNodeSpec) { s.Sharding = &v1alpha1.Sharding{PeerPort: s.Listener.Port} }, "spec.sharding.peerPort"},
		{"peerPort equals tlsPort", func(s *v1alpha1.CacheNodeSpec) { s.Sharding = &v1alpha1.Sharding{PeerPort: s.Listener.TLSPort} }, "spec.sharding.peerPort"},
		{"peerPort zero", func(s *v1alpha1.CacheNodeSpec) { s.Sharding = &v1alpha1.Sharding{} }, "spec.sharding.peerPort"},
		{"hot tier too small", func(s *v1alpha1.CacheNodeSpec) {
			s.Sharding = &v1alpha1.Sharding{PeerPort: 8090, HotTier: &v1alpha1.HotTier{Size: resource.MustParse("100Ki"), MinUses: 2, Seconds: 1}}
		}, "spec.sharding.hotTier.size"},
		{"hot tier minUses zero", func(s *v1alpha1.CacheNodeSpec) {
			s.Sharding = &v1alpha1.Sharding{PeerPort: 8090, HotTier: &v1alpha1.HotTier{Size: resource.MustParse("8Mi"), Seconds: 1}}
		}, "spec.sharding.hotTier.minUses"},
		{"sharding with hostNetwork", func(s *v1alpha1.CacheNodeSpec) {
			s.Sharding, s.HostNetwork = &v1alpha1.Sharding{PeerPort: 8090}, true
		}, "spec.sharding"},
		{"port 0", func(s *v1alpha1.CacheNodeSpec) { s.Listener.Port = 0 }, "spec.listener.port"},
		{"workerProcesses 0", func(s *v1alpha1.CacheNodeSpec) { s.Listener.WorkerProcesses = ptr.To(intstr.FromInt32(0)) }, "spec.listener.workerProcesses"},
		{"workerProcesses text", func(s *v1alpha1.CacheNodeSpec) {
			s.Listener.WorkerProcesses = ptr.To(intstr.FromString("4; user root"))
		}, "spec.listener.workerProcesses"},
		{"backlog too big", func(s *v1alpha1.CacheNodeSpec) { s.Listener.Backlog = 65536 }, "spec.listener.backlog"},
		{"hostNetwork low port", func(s *v1alpha1.CacheNodeSpec) { s.HostNetwork = true; s.Listener.Port = 80 }, "spec.listener.port"},
		{"origin without port", func(s *v1alpha1.CacheNodeSpec) { s.Origin.Servers = []string{"origin.example"} }, "spec.origin.servers[0]"},
		{"origin port too big", func(s *v1alpha1.CacheNodeSpec) { s.Origin.Servers = []string{"origin.example:70000"} }, "spec.origin.servers[0]"},
		{"origin injection", func(s *v1alpha1.CacheNodeSpec) { s.Origin.Servers = []string{"a.example:80; include /etc/passwd"} }, "spec.origin.servers[0]"},
		{"origin with scheme", func(s *v1alpha1.CacheNodeSpec) { s.Origin.Servers = []string{"http://a.example:80"} }, "spec.origin.servers[0]"},
		{"origin bad ipv6", func(s *v1alpha1.CacheNodeSpec) { s.Origin.Servers = []string{"[zz::1]:80"} }, "spec.origin.servers[0]"},
		{"duplicate origin", func(s *v1alpha1.CacheNodeSpec) { s.Origin.Servers = []string{"a:80", "a:80"} }, "spec.origin.servers[1]"},
		{"cache key free text", func(s *v1alpha1.CacheNodeSpec) { s.Cache.Key = "$cookie_session" }, "spec.cache.key"},
		{"cache key URI shared between hostnames", func(s *v1alpha1.CacheNodeSpec) { s.Cache.Key = v1alpha1.CacheKeyURI }, "spec.cache.key"},
		{"authorizedRequests unknown", func(s *v1alpha1.CacheNodeSpec) { s.Cache.AuthorizedRequests = "Always" }, "spec.cache.authorizedRequests"},
		{"authorizedRequests unset", func(s *v1alpha1.CacheNodeSpec) { s.Cache.AuthorizedRequests = "" }, "spec.cache.authorizedRequests"},
		{"status code text", func(s *v1alpha1.CacheNodeSpec) { s.Cache.Valid[0].Codes = []string{"200 any"} }, "spec.cache.valid[0].codes[0]"},
		{"validity duration", func(s *v1alpha1.CacheNodeSpec) { s.Cache.Valid[0].Duration = "1 h" }, "spec.cache.valid[0].duration"},
		{"use stale unknown", func(s *v1alpha1.CacheNodeSpec) { s.Cache.UseStale = []v1alpha1.UseStaleCondition{"off"} }, "spec.cache.useStale[0]"},
		{"tag header injection", func(s *v1alpha1.CacheNodeSpec) { s.Cache.TagHeaders = []string{"X-Tags;proxy_pass x"} }, "spec.cache.tagHeaders[0]"},
		{"tag header too long", func(s *v1alpha1.CacheNodeSpec) { s.Cache.TagHeaders = []string{"X" + strings.Repeat("t", 64)} }, "spec.cache.tagHeaders[0]"},
		{"tag header nginx reads", func(s *v1alpha1.CacheNodeSpec) { s.Cache.TagHeaders = []string{"cache-CONTROL"} }, "spec.cache.tagHeaders[0]"},
		{"tag header Content-*", func(s *v1alpha1.CacheNodeSpec) { s.Cache.TagHeaders = []string{"Content-Length"} }, "spec.cache.tagHeaders[0]"},
		{"tag header X-Accel-*", func(s *v1alpha1.CacheNodeSpec) { s.Cache.TagHeaders = []string{"X-Accel-Redirect"} }, "spec.cache.tagHeaders[0]"},
		{"five tag headers", func(s *v1alpha1.CacheNodeSpec) { s.Cache.TagHeaders = []string{"A", "B", "C", "D", "E"} }, "spec.cache.tagHeaders"},
		{"tag headers to clients unknown", func(s *v1alpha1.CacheNodeSpec) { s.Cache.TagHeadersToClients = "Strip" }, "spec.cache.tagHeadersToClients"},
		{"io unknown", func(s *v1alpha1.CacheNodeSpec) { s.IO = "async" }, "spec.io"},
		{"sendfile chunk too big", func(s *v1alpha1.CacheNodeSpec) { s.SendfileMaxChunk = ptr.To(resource.MustParse("2Gi")) }, "spec.sendfileMaxChunk"},
		{"no I/O errors", func(s *v1alpha1.CacheNodeSpec) { s.DiskFailover.IOErrors = 0 }, "spec.diskFailover.ioErrors"},
		{"negative window", func(s *v1alpha1.CacheNodeSpec) { s.DiskFailover.ErrorWindowSeconds = -1 }, "spec.diskFailover.errorWindowSeconds"},
		{"max cooldown below cooldown", func(s *v1alpha1.CacheNodeSpec) {
			s.DiskFailover.CooldownSeconds, s.DiskFailover.MaxCooldownSeconds = 600, 300
		}, "spec.diskFailover.maxCooldownSeconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := loadSpec(t, goldenCases["sample"])
			tc.mutate(spec)
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

func TestDecodeCacheNode(t *testing.T) {
	if _, err := DecodeCacheNode([]byte("apiVersion: v1\nkind: ConfigMap\n")); err == nil {
		t.Error("decoded a ConfigMap as a CacheNode")
	}
	if _, err := DecodeCacheNode([]byte("apiVersion: cache.edgepool.io/v1alpha1\nkind: CacheNode\nspec:\n  snippet: x\n")); err == nil {
		t.Error("accepted an unknown field")
	}
	// The API server matches field names case-sensitively: it would drop (or, with kubectl's
	// strict validation, refuse) IO, so rendering with io: sync would show what is not applied.
	if _, err := DecodeCacheNode([]byte("apiVersion: cache.edgepool.io/v1alpha1\nkind: CacheNode\nspec:\n  IO: sync\n")); err == nil || !strings.Contains(err.Error(), `unknown field "spec.IO"`) {
		t.Errorf("want an unknown field spec.IO, got %v", err)
	}
	// A bad quantity is named by its field, with the forms a quantity takes.
	badSize := "apiVersion: cache.edgepool.io/v1alpha1\nkind: CacheNode\nspec:\n  disks:\n  - {name: a, path: /mnt/a, size: 10Gi}\n  - {name: b, path: /mnt/b, size: 100MB}\n"
	if _, err := DecodeCacheNode([]byte(badSize)); err == nil || !strings.Contains(err.Error(), `spec.disks[1].size: "100MB" is not a quantity: a number and a unit such as 512Mi`) {
		t.Errorf("want spec.disks[1].size named, got %v", err)
	}
	for _, dup := range []string{"kind: CacheNode\nkind: CacheNode\n", `{"kind": "CacheNode", "kind": "CacheNode"}`} {
		if _, err := DecodeCacheNode([]byte(dup)); err == nil || !strings.Contains(err.Error(), `"kind" already set`) {
			t.Errorf("%q: want a duplicate key error, got %v", dup, err)
		}
	}
}

func BenchmarkNginxConf16Disks(b *testing.B) {
	spec := loadSpec(b, goldenCases["sixteen-disks"])
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NginxConf(spec); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDiskPathsAllowed: a disk path must lie strictly under a prefix the cluster admin
// allows; a prefix is a directory, not a string prefix.
func TestDiskPathsAllowed(t *testing.T) {
	prefixes := []string{"/mnt", "/data/cache"}
	for path, ok := range map[string]bool{
		"/mnt/nvme0": true, "/mnt/a/b": true, "/data/cache/hdd0": true,
		"/mnt": false, "/mntx/a": false, "/data/hdd0": false, "/data/cache": false,
		"/var": false, "/var/lib/etcd": false, "/etc/x": false, "/lib32": false,
	} {
		spec := &v1alpha1.CacheNodeSpec{Disks: []v1alpha1.Disk{{Name: "d", Path: path}}}
		errs := DiskPathsAllowed(spec, prefixes)
		if ok != (len(errs) == 0) {
			t.Errorf("%s: allowed = %v, want %v (%v)", path, len(errs) == 0, ok, errs)
		}
		if !ok && (len(errs) != 1 || errs[0].Field != "spec.disks[0].path") {
			t.Errorf("%s: errors %v, want one naming spec.disks[0].path", path, errs)
		}
	}
	if got := DiskPrefix("/data/cache/hdd0", []string{"/data", "/data/cache"}); got != "/data/cache" {
		t.Errorf("DiskPrefix = %q, want the longest prefix", got)
	}
	for list, ok := range map[string]bool{"/mnt,/data,/srv": true, "/mnt": true, "": false, "/": false, "/mnt/": false, "mnt": false, "/mnt/../etc": false, "/mnt,,/srv": false} {
		if _, err := ParseDiskPrefixes(list); ok != (err == nil) {
			t.Errorf("ParseDiskPrefixes(%q): %v, want ok = %v", list, err, ok)
		}
	}
}

// TestValidateRejectsSites: bad sites are refused with an error naming the field.
func TestValidateRejectsSites(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.CacheNodeSpec)
		field  string
	}{
		{"origin and sites", func(s *v1alpha1.CacheNodeSpec) { s.Origin.Servers = []string{"a.example:80"} }, "spec.origin"},
		{"site name injection", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Name = "a;b" }, "spec.sites[1].name"},
		{"site name upper case", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].Name = "WWW" }, "spec.sites[0].name"},
		{"site name too long", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].Name = strings.Repeat("a", 33) }, "spec.sites[0].name"},
		{"duplicate site name", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Name = s.Sites[0].Name }, "spec.sites[1].name"},
		{"no hostnames", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].Hostnames = nil }, "spec.sites[0].hostnames"},
		{"hostname regex", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].Hostnames[0] = "~^(.*)$" }, "spec.sites[0].hostnames[0]"},
		{"hostname injection", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].Hostnames[1] = "a.example; return 200" }, "spec.sites[0].hostnames[1]"},
		{"hostname with space", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].Hostnames[0] = "a.example b.example" }, "spec.sites[0].hostnames[0]"},
		{"hostname upper case", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].Hostnames[0] = "WWW.example.com" }, "spec.sites[0].hostnames[0]"},
		{"hostname trailing dot", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].Hostnames[0] = "www.example.com." }, "spec.sites[0].hostnames[0]"},
		{"hostname leading dot", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].Hostnames[0] = ".example.com" }, "spec.sites[0].hostnames[0]"},
		{"hostname empty", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].Hostnames[0] = "" }, "spec.sites[0].hostnames[0]"},
		{"wildcard of one label", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Hostnames[0] = "*.com" }, "spec.sites[1].hostnames[0]"},
		{"wildcard alone", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Hostnames[0] = "*" }, "spec.sites[1].hostnames[0]"},
		{"wildcard in the middle", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Hostnames[0] = "a.*.example.com" }, "spec.sites[1].hostnames[0]"},
		{"wildcard suffix", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Hostnames[0] = "www.example.*" }, "spec.sites[1].hostnames[0]"},
		{"partial wildcard", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Hostnames[0] = "a*.example.com" }, "spec.sites[1].hostnames[0]"},
		{"hostname too long", func(s *v1alpha1.CacheNodeSpec) {
			s.Sites[0].Hostnames[0] = strings.Repeat(strings.Repeat("a", 63)+".", 4) + "com"
		}, "spec.sites[0].hostnames[0]"},
		{"hostname in two sites", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Hostnames[0] = s.Sites[0].Hostnames[1] }, "spec.sites[1].hostnames[0]"},
		{"site origin injection", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Origin.Servers[1] = "a:80;include x" }, "spec.sites[1].origin.servers[1]"},
		{"site without origin", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].Origin.Servers = nil }, "spec.sites[0].origin.servers"},
		{"hostHeader injection", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Origin.HostHeader = "a.example\r\nX-Evil: 1" }, "spec.sites[1].origin.hostHeader"},
		{"hostHeader variable", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Origin.HostHeader = "$http_x_host" }, "spec.sites[1].origin.hostHeader"},
		{"site cache lock timeout", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Cache.LockTimeout = "5s;" }, "spec.sites[1].cache.lockTimeout"},
		{"site cache status code", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Cache.Valid[0].Codes[0] = "2000" }, "spec.sites[1].cache.valid[0].codes[0]"},
		{"site slice size too small", func(s *v1alpha1.CacheNodeSpec) { s.Sites[1].Cache.SliceSize = ptr.To(resource.MustParse("1Ki")) }, "spec.sites[1].cache.sliceSize"},
		{"slice size above 1Gi", func(s *v1alpha1.CacheNodeSpec) { s.Cache.SliceSize = ptr.To(resource.MustParse("2Gi")) }, "spec.cache.sliceSize"},
		{"slice size fractional", func(s *v1alpha1.CacheNodeSpec) { s.Cache.SliceSize = ptr.To(resource.MustParse("100000.5")) }, "spec.cache.sliceSize"},
		{"secretName injection", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].TLS.SecretName = "a;ssl_certificate /etc/x" }, "spec.sites[0].tls.secretName"},
		{"secretName path", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].TLS.SecretName = "../etc" }, "spec.sites[0].tls.secretName"},
		{"plainHTTP unknown", func(s *v1alpha1.CacheNodeSpec) { s.Sites[0].TLS.PlainHTTP = "Drop" }, "spec.sites[0].tls.plainHTTP"},
		{"defaultSite unknown", func(s *v1alpha1.CacheNodeSpec) { s.DefaultSite = "nosuch" }, "spec.defaultSite"},
		{"tlsPort equals port", func(s *v1alpha1.CacheNodeSpec) { s.Listener.TLSPort = s.Listener.Port }, "spec.listener.tlsPort"},
		{"tlsPort equals statusPort", func(s *v1alpha1.CacheNodeSpec) { s.Listener.TLSPort = s.Listener.StatusPort }, "spec.listener.tlsPort"},
		{"tlsPort equals agentPort", func(s *v1alpha1.CacheNodeSpec) { s.Listener.TLSPort = s.Listener.AgentPort }, "spec.listener.tlsPort"},
		{"tlsPort 0", func(s *v1alpha1.CacheNodeSpec) { s.Listener.TLSPort = 0 }, "spec.listener.tlsPort"},
		{"hostNetwork low tlsPort", func(s *v1alpha1.CacheNodeSpec) { s.HostNetwork = true; s.Listener.TLSPort = 443 }, "spec.listener.tlsPort"},
		{"hostNetwork site origin on loopback", func(s *v1alpha1.CacheNodeSpec) {
			s.HostNetwork = true
			s.Sites[1].Origin.Servers[1] = "127.0.0.1:80"
		}, "spec.sites[1].origin.servers[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := loadSpec(t, goldenCases["sites"])
			tc.mutate(spec)
			conf, err := NginxConf(spec)
			if err == nil {
				t.Fatalf("rendered an invalid spec:\n%s", conf)
			}
			if !strings.Contains(err.Error(), tc.field+":") {
				t.Errorf("error does not name %s: %v", tc.field, err)
			}
		})
	}
	// defaultSite without sites.
	spec := loadSpec(t, goldenCases["sample"])
	spec.DefaultSite = "www"
	if _, err := NginxConf(spec); err == nil || !strings.Contains(err.Error(), "spec.defaultSite:") {
		t.Errorf("defaultSite without sites: %v", err)
	}
}

// TestSitesRender: with sites, each port has exactly one default server, which carries
// the socket options; the default site takes that place from the refusing server.
// TestTagHeaders: the client-facing servers hide each site's tag headers unless it passes
// them; a sharded CacheNode's owner-facing servers never do; the facts name every site's
// headers once.
func TestTagHeaders(t *testing.T) {
	spec := loadSpec(t, goldenCases["sharded-sites"])
	spec.Sites[0].Cache = spec.Cache.CacheRules.DeepCopy()
	spec.Sites[0].Cache.TagHeaders = []string{"X-Product-Tags", "cache-tag"}
	spec.Sites[1].Cache = spec.Cache.CacheRules.DeepCopy()
	spec.Sites[1].Cache.TagHeadersToClients = v1alpha1.TagHeadersPass
	conf, err := NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	servers := strings.Split(conf, "\n    server {")
	hides := func(server string) string {
		var names []string
		for _, line := range strings.Split(server, "\n") {
			if name, ok := strings.CutPrefix(strings.TrimSpace(line), "proxy_hide_header "); ok {
				names = append(names, strings.TrimSuffix(name, ";"))
			}
		}
		return strings.Join(names, " ")
	}
	var got []string
	for _, server := range servers[1:] {
		name := "?"
		if _, after, ok := strings.Cut(server, "server_name "); ok {
			name, _, _ = strings.Cut(after, ";")
		}
		if strings.Contains(server, "listen 127.0.0.1:") {
			continue // stub_status, compression's loopback servers
		}
		got = append(got, name+": "+hides(server))
	}
	want := []string{
		"www.example.com example.com: ", // the plain HTTP redirect
		"www.example.com example.com: X-Product-Tags cache-tag",
		"*.media.example.com: ",
		"?: ",                                           // the owner's refusal of other hosts
		"www.example.com example.com: Content-Encoding", // at the owner, which compresses
		"*.media.example.com: Content-Encoding",         // its rules here do not slice: it compresses
	}
	if !slices.Equal(got[len(got)-len(want):], want) {
		t.Errorf("hidden headers per server:\n%s\nwant the last ones\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if f := Facts(spec, conf); !slices.Equal(f.TagHeaders, []string{"Cache-Tag", "Surrogate-Key", "X-Product-Tags"}) {
		t.Errorf("facts name the tag headers %q", f.TagHeaders)
	}
}

func TestSitesRender(t *testing.T) {
	nginx := nginxBinary(t)
	for _, tc := range []struct {
		name        string
		defaultSite string
		plainTLS    v1alpha1.PlainHTTP
		want        []string
		absent      []string
	}{
		{"refuse", "", v1alpha1.PlainHTTPRedirect, []string{
			"listen 8080 default_server reuseport backlog=511;\n        listen 8443 ssl default_server reuseport backlog=511;\n        ssl_reject_handshake on;",
			"return 421;", "return 308 https://$host$request_uri;",
		}, nil},
		{"default site with tls", "media", v1alpha1.PlainHTTPServe, []string{
			"listen 8080 default_server reuseport backlog=511;\n        listen 8443 ssl default_server reuseport backlog=511;\n        http2 on;\n        server_name *.media.example.com;",
		}, []string{"return 421;", "ssl_reject_handshake", "return 308"}},
		{"default site redirecting", "www", v1alpha1.PlainHTTPRedirect, []string{
			"listen 8080 default_server reuseport backlog=511;\n        server_name www.example.com example.com;\n",
			"listen 8443 ssl default_server reuseport backlog=511;\n        http2 on;\n        server_name www.example.com example.com;\n",
		}, []string{"return 421;", "ssl_reject_handshake"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := loadSpec(t, goldenCases["sites"])
			spec.DefaultSite = tc.defaultSite
			spec.Sites[0].TLS.PlainHTTP = tc.plainTLS
			conf, err := NginxConf(spec)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.want {
				if !strings.Contains(conf, want) {
					t.Errorf("config lacks %q", want)
				}
			}
			for _, absent := range tc.absent {
				if strings.Contains(conf, absent) {
					t.Errorf("config has %q", absent)
				}
			}
			if n := strings.Count(conf, " reuseport backlog=511;"); n != 2 {
				t.Errorf("socket options on %d listens, want 2 (one per port)", n)
			}
			for _, port := range []string{"8080", "8443"} {
				if got := strings.Count(conf, "listen "+port+" default_server") + strings.Count(conf, "listen "+port+" ssl default_server"); got != 1 {
					t.Errorf("port %s has %d default servers, want 1", port, got)
				}
			}
			if err := nginxTest(t, nginx, conf, Facts(spec, conf).Certificates...); err != nil {
				t.Fatal(err)
			}
		})
	}

	// A default site without tls answers unmatched plain hosts; the TLS port still refuses.
	spec := loadSpec(t, goldenCases["sites"])
	spec.Sites[0].TLS = nil
	spec.DefaultSite = "www"
	conf, err := NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, conf,
		"listen 8443 ssl default_server reuseport backlog=511;\n        ssl_reject_handshake on;",
		"listen 8080 default_server reuseport backlog=511;\n        server_name www.example.com example.com;",
	)
	if got := Facts(spec, conf).Certificates; len(got) != 1 || got[0].Site != "media" || got[0].SecretName != "media-example-com-tls" || got[0].Hostnames[0] != "*.media.example.com" {
		t.Errorf("Facts.Certificates = %+v, want media's alone", got)
	}
	if err := nginxTest(t, nginx, conf, Facts(spec, conf).Certificates...); err != nil {
		t.Fatal(err)
	}

	// Without tls anywhere nginx has no TLS port and no TLS settings.
	spec.Sites[1].TLS = nil
	if conf, err = NginxConf(spec); err != nil {
		t.Fatal(err)
	}
	for _, absent := range []string{"ssl", "8443", "421"} {
		if strings.Contains(conf, absent) {
			t.Errorf("config without tls has %q", absent)
		}
	}
}

// With sliceSize, every slice is a cache entry of its own under the object's key and its
// range, fetched with that range; forced freshness for 200 covers the slices (206); and
// the node agent learns that every host's exact purges must find slices.
func TestSlicing(t *testing.T) {
	nginx := nginxBinary(t)
	spec := loadSpec(t, goldenCases["sample"])
	spec.Cache.SliceSize = ptr.To(resource.MustParse("1Mi"))
	spec.Cache.Valid = []v1alpha1.CacheValidity{{Codes: []string{"200", "301"}, Duration: "1h"}}
	conf, err := NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, conf,
		"slice 1m;",
		"proxy_cache_key \"$host$request_uri$slice_range\";",
		"proxy_set_header Range $slice_range;",
		"proxy_cache_valid 200 301 206 1h;",
		// the disk stays the object's: its slices are read from where they were stored
		"split_clients \"$host$request_uri\" $edgepool_split_disk {",
		// a slice's header read comes after the response started: never in the bounded pool
		"aio threads=pool_${edgepool_disk}_io;",
	)
	if strings.Contains(conf, "aio threads="+ThreadPool) {
		t.Errorf("a sliced location sends header reads to the pool whose queue may overflow")
	}
	if err := nginxTest(t, nginx, conf); err != nil {
		t.Fatal(err)
	}
	if got := Facts(spec, conf).SlicedHosts; !slices.Equal(got, []string{"*"}) {
		t.Errorf("sliced hosts %q, want every host", got)
	}
	spec.Cache.SliceSize = nil
	conf, _ = NginxConf(spec)
	if strings.Contains(conf, "slice") || Facts(spec, conf).SlicedHosts != nil {
		t.Error("slicing without sliceSize")
	}
	for _, bad := range []string{"1000", "63Ki", "2Gi", "1.5Ki"} {
		spec.Cache.SliceSize = ptr.To(resource.MustParse(bad))
		if _, err := NginxConf(spec); err == nil || !strings.Contains(err.Error(), "spec.cache.sliceSize") {
			t.Errorf("sliceSize %s: got %v, want an error naming spec.cache.sliceSize", bad, err)
		}
	}

	// With sites: the hostnames of those that slice, or every host when the default does.
	spec = loadSpec(t, goldenCases["sites"])
	conf, err = NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Facts(spec, conf).SlicedHosts, []string{"*.media.example.com"}; !slices.Equal(got, want) {
		t.Errorf("sliced hosts %q, want %q", got, want)
	}
	if strings.Count(conf, "slice 1m;") != 1 {
		t.Errorf("want one sliced location, for the media site:\n%s", conf)
	}
	spec.DefaultSite = "media"
	if got := Facts(spec, conf).SlicedHosts; !slices.Equal(got, []string{"*"}) {
		t.Errorf("with the sliced site as the default, sliced hosts %q, want every host", got)
	}
}

// wantLines checks that conf holds each of want.
func wantLines(t *testing.T, conf string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(conf, w) {
			t.Errorf("config lacks %q", w)
		}
	}
}

// TestDefaultFailoverPolicy: the policy an agent keeps until its first configuration is the
// one a CacheNode gets by default.
func TestDefaultFailoverPolicy(t *testing.T) {
	spec := &v1alpha1.CacheNodeSpec{}
	spec.Default()
	if got := Facts(spec, "").Failover; got == nil || *got != agentapi.DefaultFailoverPolicy {
		t.Errorf("a defaulted CacheNode's policy %+v, the agent's default %+v", got, agentapi.DefaultFailoverPolicy)
	}
}
