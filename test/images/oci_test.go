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

package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// An OCI image-layout archive, read with the standard library only (the product's
// module does not depend on go-containerregistry).

// ociImage is the one image of an OCI archive, its layers applied in order.
type ociImage struct {
	file     string
	name     string // io.containerd.image.name
	refName  string // org.opencontainers.image.ref.name
	platform string // in the index, os/architecture
	digest   string // the manifest's
	config   struct {
		Created      time.Time `json:"created"`
		OS           string    `json:"os"`
		Architecture string    `json:"architecture"`
		Config       struct {
			User       string
			Entrypoint []string
			Env        []string
			Labels     map[string]string
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	files map[string]*imageFile // by absolute path
}

type imageFile struct {
	typ      byte
	mode     int64
	uid, gid int
	link     string
	data     []byte
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

// readArchive reads an OCI archive, checking every blob against its digest and every
// layer against its diff_id.
func readArchive(t *testing.T, file string) *ociImage {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if entries[hdr.Name], err = io.ReadAll(tr); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
		}
	}
	blob := func(digest string) []byte {
		t.Helper()
		data, ok := entries["blobs/"+strings.Replace(digest, ":", "/", 1)]
		if !ok {
			t.Fatalf("%s: no blob %s", file, digest)
		}
		if got := fmt.Sprintf("sha256:%x", sha256.Sum256(data)); got != digest {
			t.Fatalf("%s: blob %s has digest %s", file, digest, got)
		}
		return data
	}
	unmarshal := func(data []byte, v any, what string) {
		t.Helper()
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("%s: %s: %v", file, what, err)
		}
	}
	if _, ok := entries["oci-layout"]; !ok {
		t.Fatalf("%s: no oci-layout: not an OCI image layout", file)
	}
	var index struct{ Manifests []descriptor }
	unmarshal(entries["index.json"], &index, "index.json")
	if len(index.Manifests) != 1 {
		t.Fatalf("%s: %d manifests in index.json, want 1", file, len(index.Manifests))
	}
	m := index.Manifests[0]
	img := &ociImage{file: file, name: m.Annotations["io.containerd.image.name"],
		refName: m.Annotations["org.opencontainers.image.ref.name"], digest: m.Digest, files: map[string]*imageFile{}}
	if m.Platform != nil {
		img.platform = m.Platform.OS + "/" + m.Platform.Architecture
	}
	var manifest struct {
		Config descriptor
		Layers []descriptor
	}
	unmarshal(blob(m.Digest), &manifest, "manifest")
	unmarshal(blob(manifest.Config.Digest), &img.config, "config")
	if len(manifest.Layers) != len(img.config.RootFS.DiffIDs) {
		t.Fatalf("%s: %d layers, %d diff_ids", file, len(manifest.Layers), len(img.config.RootFS.DiffIDs))
	}
	for i, l := range manifest.Layers {
		if l.MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Fatalf("%s: layer %s is %s", file, l.Digest, l.MediaType)
		}
		zr, err := gzip.NewReader(bytes.NewReader(blob(l.Digest)))
		if err != nil {
			t.Fatalf("%s: layer %s: %v", file, l.Digest, err)
		}
		layer, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("%s: layer %s: %v", file, l.Digest, err)
		}
		if got := fmt.Sprintf("sha256:%x", sha256.Sum256(layer)); got != img.config.RootFS.DiffIDs[i] {
			t.Fatalf("%s: layer %s has diff_id %s, the config says %s", file, l.Digest, got, img.config.RootFS.DiffIDs[i])
		}
		img.apply(t, layer)
	}
	return img
}

// apply adds a layer's files (no whiteouts: the images are built, not derived).
func (img *ociImage) apply(t *testing.T, layer []byte) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", img.file, err)
		}
		name := path.Clean("/" + hdr.Name)
		if strings.HasPrefix(path.Base(name), ".wh.") {
			t.Fatalf("%s: whiteout %s", img.file, name)
		}
		f := &imageFile{typ: hdr.Typeflag, mode: hdr.Mode, uid: hdr.Uid, gid: hdr.Gid, link: hdr.Linkname}
		switch hdr.Typeflag {
		case tar.TypeReg:
			if f.data, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		case tar.TypeLink:
			target := img.files[path.Clean("/"+hdr.Linkname)]
			if target == nil {
				t.Fatalf("%s: hard link %s to a missing %s", img.file, name, hdr.Linkname)
			}
			f.typ, f.data = tar.TypeReg, target.data
		case tar.TypeSymlink, tar.TypeDir:
		default:
			t.Fatalf("%s: %s has type %q", img.file, name, hdr.Typeflag)
		}
		img.files[name] = f
	}
}

// resolve follows symlinks within the image (in every component of p) and returns the
// path they lead to.
func (img *ociImage) resolve(p string) string {
	parts := strings.Split(strings.Trim(path.Clean("/"+p), "/"), "/")
	cur := "/"
	for hops := 0; len(parts) > 0 && hops < 40; {
		next := path.Join(cur, parts[0])
		parts = parts[1:]
		f := img.files[next]
		if f == nil || f.typ != tar.TypeSymlink {
			cur = next
			continue
		}
		hops++
		target := f.link
		if !path.IsAbs(target) {
			target = path.Join(cur, target)
		}
		parts = append(strings.Split(strings.Trim(path.Clean(target), "/"), "/"), parts...)
		cur = "/"
	}
	return cur
}

// lookup returns the file at p, symlinks followed, or nil.
func (img *ociImage) lookup(p string) *imageFile {
	return img.files[img.resolve(p)]
}

// unpack writes the image's folders, files and symlinks (as they are) under dir.
func (img *ociImage) unpack(t *testing.T, dir string) {
	t.Helper()
	for name, f := range img.files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch f.typ {
		case tar.TypeReg:
			err = os.WriteFile(p, f.data, os.FileMode(f.mode&0o777))
		case tar.TypeSymlink:
			err = os.Symlink(f.link, p)
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
