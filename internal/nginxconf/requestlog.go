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

package nginxconf

import "strings"

// Per-request facts. nginx sends one line per request to the node agent as a syslog
// datagram on a unix socket in its working directory, which the agent sets to its run
// directory and where it binds RequestLogSocket before nginx starts. nginx's syslog
// writes never wait: a line the socket cannot take is dropped, and nginx says so in its
// error stream, where the agent counts it.
const (
	// RequestLogSocket is the socket's path, relative to nginx's working directory: a
	// fixed path that no field of a CacheNode reaches.
	RequestLogSocket = "requests.sock"
	// RequestLogFormatName names RequestLogFormat in nginx.conf.
	RequestLogFormatName = "edgepool_requests"
	// RequestLogTag is the syslog tag of a RequestLogFormat line. It names the format's
	// version: a changed format gets a new tag, so an agent never misreads another's.
	RequestLogTag = "edgepool_req1"
	// RequestLogSeparator separates the fields. nginx escapes nothing of the fields'
	// values into it: none of them holds request input.
	RequestLogSeparator = "|"
)

// RequestLogFields are the nginx variables of a RequestLogFormat line, in order: how the
// cache answered, the disk that served, the response's status, bytes sent to the
// client, the request's time, and the origin's status and response time for each try
// (comma-separated lists, "-" when the origin was not asked).
var RequestLogFields = []string{
	"$upstream_cache_status", DiskVariable, "$status", "$bytes_sent", "$request_time",
	"$upstream_status", "$upstream_response_time",
}

// RequestLogFormat is the log_format of the per-request lines.
func RequestLogFormat() string { return strings.Join(RequestLogFields, RequestLogSeparator) }

// A request the cache failed on its own side before its response started (a thread-pool
// queue overflow, an I/O error opening or reading the cached file, a full keys zone) is
// answered by the origin, uncached, once: its line is a RequestLogFormat line with a tag
// of its own, and its X-Cache-Status says FallbackCacheStatus.
const (
	FallbackLogTag      = "edgepool_fallback1"
	FallbackCacheStatus = "FALLBACK"
	// FallbackCacheError is the reason of such a fallback in the agent's metrics.
	FallbackCacheError = "cache_error"
)

// A request a client limit refused (429) sends a line of its own beside its request
// line: the site (empty without sites), then nginx's $limit_req_status and
// $limit_conn_status ("REJECTED" for the limit that refused it).
const LimitedLogTag = "edgepool_limit1"

// SitePattern is a site's name (the API's rule, which the renderer checks again): it names
// the site's zones, log formats and certificate files, and comes back in its lines.
const SitePattern = `[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?`

// A sharded cache's client-facing servers send a line per request too, on the same
// socket (RingLogFormat): which tier answered the client.
const (
	RingLogFormatName = "edgepool_ring"
	RingLogTag        = "edgepool_ring1"
	// ServedByVariable holds one of the ServedBy values.
	ServedByVariable = "$edgepool_served_by"
)

// Who answered a sharded cache's client: the pod's hot tier, the pod itself as the key's
// owner, another pod (the owner), or the origin when the owners failed; none when no one
// was asked (a request refused at once).
const (
	ServedByHot    = "hot"
	ServedByOwn    = "own"
	ServedByPeer   = "peer"
	ServedByOrigin = "origin"
	ServedByNone   = "none"
)

// RingLogFields are the nginx variables of a RingLogFormat line, in order: who served,
// the response's status and the bytes sent to the client.
var RingLogFields = []string{ServedByVariable, "$status", "$bytes_sent"}

// RingLogFormat is the log_format of a sharded cache's client-facing lines.
func RingLogFormat() string { return strings.Join(RingLogFields, RequestLogSeparator) }

// At a sharded cache's owner-facing servers the per-request line says who asked too
// (OwnerLogFormat): the pod itself, for its own clients, or another pod of the ring. The
// client-facing servers name the address their client reached in PodHeader; the owner
// compares it with its own.
const (
	OwnerLogFormatName = "edgepool_owner"
	OwnerLogTag        = "edgepool_owner1"
	// AskedByVariable holds AskedBySelf or AskedByPeer.
	AskedByVariable = "$edgepool_asked_by"
	AskedBySelf     = "self"
	AskedByPeer     = "peer"
	// PodHeader carries the address of the pod that passed a request to the ring.
	PodHeader = "X-Edgepool-Pod"
)

// OwnerLogFields are RequestLogFields, then who asked.
var OwnerLogFields = append(RequestLogFields[:len(RequestLogFields):len(RequestLogFields)], AskedByVariable)

// OwnerLogFormat is the log_format of a sharded cache's owner-facing lines.
func OwnerLogFormat() string { return strings.Join(OwnerLogFields, RequestLogSeparator) }

// The optional JSON access log (a CacheNode's accessLogPercent): nginx sends a sample of its
// requests as JSON lines on a socket of their own, so that they never crowd out the
// per-request lines, and the agent writes them to its standard output.
const (
	AccessLogSocket = "access.sock"
	AccessLogTag    = "edgepool_access1"
)
