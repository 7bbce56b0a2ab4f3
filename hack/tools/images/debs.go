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
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
)

// arch is the images' architecture; packages are downloaded for it.
const arch = "amd64"

// dropped are folders of packages that an image does not ship.
var dropped = []string{"usr/share/doc", "usr/share/man", "usr/share/lintian"}

// debPackage is one downloaded .deb.
type debPackage struct {
	name, version, file string
}

// resolvePackages reads a package list (a name per line, # comments) and finds each
// package's .deb in dir, downloading the missing ones when download is set. The .debs
// present are the inputs: a newer version in the archive is not fetched.
func resolvePackages(list, dir string, download bool) ([]debPackage, error) {
	names, err := readList(list)
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, n := range names {
		if files, _ := filepath.Glob(filepath.Join(dir, n+"_*.deb")); len(files) == 0 {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		if !download {
			return nil, fmt.Errorf("no .deb in %s for %s (download them with -download)", dir, strings.Join(missing, ", "))
		}
		if err := aptDownload(dir, missing); err != nil {
			return nil, err
		}
	}
	var pkgs []debPackage
	for _, n := range names {
		files, _ := filepath.Glob(filepath.Join(dir, n+"_*.deb"))
		if len(files) != 1 {
			return nil, fmt.Errorf("%d .debs of %s in %s, want one: remove the stale ones", len(files), n, dir)
		}
		fields, err := exec.Command("dpkg-deb", "--field", files[0], "Package", "Version", "Architecture").Output()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", files[0], err)
		}
		f := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(fields)), "\n") {
			k, v, _ := strings.Cut(line, ": ")
			f[k] = v
		}
		if f["Package"] != n || (f["Architecture"] != arch && f["Architecture"] != "all") {
			return nil, fmt.Errorf("%s is %s for %s, want %s for %s", files[0], f["Package"], f["Architecture"], n, arch)
		}
		pkgs = append(pkgs, debPackage{name: n, version: f["Version"], file: files[0]})
	}
	return pkgs, nil
}

func readList(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			names = append(names, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s lists no package", file)
	}
	return names, nil
}

// aptDownload fetches the packages' candidate versions into dir, updating apt's lists
// once if they do not know a package.
func aptDownload(dir string, names []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := []string{"download", "-q", "-o", "APT::Sandbox::User=root"}
	for _, n := range names {
		args = append(args, n+":"+arch)
	}
	get := func() ([]byte, error) {
		cmd := exec.Command("apt-get", args...)
		cmd.Dir = dir
		return cmd.CombinedOutput()
	}
	if _, err := get(); err == nil {
		return nil
	}
	if out, err := exec.Command("apt-get", "update", "-qq").CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get update: %w: %s", err, out)
	}
	if out, err := get(); err != nil {
		return fmt.Errorf("apt-get download: %w: %s", err, out)
	}
	return nil
}

// unpack adds a package's files to t, less the dropped folders.
func unpack(t tree, p debPackage) error {
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", p.file)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("dpkg-deb: %w", err)
	}
	err = unpackTar(t, p.name, tar.NewReader(out))
	io.Copy(io.Discard, out)
	if werr := cmd.Wait(); err == nil && werr != nil {
		err = fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w", p.file, werr)
	}
	return err
}

func unpackTar(t tree, origin string, tr *tar.Reader) error {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", origin, err)
		}
		name := clean(hdr.Name)
		if name == "" || isDropped(name) {
			continue
		}
		e := &entry{origin: origin, typ: hdr.Typeflag, mode: hdr.Mode & 0o7777}
		switch hdr.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			if e.data, err = io.ReadAll(tr); err != nil {
				return fmt.Errorf("read %s: %w", origin, err)
			}
		case tar.TypeSymlink:
			e.link = hdr.Linkname
		case tar.TypeLink:
			e.link = clean(hdr.Linkname)
		default:
			return fmt.Errorf("%s: %s has unsupported type %q", origin, name, hdr.Typeflag)
		}
		if err := t.add(name, e); err != nil {
			return err
		}
	}
}

// clean turns an archive path ("./usr/sbin/", "/etc/passwd") into a tree key
// ("usr/sbin", "etc/passwd"); the root is "".
func clean(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

func isDropped(name string) bool {
	for _, d := range dropped {
		if name == d || strings.HasPrefix(name, d+"/") {
			return true
		}
	}
	return false
}

// versions is "name=version ..." for labels and the summary.
func versions(pkgs []debPackage) string {
	var s []string
	for _, p := range pkgs {
		s = append(s, p.name+"="+p.version)
	}
	return strings.Join(s, " ")
}
