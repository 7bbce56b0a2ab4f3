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

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/nginxconf"
)

// Per-client limits (v1alpha1.ClientLimits) hold at the client-facing servers only: a
// sharded pod's owner-facing server serves the ring's pods, and the pod a client reached
// has counted its request already.

// limitedVariable is 1 for a request a client limit refused.
const limitedVariable = "$edgepool_limited"

// limitedSite is a site with client limits, as the renderer names its tables; the
// CacheNode without sites is the site with no name.
type limitedSite struct {
	name   string
	limits *v1alpha1.ClientLimits
}

// limitedSites are the sites with client limits: each site's own or the CacheNode's.
func limitedSites(spec *v1alpha1.CacheNodeSpec) []limitedSite {
	if len(spec.Sites) == 0 {
		if spec.ClientLimits == nil {
			return nil
		}
		return []limitedSite{{limits: spec.ClientLimits}}
	}
	var sites []limitedSite
	for i := range spec.Sites {
		if l := siteLimits(spec, &spec.Sites[i]); l != nil {
			sites = append(sites, limitedSite{spec.Sites[i].Name, l})
		}
	}
	return sites
}

func siteLimits(spec *v1alpha1.CacheNodeSpec, s *v1alpha1.Site) *v1alpha1.ClientLimits {
	if s.ClientLimits != nil {
		return s.ClientLimits
	}
	return spec.ClientLimits
}

// ClientLimitsMemory is the shared memory of spec's client limits' tables, which the cache
// pod requests beside its keys zones.
func ClientLimitsMemory(spec *v1alpha1.CacheNodeSpec) *resource.Quantity {
	var tables int64
	for _, s := range limitedSites(spec) {
		if s.limits.RequestsPerSecond > 0 {
			tables++
		}
		if s.limits.ConcurrentRequests > 0 {
			tables++
		}
	}
	return resource.NewQuantity(tables*v1alpha1.ClientLimitsZone, resource.BinarySI)
}

// zoneName is the name of a site's table of a limit (rate or concurrent).
func (s limitedSite) zoneName(limit string) string {
	if s.name == "" {
		return "edgepool_" + limit
	}
	return "edgepool_" + limit + "_" + s.name
}

// logFormat names the format of the line a refused request of the site sends the agent.
func (s limitedSite) logFormat() string { return s.zoneName("limited") }

// writeClientLimitZones writes the tables of the sites' client limits, keyed by the
// client's address (after the trusted proxies' realip), and for each site the line a
// refused request sends the node agent: the site and which limit refused it.
func writeClientLimitZones(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec) {
	sites := limitedSites(spec)
	if len(sites) == 0 {
		return
	}
	zone := nginxSize(resource.NewQuantity(v1alpha1.ClientLimitsZone, resource.BinarySI))
	w(1, "# Client limits: a table per site and limit, of the clients' addresses; a refused")
	w(1, "# request is answered 429 and sends the node agent a line of its own.")
	for _, s := range sites {
		if r := s.limits.RequestsPerSecond; r > 0 {
			w(1, "limit_req_zone $binary_remote_addr zone=%s:%s rate=%dr/s;", s.zoneName("rate"), zone, r)
		}
		if s.limits.ConcurrentRequests > 0 {
			w(1, "limit_conn_zone $binary_remote_addr zone=%s:%s;", s.zoneName("concurrent"), zone)
		}
		w(1, "log_format %s \"%s%s$limit_req_status%s$limit_conn_status\";", s.logFormat(), s.name,
			nginxconf.RequestLogSeparator, nginxconf.RequestLogSeparator)
	}
	w(1, "map \"$limit_req_status$limit_conn_status\" %s {", limitedVariable)
	w(2, "\"~REJECTED\" 1;")
	w(2, "default 0;")
	w(1, "}")
}

// writeClientLimits writes a client-facing server's limits of site (none if nil). nginx
// logs its refusals below the error log's level: under a flood of them, the node agent
// counts the lines they send it instead of reading a line of stderr for each.
func writeClientLimits(w func(int, string, ...any), site string, limits *v1alpha1.ClientLimits) {
	if limits == nil {
		return
	}
	s := limitedSite{site, limits}
	if r := limits.RequestsPerSecond; r > 0 {
		burst := ""
		if limits.Burst > 0 {
			burst = fmt.Sprintf(" burst=%d nodelay", limits.Burst)
		}
		w(2, "limit_req zone=%s%s;", s.zoneName("rate"), burst)
		w(2, "limit_req_status 429;")
		w(2, "limit_req_log_level info;")
	}
	if c := limits.ConcurrentRequests; c > 0 {
		w(2, "limit_conn %s %d;", s.zoneName("concurrent"), c)
		w(2, "limit_conn_status 429;")
		w(2, "limit_conn_log_level info;")
	}
	w(2, "access_log syslog:server=unix:%s,nohostname,tag=%s %s if=%s;", nginxconf.RequestLogSocket,
		nginxconf.LimitedLogTag, s.logFormat(), limitedVariable)
}

// validateClientLimits checks spec.clientLimits or a site's.
func validateClientLimits(l *v1alpha1.ClientLimits, p *field.Path) field.ErrorList {
	if l == nil {
		return nil
	}
	var errs field.ErrorList
	if l.RequestsPerSecond == 0 && l.ConcurrentRequests == 0 {
		errs = append(errs, field.Required(p, "set requestsPerSecond, concurrentRequests or both"))
	}
	if l.RequestsPerSecond != 0 {
		errs = append(errs, validateRange(int64(l.RequestsPerSecond), 1, 1000000, p.Child("requestsPerSecond"))...)
	}
	if l.Burst != 0 {
		errs = append(errs, validateRange(int64(l.Burst), 1, 1000000, p.Child("burst"))...)
		if l.RequestsPerSecond == 0 {
			errs = append(errs, field.Forbidden(p.Child("burst"), "needs requestsPerSecond"))
		}
	}
	if l.ConcurrentRequests != 0 {
		errs = append(errs, validateRange(int64(l.ConcurrentRequests), 1, 65535, p.Child("concurrentRequests"))...)
	}
	return errs
}
