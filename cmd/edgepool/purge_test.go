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

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// buildPurge is the command line's way to a CachePurge, without a cluster.
func buildPurge(args ...string) (*v1alpha1.CachePurge, purgeFlags, error) {
	f, err := parsePurgeFlags(args)
	if err != nil {
		return nil, f, err
	}
	p, err := purgeFromFlags(f)
	return p, f, err
}

func TestPurgeFromFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want v1alpha1.CachePurge
	}{
		{"urls, flags after the CacheNode", []string{"edge", "--url", "https://www.example.com/", "--url=http://[2001:db8::1]/a%20b?x=1", "-n", "shop"},
			v1alpha1.CachePurge{
				ObjectMeta: objectMeta("shop", "", "edge-"),
				Spec:       v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: v1alpha1.PurgeURLs, URLs: []string{"https://www.example.com/", "http://[2001:db8::1]/a%20b?x=1"}},
			}},
		{"the same url twice is one", []string{"--url", "https://a.example/x", "edge", "--url", "https://a.example/x"},
			v1alpha1.CachePurge{
				ObjectMeta: objectMeta("", "", "edge-"),
				Spec:       v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: v1alpha1.PurgeURLs, URLs: []string{"https://a.example/x"}},
			}},
		{"prefixes grouped by host", []string{"--namespace=shop", "--name", "images", "cdn.edge", "--prefix", "www.example.com/img/",
			"--prefix", "static.example.com/", "--prefix", "www.example.com/css/", "--prefix", "www.example.com/img/"},
			v1alpha1.CachePurge{
				ObjectMeta: objectMeta("shop", "images", ""),
				Spec: v1alpha1.CachePurgeSpec{CacheNode: "cdn.edge", Scope: v1alpha1.PurgePrefixes, Prefixes: []v1alpha1.PurgeHost{
					{Host: "www.example.com", Paths: []string{"/img/", "/css/"}},
					{Host: "static.example.com", Paths: []string{"/"}},
				}},
			}},
		{"all", []string{"edge", "--all"},
			v1alpha1.CachePurge{ObjectMeta: objectMeta("", "", "edge-"), Spec: v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: v1alpha1.PurgeAll}}},
		{"tags", []string{"edge", "--tag", "product-42", "--tag=deploy:7", "--tag", "product-42"},
			v1alpha1.CachePurge{ObjectMeta: objectMeta("", "", "edge-"), Spec: v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: v1alpha1.PurgeTags,
				Tags: []string{"product-42", "deploy:7"}}}},
		{"soft", []string{"edge", "--soft", "--prefix", "www.example.com/img/"},
			v1alpha1.CachePurge{ObjectMeta: objectMeta("", "", "edge-"), Spec: v1alpha1.CachePurgeSpec{CacheNode: "edge", Scope: v1alpha1.PurgePrefixes, Soft: true,
				Prefixes: []v1alpha1.PurgeHost{{Host: "www.example.com", Paths: []string{"/img/"}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, err := buildPurge(tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(&tc.want, p); diff != "" {
				t.Errorf("-want +got:\n%s", diff)
			}
		})
	}
}

func TestPurgeFlagDefaults(t *testing.T) {
	_, f, err := buildPurge("edge", "--all", "--kubeconfig", "/k", "--context", "prod")
	if err != nil {
		t.Fatal(err)
	}
	if !f.wait || f.timeout != 5*time.Minute || f.kubeconfig != "/k" || f.context != "prod" {
		t.Errorf("flags: %+v", f)
	}
	if _, f, _ = buildPurge("edge", "--all", "--wait=false", "--timeout", "0"); f.wait {
		t.Error("--wait=false waits")
	}
}

// TestPurgeFlagsRefused: what the schema or the agents would refuse is refused before
// anything is sent, naming the flag or the value.
func TestPurgeFlagsRefused(t *testing.T) {
	long := "https://www.example.com/" + strings.Repeat("a", 2048)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no CacheNode", []string{"--all"}, "purge needs one CacheNode, got 0 arguments"},
		{"two CacheNodes", []string{"a", "b", "--all"}, "purge needs one CacheNode, got 2 arguments"},
		{"an unknown flag", []string{"edge", "--all", "--force"}, "flag provided but not defined: -force"},
		{"nothing to purge", []string{"edge"}, "one of --url, --prefix, --tag or --all"},
		{"urls and all", []string{"edge", "--url", "https://a.example/", "--all"}, "one of --url, --prefix, --tag or --all"},
		{"urls and prefixes", []string{"edge", "--url", "https://a.example/", "--prefix", "a.example/x"}, "one of --url, --prefix, --tag or --all"},
		{"no timeout", []string{"edge", "--all", "--timeout", "0"}, "--timeout must be positive"},
		{"a bad timeout", []string{"edge", "--all", "--timeout", "soon"}, `invalid value "soon" for flag -timeout`},
		{"a bad CacheNode name", []string{"Edge", "--all"}, `CacheNode "Edge": not the name of a CacheNode`},
		{"a CacheNode name too long", []string{strings.Repeat("a", 53), "--all"}, "not the name of a CacheNode: must be no more than 52 characters"},
		{"a bad name", []string{"edge", "--all", "--name", "a_b"}, `--name "a_b"`},
		{"a bad namespace", []string{"edge", "--all", "-n", "a.b"}, `--namespace "a.b"`},
		{"a URL without a scheme", []string{"edge", "--url", "www.example.com/"}, `urls[0]: not an http(s) URL`},
		{"a URL with a port", []string{"edge", "--url", "https://www.example.com:8443/"}, `"https://www.example.com:8443/"`},
		{"a URL with an upper-case host", []string{"edge", "--url", "https://WWW.example.com/"}, "lower-case host"},
		{"a URL without a path", []string{"edge", "--url", "https://www.example.com"}, `"https://www.example.com"`},
		{"a URL with a space", []string{"edge", "--url", "https://www.example.com/a b"}, `urls[0]`},
		{"a URL with a newline", []string{"edge", "--url", "https://www.example.com/a\nproxy_pass x;"}, `urls[0]`},
		{"a URL too long", []string{"edge", "--url", long}, `urls[0]`},
		{"a prefix without a path", []string{"edge", "--prefix", "www.example.com"}, `--prefix "www.example.com": not HOST/PATH`},
		{"a prefix with a port", []string{"edge", "--prefix", "www.example.com:8080/img/"}, `prefixes[0].host: not a lower-case host name or address without a port ("www.example.com:8080")`},
		{"a prefix with a scheme", []string{"edge", "--prefix", "https://www.example.com/img/"}, `prefixes[0].host`},
		{"a prefix with a bad percent", []string{"edge", "--prefix", "www.example.com/%zz"}, `prefixes[0].paths[0]: not a request URI`},
		{"too many URLs", append([]string{"edge"}, manyURLs(101)...), "urls: want 1 to 100, got 101"},
		{"tags and urls", []string{"edge", "--tag", "a", "--url", "https://a.example/"}, "one of --url, --prefix, --tag or --all"},
		{"a tag with a space", []string{"edge", "--tag", "a b"}, `tags[0]: not up to 128 letters`},
		{"a tag with a quote", []string{"edge", "--tag", `a"`}, `tags[0]`},
		{"a tag too long", []string{"edge", "--tag", strings.Repeat("t", 129)}, `tags[0]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, _, err := buildPurge(tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, %v; want an error containing %q", p, err, tc.want)
			}
		})
	}
}

func manyURLs(n int) []string {
	var args []string
	for i := range n {
		args = append(args, "--url", "https://www.example.com/"+strings.Repeat("a", i))
	}
	return args
}

func objectMeta(namespace, name, generateName string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name, GenerateName: generateName}
}
