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
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPushToARegistry pushes a built image to a registry (go-containerregistry's
// implementation of the distribution API, served on 127.0.0.1) under a path of the
// user's, and reads it back by tag and by the digest push printed.
func TestPushToARegistry(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")

	b := builder{spec: &spec{
		Name: "docker.io/edgepool/cache:0.1.0", User: "101:101",
		Text: map[string]string{"/etc/hello": "hi\n"},
	}, time: time.Unix(0, 0).UTC()}
	img, err := b.image()
	if err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	pushed, err := push(img, b.spec.Name, host+"/team/")
	if err != nil {
		t.Fatal(err)
	}
	if pushed != host+"/team/edgepool/cache@"+want.String() {
		t.Errorf("push returned %s, want the image's repository in the registry pinned by its digest %s", pushed, want)
	}
	for _, ref := range []string{host + "/team/edgepool/cache:0.1.0", pushed} {
		r, err := name.ParseReference(ref)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Image(r)
		if err != nil {
			t.Fatalf("%s: %v", ref, err)
		}
		if d, _ := got.Digest(); d != want {
			t.Errorf("%s has digest %s, want %s", ref, d, want)
		}
	}

	for _, bad := range []string{"", "https://registry.example", "Registry Example"} {
		if _, err := pushedName(b.spec.Name, bad); err == nil {
			t.Errorf("registry %q accepted", bad)
		}
	}
}
