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

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/nginxconf"
)

// TLS settings of every site with tls, at the http level: nginx takes ssl_protocols (and
// more) from the default server of an address before it reads the SNI, so settings per
// server would depend on which server is the default.
const (
	// tlsProtocols: TLS 1.0 and 1.1 are deprecated (RFC 8996).
	tlsProtocols = "TLSv1.2 TLSv1.3"
	// tlsCiphers are Mozilla's "intermediate" ciphers for TLS 1.2, forward secret (ECDHE)
	// and AEAD (AES-GCM, ChaCha20-Poly1305) only. TLS 1.3's suites are OpenSSL's, all
	// of them AEAD.
	tlsCiphers = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:" +
		"ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:" +
		"ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
	// tlsSessionCache is shared by the workers (with reuseport a client's next connection
	// may reach another worker): about 4000 sessions per MiB.
	tlsSessionCache   = "shared:edgepool_tls:10m"
	tlsSessionTimeout = "1d"
)

// serverNamesBucket holds the longest hostname (253 characters) with nginx's per-name
// overhead, in a power of two.
const serverNamesBucket = 512

// siteUpstream is the upstream of a site's origin.
func siteUpstream(name string) string { return "edgepool_site_" + name }

// cacheRules are the cache rules in use: spec.cache's without sites, else each site's own
// or, for a site without, spec.cache's.
func cacheRules(spec *v1alpha1.CacheNodeSpec) []*v1alpha1.CacheRules {
	if len(spec.Sites) == 0 {
		return []*v1alpha1.CacheRules{&spec.Cache.CacheRules}
	}
	rules := make([]*v1alpha1.CacheRules, len(spec.Sites))
	for i := range spec.Sites {
		rules[i] = siteRules(spec, &spec.Sites[i])
	}
	return rules
}

func siteRules(spec *v1alpha1.CacheNodeSpec, s *v1alpha1.Site) *v1alpha1.CacheRules {
	if s.Cache != nil {
		return s.Cache
	}
	return &spec.Cache.CacheRules
}

// anyTLS says whether a site has tls, and so whether nginx listens on listener.tlsPort.
func anyTLS(spec *v1alpha1.CacheNodeSpec) bool {
	for _, s := range spec.Sites {
		if s.TLS != nil {
			return true
		}
	}
	return false
}

// defaultSite is the site spec.defaultSite names, or nil.
func defaultSite(spec *v1alpha1.CacheNodeSpec) *v1alpha1.Site {
	for i := range spec.Sites {
		if spec.Sites[i].Name == spec.DefaultSite && spec.DefaultSite != "" {
			return &spec.Sites[i]
		}
	}
	return nil
}

// writeSites writes a server per site, each filling from its own upstream, and the
// default server of each port that no site answers by default.
//
// Each port's default server (the one for hosts no server_name matches) carries its
// socket options: nginx takes them once per address and port. The default site, if any,
// is the default of the plain port, and of the TLS port if it has tls (it has no
// certificate to answer other names with otherwise). Where there is no default site,
// the default server refuses: 421 Misdirected Request over plain HTTP, and no handshake
// over TLS (ssl_reject_handshake: it needs no certificate, and shows none).
//
// A sharded spec (ring not nil) writes the servers twice: client-facing ones as above,
// which pass requests to the key's owner, and owner-facing ones on the peer port (plain
// HTTP, the same server names, the same default), which hold the caches.
func writeSites(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec, ring *ring) {
	// A hostname may be 253 characters long: nginx's default bucket (64 bytes) holds 50.
	w(1, "server_names_hash_bucket_size %d;", serverNamesBucket)
	tls := anyTLS(spec)
	if tls {
		writeTLS(w)
		writeAltSvcMap(w, spec)
	}
	for i := range spec.Sites {
		writeUpstream(w, siteUpstream(spec.Sites[i].Name), &spec.Sites[i].Origin)
	}
	def := defaultSite(spec)
	refusePlain := def == nil
	refuseTLS := tls && (def == nil || def.TLS == nil)
	if refusePlain || refuseTLS {
		writeDefaultServer(w, spec, refusePlain, refuseTLS)
	}
	for i := range spec.Sites {
		s := &spec.Sites[i]
		writeSite(w, spec, s, s == def, ring)
	}
	if ring == nil {
		return
	}
	w(0, "")
	w(1, "# sharding: the keys this pod owns, for the ring's members.")
	if def == nil {
		w(1, "server {")
		ring.writeListens(w, &spec.Listener, true)
		w(2, "return 421;")
		w(1, "}")
	}
	for i := range spec.Sites {
		s := &spec.Sites[i]
		w(0, "")
		w(1, "# Site %s, at its keys' owner.", s.Name)
		w(1, "server {")
		ring.writeListens(w, &spec.Listener, s == def)
		w(2, "server_name %s;", strings.Join(s.Hostnames, " "))
		writePeerClients(w, ring)
		writeOwnerAccessLogs(w, spec)
		w(0, "")
		writeLocation(w, spec, siteUpstream(s.Name), &s.Origin, siteRules(spec, s), newCompressor(spec, s), false)
		w(1, "}")
	}
}

// writeTLS writes the TLS settings every site with tls shares.
//
// Sessions resume from the shared cache (stateful): ssl_session_tickets off, since nginx
// never rotates the key of its stateless tickets, so a stolen key would decrypt every
// session recorded since the pod started. With OpenSSL 3, TLS 1.3 still resumes: the
// tickets it sends are then references to the shared cache.
func writeTLS(w func(int, string, ...any)) {
	w(0, "")
	w(1, "# HTTPS of the sites with tls.")
	w(1, "ssl_protocols %s;", tlsProtocols)
	w(1, "ssl_ciphers %s;", tlsCiphers)
	w(1, "ssl_prefer_server_ciphers off;")
	w(1, "ssl_session_cache %s;", tlsSessionCache)
	w(1, "ssl_session_timeout %s;", tlsSessionTimeout)
	w(1, "ssl_session_tickets off;")
	w(0, "")
}

// writeDefaultServer writes the server that refuses the hosts no site names, on the plain
// port, the TLS port or both.
func writeDefaultServer(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec, plain, tls bool) {
	l := &spec.Listener
	w(0, "")
	w(1, "# Hosts no site names: refused (421 Misdirected Request; over TLS, no handshake).")
	w(1, "server {")
	if plain {
		writeListens(w, l, l.Port, " default_server"+socketOptions(l))
	}
	if tls {
		writeListens(w, l, l.TLSPort, " ssl default_server"+socketOptions(l))
		w(2, "ssl_reject_handshake on;")
	}
	writeAccessLogs(w, spec)
	w(2, "return 421;")
	w(1, "}")
}

// writeSite writes the server (or, with plain HTTP redirected, the two servers) of a site;
// with a ring, the client-facing ones.
func writeSite(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec, s *v1alpha1.Site, isDefault bool, ring *ring) {
	l := &spec.Listener
	plainParams, tlsParams := "", " ssl"
	if isDefault {
		plainParams += " default_server" + socketOptions(l)
		tlsParams += " default_server" + socketOptions(l)
	}
	serverName := "server_name " + strings.Join(s.Hostnames, " ") + ";"
	redirect := s.TLS != nil && s.TLS.PlainHTTP == v1alpha1.PlainHTTPRedirect
	if redirect {
		// To the default HTTPS port: clients reach the cache's HTTPS as 443 (a Service's
		// or load balancer's port in front of listener.tlsPort); see docs/sites-and-tls.md.
		w(0, "")
		w(1, "# Site %s: plain HTTP is redirected to HTTPS.", s.Name)
		w(1, "server {")
		writeListens(w, l, l.Port, plainParams)
		w(2, "%s", serverName)
		writeAccessLogs(w, spec)
		w(2, "return 308 https://$host$request_uri;")
		w(1, "}")
	}
	w(0, "")
	w(1, "# Site %s.", s.Name)
	w(1, "server {")
	if !redirect {
		writeListens(w, l, l.Port, plainParams)
	}
	if s.TLS != nil {
		writeListens(w, l, l.TLSPort, tlsParams)
		if siteHTTP3(s) {
			writeListens(w, l, l.TLSPort, quicParams(spec, s, isDefault))
		}
		// Per server since nginx 1.25.1: offered in TLS (ALPN, chosen after SNI), and on
		// this server's plain port to clients that start with HTTP/2's preface.
		w(2, "http2 on;")
	}
	w(2, "%s", serverName)
	writeTagHiding(w, siteRules(spec, s))
	writeClientLimits(w, s.Name, siteLimits(spec, s))
	if siteHTTP3(s) {
		writeAltSvc(w, 2, spec)
	}
	if s.TLS != nil {
		w(2, "# Copied by the node agent from Secret %s once it parsed and matched.", s.TLS.SecretName)
		w(2, "ssl_certificate %s;", nginxconf.NginxCertificateFile(s.Name))
		w(2, "ssl_certificate_key %s;", nginxconf.NginxCertificateKeyFile(s.Name))
	}
	if ring != nil {
		writeRingLog(w)
		writeRingLocation(w, spec, ring, siteUpstream(s.Name), &s.Origin, siteRules(spec, s))
		w(1, "}")
		return
	}
	writeAccessLogs(w, spec)
	w(0, "")
	writeLocation(w, spec, siteUpstream(s.Name), &s.Origin, siteRules(spec, s), newCompressor(spec, s), true)
	w(1, "}")
}
