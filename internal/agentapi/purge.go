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

package agentapi

import (
	"bytes"
	"crypto/md5" //nolint:gosec // nginx names cache files by the MD5 of their key; nothing here relies on it for security
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// What a purge may name, as the CachePurge's schema allows it (the lists are kept equal by
// a test in api/v1alpha1). A purge names keys, never a file: the agent hashes a URL to the
// file nginx keeps it in, and compares prefixes with the key each cache file stores.
const (
	// PurgeHostPattern is a host as $host puts it in the cache key: lower case, no port.
	PurgeHostPattern = `^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*|\[[0-9a-f:.]{2,45}\])$`
	// PurgePathPattern is a request URI (path and query): the characters of RFC 3986, with a
	// percent sign only before two hex digits.
	PurgePathPattern = `^/([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*$`
	// PurgeURLPattern is a scheme, a host and a request URI.
	PurgeURLPattern = `^https?://([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*|\[[0-9a-f:.]{2,45}\])/([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*$`

	// PurgeTagPattern is a tag: what the tag headers carry between their separators
	// (spaces, commas), less the characters a header, a URI or JSON would make special.
	PurgeTagPattern = `^[A-Za-z0-9._~:/@!$&'()*+;=-]+$`

	MaxPurgeTags = 100
	MaxTagLength = 128
	// MaxResponseTags bounds the tags read from one response: those beyond are ignored.
	MaxResponseTags = 64

	MaxPurgeURLs       = 100
	MaxPurgeURLLength  = 2048
	MaxPurgeHosts      = 16
	MaxPurgePaths      = 32
	MaxPurgePathLength = 1024
	maxPurgeHostLength = 253
)

// The scopes of a purge.
const (
	PurgeScopeURLs     = "URLs"
	PurgeScopePrefixes = "Prefixes"
	PurgeScopeTags     = "Tags"
	PurgeScopeAll      = "All"
)

var (
	purgeHostRE = regexp.MustCompile(PurgeHostPattern)
	purgePathRE = regexp.MustCompile(PurgePathPattern)
	purgeURLRE  = regexp.MustCompile(PurgeURLPattern)
	purgeTagRE  = regexp.MustCompile(PurgeTagPattern)
	// urlPartsRE splits a URL that matched purgeURLRE into scheme, host and request URI.
	urlPartsRE = regexp.MustCompile(`^(https?)://([^/]+)(/.*)$`)
)

// PurgeSpec is what a purge removes: a CachePurge's spec, as the operator sends it to the
// agents and lists it in the ConfigMap.
type PurgeSpec struct {
	// Scope is URLs, Prefixes or All.
	Scope string `json:"scope"`
	// URLs are exact URLs (scheme, host, request URI), with scope URLs.
	URLs []string `json:"urls,omitempty"`
	// Prefixes are request URI prefixes per host, with scope Prefixes.
	Prefixes []PurgeHost `json:"prefixes,omitempty"`
	// Tags are the tags whose responses are purged, with scope Tags.
	Tags []string `json:"tags,omitempty"`
	// Soft marks what the purge names stale rather than removing it: nginx revalidates
	// it with the origin before serving it again.
	Soft bool `json:"soft,omitempty"`
}

// PurgeHost is the request URI prefixes purged on one host.
type PurgeHost struct {
	Host  string   `json:"host"`
	Paths []string `json:"paths"`
}

// Validate checks a purge against the schema's allowlists and bounds.
func (s PurgeSpec) Validate() error {
	var errs []error
	switch s.Scope {
	case PurgeScopeURLs:
		if len(s.URLs) == 0 || len(s.URLs) > MaxPurgeURLs {
			errs = append(errs, fmt.Errorf("urls: want 1 to %d, got %d", MaxPurgeURLs, len(s.URLs)))
		}
		for i, u := range s.URLs {
			if len(u) > MaxPurgeURLLength || !purgeURLRE.MatchString(u) {
				errs = append(errs, fmt.Errorf("urls[%d]: not an http(s) URL with a lower-case host, no port, and the characters of a URI (%.64q)", i, u))
			}
		}
	case PurgeScopePrefixes:
		if len(s.Prefixes) == 0 || len(s.Prefixes) > MaxPurgeHosts {
			errs = append(errs, fmt.Errorf("prefixes: want 1 to %d hosts, got %d", MaxPurgeHosts, len(s.Prefixes)))
		}
		for i, h := range s.Prefixes {
			if len(h.Host) > maxPurgeHostLength || !purgeHostRE.MatchString(h.Host) {
				errs = append(errs, fmt.Errorf("prefixes[%d].host: not a lower-case host name or address without a port (%.64q)", i, h.Host))
			}
			if len(h.Paths) == 0 || len(h.Paths) > MaxPurgePaths {
				errs = append(errs, fmt.Errorf("prefixes[%d].paths: want 1 to %d, got %d", i, MaxPurgePaths, len(h.Paths)))
			}
			for j, p := range h.Paths {
				if len(p) > MaxPurgePathLength || !purgePathRE.MatchString(p) {
					errs = append(errs, fmt.Errorf("prefixes[%d].paths[%d]: not a request URI starting with / (%.64q)", i, j, p))
				}
			}
		}
	case PurgeScopeTags:
		if len(s.Tags) == 0 || len(s.Tags) > MaxPurgeTags {
			errs = append(errs, fmt.Errorf("tags: want 1 to %d, got %d", MaxPurgeTags, len(s.Tags)))
		}
		for i, tag := range s.Tags {
			if !ValidTag(tag) {
				errs = append(errs, fmt.Errorf("tags[%d]: not up to %d letters, digits and ._~:/@!$&'()*+;=- (%.64q)", i, MaxTagLength, tag))
			}
		}
	case PurgeScopeAll:
	default:
		errs = append(errs, fmt.Errorf("scope %.32q is not URLs, Prefixes, Tags or All", s.Scope))
	}
	if s.Scope != PurgeScopeTags && len(s.Tags) > 0 {
		errs = append(errs, errors.New("tags are only for scope Tags"))
	}
	if s.Scope != PurgeScopeURLs && len(s.URLs) > 0 {
		errs = append(errs, errors.New("urls are only for scope URLs"))
	}
	if s.Scope != PurgeScopePrefixes && len(s.Prefixes) > 0 {
		errs = append(errs, errors.New("prefixes are only for scope Prefixes"))
	}
	return errors.Join(errs...)
}

// ValidTag says whether tag is one a purge may name and a response's tags are read as.
func ValidTag(tag string) bool { return len(tag) <= MaxTagLength && purgeTagRE.MatchString(tag) }

// ResponseTags are the tags of one value of a tag header: separated by spaces, tabs or
// commas, the first MaxResponseTags valid ones; invalid ones are skipped.
func ResponseTags(value string, tags []string) []string {
	for _, t := range strings.FieldsFunc(value, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' }) {
		if len(tags) >= MaxResponseTags {
			break
		}
		if ValidTag(t) {
			tags = append(tags, t)
		}
	}
	return tags
}

// SliceKeySuffix ends the cache key of a site that caches byte-range slices: nginx's
// $slice_range, "bytes=<first>-<last>", the slice's range.
const SliceKeySuffix = "$slice_range"

// sliceRangeRE is what $slice_range adds to an object's key.
var sliceRangeRE = regexp.MustCompile(`^bytes=[0-9]+-[0-9]+$`)

// A site that compresses (spec.compression) keeps each encoding of a response under a key
// of its own: the cache key after the encoding's name and ':' (EncodingVariable, set to
// one of Encodings). No cache key expression yields a key that starts with one: a key
// starts with a scheme (letters, then "://") or a host (which holds no ':' but in the
// brackets of an IPv6 address).
const EncodingVariable = "$edgepool_encoding"

// Encodings are the encodings a compressing site stores: what EncodingVariable holds.
var Encodings = []string{"br", "gzip", "identity"}

// ObjectKey is the cache key of the object an encoded response's key names, or key itself.
func ObjectKey(key string) string {
	for _, e := range Encodings {
		if rest, ok := strings.CutPrefix(key, e+":"); ok {
			return rest
		}
	}
	return key
}

// PurgeKeys are the cache keys a purge names, for one cache key expression.
type PurgeKeys struct {
	// All: every cached response.
	All bool
	// Exact are whole keys.
	Exact []string
	// Prefixes are key prefixes.
	Prefixes []string
	// Sliced are the keys of objects cached in slices, each slice under the object's key
	// and its range: how many there are is not known, so they are found by reading keys.
	Sliced []string
	// Tags are tags: the responses that carry one in a header of TagHeaders.
	Tags       []string
	TagHeaders []string
	// Soft: mark the responses stale instead of removing them.
	Soft bool
}

// Walks says whether the purge reads the cache's files rather than naming them.
func (k PurgeKeys) Walks() bool {
	return k.All || len(k.Prefixes) > 0 || len(k.Sliced) > 0 || len(k.Tags) > 0
}

// IsSliceOf says whether a cache key is one of the slices of the object whose key is
// object.
func IsSliceOf(key, object string) bool {
	rest, ok := strings.CutPrefix(key, object)
	return ok && sliceRangeRE.MatchString(rest)
}

// HostSliced says whether host's responses are cached in slices, by the hostnames of the
// sites that slice (Facts.SlicedHosts): exact names, wildcards (*.example.com) and "*",
// every host. It errs towards yes: a host of a site without slicing that a sliced site's
// wildcard also matches is counted sliced, which costs its exact purges a walk, never a
// slice left behind.
func HostSliced(sliced []string, host string) bool {
	for _, h := range sliced {
		switch {
		case h == "*", h == host:
			return true
		case strings.HasPrefix(h, "*.") && strings.HasSuffix(host, h[1:]):
			return true
		}
	}
	return false
}

// Keys turns a valid purge into the cache keys it names, for the cache key expression
// the configuration uses (one of SplitKeys: the split hashes the cache key). With
// $scheme://$host$request_uri, a prefix names both schemes.
// The exact URLs of the hosts in sliced (see HostSliced) also name their objects' slices;
// each URL names its encoded responses (ObjectKey) too, whichever sites compress.
func (s PurgeSpec) Keys(cacheKey string, sliced []string) (PurgeKeys, error) {
	if err := s.Validate(); err != nil {
		return PurgeKeys{}, err
	}
	withScheme := false
	switch cacheKey {
	case "$host$request_uri":
	case "$scheme://$host$request_uri", "$" + PeerSchemeVariable + "://$host$request_uri":
		withScheme = true
	default:
		return PurgeKeys{}, fmt.Errorf("cache key %q is not one of %s", cacheKey, strings.Join(SplitKeys, ", "))
	}
	k := PurgeKeys{Soft: s.Soft}
	switch s.Scope {
	case PurgeScopeAll:
		k.All = true
	case PurgeScopeTags:
		k.Tags = s.Tags
	case PurgeScopeURLs:
		for _, u := range s.URLs {
			m := urlPartsRE.FindStringSubmatch(u)
			key := m[2] + m[3]
			if withScheme {
				key = m[1] + "://" + key
			}
			k.Exact = append(k.Exact, key)
			for _, e := range Encodings {
				k.Exact = append(k.Exact, e+":"+key)
			}
			if HostSliced(sliced, m[2]) {
				k.Sliced = append(k.Sliced, key)
			}
		}
	case PurgeScopePrefixes:
		for _, h := range s.Prefixes {
			for _, p := range h.Paths {
				if withScheme {
					k.Prefixes = append(k.Prefixes, "http://"+h.Host+p, "https://"+h.Host+p)
				} else {
					k.Prefixes = append(k.Prefixes, h.Host+p)
				}
			}
		}
	}
	return k, nil
}

// CacheFile is where nginx keeps the response to key under a cache directory with
// levels=1:2: the MD5 of the key in hex, in a directory named by its last character and,
// within it, one named by the two before.
func CacheFile(key string) string {
	sum := md5.Sum([]byte(key)) //nolint:gosec // nginx's file naming
	return CacheFileNamed(hex.EncodeToString(sum[:]))
}

// CacheFileNamed is where nginx keeps the cache file named name (32 hex digits).
func CacheFileNamed(name string) string {
	return filepath.Join(name[len(name)-1:], name[len(name)-3:len(name)-1], name)
}

// A node that restarts must not serve what was purged while it was down, even after the
// purge expired. So the operator also lists a CacheNode's purges in its ConfigMap
// (ActivePurgesKey), and each disk keeps a record of the purges applied to it
// (DiskPurgeRecord, beside the marker): before nginx starts, the agent applies on each disk
// the listed purges it lacks, and empties the cache of a disk whose record is older than
// the list reaches back (Since): it may have missed a purge no longer listed.
const (
	ActivePurgesKey = "purges.json"
	DiskPurgeRecord = ".edgepool-purges"
	// DiskTagIndex is a disk's index of the tags of its cached responses (tagindex).
	DiskTagIndex = ".edgepool-tags"
	// MaxActivePurges bounds the list; the operator drops the oldest purges (and moves
	// Since past them) to stay within it and the ConfigMap's size.
	MaxActivePurges = 256
)

// ActivePurges is the list of a CacheNode's purges in its ConfigMap.
type ActivePurges struct {
	// Generated is when the operator wrote the list: every purge created before then is
	// in it, or was created before Since.
	Generated time.Time `json:"generated"`
	// Since is how far back the list reaches: it holds every purge created since.
	Since time.Time `json:"since"`
	// Purges are the purges, oldest first.
	Purges []ActivePurge `json:"purges,omitempty"`
}

// ActivePurge is one listed purge.
type ActivePurge struct {
	UID  string    `json:"uid"`
	Spec PurgeSpec `json:"spec"`
}

// Marshal writes the list as purges.json, with the characters of URLs as they are (no
// HTML escaping, which would write an & in six bytes), so that a purge takes about as
// many bytes as the characters the CachePurge schema bounds.
func (l ActivePurges) Marshal() []byte {
	return marshalPlain(l)
}

// Size is how many bytes p takes in purges.json.
func (p ActivePurge) Size() int {
	return len(marshalPlain(p))
}

func marshalPlain(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // strings, times and lists of them always marshal
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// Validate checks the list: it decides what nginx serves after a restart.
func (l ActivePurges) Validate() error {
	var errs []error
	if l.Generated.IsZero() || l.Since.After(l.Generated) {
		errs = append(errs, errors.New("purges list: generated must be set, and since not after it"))
	}
	if len(l.Purges) > MaxActivePurges {
		errs = append(errs, fmt.Errorf("purges list: %d purges, at most %d", len(l.Purges), MaxActivePurges))
	}
	seen := map[string]bool{}
	for i, p := range l.Purges {
		if !uidRE.MatchString(p.UID) || seen[p.UID] {
			errs = append(errs, fmt.Errorf("purges[%d]: uid %.64q is not a UID, or listed twice", i, p.UID))
		}
		seen[p.UID] = true
		if err := p.Spec.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("purges[%d]: %w", i, err))
		}
	}
	return errors.Join(errs...)
}
