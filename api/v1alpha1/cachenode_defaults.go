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

package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// Default fills unset fields with the values the API server's schema defaults them to.
// Objects read from the API server are already defaulted; this serves offline tools such as
// `edgepool render`. A test on envtest keeps it equal to the schema's defaults.
func (s *CacheNodeSpec) Default() {
	if s.DiskLabels == "" {
		s.DiskLabels = DiskLabelsEdgepool
	}
	for i := range s.Disks {
		d := &s.Disks[i]
		if d.Weight == 0 {
			d.Weight = 1
		}
		if d.ThreadPool.MaxQueue == nil {
			d.ThreadPool.MaxQueue = ptr.To[int32](65536)
		}
		if d.KeysZoneSize == nil {
			d.KeysZoneSize = ptr.To(resource.MustParse("64Mi"))
		}
		if d.Inactive == "" {
			d.Inactive = "7d"
		}
	}
	l := &s.Listener
	if l.ReusePort == nil {
		l.ReusePort = ptr.To(true)
	}
	if l.Port == 0 {
		l.Port = 8080
	}
	if l.WorkerProcesses == nil {
		l.WorkerProcesses = ptr.To(intstr.FromString("auto"))
	}
	if l.WorkerConnections == 0 {
		l.WorkerConnections = 4096
	}
	if l.Backlog == 0 {
		l.Backlog = 511
	}
	if l.StatusPort == 0 {
		l.StatusPort = 18081
	}
	if l.AgentPort == 0 {
		l.AgentPort = 9145
	}
	if l.TLSPort == 0 {
		l.TLSPort = 8443
	}
	if s.Sharding != nil && s.Sharding.PeerPort == 0 {
		s.Sharding.PeerPort = DefaultPeerPort
	}
	if s.Sharding != nil && s.Sharding.HotTier != nil {
		if h := s.Sharding.HotTier; h.MinUses == 0 {
			h.MinUses = 2
		}
		if h := s.Sharding.HotTier; h.Seconds == 0 {
			h.Seconds = 1
		}
	}
	if len(s.Origin.Servers) > 0 { // with sites, origin is unset
		s.Origin.defaults()
	}
	for i := range s.Sites {
		site := &s.Sites[i]
		site.Origin.defaults()
		if site.Cache != nil {
			site.Cache.defaults()
		}
		if site.TLS != nil && site.TLS.PlainHTTP == "" {
			site.TLS.PlainHTTP = PlainHTTPServe
		}
		if site.TLS != nil && site.TLS.HTTP3 == "" {
			site.TLS.HTTP3 = HTTP3Off
		}
		if site.Compression != nil {
			site.Compression.defaults()
		}
	}
	if s.Compression != nil {
		s.Compression.defaults()
	}
	if s.Cache.Key == "" {
		s.Cache.Key = CacheKeyHostURI
	}
	s.Cache.defaults()
	if s.IO == "" {
		s.IO = IOThreads
	}
	if s.SendfileMaxChunk == nil {
		s.SendfileMaxChunk = ptr.To(resource.MustParse("2Mi"))
	}
	f := &s.DiskFailover
	if f.IOErrors == 0 {
		f.IOErrors = 5
	}
	if f.CheckFailures == 0 {
		f.CheckFailures = 2
	}
	if f.ErrorWindowSeconds == 0 {
		f.ErrorWindowSeconds = 10
	}
	if f.CooldownSeconds == 0 {
		f.CooldownSeconds = 60
	}
	if f.MaxCooldownSeconds == 0 {
		f.MaxCooldownSeconds = 1800
	}
	if s.DiskAdoption == "" {
		s.DiskAdoption = DiskAdoptionAdopt
	}
	if s.Service != nil {
		s.Service.defaults()
	}
}

func (o *Origin) defaults() {
	if o.Keepalive == nil {
		o.Keepalive = ptr.To[int32](32)
	}
}

// DefaultCompressedTypes are the media types a compression compresses unless it lists
// its own: text, and the text formats of application and image.
var DefaultCompressedTypes = []string{
	"text/html", "text/css", "text/plain", "text/xml", "text/javascript", "application/javascript",
	"application/json", "application/xml", "application/rss+xml", "application/atom+xml",
	"image/svg+xml", "application/wasm",
}

func (c *Compression) defaults() {
	if c.Gzip == "" {
		c.Gzip = CompressionOn
	}
	if c.GzipLevel == 0 {
		c.GzipLevel = 6
	}
	if c.Brotli == "" {
		c.Brotli = CompressionOn
	}
	if c.BrotliLevel == nil {
		c.BrotliLevel = ptr.To[int32](6)
	}
	if c.Types == nil {
		c.Types = append([]string(nil), DefaultCompressedTypes...)
	}
	if c.MinLength == nil {
		c.MinLength = ptr.To[int32](256)
	}
}

func (c *CacheRules) defaults() {
	// valid, useStale and sliceSize have no default: forced freshness, stale responses
	// the origin did not allow and slicing are opt-ins.
	if c.AuthorizedRequests == "" {
		c.AuthorizedRequests = AuthorizedRequestsBypass
	}
	if c.Lock == nil {
		c.Lock = ptr.To(true)
	}
	if c.LockTimeout == "" {
		c.LockTimeout = "5s"
	}
	if c.TagHeaders == nil {
		c.TagHeaders = []string{"Surrogate-Key", "Cache-Tag"}
	}
	if c.TagHeadersToClients == "" {
		c.TagHeadersToClients = TagHeadersHide
	}
}

// Threads is the size of the disk's thread pool: threadPool.threads, or when unset the
// default for its media. An HDD's reads take milliseconds, so a worker accumulates more of
// them in flight; `make bench` (D4) measured, under 50 cold connections per worker on one
// HDD, a hot object keeping 0.09 of its rate with 16 threads, 0.20 with 64 and 1.00 with
// 128. A thread costs about 8 KiB resident (its stack is reserved, not touched).
func (d *Disk) Threads() int32 {
	if d.ThreadPool.Threads > 0 {
		return d.ThreadPool.Threads
	}
	if d.Media == MediaHDD {
		return 128
	}
	return 32
}
