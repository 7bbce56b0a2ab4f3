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
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// pushedName is where an image named ref (docker.io/edgepool/cache:0.1.0) goes in
// registry (host[:port][/path]): registry/edgepool/cache:0.1.0.
func pushedName(ref, registry string) (name.Tag, error) {
	src, err := name.NewTag(ref)
	if err != nil {
		return name.Tag{}, fmt.Errorf("the image's name %q: %w", ref, err)
	}
	registry = strings.TrimSuffix(registry, "/")
	if registry == "" || strings.Contains(registry, "://") {
		return name.Tag{}, fmt.Errorf("registry %q: want host[:port][/path], no scheme", registry)
	}
	dst, err := name.NewTag(registry + "/" + src.RepositoryStr() + ":" + src.TagStr())
	if err != nil {
		return name.Tag{}, fmt.Errorf("registry %q: %w", registry, err)
	}
	return dst, nil
}

// push sends img to registry under its own repository and tag, with the credentials of
// the Docker config (`docker login`, or none), and returns the reference pinned by digest.
// A registry on localhost or 127.0.0.1 is spoken to over plain HTTP, as docker does.
func push(img v1.Image, ref, registry string) (string, error) {
	dst, err := pushedName(ref, registry)
	if err != nil {
		return "", err
	}
	if err := remote.Write(dst, img, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("push %s: %w", dst, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	return dst.Context().Digest(digest.String()).String(), nil
}
