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

// Package specgen draws random CacheNode manifests from the CRD's OpenAPI schema
// (config/crd/bases), for the property tests: whatever the API server accepts must render,
// and whatever renders must pass `nginx -t`.
//
// The draws follow the schema, so they stay in step with the kubebuilder markers: a
// pattern is drawn from (regexp/syntax), enums, minimum/maximum, minLength/maxLength,
// minItems/maxItems, list types and keys are kept. What the schema holds only as CEL
// rules is not known here, so the draws step over it on purpose, and the API server is
// the judge: quantities are drawn around the field's default and, now and then, from
// their edges (0, negative, fractional, 1e100, the bounds and one byte past them), origins
// as DNS names, IPv4 and [IPv6] addresses and whatever else the pattern lets through.
// Fields that never reach nginx.conf (tolerations, resources, updateStrategy,
// nodeSelector) are left out.
package specgen

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// skipped are the fields that never reach nginx.conf; drawing them tests nothing.
var skipped = map[string]bool{
	"spec.tolerations":    true,
	"spec.resources":      true,
	"spec.updateStrategy": true,
	"spec.nodeSelector":   true,
}

// Generator draws CacheNode manifests from one CRD.
type Generator struct {
	group, version, kind string
	spec                 *apiextensionsv1.JSONSchemaProps
	patterns             map[string]*syntax.Regexp
}

// Load reads the CRD file and keeps the schema of its storage version's spec.
func Load(crdFile string) (*Generator, error) {
	data, err := os.ReadFile(crdFile)
	if err != nil {
		return nil, err
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		return nil, fmt.Errorf("decode %s: %w", crdFile, err)
	}
	for _, v := range crd.Spec.Versions {
		if !v.Storage || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		spec, ok := v.Schema.OpenAPIV3Schema.Properties["spec"]
		if !ok {
			return nil, fmt.Errorf("%s: version %s has no spec", crdFile, v.Name)
		}
		return &Generator{
			group: crd.Spec.Group, version: v.Name, kind: crd.Spec.Names.Kind,
			spec: &spec, patterns: map[string]*syntax.Regexp{},
		}, nil
	}
	return nil, fmt.Errorf("%s: no storage version with a schema", crdFile)
}

// Draw returns a manifest (unstructured content: maps, slices, strings, int64s, bools)
// drawn with r. It is named name, in namespace default.
func (g *Generator) Draw(r *rand.Rand, name string) map[string]any {
	d := &drawer{g: g, r: r}
	spec, _ := d.value("spec", g.spec)
	obj := map[string]any{
		"apiVersion": g.group + "/" + g.version,
		"kind":       g.kind,
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec":       spec,
	}
	// The CEL rules a draw trips over most: mostly follow them, so that most draws get
	// past them to the rest. acceptMutex set with reusePort left at its default, true:
	if l, ok := spec.(map[string]any)["listener"].(map[string]any); ok {
		if _, set := l["acceptMutex"]; set && r.IntN(10) > 0 {
			l["reusePort"] = false
		}
		// A privileged tlsPort with hostNetwork (the cache runs as non-root): mostly left
		// to its default, 8443. The other ports' draws cover the rule's edges.
		if tlsPort, set := l["tlsPort"].(int64); set && tlsPort < 1024 && spec.(map[string]any)["hostNetwork"] == true && r.IntN(10) > 0 {
			delete(l, "tlsPort")
		}
	}
	// The cache key URI, which stays in the enum only so that stored CacheNodes decode:
	// mostly left to its default.
	if c, ok := spec.(map[string]any)["cache"].(map[string]any); ok && c["key"] == "URI" && r.IntN(10) > 0 {
		delete(c, "key")
	}
	// sharding is refused with hostNetwork, and a hot tier's size is a quantity in a range:
	// mostly follow both.
	if sh, ok := spec.(map[string]any)["sharding"].(map[string]any); ok && r.IntN(10) > 0 {
		delete(spec.(map[string]any), "hostNetwork")
		delete(sh, "peerPort") // its default, 8090, is off the listener's
		if hot, ok := sh["hotTier"].(map[string]any); ok {
			hot["size"] = fmt.Sprintf("%dMi", 1+r.IntN(1024))
		}
	}
	d.originOrSites(spec.(map[string]any))
	// Client limits set at least one limit, and burst only with a rate: mostly follow both.
	d.clientLimits(spec.(map[string]any))
	if sites, ok := spec.(map[string]any)["sites"].([]any); ok {
		for _, site := range sites {
			if m, ok := site.(map[string]any); ok {
				d.clientLimits(m)
			}
		}
	}
	// The service's fields that only some types take: mostly drop what the drawn type refuses.
	if svc, ok := spec.(map[string]any)["service"].(map[string]any); ok && r.IntN(10) > 0 {
		typ, _ := svc["type"].(string)
		if typ == "" || typ == "ClusterIP" {
			delete(svc, "externalTrafficPolicy")
			if ports, ok := svc["ports"].(map[string]any); ok {
				delete(ports, "httpNodePort")
				delete(ports, "httpsNodePort")
			}
		}
		if typ != "LoadBalancer" {
			delete(svc, "loadBalancerSourceRanges")
			delete(svc, "loadBalancerClass")
		}
	}
	return obj
}

// originOrSites makes most draws set either origin (two in three) or sites, as the CEL
// rule asks, and name a drawn site as defaultSite when one is drawn; one in twenty is
// left as drawn (both, neither, a defaultSite that names no site).
func (d *drawer) originOrSites(spec map[string]any) {
	if d.r.IntN(20) == 0 {
		return
	}
	ensure := func(name string) {
		if _, ok := spec[name]; !ok {
			prop := d.g.spec.Properties[name]
			if v, ok := d.value("spec."+name, &prop); ok {
				spec[name] = v
			}
		}
	}
	if d.r.IntN(3) > 0 {
		delete(spec, "sites")
		delete(spec, "defaultSite")
		ensure("origin")
		return
	}
	delete(spec, "origin")
	ensure("sites")
	sites, _ := spec["sites"].([]any)
	// Each site is another origin and more hostnames, each a chance of a refusal: mostly
	// a few sites, so that most draws get past the API server.
	// spec.origin's draws cover long lists of servers, odd ones among them (the renderer
	// checks both with one function): mostly a few sites of a few servers each.
	if len(sites) > 3 && d.r.IntN(5) > 0 {
		sites = sites[:1+d.r.IntN(3)]
		spec["sites"] = sites
	}
	for _, site := range sites {
		o, _ := site.(map[string]any)["origin"].(map[string]any)
		if servers, _ := o["servers"].([]any); len(servers) > 3 && d.r.IntN(5) > 0 {
			o["servers"] = servers[:1+d.r.IntN(3)]
		}
	}
	// Short labels drawn for many sites' hostnames often meet: mostly keep each hostname
	// in one site, as the CEL rule asks, by naming it under its site's.
	if d.r.IntN(10) > 0 {
		seen := map[string]bool{}
		for _, site := range sites {
			m, _ := site.(map[string]any)
			hosts, _ := m["hostnames"].([]any)
			for j, h := range hosts {
				name, _ := h.(string)
				if seen[name] {
					if rest, ok := strings.CutPrefix(name, "*."); ok {
						name = "*." + fmt.Sprint(m["name"]) + "." + rest
					} else {
						name = fmt.Sprint(m["name"]) + "." + name
					}
					hosts[j] = name
				}
				seen[name] = true
			}
		}
	}
	if _, ok := spec["defaultSite"]; ok && len(sites) > 0 {
		if site, ok := sites[d.r.IntN(len(sites))].(map[string]any); ok {
			spec["defaultSite"] = site["name"]
		}
	}
}

// Manifest is Draw's result as JSON (which is YAML too).
func (g *Generator) Manifest(r *rand.Rand, name string) []byte {
	data, err := json.Marshal(g.Draw(r, name))
	if err != nil {
		panic(err) // maps, slices, strings, int64s and bools always marshal
	}
	return data
}

type drawer struct {
	g *Generator
	r *rand.Rand
}

// value draws a value for the schema s at path; ok is false when the field is left out.
func (d *drawer) value(path string, s *apiextensionsv1.JSONSchemaProps) (any, bool) {
	if skipped[path] {
		return nil, false
	}
	if s.XIntOrString {
		switch {
		case isQuantity(s):
			return d.quantity(path, s), true
		case strings.HasSuffix(path, ".workerProcesses"):
			return d.workerProcesses(), true
		}
		return d.integer(s), true
	}
	switch s.Type {
	case "object":
		if len(s.Properties) == 0 {
			return nil, false // a map (additionalProperties): none reaches nginx.conf
		}
		m := map[string]any{}
		for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
			if !slices.Contains(s.Required, name) && d.r.IntN(2) == 0 {
				continue // optional, left to its default
			}
			prop := s.Properties[name]
			if v, ok := d.value(path+"."+name, &prop); ok {
				m[name] = v
			}
		}
		if path == "spec.diskFailover" {
			d.orderCooldowns(m)
		}
		return m, true
	case "array":
		return d.array(path, s), true
	case "string":
		return d.str(path, s), true
	case "integer":
		return d.integer(s), true
	case "boolean":
		return d.r.IntN(2) == 0, true
	}
	return nil, false
}

func (d *drawer) array(path string, s *apiextensionsv1.JSONSchemaProps) []any {
	lo, hi := int64(0), int64(8)
	if s.MinItems != nil {
		lo = *s.MinItems
	}
	if s.MaxItems != nil {
		hi = *s.MaxItems
	}
	n := hi
	switch p := d.r.IntN(10); {
	case p < 6: // a few
		n = min(lo+d.r.Int64N(3), hi)
	case p < 9:
		n = lo + d.r.Int64N(hi-lo+1)
	}
	out := []any{}
	seen := map[string]bool{}
	for range n {
		// Sets hold unique values and maps unique keys: redraw a duplicate a few times.
		for range 10 {
			v, _ := d.value(path+"[]", s.Items.Schema)
			key := uniqueKey(s, v)
			if key == "" || !seen[key] {
				seen[key] = key != ""
				out = append(out, v)
				break
			}
		}
	}
	return out
}

// uniqueKey is what must be unique among a list's items ("" when nothing must).
func uniqueKey(s *apiextensionsv1.JSONSchemaProps, v any) string {
	switch {
	case s.XListType != nil && *s.XListType == "set":
		b, _ := json.Marshal(v)
		return string(b)
	case s.XListType != nil && *s.XListType == "map":
		m, _ := v.(map[string]any)
		var key []string
		for _, k := range s.XListMapKeys {
			key = append(key, fmt.Sprint(m[k]))
		}
		return strings.Join(key, "\x00")
	}
	return ""
}

func (d *drawer) integer(s *apiextensionsv1.JSONSchemaProps) int64 {
	lo, hi := int64(math.MinInt32), int64(math.MaxInt32)
	if s.Format == "int64" {
		lo, hi = -1<<53, 1<<53
	}
	if s.Minimum != nil {
		lo = int64(*s.Minimum)
	}
	if s.Maximum != nil {
		hi = int64(*s.Maximum)
	}
	switch p := d.r.IntN(20); {
	case p < 3:
		return lo
	case p < 6:
		return hi
	case p < 13:
		return lo + d.r.Int64N(hi-lo+1)
	default: // log-uniform above lo: small values are as likely as large ones
		span := float64(hi-lo) + 1
		return min(lo+int64(math.Pow(span, d.r.Float64())-1), hi)
	}
}

// clientLimits makes most drawn clientLimits of m (a spec or a site) valid: a rate when
// they have neither limit or a burst alone; one in ten is left as drawn.
func (d *drawer) clientLimits(m map[string]any) {
	l, ok := m["clientLimits"].(map[string]any)
	if !ok || d.r.IntN(10) == 0 {
		return
	}
	_, rate := l["requestsPerSecond"]
	_, concurrent := l["concurrentRequests"]
	_, burst := l["burst"]
	if !rate && (burst || !concurrent) {
		l["requestsPerSecond"] = int64(1 + d.r.IntN(1000))
	}
}

// orderCooldowns makes most drawn failover policies keep maxCooldownSeconds at least
// cooldownSeconds (their defaults filling the one not drawn), so that drawing the two
// independently does not refuse a policy in four; one in eight is left as drawn.
func (d *drawer) orderCooldowns(m map[string]any) {
	lo, hi := int64(60), int64(1800) // the schema's defaults
	if v, ok := m["cooldownSeconds"].(int64); ok {
		lo = v
	}
	if v, ok := m["maxCooldownSeconds"].(int64); ok {
		hi = v
	}
	if hi < lo && d.r.IntN(8) != 0 {
		m["cooldownSeconds"], m["maxCooldownSeconds"] = hi, lo
	}
}

func (d *drawer) workerProcesses() any {
	switch p := d.r.IntN(20); {
	case p < 9:
		return "auto"
	case p < 18:
		return d.integer(&apiextensionsv1.JSONSchemaProps{Minimum: ptrTo(1.0), Maximum: ptrTo(1024.0)})
	default: // what the CEL rule refuses
		return []any{int64(0), int64(1025), "4", "Auto"}[d.r.IntN(4)]
	}
}

func ptrTo[T any](v T) *T { return &v }

func (d *drawer) str(path string, s *apiextensionsv1.JSONSchemaProps) string {
	if len(s.Enum) > 0 {
		var v string
		_ = json.Unmarshal(s.Enum[d.r.IntN(len(s.Enum))].Raw, &v)
		return v
	}
	// Lists run to 32 entries, and one odd entry refuses the whole draw: odd entries are
	// rare enough that most lists have none, and frequent enough that hundreds of draws
	// hold dozens.
	if (path == "spec.origin.servers[]" || path == "spec.sites[].origin.servers[]") && d.r.IntN(60) > 0 {
		return d.address()
	}
	if path == "spec.sites[].hostnames[]" && d.r.IntN(40) > 0 {
		return d.hostname()
	}
	if (path == "spec.listener.clientCIDRs[]" || path == "spec.listener.trustedProxies[]" || path == "spec.service.loadBalancerSourceRanges[]") && d.r.IntN(30) > 0 {
		return d.cidr()
	}
	lo, hi := int64(0), int64(64)
	if s.MinLength != nil {
		lo = *s.MinLength
	}
	if s.MaxLength != nil {
		hi = *s.MaxLength
	}
	pattern := patternOf(s)
	if pattern == "" {
		const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
		b := make([]byte, lo+d.r.Int64N(min(hi, lo+16)-lo+1))
		for i := range b {
			b[i] = letters[d.r.IntN(len(letters))]
		}
		return string(b)
	}
	re := d.g.pattern(pattern)
	var last string
	for try := range 20 {
		// Now and then long: open repeats fill the string up to a few characters short
		// of maxLength, where the bounds are, and what follows them takes it to or past it.
		budget := -1
		if d.r.IntN(8) == 0 || try > 10 {
			budget = int(hi) - d.r.IntN(9)
		}
		var b strings.Builder
		d.regex(re, &b, budget)
		last = b.String()
		if int64(len(last)) >= lo && int64(len(last)) <= hi {
			return last
		}
	}
	return last // the API server refuses it: a draw like any other
}

// patternOf is the regular expression a string field must match: its schema's pattern,
// or the one of a CEL rule self.matches(r"...") (a rule with a message that names the
// field and the form, where a pattern would answer with the bare expression).
func patternOf(s *apiextensionsv1.JSONSchemaProps) string {
	if s.Pattern != "" {
		return s.Pattern
	}
	const prefix, suffix = `self.matches(r"`, `")`
	for _, v := range s.XValidations {
		if strings.HasPrefix(v.Rule, prefix) && strings.HasSuffix(v.Rule, suffix) {
			return strings.TrimSuffix(strings.TrimPrefix(v.Rule, prefix), suffix)
		}
	}
	return ""
}

func (g *Generator) pattern(p string) *syntax.Regexp {
	re, ok := g.patterns[p]
	if !ok {
		var err error
		if re, err = syntax.Parse(p, syntax.Perl); err != nil {
			panic(fmt.Sprintf("CRD pattern %q: %v", p, err))
		}
		g.patterns[p] = re
	}
	return re
}

// regex writes a random string that re matches. With a budget (>= 0), open repeats (*, +,
// {n,}) go on while b stays within it.
func (d *drawer) regex(re *syntax.Regexp, b *strings.Builder, budget int) {
	switch re.Op {
	case syntax.OpLiteral:
		b.WriteString(string(re.Rune))
	case syntax.OpCharClass:
		size := 0
		for i := 0; i < len(re.Rune); i += 2 {
			size += int(re.Rune[i+1]-re.Rune[i]) + 1
		}
		n := d.r.IntN(size)
		for i := 0; i < len(re.Rune); i += 2 {
			if w := int(re.Rune[i+1]-re.Rune[i]) + 1; n >= w {
				n -= w
				continue
			}
			b.WriteRune(re.Rune[i] + rune(n))
			break
		}
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		b.WriteByte(byte(' ' + d.r.IntN(95)))
	case syntax.OpCapture:
		d.regex(re.Sub[0], b, budget)
	case syntax.OpConcat:
		for _, sub := range re.Sub {
			d.regex(sub, b, budget)
		}
	case syntax.OpAlternate:
		d.regex(re.Sub[d.r.IntN(len(re.Sub))], b, budget)
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		lo, hi := re.Min, re.Max
		switch re.Op {
		case syntax.OpStar:
			lo, hi = 0, -1
		case syntax.OpPlus:
			lo, hi = 1, -1
		case syntax.OpQuest:
			lo, hi = 0, 1
		}
		if hi < 0 && budget >= 0 { // fill up to the budget
			for n := 0; n < 1000; n++ {
				var sub strings.Builder
				d.regex(re.Sub[0], &sub, budget)
				if n >= lo && b.Len()+sub.Len() > budget {
					break
				}
				b.WriteString(sub.String())
			}
			return
		}
		if hi < 0 {
			hi = lo + 8
		}
		if budget < 0 && hi-lo > 3 && d.r.IntN(2) == 0 {
			hi = lo + 3 // mostly short
		}
		for range lo + d.r.IntN(hi-lo+1) {
			d.regex(re.Sub[0], b, budget)
		}
	}
	// OpBeginText, OpEndText, OpEmptyMatch and the like write nothing.
}

// address draws an origin server: an IPv4 address or an IPv6 one in brackets, some of
// them odd (IPv4 in brackets, IPv4-mapped IPv6, the unspecified address).
func (d *drawer) address() string {
	port := []int{1, 80, 443, 8080, 65535, 1 + d.r.IntN(65535)}[d.r.IntN(6)]
	var a [16]byte
	for i := range a {
		a[i] = byte(d.r.IntN(256))
	}
	v4 := netip.AddrFrom4([4]byte(a[:4]))
	switch p := d.r.IntN(40); {
	case p < 18:
		return fmt.Sprintf("%s:%d", v4, port)
	case p < 34:
		return fmt.Sprintf("[%s]:%d", netip.AddrFrom16(a), port)
	case p < 38:
		return fmt.Sprintf("[%s]:%d", []string{"::", "::1", "fe80::1", "2001:db8::"}[d.r.IntN(4)], port)
	default:
		return fmt.Sprintf("[%s]:%d", []string{v4.String(), "::ffff:" + v4.String()}[d.r.IntN(2)], port)
	}
}

// hostname draws a site's hostname: an exact name of one to four labels or a wildcard
// of two to four labels (the schema's pattern alone draws mostly names its CEL rule
// refuses, with *. inside).
func (d *drawer) hostname() string {
	if d.r.IntN(8) == 0 {
		return d.longHostname()
	}
	labels := make([]string, 1+d.r.IntN(4))
	for i := range labels {
		labels[i] = d.str("label", &apiextensionsv1.JSONSchemaProps{
			MinLength: ptrTo[int64](1), MaxLength: ptrTo[int64](63), Pattern: `^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`,
		})
	}
	name := strings.Join(labels, ".")
	if len(labels) >= 2 && d.r.IntN(3) == 0 {
		return "*." + name
	}
	return name
}

// longHostname draws a hostname at the schema's bound: 253 characters (one in six 254,
// which the API server refuses), in labels of 63 characters, a wildcard one time in three.
func (d *drawer) longHostname() string {
	n := 253
	if d.r.IntN(6) == 0 {
		n++
	}
	const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
	var b strings.Builder
	if d.r.IntN(3) == 0 {
		b.WriteString("*.")
	}
	for b.Len() < n {
		if b.Len() > 0 && !strings.HasSuffix(b.String(), ".") {
			b.WriteByte('.')
		}
		size := min(63, n-b.Len())
		for i := range size {
			c := alnum[d.r.IntN(len(alnum))]
			if i > 0 && i < size-1 && d.r.IntN(10) == 0 {
				c = '-'
			}
			b.WriteByte(c)
		}
	}
	return b.String()
}

// cidr draws a client CIDR: mostly canonical IPv4 or IPv6 prefixes, now and then one
// with host bits set (which the API server refuses).
func (d *drawer) cidr() string {
	var a [16]byte
	for i := range a {
		a[i] = byte(d.r.IntN(256))
	}
	addr, bits := netip.AddrFrom4([4]byte(a[:4])), d.r.IntN(33)
	if d.r.IntN(3) == 0 {
		addr, bits = netip.AddrFrom16(a), d.r.IntN(129)
	}
	prefix := netip.PrefixFrom(addr, bits)
	if d.r.IntN(10) > 0 {
		prefix = prefix.Masked()
	}
	return prefix.String()
}

// isQuantity tells a resource.Quantity's schema: the pattern controller-gen writes for
// one, or a CEL rule of ours that reads it as a quantity.
func isQuantity(s *apiextensionsv1.JSONSchemaProps) bool {
	if strings.Contains(s.Pattern, "[KMGTPE]i") {
		return true
	}
	for _, rule := range s.XValidations {
		if strings.Contains(rule.Rule, "quantity(self)") {
			return true
		}
	}
	return false
}

// quantity draws a resource.Quantity, as a string or an integer: mostly a number of bytes
// around the field's default (1Gi without one), written in one of the forms the API
// server accepts; one in 50 an odd one, two in 50 an edge. A slice size is drawn around
// 1Mi.
func (d *drawer) quantity(path string, s *apiextensionsv1.JSONSchemaProps) any {
	scale := int64(1 << 30)
	if strings.HasSuffix(path, ".sliceSize") { // no default: around a typical slice
		scale = 1 << 20
	}
	if s.Default != nil {
		var def string
		if json.Unmarshal(s.Default.Raw, &def) == nil {
			if q, err := resource.ParseQuantity(def); err == nil && q.Value() > 0 {
				scale = q.Value()
			}
		}
	}
	switch p := d.r.IntN(50); {
	case p == 0:
		return odd[d.r.IntN(len(odd))]
	case p <= 2:
		return edges[d.r.IntN(len(edges))]
	}
	// Log-uniform from 6 halvings below the scale to 8 doublings above, rounded to a unit.
	v := max(int64(float64(scale)*math.Exp2(14*d.r.Float64()-6)), 1)
	unit := []int64{1, 1 << 10, 1 << 20, 1 << 30, 1000, 1000000}[d.r.IntN(6)]
	v = max(v/unit, 1) * unit
	return d.format(v)
}

// format writes v bytes in one of the quantity forms that are exact for it.
func (d *drawer) format(v int64) any {
	forms := []any{v, strconv.FormatInt(v, 10)}
	for i, suffix := range []string{"Ki", "Mi", "Gi", "Ti", "Pi"} {
		if unit := int64(1) << (10 * (i + 1)); v%unit == 0 {
			forms = append(forms, fmt.Sprintf("%d%s", v/unit, suffix))
		}
	}
	for i, suffix := range []string{"k", "M", "G", "T", "P"} {
		if unit := int64(math.Pow10(3 * (i + 1))); v%unit == 0 {
			forms = append(forms, fmt.Sprintf("%d%s", v/unit, suffix), fmt.Sprintf("%de%d", v/unit, 3*(i+1)))
		}
	}
	return forms[d.r.IntN(len(forms))]
}

var (
	// edges are the bounds a byte quantity may have, and one byte either side.
	edges = []any{
		"0", int64(0), "1", "1023", "1Ki", "1048575", "1Mi", "1048577", "2Mi", "64Mi",
		"1073741823", "1Gi", "1073741825", "2Gi", "4Gi", "16Gi", "17179869183", "17179869185",
		"64Gi", "68719476737", "1Ti", "1Pi", "1125899906842625", "1Ei",
		"9223372036854775807", int64(math.MaxInt64),
	}
	// odd are quantities that are no number of bytes nginx could take: negative,
	// fractional, too large for int64, in exotic notation, or no quantity at all.
	odd = []any{
		"-1Gi", "-1", "-0", "+1Mi", "1e100", "1E", "8Ei", "9223372036854775808", "100m",
		"1000m", "1.5Gi", "1.0000001Gi", "0.5", ".5Ki", "1e3", "2e9", "1.5e6", "1M", "0.1Ki",
		"100MB", "1 Gi", "1gi", "", "Gi", "0x10",
	}
)

// NewSource returns a random source that reads its numbers from data, 8 bytes at a time,
// and then from a ChaCha8 stream seeded with data's hash: under `go test -fuzz` a changed
// byte changes one draw, and a short input still draws a whole spec.
func NewSource(data []byte) rand.Source {
	return &byteSource{data: data, rest: rand.NewChaCha8(sha256.Sum256(data))}
}

type byteSource struct {
	data []byte
	rest *rand.ChaCha8
}

func (s *byteSource) Uint64() uint64 {
	if len(s.data) >= 8 {
		v := binary.LittleEndian.Uint64(s.data)
		s.data = s.data[8:]
		return v
	}
	return s.rest.Uint64()
}
