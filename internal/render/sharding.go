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
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// A sharded CacheNode (spec.sharding) renders every server twice, the same on every pod:
//   - client-facing, on the listener's ports: it passes each request to the owner of its
//     key, chosen by nginx's consistent hash of the key over the ring (the ready pods'
//     addresses, this pod's own among them), and, if the owners it tries fail, to the
//     origin uncached;
//   - owner-facing, on the peer port: the disks' caches as an unsharded CacheNode has
//     them, filling only from the origin, so a request never goes round the ring twice.
//
// Only the owner stores a key, and concurrent misses from every pod meet in its cache
// lock. Removing a member moves only the keys it owned; adding one takes keys only for
// itself (docs/fleet-design.md has the reading of nginx's source behind this).

// ringUpstream is the upstream of the owners; hotZone the hot tier's keys zone.
const (
	ringUpstream = "edgepool_ring"
	hotZone      = "edgepool_hot"
)

// MaxRingMembers bounds the ring: the nodes a CacheNode may run on.
const MaxRingMembers = 5000

// Ring tuning: a member that refuses or does not answer a connection is skipped for
// ringFailTimeout, and a request tries ringTries owners before it goes to the origin.
const (
	ringConnectTimeout = "2s"
	ringFailTimeout    = "10s"
	ringTries          = 2
	ringKeepalive      = 64
)

// ring is a sharded spec's owners: the members' addresses, sorted, at the peer port. With
// no member yet (no pod ready), the ring is the pod itself.
type ring struct {
	peerPort int32
	members  []netip.Addr
}

// newRing checks members and returns the ring of spec, nil if spec is not sharded.
func newRing(spec *v1alpha1.CacheNodeSpec, members []netip.Addr) (*ring, error) {
	if spec.Sharding == nil {
		return nil, nil
	}
	if len(members) > MaxRingMembers {
		return nil, fmt.Errorf("ring: %d members, at most %d", len(members), MaxRingMembers)
	}
	r := &ring{peerPort: spec.Sharding.PeerPort}
	for _, a := range members {
		// Pod addresses: unicast, with no zone (the same on every pod).
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || a.Zone() != "" {
			return nil, fmt.Errorf("ring: %q is not a pod address", a)
		}
		r.members = append(r.members, a.Unmap())
	}
	// nginx hashes the server strings, and colliding points keep an arbitrary server:
	// sorted and unique, every pod builds the same ring from the same members.
	slices.SortFunc(r.members, func(a, b netip.Addr) int { return a.Compare(b) })
	r.members = slices.Compact(r.members)
	return r, nil
}

// writeRing writes the owners' upstream and the map that carries the client's scheme to
// the owner.
func writeRing(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec, r *ring) {
	w(0, "")
	w(1, "# sharding: each key's owner among the ready pods (%d), by nginx's consistent hash.", len(r.members))
	w(1, "upstream %s {", ringUpstream)
	w(2, "hash \"%s\" consistent;", cacheKeys[spec.Cache.Key])
	if len(r.members) == 0 {
		w(2, "# No pod is ready yet: each pod is the owner of every key.")
		w(2, "server 127.0.0.1:%d;", r.peerPort)
	}
	for _, a := range r.members {
		w(2, "server %s max_fails=1 fail_timeout=%s;", netip.AddrPortFrom(a, uint16(r.peerPort)), ringFailTimeout)
	}
	w(2, "keepalive %d;", ringKeepalive)
	w(1, "}")
	if h := spec.Sharding.HotTier; h != nil {
		w(1, "# The hot tier: copies of what owners served from their caches, in memory (%s).", agentapi.HotTierDir)
		w(1, "proxy_cache_path %s levels=1:2 keys_zone=%s:%s max_size=%s inactive=1m use_temp_path=off;",
			agentapi.HotTierDir, hotZone, nginxSize(resource.NewQuantity(v1alpha1.HotTierKeysZone, resource.BinarySI)), nginxOffset(&h.Size))
		w(1, "map $upstream_http_x_cache_status $edgepool_hot_refused {")
		w(2, "volatile;")
		w(2, "HIT 0;")
		w(2, "REVALIDATED 0;")
		w(2, "default 1;")
		w(1, "}")
	}
	w(1, "# Who answered the client, for the node agent's metrics: the hot tier, this pod as the")
	w(1, "# owner (the last ring server tried is this pod's address), another pod, or the origin")
	w(1, "# (the one internal redirect with an upstream before it is to @origin).")
	w(1, "map \"$upstream_cache_status|$upstream_addr|$server_addr\" %s {", agentapi.ServedByVariable)
	w(2, "\"~^HIT\\|\" %s;", agentapi.ServedByHot)
	w(2, "\"~ : \" %s;", agentapi.ServedByOrigin)
	w(2, "\"~[|, ]([^ ,|]+):%d\\|\\1$\" %s;", r.peerPort, agentapi.ServedByOwn)
	w(2, "\"~:%d\\|\" %s;", r.peerPort, agentapi.ServedByPeer)
	w(2, "default %s;", agentapi.ServedByNone)
	w(1, "}")
	w(1, "log_format %s \"%s\";", agentapi.RingLogFormatName, agentapi.RingLogFormat())
	w(1, "# At the owner, who asked: this pod (the address its client reached is the one the")
	w(1, "# owner is reached at; with no pod ready, loopback) or another pod of the ring.")
	w(1, "map \"$http_%s|$server_addr\" %s {", headerVariable(agentapi.PodHeader), agentapi.AskedByVariable)
	w(2, "\"~^([^|]+)\\|\\1$\" %s;", agentapi.AskedBySelf)
	w(2, "\"~\\|127\\.0\\.0\\.1$\" %s;", agentapi.AskedBySelf)
	w(2, "default %s;", agentapi.AskedByPeer)
	w(1, "}")
	w(1, "log_format %s \"%s\";", agentapi.OwnerLogFormatName, agentapi.OwnerLogFormat())
	w(1, "# At the owner: the scheme of the client's request, as the pod that passed it on says.")
	w(1, "map $http_x_edgepool_scheme $%s {", agentapi.PeerSchemeVariable)
	w(2, "https https;")
	w(2, "default http;")
	w(1, "}")
}

// writeRingLocation writes a client-facing location: the request goes to its key's owner
// as the client sent it, with who the client is and the scheme it used, through the hot
// tier if there is one and the site does not cache in slices. If the owners tried fail
// (nginx's own 502 or 504, not an answer an owner relays from the origin), the origin
// answers, uncached.
func writeRingLocation(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec, upstream string, origin *v1alpha1.Origin, rules *v1alpha1.CacheRules) {
	hot := spec.Sharding.HotTier
	if hot == nil || rules.SliceSize != nil {
		w(2, "location / {")
		writeRingProxy(w)
		w(2, "}")
	} else {
		w(2, "location / {")
		w(3, "# A Range goes to the owner as it is: a cache would ask for the whole object.")
		w(3, "error_page 418 = @edgepool_ring;")
		w(3, "if ($http_range) {")
		w(4, "return 418;")
		w(3, "}")
		writeRingProxy(w)
		w(3, "# The hot tier: only what an owner served from its cache (its policy let it store")
		w(3, "# it), after %d requests, for %ds; then the owner is asked again.", hot.MinUses, hot.Seconds)
		w(3, "proxy_cache %s;", hotZone)
		w(3, "proxy_cache_key \"%s\";", cacheKeys[spec.Cache.Key])
		w(3, "proxy_cache_min_uses %d;", hot.MinUses)
		w(3, "proxy_ignore_headers Cache-Control Expires;")
		w(3, "proxy_cache_valid 200 %ds;", hot.Seconds)
		w(3, "proxy_cache_bypass $edgepool_authorization;")
		w(3, "proxy_no_cache $edgepool_hot_refused $edgepool_authorization;")
		w(3, "proxy_cache_revalidate on;")
		w(3, "proxy_cache_lock on;")
		w(3, "add_header X-Hot-Cache-Status $upstream_cache_status always;")
		w(2, "}")
		w(0, "")
		w(2, "location @edgepool_ring {")
		writeRingProxy(w)
		w(2, "}")
	}
	w(0, "")
	w(2, "# The owners failed: the origin answers, and nothing is stored. A request that is not")
	w(2, "# safe to repeat may have reached an owner already: it is not sent twice.")
	w(2, "location @origin {")
	w(3, "if ($request_method !~ ^(GET|HEAD|OPTIONS)$) {")
	w(4, "return 502;")
	w(3, "}")
	w(3, "proxy_pass http://%s;", upstream)
	w(3, "proxy_http_version 1.1;")
	w(3, "proxy_set_header Connection \"\";")
	host := "$host"
	if origin.HostHeader != "" {
		host = origin.HostHeader
	}
	w(3, "proxy_set_header Host %s;", host)
	writeForwardedHeaders(w, spec.Cache.Key, "$scheme")
	w(3, "proxy_pass_header Date;")
	w(3, "add_header X-Cache-Status BYPASS always;")
	w(2, "}")
}

// writeRingProxy writes the directives that pass a request to the ring.
func writeRingProxy(w func(int, string, ...any)) {
	w(3, "proxy_pass http://%s;", ringUpstream)
	w(3, "proxy_http_version 1.1;")
	w(3, "proxy_set_header Connection \"\";")
	w(3, "proxy_set_header Host $host;")
	w(3, "proxy_set_header X-Real-IP $remote_addr;")
	w(3, "proxy_set_header X-Edgepool-Scheme $scheme;")
	w(3, "proxy_set_header %s $server_addr;", agentapi.PodHeader)
	w(3, "proxy_pass_header Date;")
	w(3, "proxy_connect_timeout %s;", ringConnectTimeout)
	w(3, "proxy_next_upstream error timeout;")
	w(3, "proxy_next_upstream_tries %d;", ringTries)
	w(3, "error_page 502 504 = @origin;")
}

// writeRingLog writes a client-facing server's line per request to the node agent.
func writeRingLog(w func(int, string, ...any)) {
	w(2, "access_log syslog:server=unix:%s,nohostname,tag=%s %s;", agentapi.RequestLogSocket, agentapi.RingLogTag, agentapi.RingLogFormatName)
}

// writePeerClients writes an owner-facing server's realip: the client is the one the
// member that passed the request on names, and a member only.
func writePeerClients(w func(int, string, ...any), r *ring) {
	w(2, "# The client, as the member that passed the request on names it.")
	w(2, "set_real_ip_from 127.0.0.1;")
	for _, a := range r.members {
		w(2, "set_real_ip_from %s;", a)
	}
	w(2, "real_ip_header X-Real-IP;")
}

// headerVariable is the suffix of the $http_ variable of a request header.
func headerVariable(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "-", "_"))
}

// listen is an owner-facing server's listen.
func (r *ring) listen(l *v1alpha1.Listener, isDefault bool) string {
	if isDefault {
		return fmt.Sprintf("listen %d default_server%s;", r.peerPort, socketOptions(l))
	}
	return fmt.Sprintf("listen %d;", r.peerPort)
}

// cacheKey is the cache key expression of spec where the cache is: at the owner, a
// sharded cache's scheme is the one the client used with the pod that passed it on.
func cacheKey(spec *v1alpha1.CacheNodeSpec) string {
	key := cacheKeys[spec.Cache.Key]
	if spec.Sharding != nil {
		key = strings.Replace(key, "$scheme", "$"+agentapi.PeerSchemeVariable, 1)
	}
	return key
}

// schemeVariable is the variable holding the client's scheme where the cache is.
func schemeVariable(spec *v1alpha1.CacheNodeSpec) string {
	if spec.Sharding != nil {
		return "$" + agentapi.PeerSchemeVariable
	}
	return "$scheme"
}

// validateSharding checks the peer port against the listener's.
func validateSharding(spec *v1alpha1.CacheNodeSpec, root *field.Path) field.ErrorList {
	if spec.Sharding == nil {
		return nil
	}
	p := root.Child("sharding", "peerPort")
	errs := validateRange(int64(spec.Sharding.PeerPort), 1, 65535, p)
	l := &spec.Listener
	if port := spec.Sharding.PeerPort; port == l.Port || port == l.StatusPort || port == l.AgentPort || port == l.TLSPort {
		errs = append(errs, field.Invalid(p, port, "must differ from listener.port, statusPort, agentPort and tlsPort"))
	}
	if h := spec.Sharding.HotTier; h != nil {
		hp := root.Child("sharding", "hotTier")
		errs = append(errs, validateSize(&h.Size, 1<<20, 16<<30, hp.Child("size"))...)
		errs = append(errs, validateRange(int64(h.MinUses), 1, 100, hp.Child("minUses"))...)
		errs = append(errs, validateRange(int64(h.Seconds), 1, 60, hp.Child("seconds"))...)
	}
	if spec.HostNetwork {
		errs = append(errs, field.Forbidden(root.Child("sharding"), "not available with hostNetwork: NetworkPolicy does not apply to hostNetwork pods, so the peer port would be open to whoever reaches the node"))
	}
	return errs
}
