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
// package's .deb in dir, downloading the missing ones from the Debian suite when download
// is set. The .debs present are the inputs: a newer version in the archive is not fetched.
func resolvePackages(list, suite, dir string, download bool) ([]debPackage, error) {
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
		if err := aptDownload(dir, suite, missing); err != nil {
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

// aptDownload fetches the packages' candidate versions from suite into dir. apt runs on
// a state of its own under dir (its sources, lists and cache): the machine's apt sources
// name its own Debian release, and are neither read nor changed. The Release files are
// verified with the machine's Debian archive keyring.
func aptDownload(dir, suite string, names []string) error {
	state := filepath.Join(dir, ".apt")
	for _, d := range []string{"lists/partial", "cache/archives/partial", "sources.list.d"} {
		if err := os.MkdirAll(filepath.Join(state, d), 0o755); err != nil {
			return err
		}
	}
	const keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
	sources := fmt.Sprintf(`deb [signed-by=%[1]s] http://deb.debian.org/debian %[2]s main
deb [signed-by=%[1]s] http://deb.debian.org/debian %[2]s-updates main
deb [signed-by=%[1]s] http://deb.debian.org/debian-security %[2]s-security main
`, keyring, suite)
	if err := os.WriteFile(filepath.Join(state, "sources.list"), []byte(sources), 0o644); err != nil {
		return err
	}
	apt := func(args ...string) ([]byte, error) {
		opts := []string{"-q",
			"-o", "Dir::Etc::SourceList=" + filepath.Join(state, "sources.list"),
			"-o", "Dir::Etc::SourceParts=" + filepath.Join(state, "sources.list.d"),
			"-o", "Dir::State::Lists=" + filepath.Join(state, "lists"),
			"-o", "Dir::Cache=" + filepath.Join(state, "cache"),
			"-o", "Dir::State::Status=/dev/null",
			"-o", "APT::Sandbox::User=root"}
		cmd := exec.Command("apt-get", append(opts, args...)...)
		cmd.Dir = dir
		return cmd.CombinedOutput()
	}
	if out, err := apt("update"); err != nil {
		return fmt.Errorf("apt-get update (%s): %w: %s", suite, err, out)
	}
	args := []string{"download"}
	for _, n := range names {
		args = append(args, n+":"+arch)
	}
	if out, err := apt(args...); err != nil {
		return fmt.Errorf("apt-get download (%s): %w: %s", suite, err, out)
	}
	return nil
}

// extract unpacks the packages into dir, as dpkg would install them (without running
// their scripts): a root holding the image's programs and their libraries. dir is made
// anew unless it already holds these very versions (its .versions file says which), so
// that a test running them meanwhile is left alone.
func extract(pkgs []debPackage, dir string) error {
	stamp := filepath.Join(dir, ".versions")
	if have, err := os.ReadFile(stamp); err == nil && string(have) == versions(pkgs) {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range pkgs {
		if out, err := exec.Command("dpkg-deb", "--extract", p.file, dir).CombinedOutput(); err != nil {
			return fmt.Errorf("dpkg-deb --extract %s: %w: %s", p.file, err, out)
		}
	}
	return os.WriteFile(stamp, []byte(versions(pkgs)), 0o644)
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
