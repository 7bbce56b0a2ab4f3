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
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations that name the image for `ctr images import` (containerd 1.6 reads the
// first, then the second) and the label that records the Debian packages.
const (
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"
	labelPackages       = "io.edgepool.debian-packages"
)

// entry is one file of a layer; its owner is root and its time the image's.
type entry struct {
	origin string // the package or input it comes from, for conflicts
	typ    byte
	mode   int64
	data   []byte
	link   string
}

// tree is a layer's files by path ("usr/sbin/nginx").
type tree map[string]*entry

// add adds e at name, with any missing parent folders. Folders may repeat; other
// paths may only repeat with the same content.
func (t tree) add(name string, e *entry) error {
	if old, ok := t[name]; ok {
		same := old.typ == e.typ && old.link == e.link && bytes.Equal(old.data, e.data) &&
			(old.mode == e.mode || e.typ == tar.TypeDir)
		if !same {
			return fmt.Errorf("/%s from %s differs from the one from %s", name, e.origin, old.origin)
		}
		return nil
	}
	if dir := path.Dir(name); dir != "." {
		if parent, ok := t[dir]; ok && parent.typ != tar.TypeDir {
			return fmt.Errorf("/%s from %s is under /%s, which is not a folder", name, e.origin, dir)
		} else if !ok {
			if err := t.add(dir, &entry{origin: e.origin, typ: tar.TypeDir, mode: 0o755}); err != nil {
				return err
			}
		}
	}
	t[name] = e
	return nil
}

// tar writes the tree as an uncompressed layer, in sorted order (a folder before its
// contents).
func (t tree) tar(mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range slices.Sorted(maps.Keys(t)) {
		e := t[name]
		hdr := &tar.Header{Typeflag: e.typ, Name: name, Mode: e.mode, ModTime: mtime, Linkname: e.link}
		switch e.typ {
		case tar.TypeDir:
			hdr.Name += "/"
		case tar.TypeReg:
			hdr.Size = int64(len(e.data))
		case tar.TypeLink:
			if target, ok := t[e.link]; !ok || target.typ != tar.TypeReg {
				return nil, fmt.Errorf("/%s from %s links to /%s, which is not a file of the layer", name, e.origin, e.link)
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("write layer: %w", err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("write layer: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("write layer: %w", err)
	}
	return buf.Bytes(), nil
}

// builder assembles one image.
type builder struct {
	spec     *spec
	inputs   string
	packages []debPackage
	time     time.Time
}

// layers returns the image's layers, each with what its history says of it: the
// Debian packages (which change rarely) below the accounts and the binaries.
func (b *builder) layers() (trees []tree, createdBy []string, err error) {
	if len(b.packages) > 0 {
		t := tree{}
		for _, p := range b.packages {
			if err := unpack(t, p); err != nil {
				return nil, nil, err
			}
		}
		for _, name := range slices.Sorted(maps.Keys(b.spec.Links)) {
			if err := t.add(clean(name), &entry{origin: "spec", typ: tar.TypeSymlink, mode: 0o777, link: b.spec.Links[name]}); err != nil {
				return nil, nil, err
			}
		}
		trees = append(trees, t)
		createdBy = append(createdBy, "imagebuild: debian packages "+versions(b.packages))
	}
	t := tree{}
	var added []string
	text := maps.Clone(b.spec.Text)
	if len(b.spec.Accounts) > 0 {
		var passwd, group strings.Builder
		for _, a := range b.spec.Accounts {
			fmt.Fprintf(&passwd, "%s:x:%d:%d:%s:%s:/sbin/nologin\n", a.Name, a.ID, a.ID, a.Name, a.Home)
			fmt.Fprintf(&group, "%s:x:%d:\n", a.Name, a.ID)
		}
		if text == nil {
			text = map[string]string{}
		}
		text["/etc/passwd"], text["/etc/group"] = passwd.String(), group.String()
	}
	for _, name := range slices.Sorted(maps.Keys(text)) {
		if err := t.add(clean(name), &entry{origin: "spec", typ: tar.TypeReg, mode: 0o644, data: []byte(text[name])}); err != nil {
			return nil, nil, err
		}
		added = append(added, name)
	}
	for _, f := range b.spec.Files {
		data, err := os.ReadFile(filepath.Join(b.inputs, f.Src))
		if err != nil {
			return nil, nil, fmt.Errorf("read input: %w", err)
		}
		if err := t.add(clean(f.Dst), &entry{origin: f.Src, typ: tar.TypeReg, mode: 0o755, data: data}); err != nil {
			return nil, nil, err
		}
		added = append(added, f.Dst)
	}
	trees = append(trees, t)
	createdBy = append(createdBy, "imagebuild: files "+strings.Join(added, " "))
	return trees, createdBy, nil
}

// image assembles the image from the spec.
func (b *builder) image() (v1.Image, error) {
	trees, createdBy, err := b.layers()
	if err != nil {
		return nil, err
	}
	name, tag := splitRef(b.spec.Name)
	labels := map[string]string{
		"org.opencontainers.image.title":   name,
		"org.opencontainers.image.version": tag,
	}
	if len(b.packages) > 0 {
		labels[labelPackages] = versions(b.packages)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: arch,
		OS:           "linux",
		Created:      v1.Time{Time: b.time},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			User:       b.spec.User,
			Entrypoint: b.spec.Entrypoint,
			Env:        b.spec.Env,
			WorkingDir: "/",
			Labels:     labels,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("set config: %w", err)
	}
	for i, t := range trees {
		data, err := t.tar(b.time)
		if err != nil {
			return nil, err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithCompressionLevel(compression), tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
		if err != nil {
			return nil, fmt.Errorf("compress layer: %w", err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     layer,
			MediaType: types.OCILayer,
			History:   v1.History{Created: v1.Time{Time: b.time}, CreatedBy: createdBy[i]},
		})
		if err != nil {
			return nil, fmt.Errorf("append layer: %w", err)
		}
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// splitRef splits docker.io/edgepool/cache:0.1.0 into its name and tag.
func splitRef(ref string) (name, tag string) {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[:i], ref[i+1:]
	}
	return ref, "latest"
}

// write writes img, named ref, as an OCI image-layout archive at out, its files dated
// mtime, and returns its manifest's digest.
func write(img v1.Image, ref, out string, mtime time.Time) (v1.Hash, error) {
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("compute digest: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return v1.Hash{}, err
	}
	dir, err := os.MkdirTemp(filepath.Dir(out), ".imagebuild-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("write layout: %w", err)
	}
	_, tag := splitRef(ref)
	err = p.AppendImage(img,
		layout.WithAnnotations(map[string]string{annotationImageName: ref, annotationRefName: tag}),
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: arch}))
	if err != nil {
		return v1.Hash{}, fmt.Errorf("write layout: %w", err)
	}
	tmp := filepath.Join(dir, "image.tar")
	if err := tarFolder(filepath.Join(dir, "layout"), tmp, mtime); err != nil {
		return v1.Hash{}, err
	}
	if err := os.Rename(tmp, out); err != nil {
		return v1.Hash{}, err
	}
	return digest, nil
}

// tarFolder writes the files under dir to an uncompressed tar, in lexical order, as
// root with the time mtime.
func tarFolder(dir, out string, mtime time.Time) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime}
		if d.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			return tw.WriteHeader(hdr)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = f.Close()
	}
	if err != nil {
		return fmt.Errorf("write archive: %w", err)
	}
	return nil
}
