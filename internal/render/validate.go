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
	"errors"
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/nginxconf"
)

// The renderer's own allowlists. They repeat the CRD schema on purpose (defense in depth):
// a value reaches nginx.conf only if it passes both.
var (
	diskNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)
	diskPathRE = regexp.MustCompile(`^(/[A-Za-z0-9_][A-Za-z0-9._-]*)+$`)
	durationRE = regexp.MustCompile(`^[1-9][0-9]{0,5}(s|m|h|d)$`)
	hostnameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$`)
	siteNameRE = regexp.MustCompile(`^` + nginxconf.SitePattern + `$`)
	// secretNameRE is a Kubernetes object name (a DNS subdomain).
	secretNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	statusRE     = regexp.MustCompile(`^([1-5][0-9][0-9]|any)$`)
	tagHeaderRE  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]{0,63}$`)
	// reservedHeaders are response headers nginx or edgepool reads or writes itself: never
	// tag headers (which the cache may hide from clients). So are Content-* and X-Accel-*.
	reservedHeaders = []string{"cache-control", "expires", "set-cookie", "vary", "etag", "last-modified", "date", "location", "age",
		"connection", "transfer-encoding", "keep-alive", "upgrade", "accept-ranges", "content-range", "www-authenticate",
		"x-cache-status", "x-hot-cache-status"}

	useStaleConditions = map[v1alpha1.UseStaleCondition]bool{
		"error": true, "timeout": true, "invalid_header": true, "updating": true,
		"http_500": true, "http_502": true, "http_503": true, "http_504": true,
		"http_403": true, "http_404": true, "http_429": true,
	}
)

const (
	maxDisks      = 16
	maxDiskPath   = 255
	minCacheSize  = 1 << 20
	maxCacheSize  = 1 << 50 // 1Pi: far above any one disk, far below nginx's off_t
	minZoneSize   = 1 << 20
	maxChunkBytes = 1 << 30
	// maxZonesTotal bounds the disks' keys zones together, and so each one. nginx maps
	// every zone in full when it loads the configuration (nginx -t too, on the node), and
	// the cache pod requests the sum as memory. 16Gi holds about 134 million keys (8000
	// per MiB), 128 TiB of cache at 1 MiB per object, and is memory a cache node has;
	// nginx -t on a 24 GiB machine cannot map one 64Gi zone, the old per-disk maximum.
	maxZonesTotal = 16 << 30
)

// Validate checks every field that reaches nginx.conf against the renderer's allowlists.
func Validate(spec *v1alpha1.CacheNodeSpec) field.ErrorList {
	root := field.NewPath("spec")
	var errs field.ErrorList

	errs = append(errs, validateDisks(spec.Disks, root.Child("disks"))...)
	errs = append(errs, validateListener(&spec.Listener, root.Child("listener"))...)
	if len(spec.Sites) == 0 {
		errs = append(errs, validateOrigin(&spec.Origin, root.Child("origin"))...)
	} else if !isZeroOrigin(&spec.Origin) {
		errs = append(errs, field.Forbidden(root.Child("origin"), "must be unset with sites: each site has its own origin"))
	}
	errs = append(errs, validateSites(spec, root)...)
	errs = append(errs, validateCache(&spec.Cache, root.Child("cache"))...)
	errs = append(errs, validateClientLimits(spec.ClientLimits, root.Child("clientLimits"))...)
	errs = append(errs, validateCompression(spec.Compression, root.Child("compression"))...)
	for i := range spec.Sites {
		errs = append(errs, validateClientLimits(spec.Sites[i].ClientLimits, root.Child("sites").Index(i).Child("clientLimits"))...)
		errs = append(errs, validateCompression(spec.Sites[i].Compression, root.Child("sites").Index(i).Child("compression"))...)
	}

	switch spec.IO {
	case v1alpha1.IOThreads, v1alpha1.IOSync:
	default:
		errs = append(errs, field.NotSupported(root.Child("io"), spec.IO, []string{string(v1alpha1.IOThreads), string(v1alpha1.IOSync)}))
	}
	errs = append(errs, validateSize(spec.SendfileMaxChunk, 0, maxChunkBytes, root.Child("sendfileMaxChunk"))...)
	errs = append(errs, validateDiskFailover(&spec.DiskFailover, root.Child("diskFailover"))...)
	if p := spec.AccessLogPercent; p < 0 || p > 100 { // 0: unset, no access log
		errs = append(errs, field.Invalid(root.Child("accessLogPercent"), p, "must be from 1 to 100"))
	}
	if spec.HostNetwork {
		errs = append(errs, validateHostNetwork(spec, root)...)
	}
	errs = append(errs, validateSharding(spec, root)...)
	return errs
}

func validateDisks(disks []v1alpha1.Disk, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(disks) < 1 || len(disks) > maxDisks {
		errs = append(errs, field.Invalid(p, len(disks), fmt.Sprintf("must list 1 to %d disks", maxDisks)))
	}
	names := map[string]bool{}
	var zones int64 // bytes, each zone at most maxZonesTotal: no overflow
	for i := range disks {
		d := &disks[i]
		dp := p.Index(i)
		if !diskNameRE.MatchString(d.Name) {
			errs = append(errs, field.Invalid(dp.Child("name"), d.Name, "must be a DNS label of at most 32 characters"))
		} else if names[d.Name] {
			errs = append(errs, field.Duplicate(dp.Child("name"), d.Name))
		}
		names[d.Name] = true
		errs = append(errs, validateDiskPath(d.Path, dp.Child("path"))...)
		for j := range i {
			if nested(d.Path, disks[j].Path) || nested(disks[j].Path, d.Path) {
				errs = append(errs, field.Invalid(dp.Child("path"), d.Path, fmt.Sprintf("must not be equal to or nested in the path of disk %q", disks[j].Name)))
			}
		}
		switch d.Media {
		case v1alpha1.MediaNVMe, v1alpha1.MediaSSD, v1alpha1.MediaHDD:
		default:
			errs = append(errs, field.NotSupported(dp.Child("media"), d.Media, []string{"NVMe", "SSD", "HDD"}))
		}
		errs = append(errs, validateSize(&d.Size, minCacheSize, maxCacheSize, dp.Child("size"))...)
		errs = append(errs, validateRange(int64(d.Weight), 1, 100, dp.Child("weight"))...)
		if d.ThreadPool.Threads != 0 { // unset: the media's default
			errs = append(errs, validateRange(int64(d.ThreadPool.Threads), 1, 512, dp.Child("threadPool", "threads"))...)
		}
		if d.ThreadPool.MaxQueue == nil {
			errs = append(errs, field.Required(dp.Child("threadPool", "maxQueue"), ""))
		} else {
			errs = append(errs, validateRange(int64(*d.ThreadPool.MaxQueue), 0, 1<<20, dp.Child("threadPool", "maxQueue"))...)
		}
		if zoneErrs := validateSize(d.KeysZoneSize, minZoneSize, maxZonesTotal, dp.Child("keysZoneSize")); len(zoneErrs) > 0 {
			errs = append(errs, zoneErrs...)
		} else {
			zones += d.KeysZoneSize.Value()
		}
		errs = append(errs, validateDuration(d.Inactive, dp.Child("inactive"))...)
		if d.TakeOverFrom != "" {
			// It reaches the agent's --disk flag, whose fields are split at commas and equals signs.
			for _, msg := range validation.IsDNS1123Subdomain(d.TakeOverFrom) {
				errs = append(errs, field.Invalid(dp.Child("takeOverFrom"), d.TakeOverFrom, msg))
			}
		}
	}
	if zones > maxZonesTotal {
		errs = append(errs, field.Invalid(p, resource.NewQuantity(zones, resource.BinarySI).String(),
			fmt.Sprintf("the disks' keysZoneSize must add up to at most %d bytes", int64(maxZonesTotal))))
	}
	return errs
}

// validateDiskPath accepts only clean absolute paths of safe characters. Where on the
// node they may be is the cluster admin's allowlist (DiskPathsAllowed).
func validateDiskPath(p string, fp *field.Path) field.ErrorList {
	switch {
	case len(p) > maxDiskPath:
		return field.ErrorList{field.TooLong(fp, p, maxDiskPath)}
	case strings.Contains(p, ".."):
		return field.ErrorList{field.Invalid(fp, p, "must not contain '..'")}
	case !diskPathRE.MatchString(p) || path.Clean(p) != p:
		return field.ErrorList{field.Invalid(fp, p, "must be a clean absolute path of letters, digits and . _ -")}
	}
	return nil
}

// DefaultDiskPrefixes are where disk paths may lie unless the cluster admin says otherwise
// (the operator's --allowed-disk-prefixes, the chart's diskPaths.allowedPrefixes).
var DefaultDiskPrefixes = []string{"/mnt", "/data", "/srv"}

// ParseDiskPrefixes reads a comma-separated allowlist of disk path prefixes: clean
// absolute paths, not the root.
func ParseDiskPrefixes(list string) ([]string, error) {
	var prefixes []string
	for _, p := range strings.Split(list, ",") {
		if !diskPathRE.MatchString(p) || path.Clean(p) != p || strings.Contains(p, "..") {
			return nil, fmt.Errorf("disk path prefix %q: want a clean absolute path of letters, digits and . _ -, not /", p)
		}
		prefixes = append(prefixes, p)
	}
	return prefixes, nil
}

// DiskPathsAllowed checks that every disk path lies strictly under one of the prefixes
// the cluster admin allows: a cache disk never exposes node state such as /var or /etc.
func DiskPathsAllowed(spec *v1alpha1.CacheNodeSpec, prefixes []string) field.ErrorList {
	var errs field.ErrorList
	for i, d := range spec.Disks {
		if DiskPrefix(d.Path, prefixes) == "" {
			errs = append(errs, field.Invalid(field.NewPath("spec", "disks").Index(i).Child("path"), d.Path,
				fmt.Sprintf("must lie under a prefix the cluster admin allows: %s", strings.Join(prefixes, ", "))))
		}
	}
	return errs
}

// DiskPrefix is the longest of the prefixes that p lies strictly under, or "".
func DiskPrefix(p string, prefixes []string) string {
	best := ""
	for _, prefix := range prefixes {
		if strings.HasPrefix(p, prefix+"/") && len(prefix) > len(best) {
			best = prefix
		}
	}
	return best
}

// nested reports whether path p is dir or lies inside it.
func nested(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

func validateListener(l *v1alpha1.Listener, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	errs = append(errs, validateRange(int64(l.Port), 1, 65535, p.Child("port"))...)
	errs = append(errs, validateRange(int64(l.StatusPort), 1, 65535, p.Child("statusPort"))...)
	if l.StatusPort == l.Port {
		errs = append(errs, field.Invalid(p.Child("statusPort"), l.StatusPort, "must differ from port"))
	}
	errs = append(errs, validateRange(int64(l.AgentPort), 1, 65535, p.Child("agentPort"))...)
	if l.AgentPort == l.Port || l.AgentPort == l.StatusPort {
		errs = append(errs, field.Invalid(p.Child("agentPort"), l.AgentPort, "must differ from port and statusPort"))
	}
	errs = append(errs, validateRange(int64(l.TLSPort), 1, 65535, p.Child("tlsPort"))...)
	if l.TLSPort == l.Port || l.TLSPort == l.StatusPort || l.TLSPort == l.AgentPort {
		errs = append(errs, field.Invalid(p.Child("tlsPort"), l.TLSPort, "must differ from port, statusPort and agentPort"))
	}
	if l.ReusePort == nil {
		errs = append(errs, field.Required(p.Child("reusePort"), ""))
	} else if *l.ReusePort && l.AcceptMutex != nil {
		errs = append(errs, field.Forbidden(p.Child("acceptMutex"), "may be set only when reusePort is false"))
	}
	if _, err := workerProcesses(l); err != nil {
		errs = append(errs, field.Invalid(p.Child("workerProcesses"), l.WorkerProcesses, err.Error()))
	}
	errs = append(errs, validateRange(int64(l.WorkerConnections), 16, 1<<20, p.Child("workerConnections"))...)
	errs = append(errs, validateRange(int64(l.Backlog), 1, 65535, p.Child("backlog"))...)
	if len(l.TrustedProxies) > 32 {
		errs = append(errs, field.TooMany(p.Child("trustedProxies"), len(l.TrustedProxies), 32))
	}
	for i, c := range l.TrustedProxies {
		if !canonicalCIDR(c) {
			errs = append(errs, field.Invalid(p.Child("trustedProxies").Index(i), c, "must be a CIDR in canonical form with no host bits set, e.g. 10.0.0.0/8"))
		}
	}
	if len(l.IPFamilies) > 2 {
		errs = append(errs, field.TooMany(p.Child("ipFamilies"), len(l.IPFamilies), 2))
	}
	for i, f := range l.IPFamilies {
		switch {
		case f != v1alpha1.IPv4 && f != v1alpha1.IPv6:
			errs = append(errs, field.NotSupported(p.Child("ipFamilies").Index(i), f, []v1alpha1.IPFamily{v1alpha1.IPv4, v1alpha1.IPv6}))
		case slices.Contains(l.IPFamilies[:i], f):
			errs = append(errs, field.Duplicate(p.Child("ipFamilies").Index(i), f))
		}
	}
	return errs
}

// canonicalCIDR says whether c is a CIDR written as netip writes it, with no host bits.
func canonicalCIDR(c string) bool {
	prefix, err := netip.ParsePrefix(c)
	return err == nil && prefix.Masked() == prefix && prefix.String() == c
}

// workerProcesses returns the worker_processes value: auto or a count.
func workerProcesses(l *v1alpha1.Listener) (string, error) {
	wp := l.WorkerProcesses
	switch {
	case wp == nil:
		return "", fmt.Errorf("must be set")
	case wp.Type == 0 && wp.IntVal >= 1 && wp.IntVal <= 1024:
		return strconv.Itoa(int(wp.IntVal)), nil
	case wp.Type == 1 && wp.StrVal == "auto":
		return "auto", nil
	}
	return "", fmt.Errorf("must be auto or an integer from 1 to 1024")
}

func validateOrigin(o *v1alpha1.Origin, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(o.Servers) < 1 || len(o.Servers) > 32 {
		errs = append(errs, field.Invalid(p.Child("servers"), len(o.Servers), "must list 1 to 32 servers"))
	}
	seen := map[string]bool{}
	for i, s := range o.Servers {
		if err := validateHostPort(s); err != nil {
			errs = append(errs, field.Invalid(p.Child("servers").Index(i), s, err.Error()))
		} else if seen[s] {
			errs = append(errs, field.Duplicate(p.Child("servers").Index(i), s))
		}
		seen[s] = true
	}
	if o.Keepalive == nil {
		errs = append(errs, field.Required(p.Child("keepalive"), ""))
	} else {
		errs = append(errs, validateRange(int64(*o.Keepalive), 0, 1024, p.Child("keepalive"))...)
	}
	if o.HostHeader != "" && (!hostnameRE.MatchString(o.HostHeader) || len(o.HostHeader) > 253) {
		errs = append(errs, field.Invalid(p.Child("hostHeader"), o.HostHeader, "must be a lower-case DNS name of at most 253 characters"))
	}
	return errs
}

func isZeroOrigin(o *v1alpha1.Origin) bool {
	return len(o.Servers) == 0 && o.Keepalive == nil && o.HostHeader == ""
}

const (
	maxSites         = 16
	maxSiteHostnames = 16
)

// validateSites checks the sites and defaultSite: names, hostnames (each in one site
// only), origins, cache rules and certificates' Secrets.
func validateSites(spec *v1alpha1.CacheNodeSpec, root *field.Path) field.ErrorList {
	var errs field.ErrorList
	p := root.Child("sites")
	if len(spec.Sites) > maxSites {
		errs = append(errs, field.TooMany(p, len(spec.Sites), maxSites))
	}
	names := map[string]bool{}
	hosts := map[string]string{} // hostname: the site that has it
	for i := range spec.Sites {
		s := &spec.Sites[i]
		sp := p.Index(i)
		if !siteNameRE.MatchString(s.Name) {
			errs = append(errs, field.Invalid(sp.Child("name"), s.Name, "must be a DNS label of at most 32 characters"))
		} else if names[s.Name] {
			errs = append(errs, field.Duplicate(sp.Child("name"), s.Name))
		}
		names[s.Name] = true
		if len(s.Hostnames) < 1 || len(s.Hostnames) > maxSiteHostnames {
			errs = append(errs, field.Invalid(sp.Child("hostnames"), len(s.Hostnames), fmt.Sprintf("must list 1 to %d hostnames", maxSiteHostnames)))
		}
		for j, h := range s.Hostnames {
			hp := sp.Child("hostnames").Index(j)
			if err := validateSiteHostname(h); err != "" {
				errs = append(errs, field.Invalid(hp, h, err))
			} else if other, ok := hosts[h]; ok {
				errs = append(errs, field.Duplicate(hp, fmt.Sprintf("%s (also a hostname of site %q)", h, other)))
			} else {
				hosts[h] = s.Name
			}
		}
		errs = append(errs, validateOrigin(&s.Origin, sp.Child("origin"))...)
		if s.Cache != nil {
			errs = append(errs, validateCacheRules(s.Cache, sp.Child("cache"))...)
		}
		if s.TLS != nil {
			tp := sp.Child("tls")
			if n := s.TLS.SecretName; !secretNameRE.MatchString(n) || len(n) > 253 {
				errs = append(errs, field.Invalid(tp.Child("secretName"), n, "must be the name of a Secret: a lower-case DNS subdomain of at most 253 characters"))
			}
			switch s.TLS.PlainHTTP {
			case v1alpha1.PlainHTTPServe, v1alpha1.PlainHTTPRedirect:
			default:
				errs = append(errs, field.NotSupported(tp.Child("plainHTTP"), s.TLS.PlainHTTP,
					[]string{string(v1alpha1.PlainHTTPServe), string(v1alpha1.PlainHTTPRedirect)}))
			}
			switch s.TLS.HTTP3 {
			case v1alpha1.HTTP3Off, v1alpha1.HTTP3On:
			default:
				errs = append(errs, field.NotSupported(tp.Child("http3"), s.TLS.HTTP3,
					[]string{string(v1alpha1.HTTP3Off), string(v1alpha1.HTTP3On)}))
			}
		}
	}
	if d := spec.DefaultSite; d != "" && !names[d] {
		errs = append(errs, field.Invalid(root.Child("defaultSite"), d, "must name a site"))
	}
	return errs
}

// validateSiteHostname says what is wrong with a site's hostname ("" if nothing): an
// exact lower-case DNS name, or a wildcard "*." followed by at least two labels (nginx's
// *.example.com matches every name that ends in .example.com). No other wildcard and no
// regular expression (a server_name that starts with ~) reaches nginx.conf.
func validateSiteHostname(h string) string {
	const want = "must be a lower-case DNS name, or *. followed by at least two labels"
	if len(h) > 253 {
		return want + ", of at most 253 characters"
	}
	if rest, ok := strings.CutPrefix(h, "*."); ok {
		if !hostnameRE.MatchString(rest) || !strings.Contains(rest, ".") {
			return want
		}
		return ""
	}
	if !hostnameRE.MatchString(h) {
		return want
	}
	return ""
}

var errHostPort = errors.New("must be host:port with a DNS name, IPv4 or [IPv6] host and a port from 1 to 65535")

// validateHostPort accepts host:port where host is a lower-case DNS name, an IPv4 address
// or a bracketed IPv6 address.
func validateHostPort(s string) error {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || len(s) > 261 {
		return errHostPort
	}
	host, portStr := s[:i], s[i+1:]
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != portStr {
		return errHostPort
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		addr, err := netip.ParseAddr(host[1 : len(host)-1])
		switch {
		case err != nil || !addr.Is6() || addr.Zone() != "":
			return errHostPort
		case addr.Is4In6(): // as the CRD's rule: its ip() refuses them
			return errors.New("a bracketed host must be an IPv6 address, and not an IPv4-mapped one (write an IPv4 address without brackets)")
		}
		return nil
	}
	if !hostnameRE.MatchString(host) || len(host) > 253 {
		return errHostPort
	}
	return nil
}

// NodeDaemonPorts are the TCP ports the daemons of a Kubernetes node listen on (kubeadm's
// defaults). With hostNetwork a cache port among them would fail to bind, or, bound while
// the daemon restarts, answer in its place: etcd 2379 (clients), 2380 (peers), 2381
// (metrics); kube-apiserver 6443; kubelet 10250 (API), 10248 (healthz), 10255 (read-only);
// kube-proxy 10249 (metrics), 10256 (healthz); kube-controller-manager 10257;
// kube-scheduler 10259. The CRD's CEL rules list the same ports.
var NodeDaemonPorts = []int32{2379, 2380, 2381, 6443, 10248, 10249, 10250, 10255, 10256, 10257, 10259}

var (
	// numericHostRE matches the hosts that are numbers to inet_aton (which glibc's
	// getaddrinfo, and so nginx, uses for hosts its own parser does not read): one to four
	// parts, each decimal, octal (leading 0) or hex (0x).
	numericHostRE = regexp.MustCompile(`^(0x[0-9a-f]*|[0-9]+)(\.(0x[0-9a-f]*|[0-9]+))*$`)
	// loopbackNameRE matches the names /etc/hosts of common distributions and RFC 6761 give
	// to the loopback addresses.
	loopbackNameRE = regexp.MustCompile(`^(localhost[46]?(\.localdomain[46]?)?|ip6-localhost|ip6-loopback|.*\.localhost)$`)
	// metadataNames are the names of cloud metadata services (Google Compute Engine; AWS,
	// through the VPC's resolver and its search domain).
	metadataNames = []string{"metadata", "metadata.google.internal", "instance-data", "instance-data.ec2.internal"}
	// metadataPrefixes are addresses that reach the node or a cloud's metadata service
	// beside loopback and link-local: 0.0.0.0/8 (connecting to it reaches the node itself),
	// Alibaba Cloud's metadata service, Azure's WireServer, AWS's IMDS and EKS Pod
	// Identity agent, and Google Compute Engine's IPv6 metadata server.
	metadataPrefixes = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),
		netip.MustParsePrefix("100.100.100.200/32"),
		netip.MustParsePrefix("168.63.129.16/32"),
		netip.MustParsePrefix("fd00:ec2::254/128"),
		netip.MustParsePrefix("fd00:ec2::23/128"),
		netip.MustParsePrefix("fd20:ce::254/128"),
	}
)

// validateHostNetwork checks what only matters when the cache shares the node's network
// namespace: ports of the node's daemons, and origins that reach the node itself or the
// cloud's metadata service (credentials of the node's identity).
func validateHostNetwork(spec *v1alpha1.CacheNodeSpec, root *field.Path) field.ErrorList {
	var errs field.ErrorList
	l := &spec.Listener
	if l.Port < 1024 {
		errs = append(errs, field.Invalid(root.Child("listener", "port"), l.Port, "must be at least 1024 with hostNetwork: cache pods run as non-root"))
	}
	if l.TLSPort < 1024 {
		errs = append(errs, field.Invalid(root.Child("listener", "tlsPort"), l.TLSPort, "must be at least 1024 with hostNetwork: cache pods run as non-root"))
	}
	for _, p := range []struct {
		name string
		port int32
	}{{"port", l.Port}, {"statusPort", l.StatusPort}, {"agentPort", l.AgentPort}, {"tlsPort", l.TLSPort}} {
		if slices.Contains(NodeDaemonPorts, p.port) {
			errs = append(errs, field.Invalid(root.Child("listener", p.name), p.port, "must not be a port of a node daemon with hostNetwork"))
		}
	}
	errs = append(errs, originHazards(spec.Origin.Servers, root.Child("origin", "servers"))...)
	for i := range spec.Sites {
		errs = append(errs, originHazards(spec.Sites[i].Origin.Servers, root.Child("sites").Index(i).Child("origin", "servers"))...)
	}
	return errs
}

// originHazards refuses the origin servers that reach the node or a metadata service.
func originHazards(servers []string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, s := range servers {
		if validateHostPort(s) != nil {
			continue // reported by validateOrigin
		}
		if why := OriginHazard(s[:strings.LastIndexByte(s, ':')]); why != "" {
			errs = append(errs, field.Invalid(p.Index(i), s, "must not reach the node or the cloud's metadata service with hostNetwork: "+why))
		}
	}
	return errs
}

// OriginHazard says why an origin host, as the renderer's host:port allowlist admits it,
// reaches the node itself or a cloud's metadata service from the node's network namespace;
// it returns "" when it does not. Numbers are refused unless written as dotted-decimal
// IPv4: nginx reads 0127.0.0.1 as 127.0.0.1 while inet_aton reads 0177.0.0.1 as
// 127.0.0.1, and both read 127.1, 2130706433 and 0x7f000001 as 127.0.0.1. Names are
// compared with the well-known ones only: a DNS name that resolves to the node is not
// caught here (nginx resolves names when it loads its configuration).
func OriginHazard(host string) string {
	if strings.HasPrefix(host, "[") {
		addr, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
		switch {
		case err != nil || !addr.Is6() || addr.Zone() != "":
			return "not an IPv6 address"
		case addr.Is4In6():
			return "an IPv4-mapped IPv6 address reaches IPv4 addresses, the node's loopback among them; write the IPv4 address"
		}
		return addressHazard(addr)
	}
	if numericHostRE.MatchString(host) {
		addr, err := netip.ParseAddr(host)
		if err != nil || !addr.Is4() {
			return "a numeric host must be a dotted-decimal IPv4 address: nginx and the C resolver read 127.1, 2130706433, 0x7f000001 and 0177.0.0.1 as addresses"
		}
		return addressHazard(addr)
	}
	if loopbackNameRE.MatchString(host) {
		return "names the loopback address"
	}
	if slices.Contains(metadataNames, host) {
		return "names a cloud metadata service"
	}
	return ""
}

func addressHazard(addr netip.Addr) string {
	switch {
	case addr.IsLoopback():
		return "a loopback address is the node's own"
	case addr.IsUnspecified():
		return "the unspecified address reaches the node itself"
	case addr.IsLinkLocalUnicast():
		return "a link-local address reaches the node's link and the cloud's metadata service"
	}
	for _, p := range metadataPrefixes {
		if p.Contains(addr) {
			return fmt.Sprintf("%s reaches the node itself or a cloud metadata service", p)
		}
	}
	return ""
}

func validateCache(c *v1alpha1.CachePolicy, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch _, ok := cacheKeys[c.Key]; {
	case c.Key == v1alpha1.CacheKeyURI:
		errs = append(errs, field.Invalid(p.Child("key"), c.Key, "shares one cached response between all the hostnames the cache answers; use HostURI"))
	case !ok:
		errs = append(errs, field.NotSupported(p.Child("key"), c.Key, []string{"HostURI", "SchemeHostURI"}))
	}
	return append(errs, validateCacheRules(&c.CacheRules, p)...)
}

const (
	minSliceSize = 64 << 10
	maxSliceSize = 1 << 30
)

// validateCacheRules checks spec.cache's rules or a site's.
func validateCacheRules(c *v1alpha1.CacheRules, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch c.AuthorizedRequests {
	case v1alpha1.AuthorizedRequestsBypass, v1alpha1.AuthorizedRequestsCacheIfAllowed:
	default:
		errs = append(errs, field.NotSupported(p.Child("authorizedRequests"), c.AuthorizedRequests,
			[]string{string(v1alpha1.AuthorizedRequestsBypass), string(v1alpha1.AuthorizedRequestsCacheIfAllowed)}))
	}
	if len(c.Valid) > 16 {
		errs = append(errs, field.TooMany(p.Child("valid"), len(c.Valid), 16))
	}
	for i, v := range c.Valid {
		vp := p.Child("valid").Index(i)
		if len(v.Codes) < 1 || len(v.Codes) > 16 {
			errs = append(errs, field.Invalid(vp.Child("codes"), len(v.Codes), "must list 1 to 16 codes"))
		}
		for j, code := range v.Codes {
			if !statusRE.MatchString(code) {
				errs = append(errs, field.Invalid(vp.Child("codes").Index(j), code, "must be an HTTP status code or any"))
			}
		}
		errs = append(errs, validateDuration(v.Duration, vp.Child("duration"))...)
	}
	for i, u := range c.UseStale {
		if !useStaleConditions[u] {
			errs = append(errs, field.Invalid(p.Child("useStale").Index(i), u, "is not a proxy_cache_use_stale condition"))
		}
	}
	if c.Lock == nil {
		errs = append(errs, field.Required(p.Child("lock"), ""))
	}
	errs = append(errs, validateDuration(c.LockTimeout, p.Child("lockTimeout"))...)
	if c.SliceSize != nil {
		errs = append(errs, validateSize(c.SliceSize, minSliceSize, maxSliceSize, p.Child("sliceSize"))...)
	}
	return append(errs, validateTagHeaders(c, p)...)
}

// validateTagHeaders checks a cache's tag headers, which reach nginx.conf when hidden.
func validateTagHeaders(c *v1alpha1.CacheRules, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(c.TagHeaders) > 4 {
		errs = append(errs, field.TooMany(p.Child("tagHeaders"), len(c.TagHeaders), 4))
	}
	for i, h := range c.TagHeaders {
		lower := strings.ToLower(h)
		switch {
		case !tagHeaderRE.MatchString(h):
			errs = append(errs, field.Invalid(p.Child("tagHeaders").Index(i), h, "must be a header name: a letter, then letters, digits and '-', at most 64"))
		case slices.Contains(reservedHeaders, lower) || strings.HasPrefix(lower, "content-") || strings.HasPrefix(lower, "x-accel-"):
			errs = append(errs, field.Invalid(p.Child("tagHeaders").Index(i), h, "is a header nginx or edgepool reads or writes itself"))
		}
	}
	switch c.TagHeadersToClients {
	case v1alpha1.TagHeadersHide, v1alpha1.TagHeadersPass:
	default:
		errs = append(errs, field.NotSupported(p.Child("tagHeadersToClients"), c.TagHeadersToClients,
			[]string{string(v1alpha1.TagHeadersHide), string(v1alpha1.TagHeadersPass)}))
	}
	return errs
}

// validateDiskFailover checks the failover policy the agents get with the configuration.
func validateDiskFailover(f *v1alpha1.DiskFailover, p *field.Path) field.ErrorList {
	errs := validateRange(int64(f.IOErrors), 1, 10000, p.Child("ioErrors"))
	errs = append(errs, validateRange(int64(f.CheckFailures), 1, 100, p.Child("checkFailures"))...)
	errs = append(errs, validateRange(int64(f.ErrorWindowSeconds), 1, 3600, p.Child("errorWindowSeconds"))...)
	errs = append(errs, validateRange(int64(f.CooldownSeconds), 1, 86400, p.Child("cooldownSeconds"))...)
	errs = append(errs, validateRange(int64(f.MaxCooldownSeconds), int64(max(f.CooldownSeconds, 1)), 604800, p.Child("maxCooldownSeconds"))...)
	return errs
}

func validateRange(v, lo, hi int64, p *field.Path) field.ErrorList {
	if v < lo || v > hi {
		return field.ErrorList{field.Invalid(p, v, fmt.Sprintf("must be from %d to %d", lo, hi))}
	}
	return nil
}

func validateDuration(d string, p *field.Path) field.ErrorList {
	if !durationRE.MatchString(d) {
		return field.ErrorList{field.Invalid(p, d, "must be a number and one unit of s, m, h or d, e.g. 10m")}
	}
	return nil
}

// validateSize checks that a quantity is a whole number of bytes within [lo, hi]; hi < 0 means no upper bound.
func validateSize(q *resource.Quantity, lo, hi int64, p *field.Path) field.ErrorList {
	if q == nil {
		return field.ErrorList{field.Required(p, "")}
	}
	v, ok := wholeBytes(q)
	switch {
	case !ok:
		return field.ErrorList{field.Invalid(p, q.String(), "must be a whole number of bytes")}
	case v < lo:
		return field.ErrorList{field.Invalid(p, q.String(), fmt.Sprintf("must be at least %d bytes", lo))}
	case hi >= 0 && v > hi:
		return field.ErrorList{field.Invalid(p, q.String(), fmt.Sprintf("must be at most %d bytes", hi))}
	}
	return nil
}

// wholeBytes returns a quantity as bytes, and whether it is a whole number of them.
func wholeBytes(q *resource.Quantity) (int64, bool) {
	v := q.Value()
	return v, q.Cmp(*resource.NewQuantity(v, resource.BinarySI)) == 0
}
