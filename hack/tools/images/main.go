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

// Command imagebuild builds one container image, described by a small JSON spec
// (images/*/image.json), as a reproducible OCI image-layout tar archive that
// `ctr -n k8s.io images import` loads under the spec's name.
//
// It uses go-containerregistry because nothing else fits here: there is no Docker
// engine and no registry; ko only puts a Go binary on a base image and cannot add
// Debian packages; buildah and kaniko need a container runtime or push to a registry.
//
// The same inputs give the same digest: files are written in sorted order as root
// (0:0) with one fixed time (-epoch), layers are gzipped by the standard library
// with fixed settings, and the config carries nothing from the host.
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// spec describes one image.
type spec struct {
	// Name is the full reference, e.g. docker.io/edgepool/cache:0.1.0.
	Name       string   `json:"name"`
	User       string   `json:"user"`
	Entrypoint []string `json:"entrypoint"`
	Env        []string `json:"env"`
	// Packages is a list of Debian packages (relative to the spec), unpacked in a layer
	// of their own below the other files.
	Packages string `json:"packages,omitempty"`
	// Debian is the Debian release (suite) the packages come from, e.g. trixie.
	Debian string `json:"debian,omitempty"`
	// Links are symbolic links (path to target) added with the packages: the folders that
	// Debian's base-files links into /usr (/lib64 -> usr/lib64, where the loader is).
	Links map[string]string `json:"links,omitempty"`
	// Accounts are written to /etc/passwd and /etc/group, one group per user.
	Accounts []account `json:"accounts,omitempty"`
	// Text files (path to content), mode 0644.
	Text map[string]string `json:"text,omitempty"`
	// Files are executables copied from the -inputs folder, mode 0755.
	Files []struct {
		Src string `json:"src"`
		Dst string `json:"dst"`
	} `json:"files"`
}

type account struct {
	Name string `json:"name"`
	ID   int    `json:"id"`
	Home string `json:"home"`
}

func main() {
	epoch := int64(0)
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var err error
		if epoch, err = strconv.ParseInt(s, 10, 64); err != nil {
			fatalf("SOURCE_DATE_EPOCH: %v", err)
		}
	}
	specFile := flag.String("spec", "", "The image's spec (JSON).")
	inputs := flag.String("inputs", ".", "The folder holding the spec's files (the built binaries).")
	debs := flag.String("debs", "", "The folder of downloaded .deb files (in a folder per Debian release), reused when present.")
	download := flag.Bool("download", false, "Download missing packages with apt-get download.")
	extractTo := flag.String("extract", "", "Also unpack the image's Debian packages into this folder (for tests that run its programs on this machine).")
	out := flag.String("out", "", "The OCI archive to write.")
	registry := flag.String("push", "", "Also push the image to this registry, host[:port][/path], under its own repository and tag (credentials: the Docker config).")
	flag.Int64Var(&epoch, "epoch", epoch, "The time of every file and of the image, in seconds since 1970 (default $SOURCE_DATE_EPOCH or 0).")
	flag.Parse()
	if *specFile == "" || (*out == "" && *extractTo == "") {
		fatalf("-spec and -out (or -extract) are required")
	}
	start := time.Now()
	s, err := readSpec(*specFile)
	if err != nil {
		fatalf("%v", err)
	}
	b := builder{spec: s, inputs: *inputs, time: time.Unix(epoch, 0).UTC()}
	if s.Packages != "" {
		if *debs == "" {
			fatalf("%s lists Debian packages: -debs is required", *specFile)
		}
		if s.Debian == "" {
			fatalf("%s lists Debian packages: its debian (release) is required", *specFile)
		}
		list := filepath.Join(filepath.Dir(*specFile), s.Packages)
		if b.packages, err = resolvePackages(list, s.Debian, filepath.Join(*debs, s.Debian), *download); err != nil {
			fatalf("%v", err)
		}
		if *extractTo != "" {
			if err := extract(b.packages, *extractTo); err != nil {
				fatalf("%v", err)
			}
		}
	}
	if *out == "" {
		return
	}
	img, err := b.image()
	if err != nil {
		fatalf("%s: %v", s.Name, err)
	}
	digest, err := write(img, s.Name, *out, b.time)
	if err != nil {
		fatalf("%s: %v", s.Name, err)
	}
	info, err := os.Stat(*out)
	if err != nil {
		fatalf("%v", err)
	}
	fmt.Printf("%-12s %s %s %d bytes, built in %.1fs\n", filepath.Base(*out), s.Name, digest, info.Size(), time.Since(start).Seconds())
	if len(b.packages) > 0 {
		fmt.Printf("%-12s debian: %s\n", "", versions(b.packages))
	}
	if *registry != "" {
		pushed, err := push(img, s.Name, *registry)
		if err != nil {
			fatalf("%v", err)
		}
		fmt.Printf("%-12s pushed %s\n", "", pushed)
	}
}

func readSpec(file string) (*spec, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var s spec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	if s.Name == "" || len(s.Entrypoint) == 0 || s.User == "" {
		return nil, fmt.Errorf("%s: name, user and entrypoint are required", file)
	}
	return &s, nil
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "imagebuild: "+format+"\n", args...)
	os.Exit(1)
}

// compression is the layers' gzip level: a change changes every digest.
const compression = gzip.DefaultCompression
