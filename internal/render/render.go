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

// Package render turns a CacheNode spec into nginx.conf. It is a pure function of the
// spec: no clients, no clock, no randomness, so the same spec always gives the same bytes.
package render

import (
	"fmt"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
)

// DiskVariable is the nginx variable that holds the disk chosen for a request.
const DiskVariable = nginxconf.DiskVariable

// ThreadPool names the thread pool of a task: pool_<disk> for the read of a cached header,
// pool_<disk>_io for the tasks of a response under way (see writePoolMap).
const ThreadPool = "pool_" + DiskVariable + poolSuffixVariable

// ioThreadPool is the disk's io pool for every task: sliced locations use it alone.
var ioThreadPool = "pool_${" + strings.TrimPrefix(DiskVariable, "$") + "}" + ioPoolSuffix

const (
	poolSuffixVariable = "$edgepool_pool_suffix"
	// closeAfterUpdateVariable is "close" for a response that started a background update
	// on an HTTP/1 connection (writeCloseAfterUpdateMap).
	closeAfterUpdateVariable = "$edgepool_close_after_update"
	ioPoolSuffix             = "_io"
	// http2MaxConcurrentStreams is nginx's default http2_max_concurrent_streams, which the
	// renderer leaves alone: the requests an HTTP/2 connection may have in flight.
	http2MaxConcurrentStreams = 128
)

// ioQueue bounds the queue of a disk's io pool above the tasks a worker can have waiting:
// one per request in flight (a task's request waits for it), two with a background
// update's subrequest beside it, on each of worker_connections connections.
func ioQueue(l *v1alpha1.Listener) int64 {
	return int64(l.WorkerConnections) * http2MaxConcurrentStreams * 2
}

// writePoolMap sends a task to the disk's io pool unless it is the read of a cached
// header: a request's $upstream_cache_status is MISS (or unset) while nginx opens and
// reads the cached file, and $upstream_addr is empty until it asks the origin, so "" and
// "MISS" are exactly the header reads; a HIT's body, a fill's writes and a revalidated
// response's reads come after. The map is volatile: nginx caches a variable's value for
// the request, and the header read's answer would send the body's tasks to pool_<disk>.
func writePoolMap(w func(int, string, ...any)) {
	w(1, "# The read of a cached header waits in pool_<disk>, whose queue may overflow (the")
	w(1, "# origin then answers); every later task of a response in pool_<disk>%s.", ioPoolSuffix)
	w(1, "map $upstream_cache_status$upstream_addr %s {", poolSuffixVariable)
	w(2, "volatile; # asked again for each task: nginx would keep a request's first answer")
	w(2, "default %s;", ioPoolSuffix)
	w(2, "\"\" \"\";")
	w(2, "MISS \"\";")
	w(1, "}")
}

// writeCloseAfterUpdateMap names the responses that started a background update: served
// STALE from the cache without asking anyone ($upstream_addr is empty; a stale response
// served after the origin failed has the origin's address). nginx reads the next request
// on their HTTP/1 connection only when the update has ended, so the next request would
// wait for the origin (or the owner's disks) after all: such a response asks the client
// to close the connection (RFC 9112 section 9.6), and its next request goes over another.
// HTTP/2 and HTTP/3 hold only the stream, and have no Connection field.
func writeCloseAfterUpdateMap(w func(int, string, ...any)) {
	w(1, "# A response that started a background update holds its HTTP/1 connection until the")
	w(1, "# update ends: it asks the client to close it, so that its next request never waits.")
	w(1, "map \"$server_protocol|$upstream_cache_status|$upstream_addr\" %s {", closeAfterUpdateVariable)
	w(2, "volatile;")
	w(2, "\"~^HTTP/1\\.[01]\\|STALE\\|$\" close;")
	w(2, "default \"\";")
	w(1, "}")
}

// writeCloseAfterUpdate asks the client to close a connection a background update holds.
func writeCloseAfterUpdate(w func(int, string, ...any)) {
	w(3, "add_header Connection %s always;", closeAfterUpdateVariable)
}

// ShutdownTimeout is nginx's worker_shutdown_timeout; the cache pod's grace period exceeds it.
const ShutdownTimeout = "240s"

// cacheKeys are the keys a CacheNode may choose. URI ($request_uri) is not one: the cache
// answers every hostname, so it would serve one host's responses for another's. The
// scheme is followed by "://": without it, http with host sexample.com and https with
// host example.com would be one key.
var cacheKeys = map[v1alpha1.CacheKey]string{
	v1alpha1.CacheKeyHostURI:       "$host$request_uri",
	v1alpha1.CacheKeySchemeHostURI: "$scheme://$host$request_uri",
}

// NginxConf renders nginx.conf for a defaulted CacheNode spec. Relative paths in the
// output (pid, temp files) resolve against nginx's prefix (-p), a writable directory of
// the cache pod. It returns an error naming the offending fields if the spec is invalid.
// A sharded spec gets a ring of no members: see NginxConfRing.
func NginxConf(spec *v1alpha1.CacheNodeSpec) (string, error) {
	return NginxConfRing(spec, nil)
}

// NginxConfRing is NginxConf with the members of a sharded spec's ring: its ready cache
// pods. An unsharded spec ignores them.
func NginxConfRing(spec *v1alpha1.CacheNodeSpec, members []Member) (string, error) {
	if errs := Validate(spec); len(errs) > 0 {
		return "", fmt.Errorf("invalid CacheNode: %w", errs.ToAggregate())
	}
	ring, err := newRing(spec, members)
	if err != nil {
		return "", err
	}
	threads := spec.IO == v1alpha1.IOThreads
	workers, _ := workerProcesses(&spec.Listener)

	var b strings.Builder
	w := func(indent int, format string, args ...any) {
		b.WriteString(strings.Repeat("    ", indent))
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}

	w(0, "# Rendered by edgepool from a CacheNode spec. Do not edit: change the CacheNode.")
	w(0, "daemon off;")
	if Brotli(spec) {
		w(0, "# Brotli (spec.compression): Debian's module, through the node agent's link %s.", nginxconf.ModulesLink)
		w(0, "load_module %s;", nginxconf.BrotliModule)
	}
	if workers == "auto" {
		w(0, "# worker_processes: one per CPU of the container, set by the node agent (nginx's auto counts the host's).")
	} else {
		w(0, "worker_processes %s;", workers)
	}
	w(0, "worker_rlimit_nofile %d;", min(2*int64(spec.Listener.WorkerConnections), 1<<20))
	w(0, "pid nginx.pid;")
	w(0, "# Bounds graceful shutdown and the old workers of a reload: connections left behind")
	w(0, "# by failed thread-pool tasks are otherwise never closed.")
	w(0, "worker_shutdown_timeout %s;", ShutdownTimeout)
	w(0, "# Thread-pool queue overflows are logged at level error; the node agent reads stderr.")
	w(0, "error_log stderr warn;")
	// The policy is the agent's (in the facts beside nginx.conf); written here too, a change
	// of it changes configHash and reaches the agents as any configuration change does.
	f := &spec.DiskFailover
	w(0, "# Disk failover, by the node agent: %d I/O errors or %d failed checks within %ds take a disk out;",
		f.IOErrors, f.CheckFailures, f.ErrorWindowSeconds)
	w(0, "# it is put back after %ds of passing checks (doubling to at most %ds if it fails again).",
		f.CooldownSeconds, f.MaxCooldownSeconds)
	if threads {
		w(0, "# Two pools per disk. pool_<disk> reads cached headers: a request whose read would wait")
		w(0, "# beyond its max_queue fails before its response starts, and the origin answers it. The")
		w(0, "# reads, sendfiles and writes of responses under way go to pool_<disk>%s, whose queue", ioPoolSuffix)
		w(0, "# holds every task a worker can have in flight (one per request): no overflow cuts a")
		w(0, "# response its status line already went out for.")
		for _, d := range spec.Disks {
			w(0, "thread_pool pool_%s threads=%d max_queue=%d;", d.Name, d.Threads(), *d.ThreadPool.MaxQueue)
			w(0, "thread_pool pool_%s%s threads=%d max_queue=%d;", d.Name, ioPoolSuffix, d.Threads(), ioQueue(&spec.Listener))
		}
	}
	w(0, "")
	w(0, "events {")
	w(1, "worker_connections %d;", spec.Listener.WorkerConnections)
	if spec.Listener.AcceptMutex != nil {
		w(1, "accept_mutex %s;", onOff(*spec.Listener.AcceptMutex))
	}
	w(0, "}")
	w(0, "")
	w(0, "http {")
	w(1, "default_type application/octet-stream;")
	w(1, "access_log off;")
	w(1, "# One line per request to the node agent, which turns them into metrics (see")
	w(1, "# nginxconf.RequestLogFields). The format holds no request input.")
	w(1, "log_format %s \"%s\";", nginxconf.RequestLogFormatName, nginxconf.RequestLogFormat())
	writeAccessLogFormat(w, spec.AccessLogPercent)
	w(1, "server_tokens off;")
	w(1, "sendfile on;")
	w(1, "tcp_nopush on;")
	w(1, "sendfile_max_chunk %s;", nginxSize(spec.SendfileMaxChunk))
	for _, t := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		w(1, "%s_temp_path tmp/%s;", t, t)
	}
	// Responses that will not be cached are passed through memory buffers, never spooled
	// to tmp/ (up to 1 GiB each by default): tmp/ is the pod's emptyDir, and its growth
	// would get the pod evicted. Fills of the cache are written to their disk regardless.
	w(1, "proxy_max_temp_file_size 0;")
	w(1, "# Holds the longest tag header name the cache may hide (64 characters): nginx's")
	w(1, "# default buckets (64 bytes) hold names of up to 50.")
	w(1, "proxy_headers_hash_bucket_size %d;", proxyHeadersBucket)
	if HTTP3(spec) {
		w(1, "# The Alt-Svc map's keys hold a hostname (253 characters); set before the first map.")
		w(1, "map_hash_bucket_size %d;", serverNamesBucket)
	}
	writeTrustedProxies(w, spec.Listener.TrustedProxies)
	w(0, "")
	w(1, "# One cache per disk, in a directory of its own beside the agent's marker (nginx")
	w(1, "# deletes every other file under a cache path); use_temp_path=off writes fills")
	w(1, "# straight onto the disk. nginx reaches each through the node agent's link %s/<disk>", nginxconf.DiskLinkDir)
	w(1, "# under its prefix, which points elsewhere while the disk is out of the split.")
	w(1, "# min_free has the cache manager evict before the filesystem is full, whatever max_size")
	w(1, "# says: a write that found no space would count as the disk failing.")
	for _, d := range spec.Disks {
		w(1, "proxy_cache_path %s levels=1:2 keys_zone=%s%s:%s max_size=%s min_free=%s inactive=%s use_temp_path=off; # %s/%s",
			nginxconf.DiskLink(d.Name), nginxconf.CacheZonePrefix, d.Name, nginxSize(d.KeysZoneSize), nginxOffset(&d.Size),
			nginxOffset(minFree(&d.Size)), d.Inactive, d.Path, agentapi.DiskCacheDir)
	}
	w(0, "")
	splitConf, err := nginxconf.SplitConf(split(spec), "    ")
	if err != nil {
		return "", fmt.Errorf("render the split: %w", err)
	}
	b.WriteString(splitConf)
	w(0, "")
	writeCacheMaps(w, cacheRules(spec))
	writeCloseAfterUpdateMap(w)
	writeClientLimitZones(w, spec)
	writeCompressionMaps(w, spec)
	if threads {
		writePoolMap(w)
	}
	if ring != nil {
		writeRing(w, spec, ring)
	}
	if len(spec.Sites) == 0 {
		writeUpstream(w, "edgepool_origin", &spec.Origin)
		w(0, "")
		w(1, "server {")
		writeListens(w, &spec.Listener, spec.Listener.Port, socketOptions(&spec.Listener))
		writeTagHiding(w, &spec.Cache.CacheRules)
		writeClientLimits(w, "", spec.ClientLimits)
		if ring != nil {
			writeRingLog(w)
			writeRingLocation(w, spec, ring, "edgepool_origin", &spec.Origin, &spec.Cache.CacheRules)
			w(1, "}")
			w(0, "")
			w(1, "# sharding: the keys this pod owns, for the ring's members.")
			w(1, "server {")
			ring.writeListens(w, &spec.Listener, true)
			writePeerClients(w, ring)
			writeOwnerAccessLogs(w, spec)
		} else {
			writeAccessLogs(w, spec)
		}
		w(0, "")
		writeLocation(w, spec, "edgepool_origin", &spec.Origin, &spec.Cache.CacheRules, newCompressor(spec, nil), ring == nil)
		w(1, "}")
	} else {
		writeSites(w, spec, ring)
	}
	for _, c := range compressors(spec) {
		c.writeServers(w, spec)
	}
	w(0, "")
	w(1, "# stub_status for the node agent, on loopback only.")
	w(1, "server {")
	w(2, "listen 127.0.0.1:%d default_server;", spec.Listener.StatusPort)
	if len(compressors(spec)) > 0 {
		w(2, "# The loopback's default: room for the headers a request brings over HTTP/2 (whose")
		w(2, "# Cookie fields nginx joins in one) on its way through the compression servers.")
		w(2, "large_client_header_buffers 4 64k;")
	}
	w(2, "location = %s {", nginxconf.StubStatusPath)
	w(3, "stub_status;")
	w(2, "}")
	w(2, "location / {")
	w(3, "return 404;")
	w(2, "}")
	w(1, "}")
	w(0, "}")
	return b.String(), nil
}

// writeListens writes a server's listens of port, followed by params: on every IPv4
// address and, when the listener serves IPv6, on every IPv6 address ([::], which nginx
// opens IPv6-only).
func writeListens(w func(int, string, ...any), l *v1alpha1.Listener, port int32, params string) {
	w(2, "listen %d%s;", port, params)
	if l.ServesIPv6() {
		w(2, "listen [::]:%d%s;", port, params)
	}
}

// socketOptions are the listen parameters that set up a listening socket. nginx takes
// them once per address and port: on the default server's listen.
func socketOptions(l *v1alpha1.Listener) string {
	opts := ""
	if *l.ReusePort {
		opts += " reuseport"
	}
	return fmt.Sprintf("%s backlog=%d", opts, l.Backlog)
}

// writeUpstream writes an origin's upstream block.
func writeUpstream(w func(int, string, ...any), name string, o *v1alpha1.Origin) {
	w(1, "upstream %s {", name)
	for _, s := range o.Servers {
		w(2, "server %s;", s)
	}
	if *o.Keepalive > 0 {
		w(2, "keepalive %d;", *o.Keepalive)
	}
	w(1, "}")
}

// writeAccessLogs writes a server's request log (to the node agent) and, if on, its JSON
// access log.
func writeAccessLogs(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec) {
	writeLogs(w, spec, nginxconf.RequestLogTag, nginxconf.RequestLogFormatName)
}

// writeOwnerAccessLogs writes a sharded cache's owner-facing server's logs: its request
// log says who asked.
func writeOwnerAccessLogs(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec) {
	writeLogs(w, spec, nginxconf.OwnerLogTag, nginxconf.OwnerLogFormatName)
}

func writeLogs(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec, tag, format string) {
	w(2, "# A datagram socket in nginx's working directory, the node agent's run directory:")
	w(2, "# nginx never waits for the agent, a line it cannot take is dropped (and counted).")
	writeLogsAt(w, 2, spec, tag, format)
}

// writeLogsAt writes the access logs at depth: the request line of tag and format, and
// the sampled JSON log.
func writeLogsAt(w func(int, string, ...any), depth int, spec *v1alpha1.CacheNodeSpec, tag, format string) {
	w(depth, "access_log syslog:server=unix:%s,nohostname,tag=%s %s;", nginxconf.RequestLogSocket, tag, format)
	if percent := spec.AccessLogPercent; percent > 0 {
		sampled := ""
		if percent < 100 {
			sampled = " if=" + accessLogSampled
		}
		w(depth, "access_log syslog:server=unix:%s,nohostname,tag=%s %s%s;", nginxconf.AccessLogSocket, nginxconf.AccessLogTag, accessLogFormatName, sampled)
	}
}

// writeLocation writes the location that answers from the cache, filling from upstream
// (origin's) with rules. Every site shares the node-wide key, which holds the host, and
// the disks: the split picks $edgepool_disk from the key.
// A compressing site (comp not nil) fills through its compressor; clientFacing says
// whether the location's server answers clients (and so hides the tag headers).
func writeLocation(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec, upstream string, origin *v1alpha1.Origin, rules *v1alpha1.CacheRules, comp *compressor, clientFacing bool) {
	w(2, "location / {")
	if comp != nil {
		comp.writeCompressingRequest(w, spec)
	} else {
		writeOriginRequest(w, spec, upstream, origin)
	}
	fallback := rules.SliceSize == nil // a slice's fallback would have to answer as a slice
	if fallback {
		w(3, "# A failure on the cache's side before the response started: the origin answers.")
		w(3, "error_page 500 = %s;", fallbackLocation)
	}
	w(3, "proxy_cache %s;", nginxconf.CacheZoneVariable)
	key := cacheKey(spec)
	if comp != nil {
		key = comp.encodingVariable() + ":" + key
	}
	writeCacheKey(w, key, rules)
	writeCachePolicy(w, rules)
	w(3, "proxy_cache_lock %s;", onOff(*rules.Lock))
	if *rules.Lock {
		w(3, "proxy_cache_lock_timeout %s;", rules.LockTimeout)
	}
	if rules.SliceSize == nil { // a slice's update would have to fetch as a slice
		w(3, "# stale-while-revalidate (RFC 5861 section 3): the stale response now, the update behind it.")
		w(3, "proxy_cache_background_update on;")
		writeCloseAfterUpdate(w)
	}
	if spec.IO == v1alpha1.IOThreads {
		pool := ThreadPool
		if rules.SliceSize != nil {
			// Every slice after the first is a subrequest that starts after the response did:
			// no read of it may overflow, its header's included.
			pool = ioThreadPool
		}
		w(3, "aio threads=%s;", pool)
		w(3, "aio_write on;")
	}
	w(3, "add_header X-Cache-Status $upstream_cache_status always;")
	if comp != nil {
		var hidden []string
		if clientFacing {
			hidden = hiddenTags(rules)
		}
		comp.writeCompressedResponse(w, hidden)
	}
	writeAltSvc(w, 3, spec)
	w(2, "}")
	if !fallback {
		return
	}
	w(0, "")
	w(2, "# The cache failed on its own side (a thread-pool queue overflow, an I/O error, a full")
	w(2, "# keys zone) before the response started: the origin answers, uncached, once (the")
	w(2, "# origin's own errors never come here: nginx passes them on).")
	w(2, "location %s {", fallbackLocation)
	writeOriginRequest(w, spec, upstream, origin)
	w(3, "proxy_cache off;")
	w(3, "proxy_pass_header Date;")
	writeLogsAt(w, 3, spec, nginxconf.FallbackLogTag, nginxconf.RequestLogFormatName)
	w(3, "add_header X-Cache-Status %s always;", nginxconf.FallbackCacheStatus)
	writeAltSvc(w, 3, spec)
	w(2, "}")
}

// fallbackLocation answers a request the cache failed on its own side.
const fallbackLocation = "@edgepool_fallback"

// writeOriginRequest writes what a request to upstream (origin's) carries.
func writeOriginRequest(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec, upstream string, origin *v1alpha1.Origin) {
	w(3, "proxy_pass http://%s;", upstream)
	w(3, "proxy_http_version 1.1;")
	w(3, "proxy_set_header Connection \"\";")
	w(3, "proxy_set_header Host %s;", originHost(origin))
	writeForwardedHeaders(w, spec.Cache.Key, schemeVariable(spec))
	writePeerHeadersCleared(w, spec)
}

// writePeerHeadersCleared keeps a sharded cache's peer headers from the origin.
func writePeerHeadersCleared(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec) {
	if spec.Sharding != nil {
		w(3, "# What the ring's pods tell each other stays in the fleet.")
		w(3, "proxy_set_header X-Edgepool-Scheme \"\";")
		w(3, "proxy_set_header %s \"\";", nginxconf.PodHeader)
	}
}

// writeTrustedProxies has nginx take the client's address from the X-Forwarded-For of
// the listed proxies (realip): the last address there that is not one of them.
func writeTrustedProxies(w func(int, string, ...any), proxies []string) {
	if len(proxies) == 0 {
		return
	}
	w(1, "# listener.trustedProxies: their X-Forwarded-For names the client ($remote_addr).")
	for _, c := range proxies {
		w(1, "set_real_ip_from %s;", c)
	}
	w(1, "real_ip_header X-Forwarded-For;")
	w(1, "real_ip_recursive on;")
}

// overridingHeaders are request headers that make common origins and frameworks take
// another host, scheme, path or method than the request's own. A response to one is
// stored under the request's key and served to every client, so a client could poison
// the cache with them (a cacheable redirect loop, a reflected host): they never reach
// the origin.
var overridingHeaders = []string{
	"Forwarded", "X-Forwarded-Host", "X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Server",
	"X-Forwarded-Scheme", "X-Forwarded-Ssl", "X-Url-Scheme", "Front-End-Https",
	"X-Host", "X-Original-Host", "X-Original-URL", "X-Rewrite-URL", "X-Original-URI",
	"X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override",
}

// writeForwardedHeaders writes what the origin hears of the client: its address from the
// connection (or the trusted proxies, see writeTrustedProxies) and, only where the cache
// key holds the scheme, the scheme (in the variable scheme); never the client's own
// version of either.
func writeForwardedHeaders(w func(int, string, ...any), key v1alpha1.CacheKey, scheme string) {
	w(3, "# The client as the connection (or a trusted proxy) says, never as it claims.")
	w(3, "proxy_set_header X-Forwarded-For $remote_addr;")
	w(3, "proxy_set_header X-Real-IP $remote_addr;")
	if strings.Contains(cacheKeys[key], "$scheme") {
		w(3, "proxy_set_header X-Forwarded-Proto %s;", scheme)
	} else {
		w(3, "# The key has no scheme, so the origin is not told it: a response that differed")
		w(3, "# by scheme (a redirect to https) would reach the clients of both.")
		w(3, "proxy_set_header X-Forwarded-Proto \"\";")
	}
	w(3, "# Headers that make origins take another host, path or method: a response to them")
	w(3, "# would be stored under this request's key, for every client.")
	for _, h := range overridingHeaders {
		w(3, "proxy_set_header %s \"\";", h)
	}
}

// The JSON access log. escape=json escapes what a request holds (its URI, headers).
const (
	accessLogFormatName = "edgepool_access"
	accessLogFormat     = `{"time":"$time_iso8601","remote_addr":"$remote_addr","method":"$request_method",` +
		`"host":"$host","uri":"$request_uri","protocol":"$server_protocol","status":$status,` +
		`"bytes_sent":$bytes_sent,"request_time":$request_time,"cache_status":"$upstream_cache_status",` +
		`"disk":"` + DiskVariable + `","upstream_status":"$upstream_status",` +
		`"upstream_response_time":"$upstream_response_time","referer":"$http_referer","user_agent":"$http_user_agent"}`
	accessLogSampled = "$edgepool_access_sampled"
)

// writeAccessLogFormat writes the JSON access log's format and, below 100%, the draw of
// the requests it logs.
func writeAccessLogFormat(w func(int, string, ...any), percent int32) {
	if percent == 0 { // unset: off
		return
	}
	w(1, "# accessLogPercent: a JSON line for %d%% of the requests, through the node agent to the", percent)
	w(1, "# pod's standard output.")
	w(1, "log_format %s escape=json '%s';", accessLogFormatName, accessLogFormat)
	if percent < 100 {
		w(1, "split_clients \"$request_id\" %s {", accessLogSampled)
		w(2, "%d%% 1;", percent)
		w(2, "* \"\";")
		w(1, "}")
	}
}

// writeCacheMaps writes the maps the cache rules' proxy_cache_bypass and proxy_no_cache
// read: once, for all the rules in use (one per site). Those that read the origin's
// response ($upstream_http_*) are volatile: they must be computed when proxy_no_cache
// asks, after the response arrived, never from an earlier value.
func writeCacheMaps(w func(int, string, ...any), rules []*v1alpha1.CacheRules) {
	cacheIfAllowed, valid := false, false
	for _, c := range rules {
		cacheIfAllowed = cacheIfAllowed || c.AuthorizedRequests == v1alpha1.AuthorizedRequestsCacheIfAllowed
		valid = valid || len(c.Valid) > 0
	}
	w(1, "# HTTP caching follows RFC 9111 for a shared cache unless the CacheNode opts out.")
	w(1, "# nginx itself stores only what the origin declared fresh (Cache-Control max-age or")
	w(1, "# s-maxage, Expires, X-Accel-Expires) or what cache.valid forces, and never")
	w(1, "# responses marked private, no-store or no-cache, with Set-Cookie, or Vary: *.")
	w(1, "map $http_authorization $edgepool_authorization {")
	w(2, "\"\" 0;")
	w(2, "default 1;")
	w(1, "}")
	if cacheIfAllowed {
		w(1, "# RFC 9111 section 3.5: a response to a request with Authorization may be reused")
		w(1, "# for others only if it says public, s-maxage or must-revalidate.")
		w(1, "map $upstream_http_cache_control $edgepool_shareable {")
		w(2, "volatile;")
		w(2, "\"~*(^|[ \\t,])(public|must-revalidate)($|[ \\t,])\" 1;")
		w(2, "\"~*(^|[ \\t,])s-maxage=\" 1;")
		w(2, "default 0;")
		w(1, "}")
		w(1, "map $edgepool_authorization$edgepool_shareable $edgepool_authorized_unshareable {")
		w(2, "volatile;")
		w(2, "10 1;")
		w(2, "default 0;")
		w(1, "}")
	}
	if valid {
		w(1, "# cache.valid forces freshness on responses the origin sent without it. Of")
		w(1, "# those, responses to requests with a Cookie and responses with Pragma: no-cache may")
		w(1, "# belong to one user: they are stored only if the origin declared them fresh or public.")
		w(1, "map $http_cookie $edgepool_cookie {")
		w(2, "\"\" 0;")
		w(2, "default 1;")
		w(1, "}")
		w(1, "map $upstream_http_cache_control $edgepool_declared {")
		w(2, "volatile;")
		w(2, "\"~*(^|[ \\t,])(max-age|s-maxage)=\" 1;")
		w(2, "\"~*(^|[ \\t,])public($|[ \\t,])\" 1;")
		w(2, "default 0;")
		w(1, "}")
		w(1, "map $upstream_http_expires$upstream_http_x_accel_expires $edgepool_expires {")
		w(2, "volatile;")
		w(2, "\"\" 0;")
		w(2, "default 1;")
		w(1, "}")
		w(1, "map $upstream_http_pragma $edgepool_pragma_no_cache {")
		w(2, "volatile;")
		w(2, "\"~*no-cache\" 1;")
		w(2, "default 0;")
		w(1, "}")
		w(1, "map $edgepool_declared$edgepool_expires$edgepool_cookie$edgepool_pragma_no_cache $edgepool_forced_unshareable {")
		w(2, "volatile;")
		w(2, "\"~^00(1.|.1)$\" 1;")
		w(2, "default 0;")
		w(1, "}")
	}
	w(0, "")
}

// writeCacheKey writes the location's cache key and, with sliceSize, the slicing: each
// slice of an object is a cache entry of its own, keyed by the object's key and the
// slice's range (nginx's example), and fetched from the origin with that Range. The
// disk is still chosen by the object's key alone (split_clients): nginx shares the
// variables of a request with its subrequests, so the split is computed once per client
// request, and a key with the slice's range would put an object's slices on the disk
// chosen by whichever range a client asked for first.
func writeCacheKey(w func(int, string, ...any), key string, c *v1alpha1.CacheRules) {
	if c.SliceSize == nil {
		w(3, "proxy_cache_key \"%s\";", key)
		return
	}
	w(3, "# Byte-range slicing: a Range request fills only the slices it covers.")
	w(3, "slice %s;", nginxSize(c.SliceSize))
	w(3, "proxy_cache_key \"%s%s\";", key, agentapi.SliceKeySuffix)
	w(3, "proxy_set_header Range %s;", agentapi.SliceKeySuffix)
}

// writeCachePolicy writes the location's caching directives.
func writeCachePolicy(w func(int, string, ...any), c *v1alpha1.CacheRules) {
	w(3, "# A stale response is revalidated with If-None-Match / If-Modified-Since, and a 304")
	w(3, "# freshens it (RFC 9111 section 4.3).")
	w(3, "proxy_cache_revalidate on;")
	w(3, "# The origin's Date, also on hits, so that caches downstream count the time the")
	w(3, "# response spent here in its age (RFC 9111 section 4.2.3).")
	w(3, "proxy_pass_header Date;")
	noCache := []string{}
	switch c.AuthorizedRequests {
	case v1alpha1.AuthorizedRequestsBypass:
		w(3, "# Requests with Authorization go to the origin, and nothing of theirs is stored.")
		w(3, "proxy_cache_bypass $edgepool_authorization;")
		noCache = append(noCache, "$edgepool_authorization")
	case v1alpha1.AuthorizedRequestsCacheIfAllowed:
		w(3, "# Opt-in: requests with Authorization are answered from the cache; their responses")
		w(3, "# are stored only when RFC 9111 section 3.5 allows it.")
		noCache = append(noCache, "$edgepool_authorized_unshareable")
	}
	if len(c.Valid) > 0 {
		noCache = append(noCache, "$edgepool_forced_unshareable")
	}
	w(3, "proxy_no_cache %s;", strings.Join(noCache, " "))
	if len(c.Valid) > 0 {
		w(3, "# Opt-in: forced freshness.")
	}
	for _, v := range c.Valid {
		codes := v.Codes
		if c.SliceSize != nil && slices.Contains(codes, "200") && !slices.Contains(codes, "206") {
			codes = append(slices.Clip(codes), "206") // a slice is a 206 to its range
		}
		w(3, "proxy_cache_valid %s %s;", strings.Join(codes, " "), v.Duration)
	}
	if len(c.UseStale) > 0 {
		conds := make([]string, len(c.UseStale))
		for i, u := range c.UseStale {
			conds[i] = string(u)
		}
		w(3, "# Opt-in: stale responses beyond the origin's stale-while-revalidate and stale-if-error.")
		w(3, "proxy_cache_use_stale %s;", strings.Join(conds, " "))
	}
}

// Facts are what the node agent needs to know about conf, rendered from spec: it never
// parses nginx.conf.
func Facts(spec *v1alpha1.CacheNodeSpec, conf string) agentapi.Facts {
	f := agentapi.Facts{
		ConfigHash: agentapi.Hash([]byte(conf)),
		Backlog:    int(spec.Listener.Backlog),
		StatusPort: int(spec.Listener.StatusPort),
		Split:      split(spec),
		Failover: &agentapi.FailoverPolicy{
			IOErrors:           int(spec.DiskFailover.IOErrors),
			CheckFailures:      int(spec.DiskFailover.CheckFailures),
			ErrorWindowSeconds: int(spec.DiskFailover.ErrorWindowSeconds),
			CooldownSeconds:    int(spec.DiskFailover.CooldownSeconds),
			MaxCooldownSeconds: int(spec.DiskFailover.MaxCooldownSeconds),
		},
	}
	f.SlicedHosts = slicedHosts(spec)
	f.TagHeaders = tagHeaders(spec)
	if workers, err := workerProcesses(&spec.Listener); err == nil && workers != "auto" {
		f.WorkerProcesses, _ = strconv.Atoi(workers)
	}
	for _, s := range spec.Sites {
		if s.TLS != nil {
			f.Certificates = append(f.Certificates, agentapi.Certificate{
				Site: s.Name, SecretName: s.TLS.SecretName, Hostnames: slices.Clone(s.Hostnames),
			})
		}
	}
	return f
}

// slicedHosts are the hostnames whose responses spec caches in slices, "*" for every host
// (no sites, or a default site that slices).
// proxyHeadersBucket holds a header name of 64 characters in the hash of hidden headers:
// an element takes a pointer, the name and two bytes, aligned to a pointer (80 bytes), and
// a bucket ends with a pointer.
const proxyHeadersBucket = 128

// tagHeaders are the tag headers of every site (or of the CacheNode's cache without
// sites), each once in its canonical case, sorted.
func tagHeaders(spec *v1alpha1.CacheNodeSpec) []string {
	rules := []*v1alpha1.CacheRules{&spec.Cache.CacheRules}
	if len(spec.Sites) > 0 {
		rules = rules[:0]
		for i := range spec.Sites {
			rules = append(rules, siteRules(spec, &spec.Sites[i]))
		}
	}
	var names []string
	for _, r := range rules {
		for _, h := range r.TagHeaders {
			if h = textproto.CanonicalMIMEHeaderKey(h); !slices.Contains(names, h) {
				names = append(names, h)
			}
		}
	}
	slices.Sort(names)
	return names
}

// writeTagHiding hides the tag headers of rules from the clients of a server, unless
// they pass. At the server's level, every location of it inherits it but one that sets a
// proxy_hide_header of its own (nginx inherits none into it): a compressing cache
// location, which hides them again (writeCompressedResponse). The servers that answer a
// sharded CacheNode's peers do not hide them, so that a peer stores the tags with the
// response.
func writeTagHiding(w func(int, string, ...any), rules *v1alpha1.CacheRules) {
	if len(hiddenTags(rules)) == 0 {
		return
	}
	w(2, "# The origin's tags (for purges by tag) are not the clients' business.")
	for _, h := range hiddenTags(rules) {
		w(2, "proxy_hide_header %s;", h)
	}
}

// hiddenTags are the tag headers a client-facing server with rules hides.
func hiddenTags(rules *v1alpha1.CacheRules) []string {
	if rules.TagHeadersToClients != v1alpha1.TagHeadersHide {
		return nil
	}
	return rules.TagHeaders
}

func slicedHosts(spec *v1alpha1.CacheNodeSpec) []string {
	if len(spec.Sites) == 0 {
		if spec.Cache.SliceSize != nil {
			return []string{"*"}
		}
		return nil
	}
	var hosts []string
	for i := range spec.Sites {
		site := &spec.Sites[i]
		rules := &spec.Cache.CacheRules
		if site.Cache != nil {
			rules = site.Cache
		}
		switch {
		case rules.SliceSize == nil:
		case site.Name == spec.DefaultSite:
			return []string{"*"}
		default:
			hosts = append(hosts, site.Hostnames...)
		}
	}
	return hosts
}

// split is how spec spreads keys across its disks.
func split(spec *v1alpha1.CacheNodeSpec) agentapi.Split {
	s := agentapi.Split{Key: cacheKey(spec), Disks: make([]agentapi.SplitDisk, len(spec.Disks))}
	for i, d := range spec.Disks {
		s.Disks[i] = agentapi.SplitDisk{Name: d.Name, Weight: d.Weight}
	}
	return s
}

// nginx reads sizes with two parsers. ngx_parse_size (keys_zone, sendfile_max_chunk) takes
// the units k and m only: "1g" is refused. ngx_parse_offset (max_size) also takes g. Each
// value is written in the largest unit, of those its parser takes, that is exact.

// minFree is the free space nginx keeps on a disk's filesystem (min_free): 1% of the
// disk's size in whole MiB, from 1 MiB to 1 GiB. nginx's cache manager passes at least
// every 10 s; min_free is room for the fills written meanwhile when the filesystem is
// smaller than size, or shared. It stays small: while a disk is out, its link points into
// the pod's emptyDir, whose filesystem (the node's) nginx then measures, and with less
// than min_free free there the manager would empty the disk's keys zone.
func minFree(size *resource.Quantity) *resource.Quantity {
	v := min(max(size.Value()/100>>20<<20, 1<<20), 1<<30)
	return resource.NewQuantity(v, resource.BinarySI)
}

// nginxSize formats a validated byte quantity for ngx_parse_size: k, m or bytes.
func nginxSize(q *resource.Quantity) string {
	return inUnit(q, "m", "k")
}

// nginxOffset formats a validated byte quantity for ngx_parse_offset: k, m, g or bytes.
func nginxOffset(q *resource.Quantity) string {
	return inUnit(q, "g", "m", "k")
}

func inUnit(q *resource.Quantity, suffixes ...string) string {
	v, _ := wholeBytes(q)
	for _, suffix := range suffixes {
		if unit := units[suffix]; v != 0 && v%unit == 0 {
			return fmt.Sprintf("%d%s", v/unit, suffix)
		}
	}
	return fmt.Sprintf("%d", v)
}

var units = map[string]int64{"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}
