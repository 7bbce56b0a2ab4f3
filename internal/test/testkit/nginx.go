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
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
	"github.com/edgepool/edgepool/internal/test/certs"
)

var (
	// listenPort is a listen directive's port, on every IPv4 address or on loopback's first.
	listenPort = regexp.MustCompile(`(?m)^(\s*listen )(?:127\.0\.0\.1:)?(\d+)`)
	// listenPort6 is a listen directive's port on every IPv6 address.
	listenPort6 = regexp.MustCompile(`(?m)^(\s*listen )\[::\]:(\d+)`)
	// loopbackUpstream is the server of an upstream on loopback (compression's), whose
	// servers listenPort moves.
	loopbackUpstream = regexp.MustCompile(`(?m)^(\s*upstream edgepool_loopback\w* \{ server )127\.0\.0\.1:(\d+)`)
)

// ListenOn has every listen of conf on the address of its family among addrs (the first
// one of the family), the loopback servers' upstreams with them: several nginx on loopback addresses of their own stand for the pods
// of a sharded CacheNode, each listening where the ring names it.
func ListenOn(conf string, addrs ...netip.Addr) string {
	if i := slices.IndexFunc(addrs, netip.Addr.Is4); i >= 0 {
		conf = listenPort.ReplaceAllString(conf, "${1}"+addrs[i].String()+":${2}")
		conf = loopbackUpstream.ReplaceAllString(conf, "${1}"+addrs[i].String()+":${2}")
	}
	if i := slices.IndexFunc(addrs, netip.Addr.Is6); i >= 0 {
		conf = listenPort6.ReplaceAllString(conf, "${1}["+addrs[i].String()+"]:${2}")
	}
	return conf
}

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
	upstreamServerRE = regexp.MustCompile(`(?m)^(\s*server )([^\s\[;]+):([0-9]+);$`)
)

// NginxT runs `nginx -t` on conf, a rendered nginx.conf, in dir (an empty temporary
// directory), as the node agent does before it loads a configuration. Two things of the
// node are not on a test machine, so they are stood in for:
//   - the disks: nginx reaches each through a link under its prefix (nginxconf.DiskLink),
//     which the agent makes; here the link's directory is made, and nginx makes each
//     disk's entry in it as a plain directory;
//   - DNS: upstream servers named by a DNS name point at localhost instead, since nginx
//     resolves names when it loads a configuration. A name's syntax is the allowlists'
//     business (schema and renderer); that it resolves is the cluster's;
//   - the certificates (render.Facts' Certificates), which the agent copies from the
//     mounted Secrets: a throwaway self-signed pair for each;
//   - the modules' link (LinkModules).
//
// nginx.conf goes where the agent installs it, in a directory under the prefix (nginx
// reads includes and certificates relative to it). It returns nginx's complaint, if any,
// warnings included.
func NginxT(nginx, conf, dir string, sites ...agentapi.Certificate) error {
	prefix := filepath.Join(dir, "prefix") + "/"
	if err := certs.WriteCertificates(prefix, sites); err != nil {
		return err
	}
	for _, sub := range []string{"tmp", nginxconf.DiskLinkDir, "conf"} {
		if err := os.MkdirAll(filepath.Join(prefix, sub), 0o755); err != nil {
			return err
		}
	}
	if err := LinkModules(prefix, nginx); err != nil {
		return err
	}
	conf = upstreamServerRE.ReplaceAllStringFunc(conf, func(line string) string {
		m := upstreamServerRE.FindStringSubmatch(line)
		if _, err := netip.ParseAddr(m[2]); err == nil {
			return line
		}
		return m[1] + "localhost:" + m[3] + ";"
	})
	file := filepath.Join(prefix, "conf", agentapi.ConfigKey)
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		return err
	}
	out, err := exec.Command(nginx, "-t", "-q", "-e", "stderr", "-p", prefix, "-c", file).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nginx -t: %w: %s", err, bytes.TrimSpace(out))
	}
	// A warning is a directive nginx deprecates or ignores: a rendered configuration has none.
	if bytes.Contains(out, []byte("[warn]")) {
		return fmt.Errorf("nginx -t warns: %s", bytes.TrimSpace(out))
	}
	return nil
}

// LinkModules links nginx's modules under prefix, as the node agent does
// (nginxconf.ModulesLink): nginx.conf loads them through it.
func LinkModules(prefix, nginx string) error {
	return os.Symlink(nginxconf.ModulesDir(nginx), filepath.Join(prefix, nginxconf.ModulesLink))
}

// LinkPrefix makes what the node agent makes before nginx (the binary nginx) starts on a
// rendered nginx.conf under prefix: the modules' link (LinkModules), each disk's cache
// directory, if missing, and the link to it through which nginx reaches it
// (nginxconf.DiskLink). A cache directory it makes is everyone's: tests run as root, and
// nginx's workers then as nobody.
func LinkPrefix(prefix, nginx string, disks []v1alpha1.Disk) error {
	if err := os.MkdirAll(filepath.Join(prefix, nginxconf.DiskLinkDir), 0o755); err != nil {
		return err
	}
	if err := LinkModules(prefix, nginx); err != nil {
		return err
	}
	for _, d := range disks {
		cache := filepath.Join(d.Path, agentapi.DiskCacheDir)
		switch err := os.Mkdir(cache, 0o777); {
		case err == nil:
			if err := os.Chmod(cache, 0o777); err != nil { // past the umask
				return err
			}
		case !errors.Is(err, os.ErrExist):
			return err
		}
		if err := os.Symlink(cache, filepath.Join(prefix, nginxconf.DiskLink(d.Name))); err != nil {
			return err
		}
	}
	return nil
}
