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

package testkit

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
)

// NginxBinary finds nginx built with thread pools: $NGINX_BIN, else nginx on the PATH
// (`make test` installs it). A missing nginx is an error, for the tests to fail on rather
// than skip.
func NginxBinary() (string, error) {
	nginx := os.Getenv("NGINX_BIN")
	if nginx == "" {
		var err error
		if nginx, err = exec.LookPath("nginx"); err != nil {
			return "", fmt.Errorf("nginx not found: run `make test` (it installs nginx) or set NGINX_BIN")
		}
	}
	out, err := exec.Command(nginx, "-V").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--with-threads")) {
		return "", fmt.Errorf("%s -V: want an nginx built --with-threads, got %v: %s", nginx, err, out)
	}
	return nginx, nil
}

var (
	cachePathRE      = regexp.MustCompile(`(?m)^(\s*proxy_cache_path )(/\S+) `)
	upstreamServerRE = regexp.MustCompile(`(?m)^(\s*server )([^\s\[;]+):([0-9]+);$`)
)

// NginxT runs `nginx -t` on conf, a rendered nginx.conf, in dir (an empty temporary
// directory), as the node agent does before it loads a configuration. Two things of the
// node are not on a test machine, so they are stood in for:
//   - the disks: every proxy_cache_path is moved under dir, and made (on a node the disk's
//     path exists; nginx makes only its last component);
//   - DNS: upstream servers named by a DNS name point at localhost instead, since nginx
//     resolves names when it loads a configuration. A name's syntax is the allowlists'
//     business (schema and renderer); that it resolves is the cluster's.
//
// It returns nginx's complaint, if any.
func NginxT(nginx, conf, dir string) error {
	prefix := filepath.Join(dir, "prefix") + "/"
	if err := os.MkdirAll(filepath.Join(prefix, "tmp"), 0o755); err != nil {
		return err
	}
	var mkdirErr error
	conf = cachePathRE.ReplaceAllStringFunc(conf, func(line string) string {
		m := cachePathRE.FindStringSubmatch(line)
		moved := filepath.Join(dir, "disks", m[2])
		if err := os.MkdirAll(moved, 0o755); err != nil {
			mkdirErr = err
		}
		return m[1] + moved + " "
	})
	if mkdirErr != nil {
		return mkdirErr
	}
	conf = upstreamServerRE.ReplaceAllStringFunc(conf, func(line string) string {
		m := upstreamServerRE.FindStringSubmatch(line)
		if _, err := netip.ParseAddr(m[2]); err == nil {
			return line
		}
		return m[1] + "localhost:" + m[3] + ";"
	})
	file := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		return err
	}
	out, err := exec.Command(nginx, "-t", "-q", "-e", "stderr", "-p", prefix, "-c", file).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nginx -t: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
