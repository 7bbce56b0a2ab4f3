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
	"crypto/sha256"
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/nginxconf"
)

// imagesDir is where `make images` leaves the archives and their inputs: imagebuild,
// inputs/ (the binaries) and debs/ (the Debian packages).
func imagesDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("IMAGES_DIR")
	if dir == "" {
		dir = filepath.Join(root, "bin/images")
	}
	if _, err := os.Stat(filepath.Join(dir, "imagebuild")); err != nil {
		t.Fatalf("no image builder in %s: run `make images` first (make test does), or set IMAGES_DIR", dir)
	}
	return dir
}

// readBuilt reads the archive `make images` built for image (operator, cache, pause).
func readBuilt(t *testing.T, image string) *ociImage {
	t.Helper()
	file := filepath.Join(imagesDir(t), image+".tar")
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("%v: run `make images` first (make test does)", err)
	}
	return readArchive(t, file)
}

// normalize names an image as the kubelet finds it in containerd (edgepool/cache:0.1.0
// is docker.io/edgepool/cache:0.1.0).
func normalize(ref string) string {
	if first, _, ok := strings.Cut(ref, "/"); !ok || !strings.ContainsAny(first, ".:") && first != "localhost" {
		return "docker.io/" + ref
	}
	return ref
}

// TestImagesReproducible builds each image twice more from the inputs `make images`
// used, at the time its archive carries: the three archives must be byte for byte
// the same.
func TestImagesReproducible(t *testing.T) {
	dir := imagesDir(t)
	for _, image := range []string{"operator", "cache", "pause"} {
		t.Run(image, func(t *testing.T) {
			made := readBuilt(t, image)
			want := sha256File(t, made.file)
			for i := range 2 {
				out := filepath.Join(t.TempDir(), image+".tar")
				cmd := exec.Command(filepath.Join(dir, "imagebuild"),
					"-spec", filepath.Join(root, "images", image, "image.json"),
					"-inputs", filepath.Join(dir, "inputs"), "-debs", filepath.Join(dir, "debs"),
					"-epoch", strconv.FormatInt(made.config.Created.Unix(), 10), "-out", out)
				if b, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("imagebuild: %v: %s", err, b)
				}
				if got := sha256File(t, out); got != want {
					rebuilt := readArchive(t, out)
					t.Errorf("build %d of %s is not %s: manifest %s, not %s (run `make images` if its spec changed)",
						i+1, image, made.file, rebuilt.digest, made.digest)
				}
			}
		})
	}
}

func sha256File(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(data))
}

// checkArchive checks the archive of image against its Dockerfile: its name, platform,
// user (named in /etc/passwd and /etc/group), entrypoint, and the binaries the
// Dockerfile copies, which must be the ones its go build produces.
func checkArchive(t *testing.T, image string, d dockerfile, name string) *ociImage {
	t.Helper()
	img := readBuilt(t, image)
	checkCommon(t, img, name)
	if img.config.Config.User != d.user {
		t.Errorf("%s: user %q, %s says %q", img.file, img.config.Config.User, d.file, d.user)
	}
	if !slices.Equal(img.config.Config.Entrypoint, d.entrypoint) {
		t.Errorf("%s: entrypoint %q, %s says %q", img.file, img.config.Config.Entrypoint, d.file, d.entrypoint)
	}
	for dest, built := range d.copies {
		want, err := os.ReadFile(built)
		if err != nil {
			t.Fatal(err)
		}
		f := img.lookup(dest)
		switch {
		case f == nil || f.typ != tar.TypeReg:
			t.Errorf("%s: no file %s, which %s copies", img.file, dest, d.file)
		case f.mode&0o111 == 0:
			t.Errorf("%s: %s is not executable (mode %o)", img.file, dest, f.mode)
		case !bytes.Equal(f.data, want):
			t.Errorf("%s: %s is not what %s builds from this tree: run `make images`", img.file, dest, d.file)
		}
	}
	uid, gid, _ := strings.Cut(d.user, ":")
	if gid == "" {
		gid = uid
	}
	for _, db := range []struct{ file, id string }{{"/etc/passwd", uid}, {"/etc/group", gid}} {
		f := img.lookup(db.file)
		if f == nil || !hasID(string(f.data), db.id) {
			t.Errorf("%s: %s does not name the image's user %s", img.file, db.file, d.user)
		}
	}
	return img
}

// hasID reports whether a passwd or group file has an entry with the id (third field).
func hasID(db, id string) bool {
	for _, line := range strings.Split(db, "\n") {
		if f := strings.Split(line, ":"); len(f) >= 3 && f[0] != "" && f[2] == id {
			return true
		}
	}
	return false
}

// checkCommon checks what every image must have: its name for `ctr images import`,
// the platform containerd looks for, files owned by root and no documentation.
func checkCommon(t *testing.T, img *ociImage, name string) {
	t.Helper()
	if img.name != name {
		t.Errorf("%s: ctr imports it as %q, want %q", img.file, img.name, name)
	}
	if _, tag, _ := strings.Cut(path.Base(name), ":"); img.refName != tag {
		t.Errorf("%s: org.opencontainers.image.ref.name %q, want %q", img.file, img.refName, tag)
	}
	if img.platform != "linux/amd64" || img.config.OS+"/"+img.config.Architecture != "linux/amd64" {
		t.Errorf("%s: platform %q in the index and %s/%s in the config, want linux/amd64",
			img.file, img.platform, img.config.OS, img.config.Architecture)
	}
	for p, f := range img.files {
		if f.uid != 0 || f.gid != 0 {
			t.Errorf("%s: %s is owned by %d:%d, want 0:0", img.file, p, f.uid, f.gid)
		}
		for _, doc := range []string{"/usr/share/doc", "/usr/share/man", "/usr/share/lintian"} {
			if p == doc || strings.HasPrefix(p, doc+"/") {
				t.Errorf("%s: ships %s", img.file, p)
			}
		}
	}
}

// pathDirs is the folders of the image's PATH.
func pathDirs(img *ociImage) []string {
	for _, kv := range img.config.Config.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			return strings.Split(v, ":")
		}
	}
	return nil
}

// libraryDirs are the folders the cache image's dynamic loader searches: it has no
// /etc/ld.so.cache, and Debian's loader searches these without one.
var libraryDirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib"}

// TestCacheImageNginx checks the cache image's nginx: its loader and every shared
// library it needs, and those libraries need, are in the image (and libgcc_s, which
// libc loads); and run from an unpacked copy with them, it is built with thread pools
// and stub_status.
func TestCacheImageNginx(t *testing.T) {
	img := readBuilt(t, "cache")
	nginx := img.lookup("/usr/sbin/nginx")
	if nginx == nil || nginx.typ != tar.TypeReg {
		t.Fatalf("%s: no /usr/sbin/nginx", img.file)
	}
	// The brotli module nginx.conf loads (nginxconf.BrotliModule, through the agent's link
	// to /usr/lib/nginx/modules): its libraries are checked as nginx's are.
	module := path.Join(nginxconf.ModulesDir("/usr/sbin/nginx"), path.Base(nginxconf.BrotliModule))
	if m := img.lookup(module); m == nil || m.typ != tar.TypeReg {
		t.Fatalf("%s: no %s", img.file, module)
	}
	interp := ""
	seen := map[string]bool{}
	queue := []string{"/usr/sbin/nginx", module}
	// libc loads libgcc_s at run time to unwind a thread that exits, and nginx's thread
	// pools call pthread_exit when a worker exits: without it, every reload and shutdown
	// aborts the old workers. It is in no DT_NEEDED entry, so it is checked by name.
	for _, lib := range []string{"libgcc_s.so.1"} {
		if !slices.ContainsFunc(libraryDirs, func(dir string) bool {
			l := img.lookup(path.Join(dir, lib))
			return l != nil && l.typ == tar.TypeReg
		}) {
			t.Errorf("%s: libc loads %s for nginx's thread pools, which is in none of %v", img.file, lib, libraryDirs)
		}
	}
	for len(queue) > 0 {
		file := queue[0]
		queue = queue[1:]
		f, err := elf.NewFile(bytes.NewReader(img.lookup(file).data))
		if err != nil {
			t.Fatalf("%s: %s: %v", img.file, file, err)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP && file == "/usr/sbin/nginx" {
				b := make([]byte, p.Filesz)
				if _, err := p.ReadAt(b, 0); err != nil {
					t.Fatal(err)
				}
				interp = strings.TrimRight(string(b), "\x00")
			}
		}
		needed, err := f.ImportedLibraries()
		if err != nil {
			t.Fatalf("%s: %s: %v", img.file, file, err)
		}
		for _, lib := range needed {
			if seen[lib] {
				continue
			}
			seen[lib] = true
			found := ""
			for _, dir := range libraryDirs {
				if l := img.lookup(path.Join(dir, lib)); l != nil && l.typ == tar.TypeReg {
					found = path.Join(dir, lib)
					break
				}
			}
			if found == "" {
				t.Errorf("%s: %s needs %s, which is in none of %v", img.file, file, lib, libraryDirs)
				continue
			}
			queue = append(queue, found)
		}
	}
	if len(seen) < 5 {
		t.Errorf("%s: nginx needs only %v, want Debian's dynamically linked nginx (libc, libcrypt, libpcre2, libssl, libz)",
			img.file, slices.Sorted(maps.Keys(seen)))
	}
	loader := img.resolve(interp)
	if interp == "" || img.files[loader] == nil || img.files[loader].typ != tar.TypeReg {
		t.Fatalf("%s: nginx's loader %q is not in the image", img.file, interp)
	}
	if t.Failed() {
		return
	}

	// Run nginx -V with the image's own loader and libraries. The loader is the image's
	// file the interpreter resolves to: /lib64's link is absolute, so in the unpacked copy
	// it would lead to the host's loader.
	dir := t.TempDir()
	img.unpack(t, dir)
	cmd := exec.Command(filepath.Join(dir, loader),
		"--library-path", filepath.Join(dir, "lib/x86_64-linux-gnu")+":"+filepath.Join(dir, "usr/lib/x86_64-linux-gnu"),
		filepath.Join(dir, "usr/sbin/nginx"), "-V")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nginx -V: %v: %s", err, out)
	}
	// 1.25.4 or later: before, a reload dropped the requests waiting on a thread pool
	// (images/cache/packages.txt). Slices and HTTP/2 serve the sites' large objects and TLS.
	for _, want := range []string{"nginx/1.26", "--with-threads", "--with-http_stub_status_module", "--with-http_slice_module", "--with-http_v2_module"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the cache image's nginx -V lacks %s:\n%s", want, out)
		}
	}
}

// TestPauseImage checks the sandbox image: /pause, static, built from hack/node/pause as
// make images builds it, run as 65535, and the program exits 0 on SIGTERM.
func TestPauseImage(t *testing.T) {
	img := readBuilt(t, "pause")
	checkCommon(t, img, "docker.io/edgepool/pause:0.1.0")
	if img.config.Config.User != "65535:65535" || !slices.Equal(img.config.Config.Entrypoint, []string{"/pause"}) {
		t.Errorf("%s: user %q, entrypoint %q; want 65535:65535 and [/pause]", img.file, img.config.Config.User, img.config.Config.Entrypoint)
	}
	// The flags of the Makefile's IMAGE_GOBUILD (there is no Dockerfile to read them from).
	built := buildStatic(t, []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w"}, "./hack/node/pause")
	want, err := os.ReadFile(built)
	if err != nil {
		t.Fatal(err)
	}
	if f := img.lookup("/pause"); f == nil || f.typ != tar.TypeReg || f.mode&0o111 == 0 {
		t.Errorf("%s: no executable /pause", img.file)
	} else if !bytes.Equal(f.data, want) {
		t.Errorf("%s: /pause is not hack/node/pause built from this tree: run `make images`", img.file)
	}

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(built)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			t.Fatalf("pause exited before a signal: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("pause after %v: %v, want exit 0", sig, err)
			}
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("pause ignored %v", sig)
		}
	}
}
