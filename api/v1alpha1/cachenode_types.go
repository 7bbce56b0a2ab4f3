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
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Media is the kind of a local disk.
// +kubebuilder:validation:Enum=NVMe;SSD;HDD
type Media string

const (
	MediaNVMe Media = "NVMe"
	MediaSSD  Media = "SSD"
	MediaHDD  Media = "HDD"
)

// IPFamily is an IP family the cache pods serve on.
// +kubebuilder:validation:Enum=IPv4;IPv6
type IPFamily string

const (
	IPv4 IPFamily = "IPv4"
	IPv6 IPFamily = "IPv6"
)

// IOMode says how nginx reads cached files.
// +kubebuilder:validation:Enum=threads;sync
type IOMode string

const (
	// IOThreads offloads reads and sendfile to one thread pool per disk (aio threads).
	IOThreads IOMode = "threads"
	// IOSync reads in the worker's event loop; cheaper when the working set fits in RAM.
	IOSync IOMode = "sync"
)

// DiskLabelSource names the node labels that prove a node has the declared disks.
// +kubebuilder:validation:Enum=Edgepool;NodeFeatureDiscovery
type DiskLabelSource string

const (
	// DiskLabelsEdgepool uses integer counts per media: disk.edgepool.io/nvme: "2".
	DiskLabelsEdgepool DiskLabelSource = "Edgepool"
	// DiskLabelsNFD uses feature.node.kubernetes.io/storage-nonrotationaldisk=true for NVMe and
	// SSD disks. NFD publishes no counts and no label for rotational disks.
	DiskLabelsNFD DiskLabelSource = "NodeFeatureDiscovery"
)

// CacheKey is one of a fixed set of safe cache keys; free-form keys are not accepted.
// +kubebuilder:validation:Enum=URI;HostURI;SchemeHostURI
type CacheKey string

const (
	// CacheKeyURI ($request_uri) is refused: the cache answers every hostname, so one
	// key for all of them serves one host's pages for another's. It stays in the enum so
	// that CacheNodes stored with it still decode; they must move to HostURI.
	CacheKeyURI           CacheKey = "URI"
	CacheKeyHostURI       CacheKey = "HostURI"       // $host$request_uri
	CacheKeySchemeHostURI CacheKey = "SchemeHostURI" // $scheme://$host$request_uri
)

// DiskAdoption says how the cache user comes to own a fresh disk.
// +kubebuilder:validation:Enum=Adopt;Prepared
type DiskAdoption string

const (
	// DiskAdoptionAdopt runs the adopt-disks init step (root, CAP_CHOWN alone).
	DiskAdoptionAdopt DiskAdoption = "Adopt"
	// DiskAdoptionPrepared runs no root step: the disks were made for the cache user.
	DiskAdoptionPrepared DiskAdoption = "Prepared"
)

// AuthorizedRequests says how the cache treats requests that carry an Authorization header.
// +kubebuilder:validation:Enum=Bypass;CacheIfAllowed
type AuthorizedRequests string

const (
	// AuthorizedRequestsBypass sends such requests to the origin: they are never answered
	// from the cache and their responses are never stored.
	AuthorizedRequestsBypass AuthorizedRequests = "Bypass"
	// AuthorizedRequestsCacheIfAllowed answers such requests from the cache, and stores
	// their responses only when the response allows a shared cache to reuse it for other
	// users: Cache-Control public, s-maxage or must-revalidate (RFC 9111 section 3.5).
	AuthorizedRequestsCacheIfAllowed AuthorizedRequests = "CacheIfAllowed"
)

// UseStaleCondition is a case in which nginx may serve a stale cached response.
// +kubebuilder:validation:Enum=error;timeout;invalid_header;updating;http_500;http_502;http_503;http_504;http_403;http_404;http_429
type UseStaleCondition string

// ThreadPool sizes the nginx thread pools that serve one disk: pool_<disk> reads the
// headers of cached responses, and pool_<disk>_io carries the rest of the disk's work
// (bodies read and sent, fills written) for responses already started.
type ThreadPool struct {
	// threads is the number of threads of each of the disk's two pools. Size it above the
	// cold (disk-bound) requests a worker keeps in flight on this disk: each pool is one
	// FIFO queue, page-cache hits included. Unset, it depends on the disk's media: 128 for
	// HDD, whose slow reads pile up, and 32 for SSD and NVMe (see docs/pool-sizing.md for
	// the measurements).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=512
	Threads int32 `json:"threads,omitempty"`

	// maxQueue is the number of cached-header reads that may wait for a thread of
	// pool_<disk>. A request whose read would wait beyond it is answered by the origin,
	// uncached (X-Cache-Status FALLBACK), and counted as a queue overflow: a small queue
	// sends the excess of a saturated disk to the origin instead of queueing it. A response
	// under way never waits in this queue, so an overflow never cuts one; sites with
	// sliceSize read through pool_<disk>_io alone. 0 sends every request whose key is on
	// this disk to the origin (nginx fails every task of a pool that holds no queue).
	// +optional
	// +kubebuilder:default=65536
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1048576
	MaxQueue *int32 `json:"maxQueue,omitempty"`
}

// Disk is a local disk of a cache node, holding one proxy_cache_path.
// The rules on its quantities touch each one once: the API server cannot bound the length
// of an int-or-string (no maxLength), so it estimates each use (a parse, string(), even
// type(self) == int) at the cost of a 3 MiB string, and with 16 disks a second use would
// exceed its cost budget; `type(self) in [int]` is the cheap way to ask. A value the
// schema's pattern refuses also fails the parse, with an error beside the pattern's.
// A quantity is a whole number of bytes when subtracting its integer part leaves 0
// (isInteger is false for some whole ones, e.g. 1.5Gi and 1Pi).
type Disk struct {
	// name identifies the disk; it names the thread pool (pool_<name>) and the cache zone
	// (cache_<name>).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")`,message="a disk's name is lowercase letters, digits and '-', starting and ending with a letter or digit, e.g. nvme0"
	Name string `json:"name,omitempty"`

	// path is the absolute host path where the disk is mounted. It must already exist on
	// the node: edgepool never creates it, so a missing disk is never replaced by the root
	// filesystem. Letters, digits and . _ - only; no . or .. segments; no system directories.
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule=`self.matches(r"^(/[A-Za-z0-9_][A-Za-z0-9._-]*)+$")`,message="path is an absolute path whose segments are letters, digits and . _ -, e.g. /mnt/edgepool/nvme0"
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="path must not contain '..'"
	Path string `json:"path,omitempty"`

	// media is the kind of disk: NVMe, SSD or HDD. Nodes must carry the matching label.
	// +required
	Media Media `json:"media,omitempty"`

	// size is the cache's max_size on this disk: a whole number of bytes from 1Mi to 1Pi.
	// nginx's cache manager trims the cache to it at each pass (at least every 10 s), so
	// the disk may hold the fills of one pause more; it also keeps 1% of size (1Mi to 1Gi)
	// free on the filesystem (min_free), evicting early when the filesystem is smaller.
	// +required
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="type(self) in [int] ? [int(self)].all(n, n >= 1048576 && n <= 1125899906842624) : isQuantity(self) && [quantity(self)].all(q, q.compareTo(quantity('1Mi')) >= 0 && q.compareTo(quantity('1Pi')) <= 0 && q.sub(int(q.asApproximateFloat())).compareTo(quantity('0')) == 0)",message="size must be a whole number of bytes from 1Mi to 1Pi"
	Size resource.Quantity `json:"size"` //nolint:kubeapilinter // the zero quantity is not valid: the rule above asks for 1Mi at least, which the linter cannot read in CEL

	// weight is this disk's share of cache keys relative to the other disks.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight,omitempty"`

	// threadPool sizes the disk's own thread pool (used when io is threads).
	// +optional
	// +kubebuilder:default={}
	ThreadPool ThreadPool `json:"threadPool,omitzero"`

	// keysZoneSize is the shared memory for cache keys (about 8000 keys per MiB): a whole
	// number of bytes from 1Mi to 16Gi. The disks' keys zones add up to at most 16Gi.
	// +optional
	// +kubebuilder:default="64Mi"
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="type(self) in [int] ? [int(self)].all(n, n >= 1048576 && n <= 17179869184) : isQuantity(self) && [quantity(self)].all(q, q.compareTo(quantity('1Mi')) >= 0 && q.compareTo(quantity('16Gi')) <= 0 && q.sub(int(q.asApproximateFloat())).compareTo(quantity('0')) == 0)",message="keysZoneSize must be a whole number of bytes from 1Mi to 16Gi"
	KeysZoneSize *resource.Quantity `json:"keysZoneSize,omitempty"`

	// inactive removes cached items not accessed within this time, e.g. 30m, 12h, 7d.
	// +optional
	// +kubebuilder:default="7d"
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule=`self.matches(r"^[1-9][0-9]{0,5}(s|m|h|d)$")`,message="inactive is a whole number and a unit of s, m, h or d, e.g. 30m, 12h or 7d"
	Inactive string `json:"inactive,omitempty"`

	// takeOverFrom hands this disk over from another CacheNode of this namespace, named
	// here, which claimed it and no longer lists it: once that CacheNode's pod on a node
	// has let go of the disk, the agent empties its cache (only what edgepool made there;
	// a disk holding anything else is left alone) and claims it. Without it, a disk
	// another CacheNode claimed is refused, and its cache kept. Taking it over needs the
	// previous CacheNode to stop listing the path on that node first: while both list
	// it, this one is refused (DiskPathConflict).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=52
	// +kubebuilder:validation:XValidation:rule=`self.matches(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")`,message="takeOverFrom is the name of a CacheNode of this namespace, e.g. hdd-edge"
	TakeOverFrom string `json:"takeOverFrom,omitempty"`
}

// DiskFailover says when a failing disk is taken out of its node's split and put back.
// A disk found unmounted, read-only, full or replaced by another filesystem is taken out
// at once.
// +kubebuilder:validation:XValidation:rule="!has(self.cooldownSeconds) || !has(self.maxCooldownSeconds) || self.maxCooldownSeconds >= self.cooldownSeconds",message="maxCooldownSeconds must be at least cooldownSeconds",fieldPath=".maxCooldownSeconds"
type DiskFailover struct {
	// ioErrors is how many failed reads and writes of a disk (EIO, EROFS, ENOSPC and their
	// kin, as nginx reports them) within errorWindowSeconds take the disk out.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	IOErrors int32 `json:"ioErrors,omitempty"`

	// checkFailures is how many failed or timed-out checks of a disk (by the node agent,
	// every few seconds: mounted, same filesystem, a write, fsync and read back) within
	// errorWindowSeconds take the disk out. They need not be in a row: a flaky disk passes
	// every other check.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	CheckFailures int32 `json:"checkFailures,omitempty"`

	// errorWindowSeconds is the window in which ioErrors and checkFailures are counted.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	ErrorWindowSeconds int32 `json:"errorWindowSeconds,omitempty"`

	// cooldownSeconds is how long a disk that is out must pass every check, with no I/O
	// error, before it is put back, with its cache.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	CooldownSeconds int32 `json:"cooldownSeconds,omitempty"`

	// maxCooldownSeconds bounds the cool-down, which doubles each time a disk fails again
	// within this long of its return, so that a flaky disk does not flap in and out.
	// +optional
	// +kubebuilder:default=1800
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=604800
	MaxCooldownSeconds int32 `json:"maxCooldownSeconds,omitempty"`
}

// Listener configures the nginx workers and the listening socket.
// +kubebuilder:validation:XValidation:rule="!has(self.acceptMutex) || (has(self.reusePort) && !self.reusePort)",message="acceptMutex may be set only when reusePort is false",fieldPath=".acceptMutex"
// +kubebuilder:validation:XValidation:rule="!has(self.statusPort) || !has(self.port) || self.statusPort != self.port",message="statusPort must differ from port",fieldPath=".statusPort"
// +kubebuilder:validation:XValidation:rule="!has(self.agentPort) || ((!has(self.port) || self.agentPort != self.port) && (!has(self.statusPort) || self.agentPort != self.statusPort))",message="agentPort must differ from port and statusPort",fieldPath=".agentPort"
// +kubebuilder:validation:XValidation:rule="!has(self.tlsPort) || ((!has(self.port) || self.tlsPort != self.port) && (!has(self.statusPort) || self.tlsPort != self.statusPort) && (!has(self.agentPort) || self.tlsPort != self.agentPort))",message="tlsPort must differ from port, statusPort and agentPort",fieldPath=".tlsPort"
type Listener struct {
	// port is the port clients connect to.
	// +optional
	// +kubebuilder:default=8080
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// reusePort gives every worker its own listening socket (listen ... reuseport) so the
	// kernel spreads connections across workers.
	// +optional
	// +kubebuilder:default=true
	ReusePort *bool `json:"reusePort,omitempty"`

	// workerProcesses is the number of nginx workers, or auto for one per CPU of the
	// container's CPU limit.
	// +optional
	// +kubebuilder:default="auto"
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? (self >= 1 && self <= 1024) : self == 'auto'",message="workerProcesses must be auto or an integer from 1 to 1024"
	WorkerProcesses *intstr.IntOrString `json:"workerProcesses,omitempty"`

	// workerConnections is the maximum number of connections per worker.
	// +optional
	// +kubebuilder:default=4096
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=1048576
	WorkerConnections int32 `json:"workerConnections,omitempty"`

	// backlog is the listen queue length. The kernel caps it at net.core.somaxconn.
	// +optional
	// +kubebuilder:default=511
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Backlog int32 `json:"backlog,omitempty"`

	// acceptMutex makes workers take turns accepting connections. Only meaningful, and
	// only allowed, when reusePort is false.
	// +optional
	AcceptMutex *bool `json:"acceptMutex,omitempty"`

	// statusPort is the loopback-only port of nginx's stub_status, read by the node agent.
	// +optional
	// +kubebuilder:default=18081
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	StatusPort int32 `json:"statusPort,omitempty"`

	// agentPort serves the node agent's /metrics, /healthz, /readyz and /status. The cache
	// pods' NetworkPolicy admits it only from the operator's pods and the scrapers the
	// cluster admin named when installing the operator.
	// +optional
	// +kubebuilder:default=9145
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	AgentPort int32 `json:"agentPort,omitempty"`

	// tlsPort is the port of HTTPS (with HTTP/2), listened on when a site has tls.
	// +optional
	// +kubebuilder:default=8443
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	TLSPort int32 `json:"tlsPort,omitempty"`

	// clientCIDRs are the source addresses admitted to port by the cache pods'
	// NetworkPolicy, e.g. a load balancer's range or the cluster's pod CIDR. Unset, clients
	// may connect from anywhere. Written with no host bits set, in canonical form
	// (10.0.0.0/8, 2001:db8::/32). Network plugins do not apply NetworkPolicy to
	// hostNetwork pods: with hostNetwork, restrict clients with the node's firewall.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=4
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c) && string(cidr(c).masked()) == c)",message="clientCIDRs must be CIDRs in canonical form with no host bits set, e.g. 10.0.0.0/8 or 2001:db8::/32"
	ClientCIDRs []string `json:"clientCIDRs,omitempty"`

	// trustedProxies are the addresses of the load balancers or proxies in front of the
	// cache whose X-Forwarded-For it believes (nginx's realip): a request from one of them
	// is taken to come from the last address in its X-Forwarded-For that is not a trusted
	// proxy. Unset, the client is the connection's peer. Either way the origin gets that
	// address alone in X-Forwarded-For and X-Real-IP, never what a client wrote there.
	// Written with no host bits set, in canonical form (10.0.0.0/8, 2001:db8::/32).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=4
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c) && string(cidr(c).masked()) == c)",message="trustedProxies must be CIDRs in canonical form with no host bits set, e.g. 10.0.0.0/8 or 2001:db8::/32"
	TrustedProxies []string `json:"trustedProxies,omitempty"`

	// ipFamilies are the IP families nginx serves clients and the ring's peers on, as a
	// Service's: IPv4, IPv6, or both in either order. Unset, IPv4, and the CacheNode's
	// Service takes the cluster's default family. IPv6 adds a listen on [::] beside the
	// IPv4 one (loopback stays IPv4), which nginx cannot open on a node whose kernel has
	// IPv6 turned off. The first family is the ring's (spec.sharding): members reach each
	// other at their pod address of that family. The Service takes them as its
	// ipFamilies, SingleStack for one and RequireDualStack for two.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=2
	IPFamilies []IPFamily `json:"ipFamilies,omitempty"`
}

// Families are the IP families l serves on: ipFamilies, or IPv4 when unset.
func (l *Listener) Families() []IPFamily {
	if len(l.IPFamilies) == 0 {
		return []IPFamily{IPv4}
	}
	return l.IPFamilies
}

// ServesIPv6 says whether nginx listens on IPv6 addresses too.
func (l *Listener) ServesIPv6() bool {
	return slices.Contains(l.IPFamilies, IPv6)
}

// Origin is the upstream the cache fills from.
type Origin struct {
	// servers are the origin's addresses as host:port (DNS name of at most 253 characters,
	// IPv4 or [IPv6]). Names are resolved when nginx loads its configuration.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:XValidation:rule=`self.matches(r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*|\[[0-9a-fA-F:.]{2,45}\]):[1-9][0-9]{0,4}$")`,message="an origin server is host:port without a scheme or path: a lowercase DNS name, an IPv4 address or a bracketed IPv6 address, and a port, e.g. origin.example.com:443, 192.0.2.10:80 or [2001:db8::1]:8080"
	// +kubebuilder:validation:items:XValidation:rule="!self.startsWith('[') || (self.lastIndexOf(']') > 1 && isIP(self.substring(1, self.lastIndexOf(']'))) && ip(self.substring(1, self.lastIndexOf(']'))).family() == 6)",message="a bracketed host must be an IPv6 address, and not an IPv4-mapped one (write an IPv4 address without brackets)"
	// +kubebuilder:validation:items:XValidation:rule="self.startsWith('[') || self.lastIndexOf(':') <= 253",message="a host name must be at most 253 characters"
	// +kubebuilder:validation:XValidation:rule="self.all(s, !s.matches(r':[0-9]{1,5}$') || int(s.substring(s.lastIndexOf(':') + 1)) <= 65535)",message="origin ports must be at most 65535"
	Servers []string `json:"servers,omitempty"`

	// keepalive is the number of idle connections to the origin each worker keeps open.
	// +optional
	// +kubebuilder:default=32
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	Keepalive *int32 `json:"keepalive,omitempty"`

	// hostHeader is the Host header sent to the origin, e.g. the name of a bucket's
	// endpoint. Unset, the origin gets the host the client asked for.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")`,message="hostHeader is a lowercase DNS name without a port, e.g. assets.s3.example.com"
	HostHeader string `json:"hostHeader,omitempty"`
}

// CacheValidity gives responses with the given status codes a freshness lifetime when
// the origin did not give them one.
type CacheValidity struct {
	// codes are HTTP status codes, or any.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:XValidation:rule=`self.matches(r"^([1-5][0-9][0-9]|any)$")`,message="a status code is a number from 100 to 599, or any, e.g. 200 or 404"
	// +kubebuilder:validation:items:MaxLength=3
	Codes []string `json:"codes,omitempty"`

	// duration is how long such responses stay fresh, e.g. 10m, 1h, 7d.
	// +required
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule=`self.matches(r"^[1-9][0-9]{0,5}(s|m|h|d)$")`,message="duration is a whole number and a unit of s, m, h or d, e.g. 10m, 1h or 7d"
	Duration string `json:"duration,omitempty"`
}

// CachePolicy says what is cached, for how long, and how misses are coalesced.
type CachePolicy struct {
	// key is the cache key (and the key that spreads objects across disks): HostURI
	// ($host$request_uri) or SchemeHostURI. URI ($request_uri) is refused: it would serve
	// one hostname's responses for every other.
	// +optional
	// +kubebuilder:default=HostURI
	// +kubebuilder:validation:XValidation:rule="self != 'URI'",message="key URI shares one cached response between all the hostnames the cache answers; use HostURI"
	Key CacheKey `json:"key,omitempty"`

	// The rules below are the default of every site that sets no cache of its own.
	CacheRules `json:",inline"`
}

// CacheRules say what a site caches, for how long, and how misses are coalesced.
type CacheRules struct {
	// valid forces freshness: it gives responses the origin sent without a freshness
	// lifetime (no Cache-Control max-age or s-maxage, Expires or X-Accel-Expires) a
	// lifetime per status code (proxy_cache_valid), where RFC 9111 would not store them
	// (or lets the cache guess, section 4.2.2). Unset, only what the origin declared
	// fresh is cached. Even with valid, a response marked private, no-store or no-cache,
	// or with Set-Cookie or Vary: *, is never stored; one to a request with Authorization
	// is stored only as authorizedRequests says; and one to a request with a Cookie, or
	// marked Pragma: no-cache, only if the origin declared it fresh or public.
	// The trade-off: origins that forget caching headers get cached anyway, for up to
	// this long after they change.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Valid []CacheValidity `json:"valid,omitempty"`

	// useStale lists the cases in which a stale response is served (proxy_cache_use_stale),
	// beyond what the origin allowed with Cache-Control stale-while-revalidate and
	// stale-if-error (RFC 5861), which are always honoured. The trade-off: nginx applies
	// it to every response, so it also serves stale copies the origin forbade with
	// must-revalidate, proxy-revalidate or s-maxage (RFC 9111 section 4.2.4). Unset,
	// nothing stale is served without the origin's leave.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=11
	UseStale []UseStaleCondition `json:"useStale,omitempty"`

	// authorizedRequests is how requests with an Authorization header are treated: Bypass
	// (they go to the origin; nothing of theirs is stored or served from the cache) or
	// CacheIfAllowed (they are served from the cache, and their responses are stored only
	// when marked public, s-maxage or must-revalidate, RFC 9111 section 3.5). The
	// trade-off of CacheIfAllowed: a user's request can be answered with what the cache
	// stored for another request of the same URL, with or without credentials, unless
	// the origin sends Vary: Authorization.
	// +optional
	// +kubebuilder:default=Bypass
	AuthorizedRequests AuthorizedRequests `json:"authorizedRequests,omitempty"`

	// lock lets one request fill a missing item while the others wait (proxy_cache_lock).
	// The waiting requests look again every 500ms; a URL whose responses are not stored
	// (private, no-store) takes the lock at every request, so concurrent requests for it
	// reach the origin one at a time: turn it off where many clients ask for such URLs.
	// +optional
	// +kubebuilder:default=true
	Lock *bool `json:"lock,omitempty"`

	// lockTimeout bounds the wait for the filling request, e.g. 5s.
	// +optional
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule=`self.matches(r"^[1-9][0-9]{0,5}(s|m|h|d)$")`,message="lockTimeout is a whole number and a unit of s, m, h or d, e.g. 5s"
	LockTimeout string `json:"lockTimeout,omitempty"`

	// sliceSize turns on byte-range slicing (nginx's slice module): the cache fetches and
	// stores large objects from the origin in slices of this size, each a cache entry of
	// its own spread across the disks, so a Range request fills only the slices it
	// covers instead of the whole object. A whole number of bytes from 64Ki to 1Gi, e.g.
	// 1Mi. Unset, a Range request is answered from the whole object, which the cache
	// fetches and stores first. The origin must answer Range requests. An object's
	// slices share its disk. An exact CachePurge of a sliced URL reads the stored key of
	// every cached file, as a prefix purge does: how many slices are cached is not known.
	// +optional
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="type(self) in [int] ? [int(self)].all(n, n >= 65536 && n <= 1073741824) : isQuantity(self) && [quantity(self)].all(q, q.compareTo(quantity('64Ki')) >= 0 && q.compareTo(quantity('1Gi')) <= 0 && q.sub(int(q.asApproximateFloat())).compareTo(quantity('0')) == 0)",message="sliceSize must be a whole number of bytes from 64Ki to 1Gi"
	SliceSize *resource.Quantity `json:"sliceSize,omitempty"`

	// tagHeaders are the response headers in which the origin labels its responses with
	// tags (Surrogate-Key as Fastly reads it, Cache-Tag as Cloudflare does), for
	// CachePurges of scope Tags: tags separated by spaces or commas, each up to 128
	// characters of letters, digits and ._~:/@!$&'()*+;=-, at most 64 per response
	// (those beyond are not indexed). Every cache pod indexes the tags of what it stores.
	// Names of the headers nginx itself reads or writes (Cache-Control, Content-*, ...)
	// are refused.
	// +optional
	// +listType=set
	// +kubebuilder:default={"Surrogate-Key","Cache-Tag"}
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:XValidation:rule=`self.matches(r"^[A-Za-z][A-Za-z0-9-]*$")`,message="a tag header is a header name: a letter, then letters, digits and '-', e.g. Surrogate-Key"
	// +kubebuilder:validation:items:XValidation:rule="!(self.lowerAscii() in ['cache-control', 'expires', 'set-cookie', 'vary', 'etag', 'last-modified', 'date', 'location', 'age', 'connection', 'transfer-encoding', 'keep-alive', 'upgrade', 'accept-ranges', 'content-range', 'www-authenticate', 'x-cache-status', 'x-hot-cache-status']) && !self.lowerAscii().startsWith('content-') && !self.lowerAscii().startsWith('x-accel-')",message="a tag header cannot be a header nginx or edgepool reads or writes itself (Cache-Control, Expires, Set-Cookie, Vary, ETag, Last-Modified, Date, Content-*, X-Accel-*, ...)"
	TagHeaders []string `json:"tagHeaders,omitempty"`

	// tagHeadersToClients is whether clients see the tag headers: Hide (the default, as
	// Fastly strips Surrogate-Key: tags often name internals) or Pass. Peers of a sharded
	// CacheNode always get them, so that each cache stores the tags it is purged by.
	// +optional
	// +kubebuilder:default=Hide
	TagHeadersToClients TagHeaderVisibility `json:"tagHeadersToClients,omitempty"`
}

// TagHeaderVisibility says whether clients see the tag headers.
// +kubebuilder:validation:Enum=Hide;Pass
type TagHeaderVisibility string

const (
	// TagHeadersHide removes the tag headers from responses to clients.
	TagHeadersHide TagHeaderVisibility = "Hide"
	// TagHeadersPass passes them on.
	TagHeadersPass TagHeaderVisibility = "Pass"
)

// PlainHTTP says what a site with TLS does with plain HTTP requests.
// +kubebuilder:validation:Enum=Serve;Redirect
type PlainHTTP string

const (
	// PlainHTTPServe answers plain HTTP requests as HTTPS ones.
	PlainHTTPServe PlainHTTP = "Serve"
	// PlainHTTPRedirect answers them with a permanent redirect (308) to HTTPS.
	PlainHTTPRedirect PlainHTTP = "Redirect"
)

// SiteTLS is the certificate of a site's HTTPS.
type SiteTLS struct {
	// secretName is a Secret of type kubernetes.io/tls, in the CacheNode's namespace, that
	// holds the site's certificate chain (tls.crt) and private key (tls.key); cert-manager
	// writes such Secrets. The cache pods mount it: the operator never reads Secrets. A
	// renewed Secret reaches nginx without restarting the pods. A missing or malformed one
	// keeps the last good certificate serving and is reported by name in the CacheNode's
	// status.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")`,message="secretName is the name of a Secret: a lowercase DNS subdomain, e.g. shop-tls"
	SecretName string `json:"secretName,omitempty"`

	// plainHTTP is what the site does with plain HTTP: Serve it, or Redirect it to HTTPS.
	// +optional
	// +kubebuilder:default=Serve
	PlainHTTP PlainHTTP `json:"plainHTTP,omitempty"`

	// http3 On also serves the site over HTTP/3 (QUIC, on UDP listener.tlsPort) and
	// advertises it in the Alt-Svc header of its HTTPS responses. Off by default.
	// +optional
	// +kubebuilder:default=Off
	HTTP3 HTTP3 `json:"http3,omitempty"`
}

// HTTP3 says whether a site with tls also serves HTTP/3.
// +kubebuilder:validation:Enum=Off;On
type HTTP3 string

const (
	// HTTP3Off serves HTTPS over TCP only (HTTP/1.1 and HTTP/2).
	HTTP3Off HTTP3 = "Off"
	// HTTP3On serves HTTP/3 beside them.
	HTTP3On HTTP3 = "On"
)

// Site is a set of hostnames served from an origin of their own, with their own cache
// rules and certificate. All sites share the node's disks and thread pools; the cache key
// holds the host, so no site is served another's responses.
type Site struct {
	// name identifies the site in nginx.conf, metrics and status.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")`,message="a site's name is lowercase letters, digits and '-', starting and ending with a letter or digit, e.g. shop"
	Name string `json:"name,omitempty"`

	// hostnames are the hosts the site answers (the Host header and the TLS server name):
	// exact names (www.example.com) or wildcards of a leading label (*.example.com, which
	// matches any name ending in .example.com). A hostname belongs to one site only.
	// +required
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:XValidation:rule=`self.matches(r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")`,message="a hostname is a lowercase DNS name without a port or trailing dot, or a wildcard of its first label, e.g. www.example.com or *.example.com"
	// +kubebuilder:validation:items:XValidation:rule="!self.contains('..') && (!self.startsWith('*') || self.indexOf('.', 2) > 0) && !self.substring(1).contains('*')",message="a hostname is a DNS name, or a wildcard *. followed by at least two labels"
	Hostnames []string `json:"hostnames,omitempty"`

	// origin is the upstream the site fills from.
	// +required
	Origin Origin `json:"origin,omitzero"`

	// cache is the site's caching rules. Unset, the CacheNode's cache applies.
	// +optional
	Cache *CacheRules `json:"cache,omitempty"`

	// tls serves the site over HTTPS on listener.tlsPort, with its own certificate.
	// +optional
	TLS *SiteTLS `json:"tls,omitempty"` //nolint:kubeapilinter // nil is "no TLS", plainly; the zero SiteTLS is invalid (secretName is required)

	// clientLimits bound what one client may ask of the site. Unset, the CacheNode's
	// clientLimits apply.
	// +optional
	ClientLimits *ClientLimits `json:"clientLimits,omitempty"`

	// compression has the cache compress the site's responses. Unset, the CacheNode's
	// compression applies.
	// +optional
	Compression *Compression `json:"compression,omitempty"`
}

// Compression has the cache compress responses for the clients that accept brotli or
// gzip, and store them compressed: a response is compressed once, when it is fetched, and
// served compressed from the cache to every client that accepts that encoding; a client
// that accepts neither gets the response as the origin sent it. Each encoding is a cached
// response of its own, and a purge removes them all. A client that accepts brotli (br)
// gets brotli, else gzip. A response is left as it is when it is of a type not listed,
// shorter than minLength, already encoded (Content-Encoding), or marked Cache-Control:
// no-transform. Clients and caches downstream are told Vary: Accept-Encoding. A site that
// caches in slices (cache.sliceSize) is never compressed: a range of a compressed response
// is not a range of the origin's.
type Compression struct {
	// gzip On compresses with gzip (the default); Off does not.
	// +optional
	// +kubebuilder:default=On
	Gzip CompressionSwitch `json:"gzip,omitempty"`

	// gzipLevel is zlib's level, from 1 (fastest) to 9 (smallest). A response is
	// compressed once, when it is fetched, so a high level costs misses only.
	// +optional
	// +kubebuilder:default=6
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	GzipLevel int32 `json:"gzipLevel,omitempty"`

	// brotli On compresses with brotli (br) for the clients that accept it (the default);
	// Off does not. A site with gzip and brotli Off does not compress (a site opting out of
	// the CacheNode's compression).
	// +optional
	// +kubebuilder:default=On
	Brotli CompressionSwitch `json:"brotli,omitempty"`

	// brotliLevel is brotli's quality, from 0 (fastest) to 11 (smallest; slow enough to
	// hold a large miss for seconds).
	// +optional
	// +kubebuilder:default=6
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=11
	BrotliLevel *int32 `json:"brotliLevel,omitempty"`

	// types are the media types (Content-Type without parameters) compressed, each of up to
	// 46 characters (nginx keeps them in a table of 64-byte buckets). text/html is always
	// compressed, as nginx does.
	// +optional
	// +listType=set
	// +kubebuilder:default={"text/html","text/css","text/plain","text/xml","text/javascript","application/javascript","application/json","application/xml","application/rss+xml","application/atom+xml","image/svg+xml","application/wasm"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=3
	// +kubebuilder:validation:items:MaxLength=46
	// +kubebuilder:validation:items:XValidation:rule=`self.matches(r"^[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*$")`,message="a type is a lowercase media type without parameters: letters, digits, '.', '+' and '-', e.g. application/json"
	Types []string `json:"types,omitempty"`

	// minLength is the length (Content-Length) below which a response is not compressed:
	// gzip's header and trailer take 18 bytes. A response without Content-Length is
	// compressed.
	// +optional
	// +kubebuilder:default=256
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1048576
	MinLength *int32 `json:"minLength,omitempty"`
}

// CompressionSwitch turns an encoding of a compression on or off.
// +kubebuilder:validation:Enum=On;Off
type CompressionSwitch string

const (
	// CompressionOn compresses with the encoding.
	CompressionOn CompressionSwitch = "On"
	// CompressionOff does not.
	CompressionOff CompressionSwitch = "Off"
)

// ClientLimits bound what one client address may ask of a site on each cache pod (each
// pod counts its own clients: behind a load balancer that spreads a client over N pods,
// the client gets up to N times as much). The client's address is the one the listener's
// trustedProxies define: the connection's peer, or the address a trusted proxy forwarded.
// A request over a limit is answered 429 Too Many Requests, counted in the node agent's
// edgepool_client_limited_total by site and limit. Each limit keeps its clients in a table
// of ClientLimitsZone bytes of shared memory, which the pod requests as memory.
// +kubebuilder:validation:XValidation:rule="has(self.requestsPerSecond) || has(self.concurrentRequests)",message="clientLimits sets requestsPerSecond, concurrentRequests or both"
// +kubebuilder:validation:XValidation:rule="!has(self.burst) || has(self.requestsPerSecond)",message="burst is the requests allowed above requestsPerSecond: set requestsPerSecond too",fieldPath=".burst"
type ClientLimits struct {
	// requestsPerSecond is the rate one client address is served at on average (nginx's
	// limit_req: a leaky bucket, counted by the millisecond).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	RequestsPerSecond int32 `json:"requestsPerSecond,omitempty"`

	// burst is how many requests above the rate one client address is served at once,
	// before its requests are refused; they are served without delay. Unset, none: a
	// second request within 1/requestsPerSecond of the first is refused.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	Burst int32 `json:"burst,omitempty"`

	// concurrentRequests is how many requests of one client address are served at once
	// (nginx's limit_conn: over HTTP/1.1 the connections with a request under way, over
	// HTTP/2 each stream). nginx takes at most 65535.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	ConcurrentRequests int32 `json:"concurrentRequests,omitempty"`
}

// ClientLimitsZone is the shared memory of one client limit's table on a site: about
// 60,000 client addresses (nginx keeps 128 bytes or so for each). When the rate's table
// is full, nginx forgets the addresses seen least recently; when the concurrent requests'
// table is full, a request from an address not in it is refused until one ends: 8 MiB holds
// more addresses than a pod has connections with the default listener (4,096 per worker).
const ClientLimitsZone = 8 << 20

// Placement selects the nodes that run the cache.
type Placement struct {
	// nodeSelector restricts the cache to nodes with these labels.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 317 && size(self[k]) <= 63)",message="a nodeSelector key is a label key (at most 317 characters) and its value a label value (at most 63)"
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations let the cache pods run on tainted nodes.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// diskLabels names the node labels that prove a node has the disks: Edgepool
	// (disk.edgepool.io/<media> with a count) or NodeFeatureDiscovery.
	// +optional
	// +kubebuilder:default=Edgepool
	DiskLabels DiskLabelSource `json:"diskLabels,omitempty"`

	// hostNetwork runs the cache in the node's network namespace. Its ports must then stay
	// off the node daemons' ports and its origins off the node's loopback and the cloud's
	// metadata service. Network plugins do not apply NetworkPolicy to hostNetwork pods, so
	// the cache pods' NetworkPolicy (listener.clientCIDRs, the agent port's allowlist) does
	// not protect them: whatever reaches the node reaches the agent port.
	// +optional
	HostNetwork bool `json:"hostNetwork,omitempty"` //nolint:kubeapilinter // unset and false mean the same: the pod network

	// priorityClassName is the PriorityClass of the cache pods (system-node-critical, or
	// one of your own). Under pressure the scheduler preempts, and the kubelet evicts,
	// lower-priority pods first.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")`,message="priorityClassName is a PriorityClass's name: a lowercase DNS subdomain, e.g. system-node-critical"
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// CacheNodeSpec defines the desired state of a set of cache nodes.
//
// With hostNetwork the cache pods share the node's network namespace, so the rules below
// keep them off the ports of the node's own daemons and keep their origins from reaching
// the node itself (its loopback, in every spelling nginx and the C resolver accept) or the
// cloud's metadata service (link-local and the metadata addresses). The renderer checks
// the same (internal/render); the lists are kept equal by tests.
// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork || self.listener.port >= 1024",message="listener.port must be at least 1024 with hostNetwork: cache pods run as non-root",fieldPath=".listener.port"
// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork || !has(self.listener.tlsPort) || self.listener.tlsPort >= 1024",message="listener.tlsPort must be at least 1024 with hostNetwork: cache pods run as non-root",fieldPath=".listener.tlsPort"
// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork || !has(self.listener.port) || !(self.listener.port in [2379, 2380, 2381, 6443, 10248, 10249, 10250, 10255, 10256, 10257, 10259])",message="listener.port must not be a port of a node daemon with hostNetwork (etcd 2379-2381, kube-apiserver 6443, kubelet 10248 10250 10255, kube-proxy 10249 10256, kube-controller-manager 10257, kube-scheduler 10259)",fieldPath=".listener.port"
// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork || !has(self.listener.statusPort) || !(self.listener.statusPort in [2379, 2380, 2381, 6443, 10248, 10249, 10250, 10255, 10256, 10257, 10259])",message="listener.statusPort must not be a port of a node daemon with hostNetwork (etcd 2379-2381, kube-apiserver 6443, kubelet 10248 10250 10255, kube-proxy 10249 10256, kube-controller-manager 10257, kube-scheduler 10259)",fieldPath=".listener.statusPort"
// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork || !has(self.listener.agentPort) || !(self.listener.agentPort in [2379, 2380, 2381, 6443, 10248, 10249, 10250, 10255, 10256, 10257, 10259])",message="listener.agentPort must not be a port of a node daemon with hostNetwork (etcd 2379-2381, kube-apiserver 6443, kubelet 10248 10250 10255, kube-proxy 10249 10256, kube-controller-manager 10257, kube-scheduler 10259)",fieldPath=".listener.agentPort"
// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork || !has(self.listener.tlsPort) || !(self.listener.tlsPort in [2379, 2380, 2381, 6443, 10248, 10249, 10250, 10255, 10256, 10257, 10259])",message="listener.tlsPort must not be a port of a node daemon with hostNetwork (etcd 2379-2381, kube-apiserver 6443, kubelet 10248 10250 10255, kube-proxy 10249 10256, kube-controller-manager 10257, kube-scheduler 10259)",fieldPath=".listener.tlsPort"
// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork || !has(self.origin) || !has(self.origin.servers) || self.origin.servers.map(s, s.substring(0, s.lastIndexOf(':'))).filter(h, h.startsWith('[')).map(h, h.substring(1, size(h) - 1)).all(a, isIP(a) && ip(a).family() == 6 && !ip(a).isLoopback() && !ip(a).isUnspecified() && !ip(a).isLinkLocalUnicast() && !['fd00:ec2::254/128', 'fd00:ec2::23/128', 'fd20:ce::254/128'].exists(c, cidr(c).containsIP(a)))",message="origin.servers must not reach the node or the cloud's metadata service with hostNetwork: loopback [::1], unspecified [::], IPv4-mapped [::ffff:a.b.c.d], link-local [fe80::/10] and the metadata addresses [fd00:ec2::254], [fd00:ec2::23], [fd20:ce::254] are refused",fieldPath=".origin.servers"
// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork || !has(self.sites) || self.sites.all(site, site.origin.servers.map(s, s.substring(0, s.lastIndexOf(':'))).filter(h, h.startsWith('[')).map(h, h.substring(1, size(h) - 1)).all(a, isIP(a) && ip(a).family() == 6 && !ip(a).isLoopback() && !ip(a).isUnspecified() && !ip(a).isLinkLocalUnicast() && !['fd00:ec2::254/128', 'fd00:ec2::23/128', 'fd20:ce::254/128'].exists(c, cidr(c).containsIP(a))))",message="sites[].origin.servers must not reach the node or the cloud's metadata service with hostNetwork: loopback [::1], unspecified [::], IPv4-mapped [::ffff:a.b.c.d], link-local [fe80::/10] and the metadata addresses [fd00:ec2::254], [fd00:ec2::23], [fd20:ce::254] are refused",fieldPath=".sites"
// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork || !has(self.origin) || !has(self.origin.servers) || self.origin.servers.map(s, s.substring(0, s.lastIndexOf(':'))).filter(h, h.matches('^(0x[0-9a-f]*|[0-9]+)([.](0x[0-9a-f]*|[0-9]+))*$')).all(h, isIP(h) && !ip(h).isLoopback() && !ip(h).isLinkLocalUnicast() && !['0.0.0.0/8', '100.100.100.200/32', '168.63.129.16/32'].exists(c, cidr(c).containsIP(h)))",message="origin.servers must not reach the node or the cloud's metadata service with hostNetwork: a numeric host must be a dotted-decimal IPv4 address (nginx and the C resolver read 127.1, 2130706433, 0x7f000001 and 0177.0.0.1 as addresses) outside loopback 127.0.0.0/8, 0.0.0.0/8, link-local 169.254.0.0/16 and the metadata addresses 100.100.100.200 and 168.63.129.16",fieldPath=".origin.servers"
// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork || !has(self.sites) || self.sites.all(site, site.origin.servers.map(s, s.substring(0, s.lastIndexOf(':'))).filter(h, h.matches('^(0x[0-9a-f]*|[0-9]+)([.](0x[0-9a-f]*|[0-9]+))*$')).all(h, isIP(h) && !ip(h).isLoopback() && !ip(h).isLinkLocalUnicast() && !['0.0.0.0/8', '100.100.100.200/32', '168.63.129.16/32'].exists(c, cidr(c).containsIP(h))))",message="sites[].origin.servers must not reach the node or the cloud's metadata service with hostNetwork: a numeric host must be a dotted-decimal IPv4 address (nginx and the C resolver read 127.1, 2130706433, 0x7f000001 and 0177.0.0.1 as addresses) outside loopback 127.0.0.0/8, 0.0.0.0/8, link-local 169.254.0.0/16 and the metadata addresses 100.100.100.200 and 168.63.129.16",fieldPath=".sites"
// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork || !has(self.origin) || !has(self.origin.servers) || self.origin.servers.map(s, s.substring(0, s.lastIndexOf(':'))).all(h, !h.matches('^(localhost[46]?([.]localdomain[46]?)?|ip6-localhost|ip6-loopback|.*[.]localhost)$') && !(h in ['metadata', 'metadata.google.internal', 'instance-data', 'instance-data.ec2.internal']))",message="origin.servers must not reach the node or the cloud's metadata service with hostNetwork: localhost names (localhost, *.localhost, ip6-localhost, ...) and the metadata service's names (metadata.google.internal, metadata, instance-data) are refused",fieldPath=".origin.servers"
// +kubebuilder:validation:XValidation:rule="!has(self.hostNetwork) || !self.hostNetwork || !has(self.sites) || self.sites.all(site, site.origin.servers.map(s, s.substring(0, s.lastIndexOf(':'))).all(h, !h.matches('^(localhost[46]?([.]localdomain[46]?)?|ip6-localhost|ip6-loopback|.*[.]localhost)$') && !(h in ['metadata', 'metadata.google.internal', 'instance-data', 'instance-data.ec2.internal'])))",message="sites[].origin.servers must not reach the node or the cloud's metadata service with hostNetwork: localhost names (localhost, *.localhost, ip6-localhost, ...) and the metadata service's names (metadata.google.internal, metadata, instance-data) are refused",fieldPath=".sites"
// +kubebuilder:validation:XValidation:rule="has(self.sites) != has(self.origin)",message="set origin for a cache without sites, or sites each with its own origin, not both"
// +kubebuilder:validation:XValidation:rule="!has(self.defaultSite) || (has(self.sites) && self.sites.exists(s, s.name == self.defaultSite))",message="defaultSite must name a site",fieldPath=".defaultSite"
// +kubebuilder:validation:XValidation:rule="!has(self.sharding) || !has(self.hostNetwork) || !self.hostNetwork",message="sharding is not available with hostNetwork: NetworkPolicy does not apply to hostNetwork pods, so the peer port would be open to whoever reaches the node",fieldPath=".sharding"
// +kubebuilder:validation:XValidation:rule="!has(self.sharding) || !has(self.sharding.peerPort) || !has(self.listener) || ((!has(self.listener.port) || self.sharding.peerPort != self.listener.port) && (!has(self.listener.statusPort) || self.sharding.peerPort != self.listener.statusPort) && (!has(self.listener.agentPort) || self.sharding.peerPort != self.listener.agentPort) && (!has(self.listener.tlsPort) || self.sharding.peerPort != self.listener.tlsPort))",message="sharding.peerPort must differ from listener.port, statusPort, agentPort and tlsPort",fieldPath=".sharding.peerPort"
type CacheNodeSpec struct {
	// Placement selects the nodes that run the cache; nodes must also carry the disk labels.
	Placement `json:",inline"`

	// disks are the local disks of every cache node: one thread pool and one cache per disk,
	// with keys spread across them by weight.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.all(b, a.name == b.name || !(a.path + '/').startsWith(b.path + '/')))",message="disk paths must be unique and must not be nested in one another"
	// +kubebuilder:validation:XValidation:rule="self.map(d, !has(d.keysZoneSize) ? 0 : type(d.keysZoneSize) in [int] ? [int(d.keysZoneSize)].map(n, n >= 0 && n <= 17179869184 ? n : 0)[0] : !isQuantity(string(d.keysZoneSize)) ? 0 : [quantity(d.keysZoneSize)].map(q, q.compareTo(quantity('0')) >= 0 && q.compareTo(quantity('16Gi')) <= 0 ? int(q.asApproximateFloat()) : 0)[0]).sum() <= 17179869184",message="the disks' keysZoneSize must add up to at most 16Gi"
	Disks []Disk `json:"disks,omitempty"`

	// listener configures the workers and the listening socket.
	// +optional
	// +kubebuilder:default={}
	Listener Listener `json:"listener,omitzero"`

	// origin is the upstream the cache fills from, for every host, when there are no sites.
	// With sites, each site names its own and origin must be unset.
	// +optional
	Origin Origin `json:"origin,omitzero"` //nolint:kubeapilinter // optional: unset with sites (a CEL rule asks for origin or sites, not both); a pointer changes the Go type for every caller

	// sites serve sets of hostnames, each from its own origin, with its own cache rules and
	// certificate. Hosts no site names are refused (421 Misdirected Request, and no TLS
	// handshake) unless defaultSite answers them. Unset, the cache answers every host from
	// origin.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.all(b, a.name == b.name || !a.hostnames.exists(h, h in b.hostnames)))",message="a hostname may belong to one site only"
	Sites []Site `json:"sites,omitempty"`

	// defaultSite names the site that also answers the hosts no site names. Unset, they
	// are refused.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	DefaultSite string `json:"defaultSite,omitempty"`

	// cache is the caching policy. By default it follows RFC 9111 for a shared cache: a
	// response is stored only when the origin gave it a freshness lifetime (Cache-Control
	// max-age or s-maxage, Expires) and did not forbid sharing it (private, no-store,
	// no-cache, Set-Cookie, Vary: *); a request with Authorization goes to the origin; a
	// stale response is revalidated with a conditional request, and served stale only when
	// the origin allowed it (stale-while-revalidate, served at once while it is revalidated
	// in the background; stale-if-error); a hit keeps the origin's Date. valid, useStale
	// and authorizedRequests serve more than the origin allowed: they are opt-ins.
	// +optional
	// +kubebuilder:default={}
	Cache CachePolicy `json:"cache,omitzero"`

	// clientLimits bound what one client may ask of the cache (every site that sets none
	// of its own). Unset, no limit.
	// +optional
	ClientLimits *ClientLimits `json:"clientLimits,omitempty"`

	// compression has the cache compress responses (every site that sets none of its
	// own). Unset, responses are served as the origin sends them.
	// +optional
	Compression *Compression `json:"compression,omitempty"`

	// io is threads (one thread pool per disk, aio threads) or sync (no thread pools).
	// +optional
	// +kubebuilder:default=threads
	IO IOMode `json:"io,omitempty"`

	// sendfileMaxChunk bounds the bytes one sendfile call may send, so one call cannot
	// block a thread or worker for long. 0 means no limit.
	// +optional
	// +kubebuilder:default="2Mi"
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="type(self) in [int] ? [int(self)].all(n, n >= 0 && n <= 1073741824) : isQuantity(self) && [quantity(self)].all(q, q.compareTo(quantity('0')) >= 0 && q.compareTo(quantity('1Gi')) <= 0 && q.sub(int(q.asApproximateFloat())).compareTo(quantity('0')) == 0)",message="sendfileMaxChunk must be a whole number of bytes from 0 to 1Gi"
	SendfileMaxChunk *resource.Quantity `json:"sendfileMaxChunk,omitempty"`

	// diskFailover says when the node agent takes a failing disk out of its node's split
	// (its keys go to the node's other disks, as misses filled from the origin) and when it
	// puts the disk back. Each node decides for itself; a change reaches the agents without
	// restarting the pods.
	// +optional
	// +kubebuilder:default={}
	DiskFailover DiskFailover `json:"diskFailover,omitzero"`

	// accessLogPercent writes a JSON line for this share of the requests (1 to 100
	// percent, each request drawn at random) to the cache pods' standard output, for log
	// pipelines. Unset, no request is logged; the node agent's metrics count every request
	// either way. The lines pass through the node agent, so a pipeline that falls behind
	// costs lines, never nginx's time.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	AccessLogPercent int32 `json:"accessLogPercent,omitempty"`

	// image overrides the cache container image (edgepool-agent as its entrypoint and nginx
	// built with thread pools, images/cache). It runs with root in its init step and the
	// disks' host paths mounted, so it is the cluster admin's to grant: the admission policy
	// edgepool-grants refuses it unless its parameter allows the image for the namespace.
	// Unset, the operator's --cache-image (the chart's cacheImage) is used.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule=`self.matches(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")`,message="image is an image reference of letters, digits and . _ / : @ -, e.g. registry.example.com/edgepool/cache:0.1.0"
	Image string `json:"image,omitempty"`

	// diskAdoption says how the cache user (UID 101) comes to own a fresh disk. Adopt: an
	// init step, root with CAP_CHOWN alone and the same allowlist as the agent, hands a
	// fresh filesystem's root (holding nothing but lost+found) to the cache user. Prepared:
	// the cluster admin made the disks for the cache user (mkfs.ext4 -E
	// root_owner=101:101), and the pods run nothing as root; a disk the cache user cannot
	// write is refused by the agent's checks.
	// +optional
	// +kubebuilder:default=Adopt
	DiskAdoption DiskAdoption `json:"diskAdoption,omitempty"`

	// resources of the cache container. A CPU limit also bounds workerProcesses: auto.
	// Requests left out are defaulted from the spec, so the pods are never BestEffort:
	// memory, the disks' keys zones (shared memory nginx fills as keys arrive) plus 128Mi for
	// the workers and the agent; cpu, 500m; ephemeral-storage, 128Mi (logs and the run
	// directory). No limits are set by default.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"` //nolint:kubeapilinter // {} and unset mean the same: requests defaulted from the spec, no limits

	// updateStrategy of the cache DaemonSet. Only changes to disks, ports or image roll pods;
	// configuration changes are reloaded in place.
	// +optional
	UpdateStrategy appsv1.DaemonSetUpdateStrategy `json:"updateStrategy,omitempty"` //nolint:kubeapilinter // {} and unset mean the same: the DaemonSet's default RollingUpdate

	// service puts a Service, named as the CacheNode, in front of the ready cache pods:
	// ClusterIP for clients in the cluster, NodePort or LoadBalancer for clients outside
	// (see docs/way-in.md). Unset, the operator keeps none, and deletes the one it made.
	// +optional
	Service *CacheNodeService `json:"service,omitempty"`

	// sharding makes the pods one cache, each key stored by one of them (see Sharding).
	// Unset, each pod is a cache of its own.
	// +optional
	Sharding *Sharding `json:"sharding,omitempty"`
}

// Condition types of a CacheNode. Ready, ConfigRendered, NodesEligible, Available,
// DisksReady, ConfigApplied and CertificatesReady are True when good; Progressing is True while rolling out; Degraded and
// QueueOverflow are True when bad. Reconciling and Stalled are kstatus's abnormal-true
// conditions, so Flux, Argo CD and kpt can tell InProgress and Failed from Current.
const (
	ConditionReady          = "Ready"
	ConditionConfigRendered = "ConfigRendered"
	ConditionNodesEligible  = "NodesEligible"
	ConditionAvailable      = "Available"
	ConditionProgressing    = "Progressing"
	ConditionDegraded       = "Degraded"
	ConditionReconciling    = "Reconciling"
	ConditionStalled        = "Stalled"
	// The status loop sets these from the node agents' reports.
	ConditionQueueOverflow = "QueueOverflow"
	ConditionDisksReady    = "DisksReady"
	ConditionConfigApplied = "ConfigApplied"
	// CertificatesReady is True when every node serves each site's certificate from its
	// Secret, valid and for the site's hostnames.
	ConditionCertificatesReady = "CertificatesReady"
)

// Reasons of the CacheNode conditions, for tools and tests that match them. The messages
// say the rest; docs/runbook.md says what to do about each.
const (
	ReasonNotObserved          = "NotObserved"
	ReasonRenderFailed         = "RenderFailed"
	ReasonRendered             = "Rendered"
	ReasonNoEligibleNodes      = "NoEligibleNodes"
	ReasonNodesEligible        = "NodesEligible"
	ReasonPodsAvailable        = "PodsAvailable"
	ReasonNoPods               = "NoPods"
	ReasonPodsUnavailable      = "PodsUnavailable"
	ReasonRollingOut           = "RollingOut"
	ReasonStable               = "Stable"
	ReasonDisksNotReady        = "DisksNotReady"
	ReasonDisksOut             = "DisksOut"
	ReasonConfigRejected       = "ConfigRejected"
	ReasonCertificatesNotReady = "CertificatesNotReady"
	ReasonQueueOverflow        = "QueueOverflow"
	ReasonAsExpected           = "AsExpected"
	ReasonNotStalled           = "NotStalled"
	ReasonReconciled           = "Reconciled"
	ReasonObserveFailed        = "ObserveFailed"
	ReasonReady                = "Ready"
	ReasonNoAgentReports       = "NoAgentReports"
	ReasonNoOverflow           = "NoOverflow"
	ReasonDisksReady           = "DisksReady"
	ReasonConfigNotApplied     = "ConfigNotApplied"
	ReasonConfigApplied        = "ConfigApplied"
	ReasonNoCertificates       = "NoCertificates"
	ReasonCertificatesServing  = "CertificatesServing"
	ReasonDiskPathConflict     = "DiskPathConflict"
	ReasonApplyFailed          = "ApplyFailed"
	ReasonDiskCheckFailed      = "DiskCheckFailed"
	ReasonAllDisksOut          = "AllDisksOut"
	ReasonFailoverFailed       = "FailoverFailed"
	// ReasonPodsFailing: cache pods cannot run (not scheduled, a volume that does not
	// mount, an image that does not pull, a container that keeps crashing); the message
	// names the nodes and what their kubelet or the scheduler said.
	ReasonPodsFailing = "PodsFailing"
	// ReasonCertificatePrefix starts the reason of a CertificatesReady False, followed by
	// the state of the first certificate in trouble (Missing, Invalid, Expired, NotYetValid,
	// HostnameMismatch, Placeholder).
	ReasonCertificatePrefix = "Certificate"
)

// CacheNodeStatus is the observed state of a CacheNode.
type CacheNodeStatus struct {
	// conditions describe the state of the cache.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// observedGeneration is the generation last reconciled successfully.
	// +optional
	// +kubebuilder:validation:Minimum=1
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// configHash is the SHA-256 of the rendered nginx.conf, in hex.
	// +optional
	// +kubebuilder:validation:MinLength=64
	// +kubebuilder:validation:MaxLength=64
	ConfigHash string `json:"configHash,omitempty"`

	// selectedNodes is the number of nodes that match the nodeSelector.
	// +optional
	SelectedNodes int32 `json:"selectedNodes"`

	// eligibleNodes is the number of selected nodes that have the required disks and whose
	// taints are tolerated.
	// +optional
	EligibleNodes int32 `json:"eligibleNodes"`

	// scheduledNodes is the number of nodes running a cache pod.
	// +optional
	ScheduledNodes int32 `json:"scheduledNodes"`

	// readyNodes is the number of nodes with a ready cache pod.
	// +optional
	ReadyNodes int32 `json:"readyNodes"`

	// disks is the number of disks each cache node serves.
	// +optional
	Disks int32 `json:"disks"`

	// service is the Service in front of the cache pods, while spec.service asks for one
	// and it exists.
	// +optional
	Service CacheNodeServiceStatus `json:"service,omitzero"`

	// sharding is the ring of a sharded CacheNode.
	// +optional
	Sharding *ShardingStatus `json:"sharding,omitempty"`
}

// CacheNode deploys the thread-pooled nginx edge cache onto the nodes that have its disks.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cn;cachenode
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Eligible",type=integer,JSONPath=`.status.eligibleNodes`
// +kubebuilder:printcolumn:name="Ready Nodes",type=integer,JSONPath=`.status.readyNodes`
// +kubebuilder:printcolumn:name="Disks",type=integer,JSONPath=`.status.disks`
// +kubebuilder:printcolumn:name="Ring",type=integer,JSONPath=`.status.sharding.members`,priority=1
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.status.service.loadBalancerAddresses[0]`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters (it names the DaemonSet and its pods)"
// +kubebuilder:validation:XValidation:rule="!has(self.spec.service) || self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must start with a letter and hold only lower-case letters, digits and - with spec.service: it names the Service"
type CacheNode struct {
	metav1.TypeMeta `json:",inline"`

	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the cache nodes.
	// +required
	Spec CacheNodeSpec `json:"spec,omitzero"`

	// status is the observed state of the cache nodes.
	// +optional
	Status CacheNodeStatus `json:"status,omitempty"` //nolint:kubeapilinter // the zero status is "nothing observed yet"; a pointer changes the Go type for every caller
}

// CacheNodeList contains a list of CacheNode.
// +kubebuilder:object:root=true
type CacheNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CacheNode `json:"items"`
}
