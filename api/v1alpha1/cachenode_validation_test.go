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

package v1alpha1_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/crdgate"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// These tests run against a real kube-apiserver and etcd (envtest): the CRD's OpenAPI
// schema and CEL rules are what reject bad CacheNodes.

var (
	k8s     client.Client
	testEnv *testkit.Env
)

func TestMain(m *testing.M) {
	env, err := testkit.StartEnv(context.Background(), testkit.EnvOptions{CRDs: filepath.Join("..", "..", "config", "crd", "bases")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	k8s, testEnv = env.Client, env
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop envtest:", err)
	}
	os.Exit(code)
}

func minimal(name string) *v1alpha1.CacheNode {
	return &v1alpha1.CacheNode{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1alpha1.CacheNodeSpec{
			Disks: []v1alpha1.Disk{
				{Name: "nvme0", Path: "/mnt/nvme0", Media: v1alpha1.MediaNVMe, Size: resource.MustParse("10Gi")},
				{Name: "hdd0", Path: "/mnt/hdd0", Media: v1alpha1.MediaHDD, Size: resource.MustParse("100Gi")},
			},
			Origin: v1alpha1.Origin{Servers: []string{"origin.example.svc:80"}},
		},
	}
}

// TestGoDefaultsMatchSchema keeps Spec.Default (used offline by `edgepool render`) equal to
// the defaults the API server applies from the CRD schema.
func TestGoDefaultsMatchSchema(t *testing.T) {
	for name, edit := range map[string]func(*v1alpha1.CacheNodeSpec){
		"defaults":             func(*v1alpha1.CacheNodeSpec) {},
		"defaults-compression": func(s *v1alpha1.CacheNodeSpec) { s.Compression = &v1alpha1.Compression{} },
	} {
		cn := minimal(name)
		edit(&cn.Spec)
		if err := k8s.Create(context.Background(), cn); err != nil {
			t.Fatal(err)
		}
		got := &v1alpha1.CacheNode{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(cn), got); err != nil {
			t.Fatal(err)
		}
		want := minimal(name).Spec
		edit(&want)
		want.Default()
		if diff := cmp.Diff(want, got.Spec, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
			t.Errorf("%s: Go defaults differ from the schema's (-Go +API server):\n%s", name, diff)
		}
	}
}

// withSites moves cn's origin into two sites (the second, b, filling from servers).
func withSites(cn *v1alpha1.CacheNode, servers ...string) *v1alpha1.CacheNode {
	cn.Spec.Sites = []v1alpha1.Site{
		{Name: "a", Hostnames: []string{"a.example.com"}, Origin: cn.Spec.Origin},
		{Name: "b", Hostnames: []string{"*.b.example.com"}, Origin: v1alpha1.Origin{Servers: servers}},
	}
	cn.Spec.Origin = v1alpha1.Origin{}
	return cn
}

func TestSampleIsAccepted(t *testing.T) {
	for _, sample := range []string{"cache_v1alpha1_cachenode.yaml", "cache_v1alpha1_cachenode_sites.yaml", "cache_v1alpha1_cachenode_sharded.yaml"} {
		t.Run(sample, func(t *testing.T) { sampleIsAccepted(t, sample) })
	}
}

func sampleIsAccepted(t *testing.T, sample string) {
	data, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", sample))
	if err != nil {
		t.Fatal(err)
	}
	cn := &v1alpha1.CacheNode{}
	if err := yaml.UnmarshalStrict(data, cn); err != nil {
		t.Fatal(err)
	}
	cn.Namespace = "default"
	if err := k8s.Create(context.Background(), cn, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
}

// TestInvalidCacheNodesAreRejected checks each rejection and that its message names the field.
func TestInvalidCacheNodesAreRejected(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.CacheNode)
		want   []string // substrings of the API server's message
	}{
		{"duplicate disk names", func(c *v1alpha1.CacheNode) { c.Spec.Disks[1].Name = "nvme0" },
			[]string{"spec.disks[1]", "Duplicate value"}},
		{"duplicate disk paths", func(c *v1alpha1.CacheNode) { c.Spec.Disks[1].Path = "/mnt/nvme0" },
			[]string{"spec.disks", "disk paths must be unique"}},
		{"nested disk paths", func(c *v1alpha1.CacheNode) { c.Spec.Disks[1].Path = "/mnt/nvme0/hdd" },
			[]string{"spec.disks", "must not be nested"}},
		{"weight 0", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Weight = -1 },
			[]string{"spec.disks[0].weight", "greater than or equal to 1"}},
		{"weight 101", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Weight = 101 },
			[]string{"spec.disks[0].weight", "less than or equal to 100"}},
		{"path with ..", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Path = "/mnt/../etc" },
			[]string{"spec.disks[0].path", "must not contain '..'"}},
		{"path with a semicolon", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Path = "/mnt/a;load_module" },
			[]string{"spec.disks[0].path", `path is an absolute path whose segments are letters, digits and . _ -`}},
		{"path with a space", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Path = "/mnt/a b" },
			[]string{"spec.disks[0].path", `path is an absolute path whose segments are letters, digits and . _ -`}},
		{"path with a variable", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Path = "/mnt/$host" },
			[]string{"spec.disks[0].path", `path is an absolute path whose segments are letters, digits and . _ -`}},
		{"relative path", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Path = "mnt/a" },
			[]string{"spec.disks[0].path", `path is an absolute path whose segments are letters, digits and . _ -`}},
		{"disk name not a DNS label", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Name = "Disk_0" },
			[]string{"spec.disks[0].name", `a disk's name is lowercase letters, digits and '-'`}},
		{"unknown media", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Media = "Tape" },
			[]string{"spec.disks[0].media", "Unsupported value"}},
		{"threads 0", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].ThreadPool.Threads = -1 },
			[]string{"spec.disks[0].threadPool.threads", "greater than or equal to 1"}},
		{"threads 513", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].ThreadPool.Threads = 513 },
			[]string{"spec.disks[0].threadPool.threads", "less than or equal to 512"}},
		{"maxQueue too big", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].ThreadPool.MaxQueue = ptr.To[int32](1048577) },
			[]string{"spec.disks[0].threadPool.maxQueue", "less than or equal to 1048576"}},
		{"inactive injection", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Inactive = "7d;" },
			[]string{"spec.disks[0].inactive", `inactive is a whole number and a unit of s, m, h or d`}},
		{"too many disks", func(c *v1alpha1.CacheNode) {
			for i := range 16 {
				c.Spec.Disks = append(c.Spec.Disks, v1alpha1.Disk{Name: fmt.Sprintf("x%d", i), Path: fmt.Sprintf("/mnt/x%d", i), Media: "SSD", Size: resource.MustParse("1Gi")})
			}
		}, []string{"spec.disks", "must have at most 16 items"}},
		{"acceptMutex with reusePort", func(c *v1alpha1.CacheNode) { c.Spec.Listener.AcceptMutex = ptr.To(false) },
			[]string{"spec.listener.acceptMutex", "acceptMutex may be set only when reusePort is false"}},
		{"statusPort equals port", func(c *v1alpha1.CacheNode) { c.Spec.Listener.Port, c.Spec.Listener.StatusPort = 9000, 9000 },
			[]string{"spec.listener.statusPort", "statusPort must differ from port"}},
		{"agentPort equals port", func(c *v1alpha1.CacheNode) { c.Spec.Listener.AgentPort = 8080 },
			[]string{"spec.listener.agentPort", "agentPort must differ from port and statusPort"}},
		{"peerPort equals port", func(c *v1alpha1.CacheNode) { c.Spec.Sharding = &v1alpha1.Sharding{PeerPort: 8080} },
			[]string{"spec.sharding.peerPort", "sharding.peerPort must differ from listener.port"}},
		{"peerPort equals agentPort", func(c *v1alpha1.CacheNode) { c.Spec.Sharding = &v1alpha1.Sharding{PeerPort: 9145} },
			[]string{"spec.sharding.peerPort", "sharding.peerPort must differ"}},
		{"peerPort out of range", func(c *v1alpha1.CacheNode) { c.Spec.Sharding = &v1alpha1.Sharding{PeerPort: 65536} },
			[]string{"spec.sharding.peerPort"}},
		{"hot tier too small", func(c *v1alpha1.CacheNode) {
			c.Spec.Sharding = &v1alpha1.Sharding{HotTier: &v1alpha1.HotTier{Size: resource.MustParse("512Ki")}}
		}, []string{"spec.sharding.hotTier.size", "size must be a whole number of bytes from 1Mi to 16Gi"}},
		{"hot tier seconds", func(c *v1alpha1.CacheNode) {
			c.Spec.Sharding = &v1alpha1.Sharding{HotTier: &v1alpha1.HotTier{Size: resource.MustParse("64Mi"), Seconds: 61}}
		}, []string{"spec.sharding.hotTier.seconds"}},
		{"sharding with hostNetwork", func(c *v1alpha1.CacheNode) {
			c.Spec.Sharding, c.Spec.HostNetwork = &v1alpha1.Sharding{}, true
		}, []string{"spec.sharding", "sharding is not available with hostNetwork"}},
		{"workerProcesses text", func(c *v1alpha1.CacheNode) {
			c.Spec.Listener.WorkerProcesses = ptr.To(intstr.FromString("4;user root"))
		},
			[]string{"spec.listener.workerProcesses", "must be auto or an integer from 1 to 1024"}},
		{"workerProcesses 0", func(c *v1alpha1.CacheNode) { c.Spec.Listener.WorkerProcesses = ptr.To(intstr.FromInt32(0)) },
			[]string{"spec.listener.workerProcesses", "must be auto or an integer from 1 to 1024"}},
		{"hostNetwork with a privileged port", func(c *v1alpha1.CacheNode) { c.Spec.HostNetwork = true; c.Spec.Listener.Port = 80 },
			[]string{"spec.listener.port", "at least 1024 with hostNetwork"}},
		{"nodeSelector value longer than a label's", func(c *v1alpha1.CacheNode) {
			c.Spec.NodeSelector = map[string]string{"edgepool.test/group": strings.Repeat("x", 1<<20)}
		}, []string{"spec.nodeSelector", "a nodeSelector key is a label key (at most 317 characters) and its value a label value (at most 63)"}},
		{"priorityClassName not a DNS subdomain", func(c *v1alpha1.CacheNode) { c.Spec.PriorityClassName = "Edge Cache" },
			[]string{"spec.priorityClassName", `priorityClassName is a PriorityClass's name: a lowercase DNS subdomain`}},
		{"origin without port", func(c *v1alpha1.CacheNode) { c.Spec.Origin.Servers = []string{"origin.example"} },
			[]string{"spec.origin.servers[0]", `an origin server is host:port without a scheme or path`}},
		{"origin with scheme", func(c *v1alpha1.CacheNode) { c.Spec.Origin.Servers = []string{"http://origin.example:80"} },
			[]string{"spec.origin.servers[0]", `an origin server is host:port without a scheme or path`}},
		{"origin injection", func(c *v1alpha1.CacheNode) { c.Spec.Origin.Servers = []string{"a.example:80;include /etc/passwd"} },
			[]string{"spec.origin.servers[0]", `an origin server is host:port without a scheme or path`}},
		{"origin IPv4-mapped in brackets", func(c *v1alpha1.CacheNode) { c.Spec.Origin.Servers = []string{"[::ffff:192.0.2.1]:80"} },
			[]string{"spec.origin.servers[0]", "a bracketed host must be an IPv6 address, and not an IPv4-mapped one (write an IPv4 address without brackets)"}},
		{"origin port too big", func(c *v1alpha1.CacheNode) { c.Spec.Origin.Servers = []string{"origin.example:70000"} },
			[]string{"spec.origin.servers", "origin ports must be at most 65535"}},
		{"duplicate origins", func(c *v1alpha1.CacheNode) { c.Spec.Origin.Servers = []string{"a:80", "a:80"} },
			[]string{"spec.origin.servers[1]", "Duplicate value"}},
		{"free-text cache key", func(c *v1alpha1.CacheNode) { c.Spec.Cache.Key = "$cookie_session" },
			[]string{"spec.cache.key", "Unsupported value"}},
		{"cache key URI", func(c *v1alpha1.CacheNode) { c.Spec.Cache.Key = v1alpha1.CacheKeyURI },
			[]string{"spec.cache.key", "key URI shares one cached response between all the hostnames"}},
		{"unknown authorizedRequests", func(c *v1alpha1.CacheNode) { c.Spec.Cache.AuthorizedRequests = "Always" },
			[]string{"spec.cache.authorizedRequests", "Unsupported value"}},
		{"status code text", func(c *v1alpha1.CacheNode) {
			c.Spec.Cache.Valid = []v1alpha1.CacheValidity{{Codes: []string{"2;0"}, Duration: "1m"}}
		}, []string{"spec.cache.valid[0].codes[0]", `a status code is a number from 100 to 599, or any`}},
		{"tag header injection", func(c *v1alpha1.CacheNode) { c.Spec.Cache.TagHeaders = []string{"X-Tags;proxy_pass x"} },
			[]string{"spec.cache.tagHeaders[0]", "a tag header is a header name"}},
		{"tag header nginx reads", func(c *v1alpha1.CacheNode) { c.Spec.Cache.TagHeaders = []string{"Surrogate-Key", "Cache-control"} },
			[]string{"spec.cache.tagHeaders[1]", "a tag header cannot be a header nginx or edgepool reads or writes itself"}},
		{"tag header Content-*", func(c *v1alpha1.CacheNode) { c.Spec.Cache.TagHeaders = []string{"content-type"} },
			[]string{"spec.cache.tagHeaders[0]", "a tag header cannot be"}},
		{"unknown tagHeadersToClients", func(c *v1alpha1.CacheNode) { c.Spec.Cache.TagHeadersToClients = "Strip" },
			[]string{"spec.cache.tagHeadersToClients", "Unsupported value"}},
		{"unknown http3", func(c *v1alpha1.CacheNode) {
			c.Spec.Origin = v1alpha1.Origin{}
			c.Spec.Sites = []v1alpha1.Site{{Name: "a", Hostnames: []string{"a.example.com"}, Origin: v1alpha1.Origin{Servers: []string{"origin:80"}},
				TLS: &v1alpha1.SiteTLS{SecretName: "a-tls", HTTP3: "Yes"}}}
		}, []string{"spec.sites[0].tls.http3", "Unsupported value"}},
		{"client limits without a limit", func(c *v1alpha1.CacheNode) { c.Spec.ClientLimits = &v1alpha1.ClientLimits{} },
			[]string{"spec.clientLimits", "clientLimits sets requestsPerSecond, concurrentRequests or both"}},
		{"burst without a rate", func(c *v1alpha1.CacheNode) {
			c.Spec.ClientLimits = &v1alpha1.ClientLimits{ConcurrentRequests: 4, Burst: 10}
		}, []string{"spec.clientLimits.burst", "burst is the requests allowed above requestsPerSecond"}},
		{"concurrent requests beyond nginx's", func(c *v1alpha1.CacheNode) {
			c.Spec.ClientLimits = &v1alpha1.ClientLimits{ConcurrentRequests: 65536}
		}, []string{"spec.clientLimits.concurrentRequests", "65535"}},
		{"a site's rate out of bounds", func(c *v1alpha1.CacheNode) {
			c.Spec.Origin = v1alpha1.Origin{}
			c.Spec.Sites = []v1alpha1.Site{{Name: "a", Hostnames: []string{"a.example.com"}, Origin: v1alpha1.Origin{Servers: []string{"origin:80"}},
				ClientLimits: &v1alpha1.ClientLimits{RequestsPerSecond: -1}}}
		}, []string{"spec.sites[0].clientLimits.requestsPerSecond"}},
		{"unknown gzip", func(c *v1alpha1.CacheNode) { c.Spec.Compression = &v1alpha1.Compression{Gzip: "Yes"} },
			[]string{"spec.compression.gzip", "Unsupported value"}},
		{"unknown brotli", func(c *v1alpha1.CacheNode) { c.Spec.Compression = &v1alpha1.Compression{Brotli: "on"} },
			[]string{"spec.compression.brotli", "Unsupported value"}},
		{"brotli level 12", func(c *v1alpha1.CacheNode) {
			c.Spec.Compression = &v1alpha1.Compression{BrotliLevel: ptr.To[int32](12)}
		},
			[]string{"spec.compression.brotliLevel", "less than or equal to 11"}},
		{"gzip level 10", func(c *v1alpha1.CacheNode) { c.Spec.Compression = &v1alpha1.Compression{GzipLevel: 10} },
			[]string{"spec.compression.gzipLevel", "less than or equal to 9"}},
		{"a type with parameters", func(c *v1alpha1.CacheNode) {
			c.Spec.Compression = &v1alpha1.Compression{Types: []string{"text/html; charset=utf-8"}}
		}, []string{"spec.compression.types[0]", "a type is a lowercase media type without parameters"}},
		{"a type nginx cannot hold", func(c *v1alpha1.CacheNode) {
			c.Spec.Compression = &v1alpha1.Compression{Types: []string{"application/" + strings.Repeat("x", 35)}}
		}, []string{"spec.compression.types[0]", "46"}},
		{"a type that would end nginx's directive", func(c *v1alpha1.CacheNode) {
			c.Spec.Compression = &v1alpha1.Compression{Types: []string{"text/css;gzip_types"}}
		}, []string{"spec.compression.types[0]"}},
		{"a site's min length out of bounds", func(c *v1alpha1.CacheNode) {
			c.Spec.Origin = v1alpha1.Origin{}
			c.Spec.Sites = []v1alpha1.Site{{Name: "a", Hostnames: []string{"a.example.com"}, Origin: v1alpha1.Origin{Servers: []string{"origin:80"}},
				Compression: &v1alpha1.Compression{MinLength: ptr.To[int32](-1)}}}
		}, []string{"spec.sites[0].compression.minLength"}},
		{"unknown io mode", func(c *v1alpha1.CacheNode) { c.Spec.IO = "async" },
			[]string{"spec.io", "Unsupported value"}},
		{"sendfile chunk too big", func(c *v1alpha1.CacheNode) { c.Spec.SendfileMaxChunk = ptr.To(resource.MustParse("2Gi")) },
			[]string{"spec.sendfileMaxChunk", "from 0 to 1Gi"}},
		{"sendfile chunk fractional", func(c *v1alpha1.CacheNode) { c.Spec.SendfileMaxChunk = ptr.To(resource.MustParse("100m")) },
			[]string{"spec.sendfileMaxChunk", "whole number of bytes"}},
		{"slice too small", func(c *v1alpha1.CacheNode) { c.Spec.Cache.SliceSize = ptr.To(resource.MustParse("1000")) },
			[]string{"spec.cache.sliceSize", "from 64Ki to 1Gi"}},
		{"slice too big", func(c *v1alpha1.CacheNode) { c.Spec.Cache.SliceSize = ptr.To(resource.MustParse("2Gi")) },
			[]string{"spec.cache.sliceSize", "from 64Ki to 1Gi"}},
		{"failover on no errors", func(c *v1alpha1.CacheNode) { c.Spec.DiskFailover.IOErrors = -1 },
			[]string{"spec.diskFailover.ioErrors", "should be greater than or equal to 1"}},
		{"failover cooldown above its maximum", func(c *v1alpha1.CacheNode) {
			c.Spec.DiskFailover.CooldownSeconds, c.Spec.DiskFailover.MaxCooldownSeconds = 600, 300
		}, []string{"spec.diskFailover.maxCooldownSeconds", "maxCooldownSeconds must be at least cooldownSeconds"}},
		{"failover cooldown above the default maximum", func(c *v1alpha1.CacheNode) { c.Spec.DiskFailover.CooldownSeconds = 3600 },
			[]string{"spec.diskFailover.maxCooldownSeconds", "maxCooldownSeconds must be at least cooldownSeconds"}},
		{"access log sample negative", func(c *v1alpha1.CacheNode) { c.Spec.AccessLogPercent = -1 },
			[]string{"spec.accessLogPercent", "greater than or equal to 1"}},
		{"access log sample 101", func(c *v1alpha1.CacheNode) { c.Spec.AccessLogPercent = 101 },
			[]string{"spec.accessLogPercent", "less than or equal to 100"}},
		// What the renderer refuses, the API server refuses first, naming the field.
		{"size 0", func(c *v1alpha1.CacheNode) { c.Spec.Disks[1].Size = resource.MustParse("0") },
			[]string{"spec.disks[1].size", "size must be a whole number of bytes from 1Mi to 1Pi"}},
		{"size negative", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Size = resource.MustParse("-1Gi") },
			[]string{"spec.disks[0].size", "from 1Mi to 1Pi"}},
		{"size 1e100", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Size = resource.MustParse("1e100") },
			[]string{"spec.disks[0].size", "from 1Mi to 1Pi"}},
		{"size fractional", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Size = resource.MustParse("100m") },
			[]string{"spec.disks[0].size", "whole number of bytes"}},
		{"size just below 1Mi", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Size = resource.MustParse("1048575") },
			[]string{"spec.disks[0].size", "from 1Mi to 1Pi"}},
		{"size above 1Pi", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].Size = resource.MustParse("1025Ti") },
			[]string{"spec.disks[0].size", "from 1Mi to 1Pi"}},
		{"keys zone below 1Mi", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].KeysZoneSize = ptr.To(resource.MustParse("1Ki")) },
			[]string{"spec.disks[0].keysZoneSize", "keysZoneSize must be a whole number of bytes from 1Mi to 16Gi"}},
		{"keys zone above 16Gi", func(c *v1alpha1.CacheNode) { c.Spec.Disks[1].KeysZoneSize = ptr.To(resource.MustParse("17179869185")) },
			[]string{"spec.disks[1].keysZoneSize", "from 1Mi to 16Gi"}},
		{"keys zone fractional", func(c *v1alpha1.CacheNode) { c.Spec.Disks[0].KeysZoneSize = ptr.To(resource.MustParse("1.5")) },
			[]string{"spec.disks[0].keysZoneSize", "whole number of bytes"}},
		{"keys zones above 16Gi together", func(c *v1alpha1.CacheNode) {
			c.Spec.Disks[0].KeysZoneSize = ptr.To(resource.MustParse("8Gi"))
			c.Spec.Disks[1].KeysZoneSize = ptr.To(resource.MustParse("8193Mi"))
		}, []string{"spec.disks", "the disks' keysZoneSize must add up to at most 16Gi"}},
		{"16 keys zones of 65535Mi", func(c *v1alpha1.CacheNode) {
			c.Spec.Disks = nil
			for i := range 16 {
				c.Spec.Disks = append(c.Spec.Disks, v1alpha1.Disk{Name: fmt.Sprintf("d%d", i), Path: fmt.Sprintf("/mnt/d%d", i), Media: "HDD",
					Size: resource.MustParse("1Ti"), KeysZoneSize: ptr.To(resource.MustParse("65535Mi"))})
			}
		}, []string{"spec.disks[15].keysZoneSize", "from 1Mi to 16Gi"}},
		{"origin IPv4 in brackets", func(c *v1alpha1.CacheNode) { c.Spec.Origin.Servers = []string{"[127.0.0.1]:80"} },
			[]string{"spec.origin.servers[0]", "a bracketed host must be an IPv6 address"}},
		{"origin not an address in brackets", func(c *v1alpha1.CacheNode) { c.Spec.Origin.Servers = []string{"a:80", "[1:2:3]:80"} },
			[]string{"spec.origin.servers[1]", "a bracketed host must be an IPv6 address"}},
		{"origin host name of 254 characters", func(c *v1alpha1.CacheNode) {
			c.Spec.Origin.Servers = []string{strings.Repeat(strings.Repeat("a", 62)+".", 4) + "ab:80"}
		}, []string{"spec.origin.servers[0]", "a host name must be at most 253 characters"}},
		{"name too long", func(c *v1alpha1.CacheNode) { c.Name = strings.Repeat("a", 53) },
			[]string{"metadata.name must be at most 52 characters"}},
		{"client CIDR with host bits", func(c *v1alpha1.CacheNode) { c.Spec.Listener.ClientCIDRs = []string{"10.0.0.1/8"} },
			[]string{"spec.listener.clientCIDRs", "clientCIDRs must be CIDRs in canonical form"}},
		{"client CIDR not canonical", func(c *v1alpha1.CacheNode) { c.Spec.Listener.ClientCIDRs = []string{"2001:DB8::/32"} },
			[]string{"spec.listener.clientCIDRs", "clientCIDRs must be CIDRs in canonical form"}},
		{"client address without a prefix", func(c *v1alpha1.CacheNode) { c.Spec.Listener.ClientCIDRs = []string{"10.0.0.1"} },
			[]string{"spec.listener.clientCIDRs", "clientCIDRs must be CIDRs in canonical form"}},
		{"client CIDR injection", func(c *v1alpha1.CacheNode) { c.Spec.Listener.ClientCIDRs = []string{"10.0.0.0/8,0.0.0.0/0"} },
			[]string{"spec.listener.clientCIDRs", "clientCIDRs must be CIDRs in canonical form"}},
		{"trusted proxy with host bits", func(c *v1alpha1.CacheNode) { c.Spec.Listener.TrustedProxies = []string{"10.0.0.1/8"} },
			[]string{"spec.listener.trustedProxies", "trustedProxies must be CIDRs in canonical form"}},
		{"trusted proxy injection", func(c *v1alpha1.CacheNode) { c.Spec.Listener.TrustedProxies = []string{"10.0.0.0/8;"} },
			[]string{"spec.listener.trustedProxies", "trustedProxies must be CIDRs in canonical form"}},
		{"ip family unknown", func(c *v1alpha1.CacheNode) { c.Spec.Listener.IPFamilies = []v1alpha1.IPFamily{"IPv5"} },
			[]string{"spec.listener.ipFamilies[0]", `Unsupported value: "IPv5"`}},
		{"ip family twice", func(c *v1alpha1.CacheNode) {
			c.Spec.Listener.IPFamilies = []v1alpha1.IPFamily{v1alpha1.IPv6, v1alpha1.IPv6}
		}, []string{"spec.listener.ipFamilies[1]", "Duplicate value"}},
		// Labels of at most 63 characters each, as the renderer takes them: the pattern once
		// let labels run together without a dot.
		{"hostname label over 63", func(c *v1alpha1.CacheNode) {
			c.Spec.Origin = v1alpha1.Origin{}
			c.Spec.Sites = []v1alpha1.Site{{Name: "a", Hostnames: []string{"*.a." + strings.Repeat("b", 100)}, Origin: v1alpha1.Origin{Servers: []string{"origin:80"}}}}
		}, []string{"spec.sites[0].hostnames[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cn := minimal("invalid")
			tc.mutate(cn)
			err := k8s.Create(context.Background(), cn, client.DryRunAll)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			// A person reads it: the form a field takes, not a bare regular expression,
			// and no rule that failed on what another rule refused.
			for _, unreadable := range []string{"should match", "evaluating rule"} {
				if strings.Contains(err.Error(), unreadable) {
					t.Errorf("error says %q:\n%v", unreadable, err)
				}
			}
		})
	}
}

// longestTypes are 32 types of the longest length compression.types takes, as JSON.
func longestTypes() string {
	types := make([]string, 32)
	for i := range types {
		types[i] = fmt.Sprintf(`"application/%s%02d"`, strings.Repeat("x", 46-len("application/")-2), i)
	}
	return strings.Join(types, ", ")
}

// TestBoundsAreAccepted creates a CacheNode at every upper and lower bound of the
// quantities and origins, in both of a quantity's forms (string and integer) and with
// whole numbers of bytes written as fractions (1.5Gi), and checks that what the API server
// accepts renders and passes `nginx -t`: the keys zones add up to exactly 16Gi, which
// nginx maps.
func TestBoundsAreAccepted(t *testing.T) {
	host253 := strings.Repeat(strings.Repeat("a", 62)+".", 4) + "a"
	manifest := fmt.Sprintf(`{"apiVersion": "cache.edgepool.io/v1alpha1", "kind": "CacheNode",
		"metadata": {"name": "bounds", "namespace": "default"},
		"spec": {
			"disks": [
				{"name": "a", "path": "/mnt/a", "media": "NVMe", "size": "1Mi", "keysZoneSize": "8Gi"},
				{"name": "b", "path": "/mnt/b", "media": "HDD", "size": 1125899906842624, "keysZoneSize": 8587837440},
				{"name": "c", "path": "/mnt/c", "media": "SSD", "size": "1Pi", "keysZoneSize": 1048576},
				{"name": "d", "path": "/mnt/d", "media": "SSD", "size": "1.5Gi", "keysZoneSize": "0.0009765625Gi"}
			],
			"origin": {"servers": ["[::1]:80", "[2001:db8::1]:65535", "%s:1", "127.0.0.1:8080"]},
			"sendfileMaxChunk": "1Gi",
			"clientLimits": {"requestsPerSecond": 1000000, "burst": 1000000, "concurrentRequests": 65535},
			"compression": {"gzipLevel": 9, "brotliLevel": 11, "minLength": 1048576, "types": [%s]}
		}}`, host253, longestTypes())
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON([]byte(manifest)); err != nil {
		t.Fatal(err)
	}
	if err := k8s.Create(context.Background(), obj, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	var cn v1alpha1.CacheNode
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &cn); err != nil {
		t.Fatal(err)
	}
	conf, err := render.NginxConf(&cn.Spec)
	if err != nil {
		t.Fatal(err)
	}
	nginx, err := testkit.NginxBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := testkit.NginxT(nginx, conf, t.TempDir(), render.Facts(&cn.Spec, conf).Certificates...); err != nil {
		t.Fatal(err)
	}
}

func dryRunCreate(cn *v1alpha1.CacheNode) error {
	return k8s.Create(context.Background(), cn, client.DryRunAll)
}

func TestHostNetworkRefusesNodeDaemonPorts(t *testing.T) {
	fields := map[string]func(*v1alpha1.Listener, int32){
		"port":       func(l *v1alpha1.Listener, p int32) { l.Port = p },
		"statusPort": func(l *v1alpha1.Listener, p int32) { l.StatusPort = p },
		"agentPort":  func(l *v1alpha1.Listener, p int32) { l.AgentPort = p },
		"tlsPort":    func(l *v1alpha1.Listener, p int32) { l.TLSPort = p },
	}
	for name, set := range fields {
		for _, port := range render.NodeDaemonPorts {
			t.Run(fmt.Sprintf("%s %d", name, port), func(t *testing.T) {
				cn := minimal("daemon-port")
				set(&cn.Spec.Listener, port)
				if err := dryRunCreate(cn); err != nil {
					t.Fatalf("refused without hostNetwork: %v", err)
				}
				cn.Spec.HostNetwork = true
				err := dryRunCreate(cn)
				if !apierrors.IsInvalid(err) {
					t.Fatalf("want an Invalid error, got %v", err)
				}
				want := fmt.Sprintf("spec.listener.%s: Invalid value: listener.%s must not be a port of a node daemon with hostNetwork", name, name)
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			})
		}
	}
	cn := minimal("daemon-port")
	cn.Spec.HostNetwork = true
	cn.Spec.Listener.Port, cn.Spec.Listener.StatusPort, cn.Spec.Listener.AgentPort, cn.Spec.Listener.TLSPort = 10251, 10258, 2382, 10260
	if err := dryRunCreate(cn); err != nil {
		t.Errorf("ports beside the daemons' were refused: %v", err)
	}
	cn.Spec.Listener.TLSPort = 443
	if err := dryRunCreate(cn); err == nil || !strings.Contains(err.Error(), "listener.tlsPort must be at least 1024 with hostNetwork") {
		t.Errorf("tlsPort 443 with hostNetwork: want refused, got %v", err)
	}
}

func TestHostNetworkRefusesOriginsThatReachTheNode(t *testing.T) {
	// Not an IPv6 address in brackets: refused with or without hostNetwork.
	alwaysRefused := map[string]bool{"[::ffff:127.0.0.1]": true, "[::ffff:7f00:1]": true, "[127.0.0.1]": true}
	const (
		ipv6    = "IPv4-mapped [::ffff:a.b.c.d], link-local [fe80::/10]"
		numeric = "a numeric host must be a dotted-decimal IPv4 address"
		names   = "localhost names (localhost, *.localhost, ip6-localhost, ...)"
	)
	for _, tc := range []struct{ host, want string }{
		{"127.0.0.1", numeric}, {"127.3.2.1", numeric}, {"127.1", numeric}, {"2130706433", numeric},
		{"0x7f000001", numeric}, {"0177.0.0.1", numeric}, {"0127.0.0.1", numeric}, {"0x7f.1", numeric},
		{"0", numeric}, {"0.0.0.0", numeric}, {"169.254.169.254", numeric}, {"169.254.170.2", numeric},
		{"0xa9fea9fe", numeric}, {"100.100.100.200", numeric}, {"168.63.129.16", numeric},
		{"[::1]", ipv6}, {"[0::1]", ipv6}, {"[::]", ipv6}, {"[::ffff:127.0.0.1]", ipv6}, {"[::ffff:7f00:1]", ipv6},
		{"[fe80::1]", ipv6}, {"[FE80::a9fe:a9fe]", ipv6}, {"[fd00:ec2::254]", ipv6}, {"[fd00:ec2::23]", ipv6},
		{"[fd20:ce::254]", ipv6}, {"[127.0.0.1]", ipv6},
		{"localhost", names}, {"localhost.localdomain", names}, {"ip6-localhost", names}, {"ip6-loopback", names},
		{"edge.localhost", names}, {"metadata.google.internal", names}, {"metadata", names}, {"instance-data", names},
	} {
		t.Run(tc.host, func(t *testing.T) {
			cn := minimal("origin-node")
			cn.Spec.Origin.Servers = []string{"origin.example:80", tc.host + ":80"}
			switch err := dryRunCreate(cn); {
			case alwaysRefused[tc.host] && (err == nil || !strings.Contains(err.Error(), "a bracketed host must be an IPv6 address")):
				t.Fatalf("want refused in every network namespace, got %v", err)
			case !alwaysRefused[tc.host] && err != nil:
				t.Fatalf("refused without hostNetwork: %v", err)
			}
			cn.Spec.HostNetwork = true
			err := dryRunCreate(cn)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want an Invalid error, got %v", err)
			}
			for _, want := range []string{"spec.origin.servers: Invalid value", "must not reach the node or the cloud's metadata service with hostNetwork", tc.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}

			// The same origin for a site.
			cn = withSites(minimal("site-origin-node"), "origin.example:80", tc.host+":80")
			switch err := dryRunCreate(cn); {
			case alwaysRefused[tc.host] && err == nil:
				t.Fatal("a site's origin: want refused in every network namespace")
			case !alwaysRefused[tc.host] && err != nil:
				t.Fatalf("a site's origin: refused without hostNetwork: %v", err)
			}
			cn.Spec.HostNetwork = true
			err = dryRunCreate(cn)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("a site's origin: want an Invalid error, got %v", err)
			}
			for _, want := range []string{"spec.sites: Invalid value", "sites[].origin.servers must not reach the node or the cloud's metadata service with hostNetwork", tc.want} {
				if !alwaysRefused[tc.host] && !strings.Contains(err.Error(), want) {
					t.Errorf("a site's origin: error lacks %q:\n%v", want, err)
				}
			}
		})
	}

	cn := minimal("origin-node")
	cn.Spec.HostNetwork = true
	cn.Spec.Origin.Servers = []string{"origin.example.svc:80", "10.0.0.10:8080", "126.255.255.255:80", "128.0.0.1:80",
		"169.255.0.1:80", "[2001:db8::1]:443", "[fd00:ec2::255]:80", "localhost.example.com:80", "mylocalhost:80",
		"metadata.example:80", "0x7f000001.example:80"}
	if err := dryRunCreate(cn); err != nil {
		t.Errorf("origins that do not reach the node were refused: %v", err)
	}
	cn = withSites(cn, cn.Spec.Origin.Servers...)
	if err := dryRunCreate(cn); err != nil {
		t.Errorf("sites' origins that do not reach the node were refused: %v", err)
	}
}

func TestOriginRulesAgreeWithRenderer(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 7))
	hosts := []string{"127.0.0.1", "10.1.2.3", "0127.0.0.1", "[::1]", "[2001:db8::1]", "localhost", "origin.example"}
	for range 120 {
		a := r.Uint32()
		switch r.IntN(4) {
		case 0:
			a = 127<<24 | a&0xffffff
		case 1:
			a = 169<<24 | 254<<16 | a&0xffff
		}
		parts := 1 + r.IntN(4)
		vals := make([]uint64, 0, parts)
		for i := range parts - 1 {
			vals = append(vals, uint64(a>>(24-8*i)&0xff))
		}
		vals = append(vals, uint64(a)&(1<<(32-8*(parts-1))-1))
		spelled := make([]string, parts)
		for i, v := range vals {
			switch r.IntN(3) {
			case 0:
				spelled[i] = strconv.FormatUint(v, 10)
			case 1:
				spelled[i] = "0" + strconv.FormatUint(v, 8)
			default:
				spelled[i] = "0x" + strconv.FormatUint(v, 16)
			}
		}
		hosts = append(hosts, strings.Join(spelled, "."))
	}
	for _, h := range hosts {
		cn := minimal("agree")
		cn.Spec.Origin.Servers = []string{h + ":80"}
		if dryRunCreate(cn) != nil {
			continue // the schema's host:port pattern refuses it with or without hostNetwork
		}
		cn.Spec.HostNetwork = true
		apiRefuses := dryRunCreate(cn) != nil
		why := render.OriginHazard(h)
		if apiRefuses != (why != "") {
			t.Errorf("%s: API server refuses: %v; renderer: %q", h, apiRefuses, why)
		}
		// The sites' rules are the same lists.
		site := withSites(minimal("agree-site"), "first.example:80", h+":80")
		site.Spec.HostNetwork = true
		if siteRefuses := dryRunCreate(site) != nil; siteRefuses != apiRefuses {
			t.Errorf("%s: API server refuses it as spec.origin: %v, as a site's origin: %v", h, apiRefuses, siteRefuses)
		}
	}
}

func TestClientCIDRsAreAccepted(t *testing.T) {
	cn := minimal("clients")
	cn.Spec.Listener.ClientCIDRs = []string{"10.0.0.0/8", "192.168.1.0/24", "203.0.113.7/32", "0.0.0.0/0", "2001:db8::/32", "::/0"}
	cn.Spec.Listener.TrustedProxies = cn.Spec.Listener.ClientCIDRs
	if err := dryRunCreate(cn); err != nil {
		t.Fatal(err)
	}
}

// TestBadQuantitiesAreNamedReadably: a size that is no number of bytes is refused by the
// API server with the field's name and the form a size takes, never a bare regular
// expression, and `edgepool render`'s gate (crdgate) refuses it with the same words.
func TestBadQuantitiesAreNamedReadably(t *testing.T) {
	gate, err := crdgate.CacheNodes()
	if err != nil {
		t.Fatal(err)
	}
	fields := []struct {
		path []string
		want string
	}{
		{[]string{"spec", "disks", "0", "size"}, "size must be a whole number of bytes from 1Mi to 1Pi"},
		{[]string{"spec", "disks", "0", "keysZoneSize"}, "keysZoneSize must be a whole number of bytes from 1Mi to 16Gi"},
		{[]string{"spec", "cache", "sliceSize"}, "sliceSize must be a whole number of bytes from 64Ki to 1Gi"},
		{[]string{"spec", "sendfileMaxChunk"}, "sendfileMaxChunk must be a whole number of bytes from 0 to 1Gi"},
		{[]string{"spec", "sharding", "hotTier", "size"}, "size must be a whole number of bytes from 1Mi to 16Gi"},
	}
	for _, f := range fields {
		for _, bad := range []any{"100MB", "1 Gi", "1gi", "", "-1Gi", "1.5", "0x10", "1e100", strings.Repeat("9", 65), int64(-1), 1.5, true} {
			field := strings.ReplaceAll(strings.Join(f.path, "."), ".0.", "[0].")
			t.Run(fmt.Sprintf("%s=%v", field, bad), func(t *testing.T) {
				obj := &unstructured.Unstructured{}
				if err := obj.UnmarshalJSON([]byte(`{"apiVersion": "cache.edgepool.io/v1alpha1", "kind": "CacheNode",
					"metadata": {"name": "quantity", "namespace": "default"},
					"spec": {"disks": [{"name": "a", "path": "/mnt/a", "media": "SSD", "size": "1Gi"}],
						"origin": {"servers": ["origin:80"]}, "cache": {}, "sharding": {"hotTier": {"size": "64Mi"}}}}`)); err != nil {
					t.Fatal(err)
				}
				if err := setPath(obj.Object, f.path, bad); err != nil {
					t.Fatal(err)
				}
				offline := gate.Validate(context.Background(), runtime.DeepCopyJSON(obj.Object))
				err := k8s.Create(context.Background(), obj, client.DryRunAll)
				if !apierrors.IsInvalid(err) {
					t.Fatalf("want an Invalid error, got %v", err)
				}
				want := []string{field + ": Invalid value: ", f.want}
				switch v := bad.(type) {
				case string:
					if len(v) > 64 { // refused by its length, before the rules
						want = []string{field + ": Too long: may not be more than 64 bytes"}
					}
				case float64, bool:
					want = []string{field + ": Invalid value: ", "must be of type integer,string"}
				}
				for _, msg := range []string{err.Error(), offline.ToAggregate().Error()} {
					for _, w := range want {
						if !strings.Contains(msg, w) {
							t.Errorf("error lacks %q:\n%v", w, msg)
						}
					}
					for _, unreadable := range []string{"should match", "evaluating rule", "no such overload"} {
						if strings.Contains(msg, unreadable) {
							t.Errorf("error says %q:\n%v", unreadable, msg)
						}
					}
				}
			})
		}
	}
}

// setPath sets the value at path (map keys, and list indexes as numbers) in obj.
func setPath(obj map[string]any, path []string, v any) error {
	var cur any = obj
	for i, key := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[key] = v
				return nil
			}
			cur = c[key]
		case []any:
			n, err := strconv.Atoi(key)
			if err != nil || n >= len(c) {
				return fmt.Errorf("no item %s", key)
			}
			if last {
				c[n] = v
				return nil
			}
			cur = c[n]
		default:
			return fmt.Errorf("no %s in %v", key, cur)
		}
	}
	return nil
}
