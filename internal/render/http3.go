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
	"github.com/edgepool/edgepool/api/v1alpha1"
)

// HTTP/3 (a site's tls.http3): a QUIC listener on UDP listener.tlsPort beside the TLS one,
// and an Alt-Svc header on the site's HTTPS responses that points clients at it.

// altSvcVariable is the Alt-Svc header of a response: the HTTP/3 advertisement on an
// HTTPS response of a site with HTTP/3, else empty (no header).
const altSvcVariable = "$edgepool_alt_svc"

// altSvcMaxAge is how long a client may remember the advertisement, in seconds.
const altSvcMaxAge = 86400

// siteHTTP3 says whether site s serves HTTP/3.
func siteHTTP3(s *v1alpha1.Site) bool { return s.TLS != nil && s.TLS.HTTP3 == v1alpha1.HTTP3On }

// HTTP3 says whether a site of spec serves HTTP/3: the cache pods then take UDP on
// listener.tlsPort.
func HTTP3(spec *v1alpha1.CacheNodeSpec) bool {
	for i := range spec.Sites {
		if siteHTTP3(&spec.Sites[i]) {
			return true
		}
	}
	return false
}

// altSvcPort is the port clients reach the cache's HTTPS at: the Service's https port,
// the node's tlsPort with hostNetwork, else 443 (a load balancer in front, as for the
// redirect to HTTPS).
func altSvcPort(spec *v1alpha1.CacheNodeSpec) int32 {
	switch {
	case spec.Service != nil && spec.Service.Ports.HTTPS != 0:
		return spec.Service.Ports.HTTPS
	case spec.HostNetwork:
		return spec.Listener.TLSPort
	}
	return 443
}

// writeAltSvcMap writes the Alt-Svc header of each site with HTTP/3, by the request's
// scheme and its server's first name (unique: a hostname belongs to one site).
func writeAltSvcMap(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec) {
	if !HTTP3(spec) {
		return
	}
	w(1, "# HTTP/3 is advertised on the HTTPS responses of the sites that serve it.")
	w(1, "map \"$scheme|$server_name\" %s {", altSvcVariable)
	for i := range spec.Sites {
		if s := &spec.Sites[i]; siteHTTP3(s) {
			w(2, "\"https|%s\" 'h3=\":%d\"; ma=%d';", s.Hostnames[0], altSvcPort(spec), altSvcMaxAge)
		}
	}
	w(2, "default \"\";")
	w(1, "}")
}

// writeAltSvc adds the Alt-Svc header at depth, where other headers are added (nginx
// inherits add_header only into levels that add none).
func writeAltSvc(w func(int, string, ...any), depth int, spec *v1alpha1.CacheNodeSpec) {
	if HTTP3(spec) {
		w(depth, "add_header Alt-Svc %s always;", altSvcVariable)
	}
}

// quicParams are the parameters of site s's QUIC listen: the default site's is the
// port's default; the first site with HTTP/3 opens the socket with reuseport (whatever
// listener.reusePort says: one UDP socket shared by the workers would hand a
// connection's datagrams to workers that do not know it).
func quicParams(spec *v1alpha1.CacheNodeSpec, s *v1alpha1.Site, isDefault bool) string {
	params := " quic"
	if isDefault {
		params += " default_server"
	}
	for i := range spec.Sites {
		if siteHTTP3(&spec.Sites[i]) {
			if &spec.Sites[i] == s {
				params += " reuseport"
			}
			break
		}
	}
	return params
}
