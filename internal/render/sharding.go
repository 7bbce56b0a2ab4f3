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
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
)

// A sharded CacheNode (spec.sharding) renders every server twice, the same on every pod:
//   - client-facing, on the listener's ports: it passes each request to the owner of its
//     key among the ring's members (the ready pods, this pod among them; ring.go places
//     the keys), then, if the owner does not answer, to the key's successor, and if that
//     fails too, to the origin uncached;
//   - owner-facing, on the peer port: the disks' caches as an unsharded CacheNode has
//     them, filling only from the origin, so a request never goes round the ring twice.
//
// Only the owner stores a key, and concurrent misses from every pod meet in its cache
// lock. Removing a member moves only the keys it owned; adding one takes keys only for
// itself; a member back at another address keeps its keys (docs/fleet-design.md).

// Names in nginx.conf: the variables holding a request's owner and successor (the name of
// a member's upstream), and the hot tier's keys zone.
const (
	ownerVariable     = "$edgepool_owner"
	successorVariable = "$edgepool_successor"
	hotZone           = "edgepool_hot"
)

// MaxRingMembers bounds the ring, the nodes a sharded CacheNode may run on, and with it
// nginx.conf: beyond a few hundred members the split has all its ten thousand slots apart,
// and each member adds its two upstreams (a 1,000-member ring renders in ~550 KiB).
const MaxRingMembers = 1000

// Ring tuning: a member that refuses or does not answer a connection is skipped for
// ringFailTimeout (nginx's default fail_timeout, with its max_fails=1); the idle
// connections each worker keeps to the members together.
const (
	ringConnectTimeout = "2s"
	ringFailTimeout    = "10s"
	ringKeepalive      = 64
)

// Member is a pod of a sharded CacheNode's ring: Name is its identity, which places its
// keys (its node's name: a DaemonSet's pod comes back on the same node), Addr where it
// is reached now. Name never reaches nginx.conf.
type Member struct {
	Name string
	Addr netip.Addr
}

// ring is a sharded spec's ring: its members sorted by name, each slot's owner and
// successor among them. With no member yet (no pod ready), the pod owns every key.
type ring struct {
	peerPort         int32
	members          []Member
	owner, successor []int
}

// newRing checks members and returns the ring of spec, nil if spec is not sharded.
func newRing(spec *v1alpha1.CacheNodeSpec, members []Member) (*ring, error) {
	if spec.Sharding == nil {
		return nil, nil
	}
	if len(members) > MaxRingMembers {
		return nil, fmt.Errorf("ring: %d members, at most %d", len(members), MaxRingMembers)
	}
	r := &ring{peerPort: spec.Sharding.PeerPort}
	for _, m := range members {
		// Pod addresses: unicast, with no zone (the same on every pod).
		a := m.Addr
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || a.Zone() != "" {
			return nil, fmt.Errorf("ring: %q is not a pod address", a)
		}
		if m.Name == "" {
			return nil, fmt.Errorf("ring: the member at %s has no name", a)
		}
		// Peers listen on the ring's family (the first of listener.ipFamilies) only.
		if family := spec.Listener.Families()[0]; a.Unmap().Is4() != (family == v1alpha1.IPv4) {
			return nil, fmt.Errorf("ring: member %q at %s: the ring is on %s (spec.listener.ipFamilies)", m.Name, a, family)
		}
		r.members = append(r.members, Member{Name: m.Name, Addr: a.Unmap()})
	}
	// The same members in any order, once each, give every pod the same configuration.
	slices.SortFunc(r.members, func(a, b Member) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), a.Addr.Compare(b.Addr))
	})
	r.members = slices.Compact(r.members)
	names := make([]string, len(r.members))
	addrs := make(map[netip.Addr]string, len(r.members))
	for i, m := range r.members {
		if i > 0 && r.members[i-1].Name == m.Name {
			return nil, fmt.Errorf("ring: member %q at two addresses, %s and %s", m.Name, r.members[i-1].Addr, m.Addr)
		}
		if other, ok := addrs[m.Addr]; ok {
			return nil, fmt.Errorf("ring: members %q and %q at one address, %s", other, m.Name, m.Addr)
		}
		names[i], addrs[m.Addr] = m.Name, m.Name
	}
	r.owner, r.successor = placeSlots(names)
	return r, nil
}

// upstream is the name of member i's upstream.
func (r *ring) upstream(i int) string {
	return fmt.Sprintf("ring_%d", i)
}

// writeRing writes the members' upstreams, the owner and successor of the request's key,
// and the maps that carry who asked, who answered and the client's scheme.
func writeRing(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec, r *ring) {
	key := cacheKeys[spec.Cache.Key]
	w(0, "")
	w(1, "# sharding: each key's owner among the ready pods (%d), by its slot (ring.go).", len(r.members))
	if len(r.members) == 0 {
		w(1, "# No pod is ready yet: each pod is the owner of every key.")
		w(1, "split_clients \"%s%s\" %s {", ringKeyPrefix, key, ownerVariable)
		w(2, "* ring_self;")
		w(1, "}")
		w(1, "upstream ring_self { server 127.0.0.1:%d; keepalive %d; }", r.peerPort, ringKeepalive)
		w(1, "upstream ring_self%s { server 127.0.0.1:%d; }", againSuffix, r.peerPort)
	} else {
		writeSlots(w, key, ownerVariable, r, r.owner)
		if len(r.members) > 1 {
			w(1, "# A key's successor: the member that gets its slot if the owner leaves.")
			writeSlots(w, key, successorVariable, r, r.successor)
		}
		w(1, "# Each member's upstreams, one per line, name it twice: nginx never takes a lone server")
		w(1, "# out, and a server that fails once is out for %s. The second upstream keeps no", ringFailTimeout)
		w(1, "# connection alive: the member is asked again there over a new one.")
		keepalive := max(8, ringKeepalive/len(r.members))
		for i, m := range r.members {
			a := netip.AddrPortFrom(m.Addr, uint16(r.peerPort))
			w(1, "upstream %s { server %s; server %s; keepalive %d; }", r.upstream(i), a, a, keepalive)
			w(1, "upstream %s%s { server %s; server %s; }", r.upstream(i), againSuffix, a, a)
		}
	}
	if h := spec.Sharding.HotTier; h != nil {
		w(1, "# The hot tier: copies of what owners served from their caches, in memory (%s).", nginxconf.HotTierDir)
		w(1, "# A copy is written under tmp/ and copied in once whole: nginx trims the copies only")
		w(1, "# at its cache manager's passes, and a copy that finds the volume full in between")
		w(1, "# is lost, not the client's response (the node agent removes what it leaves).")
		w(1, "proxy_cache_path %s levels=1:2 keys_zone=%s:%s max_size=%s inactive=1m;",
			nginxconf.HotTierDir, hotZone, nginxSize(resource.NewQuantity(v1alpha1.HotTierKeysZone, resource.BinarySI)), nginxOffset(&h.Size))
		w(1, "map $upstream_http_x_cache_status $edgepool_hot_refused {")
		w(2, "volatile;")
		w(2, "HIT 0;")
		w(2, "REVALIDATED 0;")
		w(2, "default 1;")
		w(1, "}")
	}
	w(1, "# Who answered the client, for the node agent's metrics: the hot tier (a copy, fresh or")
	w(1, "# while its owner is asked again), this pod as the owner (the last address tried is")
	w(1, "# this pod's, or loopback), another pod (the last proxied to is a member's upstream),")
	w(1, "# the origin (any other), or none.")
	w(1, "map \"$upstream_cache_status|$proxy_host|$upstream_addr|$server_addr\" %s {", nginxconf.ServedByVariable)
	w(2, "\"~^(?:HIT|STALE|UPDATING)\\|\" %s;", nginxconf.ServedByHot)
	w(2, "\"~^[^|]*\\|ring_[^|]*\\|(?:[^|]* )?([^ |]+):%d\\|\\1$\" %s;", r.peerPort, nginxconf.ServedByOwn)
	w(2, "\"~^[^|]*\\|ring_[^|]*\\|(?:[^|]* )?127\\.0\\.0\\.1:%d\\|\" %s;", r.peerPort, nginxconf.ServedByOwn)
	if spec.Listener.ServesIPv6() { // $upstream_addr brackets an IPv6 address, $server_addr does not
		w(2, "\"~^[^|]*\\|ring_[^|]*\\|(?:[^|]* )?\\[([^]|]+)\\]:%d\\|\\1$\" %s;", r.peerPort, nginxconf.ServedByOwn)
	}
	w(2, "\"~^[^|]*\\|ring_\" %s;", nginxconf.ServedByPeer)
	w(2, "\"~^[^|]*\\|[^|]\" %s;", nginxconf.ServedByOrigin)
	w(2, "default %s;", nginxconf.ServedByNone)
	w(1, "}")
	w(1, "log_format %s \"%s\";", nginxconf.RingLogFormatName, nginxconf.RingLogFormat())
	w(1, "# At the owner, who asked: this pod (the address its client reached is the one the")
	w(1, "# owner is reached at; with no pod ready, loopback) or another pod of the ring.")
	w(1, "map \"$http_%s|$server_addr\" %s {", headerVariable(nginxconf.PodHeader), nginxconf.AskedByVariable)
	w(2, "\"~^([^|]+)\\|\\1$\" %s;", nginxconf.AskedBySelf)
	w(2, "\"~\\|127\\.0\\.0\\.1$\" %s;", nginxconf.AskedBySelf)
	w(2, "default %s;", nginxconf.AskedByPeer)
	w(1, "}")
	w(1, "log_format %s \"%s\";", nginxconf.OwnerLogFormatName, nginxconf.OwnerLogFormat())
	w(1, "# At the owner: the scheme of the client's request, as the pod that passed it on says.")
	w(1, "map $http_x_edgepool_scheme $%s {", agentapi.PeerSchemeVariable)
	w(2, "https https;")
	w(2, "default http;")
	w(1, "}")
}

// againSuffix names a member's second upstream, which keeps no connection alive.
const againSuffix = "_again"

// ringKeyPrefix sets the ring's hash of a key apart from the disks' split of the same
// key: with one hash, an owner's slots would all fall in one disk's share.
const ringKeyPrefix = "ring:"

// slotsPerLine is how many split_clients parts one line holds: the ring of a large fleet
// has ten thousand.
const slotsPerLine = 8

// writeSlots writes the split_clients that sets variable to the upstream of each slot's
// member in of.
func writeSlots(w func(int, string, ...any), key, variable string, r *ring, of []int) {
	w(1, "split_clients \"%s%s\" %s {", ringKeyPrefix, key, variable)
	runs := slotRuns(of)
	var line []string
	for i, run := range runs {
		share := "*"
		if i < len(runs)-1 {
			share = fmt.Sprintf("%d.%02d%%", run.slots/100, run.slots%100)
		}
		line = append(line, share+" "+r.upstream(run.member)+";")
		if len(line) == slotsPerLine || i == len(runs)-1 {
			w(2, "%s", strings.Join(line, " "))
			line = line[:0]
		}
	}
	w(1, "}")
}

// writeRingLocation writes a client-facing location: the request goes to its key's owner
// as the client sent it, with who the client is and the scheme it used, through the hot
// tier if there is one and the site does not cache in slices. nginx's own errors (not an
// answer an owner relays from the origin) send it on:
//   - a 502 (refused, reset: e.g. a kept-alive connection the owner closed as it
//     reloaded) to the owner again, over a new connection;
//   - a 504 (no answer in time), or a second 502, to the key's successor;
//   - a failed successor to the origin, uncached.
func writeRingLocation(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec, r *ring, upstream string, origin *v1alpha1.Origin, rules *v1alpha1.CacheRules) {
	next := "@origin"
	if len(r.members) > 1 {
		next = "@edgepool_successor"
	}
	const again = "@edgepool_again"
	hot := spec.Sharding.HotTier
	if hot == nil || rules.SliceSize != nil {
		w(2, "location / {")
		writeRingProxy(w, ownerVariable, again, next)
		w(2, "}")
	} else {
		w(2, "location / {")
		w(3, "# A Range goes to the owner as it is: a cache would ask for the whole object.")
		w(3, "error_page 418 = @edgepool_ring;")
		w(3, "if ($http_range) {")
		w(4, "return 418;")
		w(3, "}")
		writeRingProxy(w, ownerVariable, again, next)
		w(3, "# The hot tier: only what an owner served from its cache (its policy let it store")
		w(3, "# it), after %d requests, for %ds; then the owner is asked again, in the background:", hot.MinUses, hot.Seconds)
		w(3, "# the copy answers meanwhile, so a hot key never waits for the owner's disks. A copy")
		w(3, "# the owner does not confirm (it refused its answer, or failed) the node agent removes")
		w(3, "# within %ds of its end.", int(nginxconf.HotTierStaleBound/time.Second))
		w(3, "proxy_cache %s;", hotZone)
		w(3, "proxy_cache_key \"%s\";", cacheKeys[spec.Cache.Key])
		w(3, "proxy_cache_min_uses %d;", hot.MinUses)
		w(3, "proxy_ignore_headers Cache-Control Expires;")
		w(3, "proxy_cache_valid 200 %ds;", hot.Seconds)
		w(3, "proxy_cache_bypass $edgepool_authorization;")
		w(3, "proxy_no_cache $edgepool_hot_refused $edgepool_authorization;")
		w(3, "proxy_cache_revalidate on;")
		w(3, "# One request makes a key's copy; those that come meanwhile go to the owner at once,")
		w(3, "# as without a hot tier: nginx's lock would hold them until it looked again (every")
		w(3, "# 500ms), and let them through one at a time for a key the owner does not store.")
		w(3, "proxy_cache_lock on;")
		w(3, "proxy_cache_lock_timeout 0s;")
		w(3, "proxy_cache_use_stale updating;")
		w(3, "proxy_cache_background_update on;")
		writeCloseAfterUpdate(w)
		w(3, "add_header X-Hot-Cache-Status $upstream_cache_status always;")
		writeAltSvc(w, 3, spec)
		w(2, "}")
		w(0, "")
		w(2, "location @edgepool_ring {")
		writeRingProxy(w, ownerVariable, again, next)
		w(2, "}")
	}
	w(0, "")
	w(2, "# The owner refused or dropped the connection: once more, over a new connection. A")
	w(2, "# request that is not safe to repeat may have reached it already: it is not sent twice.")
	w(2, "location %s {", again)
	writeUnsafeNotRepeated(w)
	writeRingProxy(w, "${"+ownerVariable[1:]+"}"+againSuffix, next, next)
	w(2, "}")
	if next != "@origin" {
		w(0, "")
		w(2, "# The owner failed: its successor answers.")
		w(2, "location %s {", next)
		writeUnsafeNotRepeated(w)
		writeRingProxy(w, successorVariable, "@origin", "@origin")
		w(2, "}")
	}
	w(0, "")
	w(2, "# The members failed: the origin answers, and nothing is stored.")
	w(2, "location @origin {")
	writeUnsafeNotRepeated(w)
	w(3, "proxy_pass http://%s;", upstream)
	w(3, "proxy_http_version 1.1;")
	w(3, "proxy_set_header Connection \"\";")
	w(3, "proxy_set_header Host %s;", originHost(origin))
	writeForwardedHeaders(w, spec.Cache.Key, "$scheme")
	w(3, "proxy_pass_header Date;")
	w(3, "add_header X-Cache-Status BYPASS always;")
	writeAltSvc(w, 3, spec)
	w(2, "}")
}

// writeUnsafeNotRepeated answers a request that is not safe to repeat with the 502 that
// sent it to a fallback.
func writeUnsafeNotRepeated(w func(int, string, ...any)) {
	w(3, "if ($request_method !~ ^(GET|HEAD|OPTIONS)$) {")
	w(4, "return 502;")
	w(3, "}")
}

// writeRingProxy writes the directives that pass a request to the member in target (an
// upstream), and on nginx's own 502 to refused, its 504 to late.
func writeRingProxy(w func(int, string, ...any), target, refused, late string) {
	w(3, "proxy_pass http://%s;", target)
	w(3, "proxy_http_version 1.1;")
	w(3, "proxy_set_header Connection \"\";")
	w(3, "proxy_set_header Host $host;")
	w(3, "proxy_set_header X-Real-IP $remote_addr;")
	w(3, "proxy_set_header X-Edgepool-Scheme $scheme;")
	w(3, "proxy_set_header %s $server_addr;", nginxconf.PodHeader)
	w(3, "proxy_pass_header Date;")
	w(3, "proxy_connect_timeout %s;", ringConnectTimeout)
	w(3, "proxy_next_upstream error timeout;")
	w(3, "proxy_next_upstream_tries 1;")
	if refused == late {
		w(3, "error_page 502 504 = %s;", refused)
	} else {
		w(3, "error_page 502 = %s;", refused)
		w(3, "error_page 504 = %s;", late)
	}
	if refused != "@origin" {
		w(3, "recursive_error_pages on;")
	}
}

// writeRingLog writes a client-facing server's line per request to the node agent.
func writeRingLog(w func(int, string, ...any)) {
	w(2, "access_log syslog:server=unix:%s,nohostname,tag=%s %s;", nginxconf.RequestLogSocket, nginxconf.RingLogTag, nginxconf.RingLogFormatName)
}

// writePeerClients writes an owner-facing server's realip: the client is the one the
// member that passed the request on names, and a member only.
func writePeerClients(w func(int, string, ...any), r *ring) {
	w(2, "# The client, as the member that passed the request on names it.")
	w(2, "set_real_ip_from 127.0.0.1;")
	for _, m := range r.members {
		w(2, "set_real_ip_from %s;", m.Addr)
	}
	w(2, "real_ip_header X-Real-IP;")
}

// headerVariable is the suffix of the $http_ variable of a request header.
func headerVariable(name string) string {
	return strings.ToLower(strings.ReplaceAll(name, "-", "_"))
}

// writeListens writes an owner-facing server's listens.
func (r *ring) writeListens(w func(int, string, ...any), l *v1alpha1.Listener, isDefault bool) {
	params := ""
	if isDefault {
		params = " default_server" + socketOptions(l)
	}
	writeListens(w, l, r.peerPort, params)
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
