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
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
)

// Compression (v1alpha1.Compression) happens before the cache, so that a response is
// compressed once and stored compressed. A compressing site's cache location keys each
// response by the encoding it stores for the client (br, gzip or identity: see
// encodingVariable) and fills through two servers on the loopback address (the status
// port's, told apart by their names), which hold nothing:
//
//	cache location --Accept-Encoding: br|gzip|identity--> compressor --> marker --> origin
//
// The compressor's brotli and gzip filters each compress for their own Accept-Encoding,
// by type and length, and leave alone a response that has a Content-Encoding; they know
// nothing of Cache-Control: no-transform. So the marker gives such a response without an
// encoding "Content-Encoding: identity", which the compressor then leaves alone and the
// cache location removes again (on hits too: nginx sets $upstream_http_* from the cached
// header). The marker also drops Accept-Encoding from the origin's Vary: the key holds the
// encoding already, and nginx's own variants would compare each client's Accept-Encoding
// string. The cache location tells the clients Vary: Accept-Encoding instead.
//
// The marker's own failures (the origin refused, reset or timed out) close the
// connection without a response (444), as does the compressor's, so that the cache
// location sees the connection error it would have seen from the origin itself
// (proxy_cache_use_stale error, stale-if-error), never a 502 response.

// Names in nginx.conf.
const (
	// loopbackUpstream is the way from a cache location to its compressor and from the
	// compressor to its marker: a new connection each time. A connection kept alive would
	// have nginx try again when a loopback server closes it unanswered (it retries a
	// request that failed on a reused connection, once more for each one it keeps), so a
	// failing origin would be asked again and again. max_fails=0: an origin that fails
	// must not take the loopback out for every site.
	loopbackUpstream = "edgepool_loopback"
	// loopbackDomain ends the loopback servers' names (.invalid: RFC 6761).
	loopbackDomain = "edgepool.invalid"
	// hostHeader carries the Host the origin is asked with from the cache location to
	// the marker.
	hostHeader = "X-Edgepool-Host"
	// storedEncodingVariable is a response's Content-Encoding without the marker's
	// identity.
	storedEncodingVariable = "$edgepool_content_encoding"
	// markedEncodingVariable is the origin's Content-Encoding, or identity for a
	// no-transform response without one.
	markedEncodingVariable = "$edgepool_marked_encoding"
	// originVaryVariable is the origin's Vary without Accept-Encoding.
	originVaryVariable = "$edgepool_origin_vary"
	// unansweredLocation closes a loopback connection without a response.
	unansweredLocation = "@edgepool_unanswered"
	// originConnectTimeout is how long a marker waits for an origin server to take a
	// connection before it tries the next one.
	originConnectTimeout = "10s"
	// loopbackTimeout outlasts the cache location's timeouts (nginx's 60 s): a slow origin
	// is the cache location's timeout, as it is without compression.
	loopbackTimeout = "90s"
)

// packedVariable is 1 for a request whose path ends in one of packedExtensions.
const packedVariable = "$edgepool_packed"

// packedExtensions name formats that are compressed already. A compressing site keys a
// response by the encoding stored for the client, before it knows the response's type:
// for these it stores one response (identity) for every client, where it would fetch and
// store the same bytes once per encoding. A response of a listed type at such a path is
// served as the origin sends it, uncompressed, which every client accepts.
var packedExtensions = []string{
	"jpe?g", "png", "gif", "webp", "avif", "heic", "heif", "jxl",
	"mp4", "m4v", "m4s", "mov", "webm", "mkv", "mp3", "m4a", "aac", "ogg", "oga", "opus", "flac",
	"woff2?", "zip", "gz", "tgz", "bz2", "xz", "zst", "br", "7z", "rar",
}

// passedHeaders are the origin's X-Accel-* headers: the loopback servers pass them on
// untouched, for the cache location to act on as it does without compression.
var passedHeaders = []string{"X-Accel-Expires", "X-Accel-Redirect", "X-Accel-Limit-Rate", "X-Accel-Buffering", "X-Accel-Charset"}

// compressor is a site that compresses, as the renderer writes it.
type compressor struct {
	site         string // "" without sites
	c            *v1alpha1.Compression
	upstream     string // the origin's
	origin       *v1alpha1.Origin
	gzip, brotli bool
}

// encodingVariable holds the encoding stored for a client: brotli if the site compresses
// with it and the client's Accept-Encoding names br (not with q=0), else gzip likewise,
// else identity (RFC 9110 section 12.5.3).
func (c *compressor) encodingVariable() string {
	switch {
	case c.gzip && c.brotli:
		return agentapi.EncodingVariable
	case c.gzip:
		return agentapi.EncodingVariable + "_gzip"
	}
	return agentapi.EncodingVariable + "_br"
}

// siteCompression is the compression of site s: its own or the CacheNode's.
func siteCompression(spec *v1alpha1.CacheNodeSpec, s *v1alpha1.Site) *v1alpha1.Compression {
	if s.Compression != nil {
		return s.Compression
	}
	return spec.Compression
}

// newCompressor is the compressor of a site (s nil: the CacheNode without sites), nil if
// it does not compress: compression unset or both encodings off, or byte-range slices.
func newCompressor(spec *v1alpha1.CacheNodeSpec, s *v1alpha1.Site) *compressor {
	cz := &compressor{c: spec.Compression, upstream: "edgepool_origin", origin: &spec.Origin}
	rules := &spec.Cache.CacheRules
	if s != nil {
		cz = &compressor{site: s.Name, c: siteCompression(spec, s), upstream: siteUpstream(s.Name), origin: &s.Origin}
		rules = siteRules(spec, s)
	}
	if cz.c == nil || rules.SliceSize != nil {
		return nil
	}
	cz.gzip, cz.brotli = cz.c.Gzip == v1alpha1.CompressionOn, cz.c.Brotli == v1alpha1.CompressionOn
	if !cz.gzip && !cz.brotli {
		return nil
	}
	return cz
}

// Brotli says whether a site of spec compresses with brotli: nginx then loads the module.
func Brotli(spec *v1alpha1.CacheNodeSpec) bool {
	for _, c := range compressors(spec) {
		if c.brotli {
			return true
		}
	}
	return false
}

// compressors are spec's compressing sites.
func compressors(spec *v1alpha1.CacheNodeSpec) []*compressor {
	if len(spec.Sites) == 0 {
		if c := newCompressor(spec, nil); c != nil {
			return []*compressor{c}
		}
		return nil
	}
	var cs []*compressor
	for i := range spec.Sites {
		if c := newCompressor(spec, &spec.Sites[i]); c != nil {
			cs = append(cs, c)
		}
	}
	return cs
}

// serverName is the name of the site's loopback server of role (gzip, origin).
func (c *compressor) serverName(role string) string {
	if c.site == "" {
		return role + "." + loopbackDomain
	}
	return role + "." + c.site + "." + loopbackDomain
}

// varyVariable holds the Vary the site's clients are told: Accept-Encoding for a response
// of a type it compresses or with an encoding, else none.
func (c *compressor) varyVariable() string {
	if c.site == "" {
		return "$edgepool_vary"
	}
	return "$edgepool_vary_" + strings.ReplaceAll(c.site, "-", "_")
}

// writeCompressionMaps writes, at the http level, what compressing sites share: the
// encoding a client accepts, the maps of the cache location and of the markers, each
// site's Vary, and the loopback upstreams.
func writeCompressionMaps(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec) {
	cs := compressors(spec)
	if len(cs) == 0 {
		return
	}
	w(1, "# Compression: the encodings a client accepts (named in Accept-Encoding, not with q=0:")
	w(1, "# RFC 9110 section 12.5.3), and the one stored for it, by the encodings of its site.")
	for _, e := range []struct{ variable, names string }{{"$edgepool_accepts_br", "br"}, {"$edgepool_accepts_gzip", "(x-)?gzip"}} {
		w(1, "map $http_accept_encoding %s {", e.variable)
		w(2, "\"~*(^|,)[ \\t]*%s[ \\t]*;[ \\t]*q[ \\t]*=[ \\t]*0(\\.0{0,3})?[ \\t]*(,|$)\" 0;", e.names)
		w(2, "\"~*(^|,)[ \\t]*%s[ \\t]*(;|,|$)\" 1;", e.names)
		w(2, "default 0;")
		w(1, "}")
	}
	w(1, "# A path whose extension names a format compressed already (images, video, audio,")
	w(1, "# fonts, archives): one response for every client, as the origin sends it.")
	w(1, "map $uri %s {", packedVariable)
	w(2, "\"~*\\.(%s)$\" 1;", strings.Join(packedExtensions, "|"))
	w(2, "default 0;")
	w(1, "}")
	w(1, "map %s$edgepool_accepts_br$edgepool_accepts_gzip %s {", packedVariable, agentapi.EncodingVariable)
	w(2, "~^01 br;")
	w(2, "001 gzip;")
	w(2, "default identity;")
	w(1, "}")
	w(1, "map %s$edgepool_accepts_gzip %s_gzip {", packedVariable, agentapi.EncodingVariable)
	w(2, "01 gzip;")
	w(2, "default identity;")
	w(1, "}")
	w(1, "map %s$edgepool_accepts_br %s_br {", packedVariable, agentapi.EncodingVariable)
	w(2, "01 br;")
	w(2, "default identity;")
	w(1, "}")
	w(1, "# The cache location's Content-Encoding: the marker's identity is the clients' none, and")
	w(1, "# a 304 says none: it may answer a validator of another encoding (weak ETags match).")
	w(1, "map \"$status|$upstream_http_content_encoding\" %s {", storedEncodingVariable)
	w(2, "volatile;")
	w(2, "\"~^304\\|\" \"\";")
	w(2, "\"~*\\|identity$\" \"\";")
	w(2, "default $upstream_http_content_encoding;")
	w(1, "}")
	w(1, "# At a marker: a no-transform response without an encoding is marked identity, so")
	w(1, "# that gzip leaves it alone (RFC 9110 section 7.7).")
	w(1, "map \"$upstream_http_content_encoding|$upstream_http_cache_control\" %s {", markedEncodingVariable)
	w(2, "volatile;")
	w(2, "\"~*^\\|(.*[ \\t,])?no-transform([ \\t,]|$)\" identity;")
	w(2, "default $upstream_http_content_encoding;")
	w(1, "}")
	w(1, "# At a marker: the origin's Vary without Accept-Encoding, which the key holds.")
	w(1, "map $upstream_http_vary %s {", originVaryVariable)
	w(2, "volatile;")
	w(2, "\"~*^[ \\t,]*accept-encoding[ \\t,]*$\" \"\";")
	w(2, "\"~*^(.*?)(?:^|[ \\t,]+)accept-encoding(?=[ \\t,]|$)(.*)$\" \"$1$2\";")
	w(2, "default $upstream_http_vary;")
	w(1, "}")
	for _, c := range cs {
		w(1, "map \"$upstream_http_content_encoding|$upstream_http_content_type\" %s {", c.varyVariable())
		w(2, "volatile;")
		for _, t := range compressedTypes(c.c) {
			w(2, "\"~*\\|%s[ \\t]*(;|$)\" Accept-Encoding;", regexp.QuoteMeta(t))
		}
		w(2, "\"~*^(identity)?\\|\" \"\";")
		w(2, "default Accept-Encoding;")
		w(1, "}")
	}
	port := spec.Listener.StatusPort
	w(1, "upstream %s { server 127.0.0.1:%d max_fails=0; }", loopbackUpstream, port)
	w(0, "")
}

// compressedTypes are the types c compresses: text/html, which nginx always compresses,
// and c's.
func compressedTypes(c *v1alpha1.Compression) []string {
	types := []string{"text/html"}
	for _, t := range c.Types {
		if t != "text/html" {
			types = append(types, t)
		}
	}
	return types
}

// writeCompressingRequest writes what a compressing cache location sends the compressor:
// the encoding it stores for the client, and the Host the origin is to be asked with.
func (c *compressor) writeCompressingRequest(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec) {
	w(3, "# Filled through the site's compressor (compression.go): one response per encoding.")
	w(3, "proxy_pass http://%s;", loopbackUpstream)
	w(3, "proxy_http_version 1.1;")
	w(3, "proxy_set_header Connection \"\";")
	w(3, "proxy_set_header Host %s;", c.serverName("gzip"))
	w(3, "proxy_set_header %s %s;", hostHeader, originHost(c.origin))
	w(3, "proxy_set_header Accept-Encoding %s;", c.encodingVariable())
	writeForwardedHeaders(w, spec.Cache.Key, schemeVariable(spec))
	writePeerHeadersCleared(w, spec)
}

// writeCompressedResponse writes what a compressing cache location tells its clients, and
// the headers its server hides (hidden): nginx inherits no proxy_hide_header into a
// location that sets one.
func (c *compressor) writeCompressedResponse(w func(int, string, ...any), hidden []string) {
	w(3, "proxy_hide_header Content-Encoding;")
	for _, h := range hidden {
		w(3, "proxy_hide_header %s; # as the server", h)
	}
	w(3, "add_header Content-Encoding %s always;", storedEncodingVariable)
	w(3, "add_header Vary %s always;", c.varyVariable())
}

// writeServers writes the site's compressor and marker on the loopback address.
func (c *compressor) writeServers(w func(int, string, ...any), spec *v1alpha1.CacheNodeSpec) {
	port := spec.Listener.StatusPort
	w(0, "")
	w(1, "# Compression of %s, for its cache location only (on loopback): each filter", siteLabel(c.site))
	w(1, "# compresses for its own Accept-Encoding, the one the cache location sends.")
	w(1, "server {")
	w(2, "listen 127.0.0.1:%d;", port)
	w(2, "server_name %s;", c.serverName("gzip"))
	types := strings.Join(compressedTypes(c.c)[1:], " ") // text/html: always, each filter says
	if c.gzip {
		w(2, "gzip on;")
		w(2, "gzip_comp_level %d;", c.c.GzipLevel)
		w(2, "gzip_min_length %d;", *c.c.MinLength)
		if types != "" {
			w(2, "gzip_types %s;", types)
		}
		w(2, "gzip_proxied any;")
	}
	if c.brotli {
		w(2, "brotli on;")
		w(2, "brotli_comp_level %d;", *c.c.BrotliLevel)
		w(2, "brotli_min_length %d;", *c.c.MinLength)
		if types != "" {
			w(2, "brotli_types %s;", types)
		}
	}
	w(2, "location / {")
	w(3, "proxy_pass http://%s;", loopbackUpstream)
	w(3, "proxy_http_version 1.1;")
	w(3, "proxy_set_header Connection \"\";")
	w(3, "proxy_set_header Host %s;", c.serverName("origin"))
	writeLoopbackPassing(w)
	w(2, "}")
	writeUnanswered(w)
	w(1, "}")
	w(0, "")
	w(1, "# The origin of %s, for its compressor only (on loopback).", siteLabel(c.site))
	w(1, "server {")
	w(2, "listen 127.0.0.1:%d;", port)
	w(2, "server_name %s;", c.serverName("origin"))
	w(2, "location / {")
	w(3, "proxy_pass http://%s;", c.upstream)
	w(3, "proxy_http_version 1.1;")
	w(3, "proxy_set_header Connection \"\";")
	w(3, "proxy_set_header Host $http_%s;", headerVariable(hostHeader))
	w(3, "proxy_set_header %s \"\";", hostHeader)
	w(3, "# An origin server that does not take the connection within %s: the next one is", originConnectTimeout)
	w(3, "# tried within the cache location's own timeout (nginx's 60 s).")
	w(3, "proxy_connect_timeout %s;", originConnectTimeout)
	writeLoopbackPassing(w)
	w(3, "proxy_hide_header Content-Encoding;")
	w(3, "add_header Content-Encoding %s always;", markedEncodingVariable)
	w(3, "proxy_hide_header Vary;")
	w(3, "add_header Vary %s always;", originVaryVariable)
	w(2, "}")
	writeUnanswered(w)
	w(1, "}")
}

// writeLoopbackPassing has a loopback server pass the response on as it came: the
// origin's Date and X-Accel-* headers are the cache location's to act on.
func writeLoopbackPassing(w func(int, string, ...any)) {
	w(3, "proxy_read_timeout %s;", loopbackTimeout)
	w(3, "proxy_send_timeout %s;", loopbackTimeout)
	w(3, "proxy_pass_header Date;")
	for _, h := range passedHeaders {
		w(3, "proxy_pass_header %s;", h)
	}
	w(3, "proxy_ignore_headers %s;", strings.Join(passedHeaders, " "))
	w(3, "error_page 502 504 %s;", unansweredLocation)
}

// writeUnanswered writes the location that closes a loopback connection unanswered.
func writeUnanswered(w func(int, string, ...any)) {
	w(2, "location %s {", unansweredLocation)
	w(3, "return 444;")
	w(2, "}")
}

func siteLabel(site string) string {
	if site == "" {
		return "the cache"
	}
	return "site " + site
}

// originHost is the Host an origin is asked with.
func originHost(o *v1alpha1.Origin) string {
	if o.HostHeader != "" {
		return o.HostHeader
	}
	return "$host"
}

// maxCompressedType is the longest type gzip_types takes: nginx builds its table with
// buckets of 64 bytes, each name in one with a pointer, its length and the bucket's end.
const maxCompressedType = 46

// compressedTypeRE is a type compression.types may list (the API's rule).
var compressedTypeRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*$`)

// validateCompression checks spec.compression or a site's.
func validateCompression(c *v1alpha1.Compression, p *field.Path) field.ErrorList {
	if c == nil {
		return nil
	}
	var errs field.ErrorList
	switches := []string{string(v1alpha1.CompressionOn), string(v1alpha1.CompressionOff)}
	for name, s := range map[string]v1alpha1.CompressionSwitch{"gzip": c.Gzip, "brotli": c.Brotli} {
		if !slices.Contains(switches, string(s)) {
			errs = append(errs, field.NotSupported(p.Child(name), s, switches))
		}
	}
	errs = append(errs, validateRange(int64(c.GzipLevel), 1, 9, p.Child("gzipLevel"))...)
	if c.BrotliLevel == nil {
		errs = append(errs, field.Required(p.Child("brotliLevel"), "defaulted by the API server"))
	} else {
		errs = append(errs, validateRange(int64(*c.BrotliLevel), 0, 11, p.Child("brotliLevel"))...)
	}
	if c.MinLength == nil {
		errs = append(errs, field.Required(p.Child("minLength"), "defaulted by the API server"))
	} else {
		errs = append(errs, validateRange(int64(*c.MinLength), 0, 1<<20, p.Child("minLength"))...)
	}
	if len(c.Types) == 0 || len(c.Types) > 32 {
		errs = append(errs, field.Invalid(p.Child("types"), len(c.Types), "want 1 to 32 types"))
	}
	seen := map[string]bool{}
	for i, t := range c.Types {
		switch {
		case len(t) < 3 || len(t) > maxCompressedType || !compressedTypeRE.MatchString(t):
			errs = append(errs, field.Invalid(p.Child("types").Index(i), t, "a lowercase media type without parameters, of up to 46 characters, e.g. application/json"))
		case seen[t]:
			errs = append(errs, field.Duplicate(p.Child("types").Index(i), t))
		}
		seen[t] = true
	}
	return errs
}
