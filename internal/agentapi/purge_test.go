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
	"crypto/md5" //nolint:gosec // nginx's file naming, checked independently
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPurgeSpecValidate(t *testing.T) {
	hosts := func(n int) []PurgeHost {
		var hs []PurgeHost
		for i := range n {
			hs = append(hs, PurgeHost{Host: fmt.Sprintf("h%d.example", i), Paths: []string{"/"}})
		}
		return hs
	}
	urls := func(n int) []string {
		var us []string
		for i := range n {
			us = append(us, fmt.Sprintf("http://a.example/%d", i))
		}
		return us
	}
	for _, tc := range []struct {
		name string
		spec PurgeSpec
		want string // "" for valid
	}{
		{"urls", PurgeSpec{Scope: "URLs", URLs: []string{"https://a.example/x?y=%2F", "http://[::1]/", "http://192.0.2.1/"}}, ""},
		{"100 urls", PurgeSpec{Scope: "URLs", URLs: urls(100)}, ""},
		{"prefixes", PurgeSpec{Scope: "Prefixes", Prefixes: hosts(16)}, ""},
		{"all", PurgeSpec{Scope: "All"}, ""},
		{"no scope", PurgeSpec{}, "scope"},
		{"unknown scope", PurgeSpec{Scope: "Everything"}, "scope"},
		{"urls without urls", PurgeSpec{Scope: "URLs"}, "urls: want 1 to 100"},
		{"101 urls", PurgeSpec{Scope: "URLs", URLs: urls(101)}, "urls: want 1 to 100"},
		{"all with urls", PurgeSpec{Scope: "All", URLs: urls(1)}, "urls are only for scope URLs"},
		{"urls with prefixes", PurgeSpec{Scope: "URLs", URLs: urls(1), Prefixes: hosts(1)}, "prefixes are only for scope Prefixes"},
		{"17 hosts", PurgeSpec{Scope: "Prefixes", Prefixes: hosts(17)}, "want 1 to 16 hosts"},
		{"a url with a port", PurgeSpec{Scope: "URLs", URLs: []string{"http://a.example:80/"}}, "urls[0]"},
		{"a url with a newline", PurgeSpec{Scope: "URLs", URLs: []string{"http://a.example/\nKEY: b"}}, "urls[0]"},
		{"a url with a NUL", PurgeSpec{Scope: "URLs", URLs: []string{"http://a.example/\x00"}}, "urls[0]"},
		{"a url with a space", PurgeSpec{Scope: "URLs", URLs: []string{"http://a.example/ "}}, "urls[0]"},
		{"a file path", PurgeSpec{Scope: "URLs", URLs: []string{"file:///etc/passwd"}}, "urls[0]"},
		{"a url too long", PurgeSpec{Scope: "URLs", URLs: []string{"http://a.example/" + strings.Repeat("a", 2048)}}, "urls[0]"},
		{"an upper-case host", PurgeSpec{Scope: "Prefixes", Prefixes: []PurgeHost{{Host: "A.example", Paths: []string{"/"}}}}, "prefixes[0].host"},
		{"a host too long", PurgeSpec{Scope: "Prefixes", Prefixes: []PurgeHost{{Host: strings.Repeat("a.", 127) + "a", Paths: []string{"/"}}}}, "prefixes[0].host"},
		{"a relative path", PurgeSpec{Scope: "Prefixes", Prefixes: []PurgeHost{{Host: "a.example", Paths: []string{"../x"}}}}, "prefixes[0].paths[0]"},
		{"no paths", PurgeSpec{Scope: "Prefixes", Prefixes: []PurgeHost{{Host: "a.example"}}}, "prefixes[0].paths: want 1 to 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// encoded are keys, each followed by the keys of its encoded responses.
func encoded(keys ...string) []string {
	var all []string
	for _, k := range keys {
		all = append(all, k, "br:"+k, "gzip:"+k, "identity:"+k)
	}
	return all
}

// ObjectKey undoes the encoding's prefix only: a key that merely holds one is its own.
func TestObjectKey(t *testing.T) {
	for key, want := range map[string]string{
		"gzip:https://a.example/x":     "https://a.example/x",
		"identity:a.example/x":         "a.example/x",
		"a.example/x":                  "a.example/x",
		"a.example/gzip:x":             "a.example/gzip:x",
		"gzipa.example/x":              "gzipa.example/x",
		"identity:gzip:a.example/x":    "gzip:a.example/x",
		"br:http://a.example/x":        "http://a.example/x",
		"[2001:db8::1]/gzip:identity:": "[2001:db8::1]/gzip:identity:",
	} {
		if got := ObjectKey(key); got != want {
			t.Errorf("ObjectKey(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestPurgeKeys(t *testing.T) {
	urls := PurgeSpec{Scope: "URLs", URLs: []string{"https://a.example/x?y=1", "http://[2001:db8::1]/"}}
	prefixes := PurgeSpec{Scope: "Prefixes", Prefixes: []PurgeHost{{Host: "a.example", Paths: []string{"/img/", "/css/"}}}}
	for _, tc := range []struct {
		spec PurgeSpec
		key  string
		want PurgeKeys
	}{
		{urls, "$host$request_uri", PurgeKeys{Exact: encoded("a.example/x?y=1", "[2001:db8::1]/")}},
		{urls, "$scheme://$host$request_uri", PurgeKeys{Exact: encoded("https://a.example/x?y=1", "http://[2001:db8::1]/")}},
		{prefixes, "$host$request_uri", PurgeKeys{Prefixes: []string{"a.example/img/", "a.example/css/"}}},
		{prefixes, "$scheme://$host$request_uri", PurgeKeys{Prefixes: []string{"http://a.example/img/", "https://a.example/img/", "http://a.example/css/", "https://a.example/css/"}}},
		{PurgeSpec{Scope: "All"}, "$host$request_uri", PurgeKeys{All: true}},
		{PurgeSpec{Scope: "All", Soft: true}, "$host$request_uri", PurgeKeys{All: true, Soft: true}},
		{PurgeSpec{Scope: "URLs", URLs: urls.URLs[:1], Soft: true}, "$host$request_uri", PurgeKeys{Exact: encoded("a.example/x?y=1"), Soft: true}},
	} {
		got, err := tc.spec.Keys(tc.key, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.All != tc.want.All || !slices.Equal(got.Exact, tc.want.Exact) || !slices.Equal(got.Prefixes, tc.want.Prefixes) {
			t.Errorf("%s with %s: got %+v, want %+v", tc.spec.Scope, tc.key, got, tc.want)
		}
	}
	if _, err := urls.Keys("$request_uri", nil); err == nil {
		t.Error("a cache key outside the allowlist was accepted")
	}
	if _, err := (PurgeSpec{Scope: "URLs"}).Keys("$host$request_uri", nil); err == nil {
		t.Error("an invalid purge gave keys")
	}
}

func TestCacheFile(t *testing.T) {
	// nginx 1.22.1 kept 127.0.0.1/a/b?c=1 (levels=1:2) in 3/1e/4f33db3ba26388893a177291276b51e3.
	if got, want := CacheFile("127.0.0.1/a/b?c=1"), filepath.Join("3", "1e", "4f33db3ba26388893a177291276b51e3"); got != want {
		t.Errorf("CacheFile = %s, want %s", got, want)
	}
}

// FuzzPurgeSpec: a spec that validates gives keys that are at most one URL long, hold
// only a URL's characters, and name files inside the cache directory.
func FuzzPurgeSpec(f *testing.F) {
	f.Add("URLs", "https://a.example/x?y=%2F", "a.example", "/img/")
	f.Add("Prefixes", "", "[::1]", "/")
	f.Add("All", "", "", "")
	f.Add("URLs", "http://a.example/../../etc/passwd", "a..b", "/\n")
	f.Fuzz(func(t *testing.T, scope, url, host, path string) {
		spec := PurgeSpec{Scope: scope}
		if url != "" {
			spec.URLs = []string{url}
		}
		if host != "" || path != "" {
			spec.Prefixes = []PurgeHost{{Host: host, Paths: []string{path}}}
		}
		for _, expr := range SplitKeys {
			keys, err := spec.Keys(expr, nil)
			if err != nil {
				continue
			}
			for _, k := range slices.Concat(keys.Exact, keys.Prefixes) {
				if len(k) > MaxPurgeURLLength+len("https") || strings.ContainsAny(k, "\x00\r\n\t \"\\`{}<>^|#") {
					t.Errorf("key %q", k)
				}
			}
			for _, k := range keys.Exact {
				file := CacheFile(k)
				sum := md5.Sum([]byte(k)) //nolint:gosec // nginx's naming
				h := hex.EncodeToString(sum[:])
				if file != h[31:]+"/"+h[29:31]+"/"+h || !filepath.IsLocal(file) {
					t.Errorf("file %s for %q", file, k)
				}
			}
		}
	})
}

func TestActivePurgesValidate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ok := ActivePurge{UID: "0b5e3c1a-7f7e-4c55-9a39-1f0a2c3d4e5f", Spec: PurgeSpec{Scope: "All"}}
	for _, tc := range []struct {
		name string
		list ActivePurges
		want string
	}{
		{"valid", ActivePurges{Generated: t0, Since: t0, Purges: []ActivePurge{ok}}, ""},
		{"no generation time", ActivePurges{Purges: []ActivePurge{ok}}, "generated must be set"},
		{"since after generated", ActivePurges{Generated: t0, Since: t0.Add(time.Second)}, "since not after it"},
		{"a UID twice", ActivePurges{Generated: t0, Purges: []ActivePurge{ok, ok}}, "listed twice"},
		{"not a UID", ActivePurges{Generated: t0, Purges: []ActivePurge{{UID: "../x", Spec: ok.Spec}}}, "not a UID"},
		{"an invalid purge", ActivePurges{Generated: t0, Purges: []ActivePurge{{UID: ok.UID, Spec: PurgeSpec{Scope: "URLs"}}}}, "purges[0]: urls"},
		{"too many", ActivePurges{Generated: t0, Purges: make([]ActivePurge, MaxActivePurges+1)}, "at most 256"},
	} {
		err := tc.list.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// An exact URL on a host with slicing also names its object's slices, which only a walk
// finds; a host of a site without slicing keeps its purge exact.
func TestPurgeKeysOfSlicedHosts(t *testing.T) {
	spec := PurgeSpec{Scope: "URLs", URLs: []string{"https://v.example/a.mp4", "https://www.example/a", "https://cdn.v.example/b"}}
	got, err := spec.Keys("$host$request_uri", []string{"v.example", "*.v.example"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"v.example/a.mp4", "cdn.v.example/b"}; !slices.Equal(got.Sliced, want) || !got.Walks() {
		t.Errorf("sliced keys %q (walks %t), want %q", got.Sliced, got.Walks(), want)
	}
	if want := encoded("v.example/a.mp4", "www.example/a", "cdn.v.example/b"); !slices.Equal(got.Exact, want) {
		t.Errorf("exact keys %q, want %q", got.Exact, want)
	}
	if got, _ := spec.Keys("$host$request_uri", nil); got.Walks() {
		t.Error("a purge of exact URLs without slicing walks the cache")
	}
	if got, _ := spec.Keys("$host$request_uri", []string{"*"}); len(got.Sliced) != 3 {
		t.Errorf("with every host sliced, sliced keys %q", got.Sliced)
	}
}

func TestHostSliced(t *testing.T) {
	sliced := []string{"v.example", "*.img.example"}
	for host, want := range map[string]bool{
		"v.example": true, "a.img.example": true, "a.b.img.example": true,
		"img.example": false, "www.v.example": false, "xv.example": false, "ximg.example": false,
	} {
		if got := HostSliced(sliced, host); got != want {
			t.Errorf("HostSliced(%q) = %t, want %t", host, got, want)
		}
	}
}

func TestIsSliceOf(t *testing.T) {
	for key, want := range map[string]bool{
		"v.example/a.mp4bytes=0-1048575":       true,
		"v.example/a.mp4bytes=1048576-2097151": true,
		"v.example/a.mp4":                      false, // the whole object: an exact key
		"v.example/a.mp4bytes=0-":              false,
		"v.example/a.mp4.bakbytes=0-1048575":   false,
		"v.example/a.mp4?x=bytes=0-1":          false,
	} {
		if got := IsSliceOf(key, "v.example/a.mp4"); got != want {
			t.Errorf("IsSliceOf(%q) = %t, want %t", key, got, want)
		}
	}
}
