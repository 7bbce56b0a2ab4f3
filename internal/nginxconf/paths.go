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

package nginxconf

import (
	"path/filepath"
	"strconv"
	"time"
)

// The layout of nginx's prefix (the agent's run directory) that nginx.conf names and the
// agent fills.

// TLS files. The cache pod mounts site S's Secret (tls.crt, tls.key) read-only at
// agentapi.TLSSecretDir(S). nginx never reads it there: it reads CertificateFile(S) and
// CertificateKeyFile(S) under its prefix (as NginxCertificateFile names them), in a
// memory-backed directory where the agent copies a pair only once it parsed and matched,
// so a missing or malformed Secret keeps the last good pair serving. TLSDir holds them.
const TLSDir = "tls"

// HotTierDir, under nginx's prefix, holds a sharded cache's hot tier: a memory-backed
// volume of the pod.
const HotTierDir = "hot"

// A hot tier's copy past its seconds answers while one request asks its owner again in
// the background. A copy the owner does not confirm (it refused its answer, or failed)
// would answer for as long as it is asked: the agent removes a copy HotTierStaleGrace
// past its end, looking every HotTierStaleSweep, so none answers more than
// HotTierStaleBound past its seconds.
const (
	HotTierStaleGrace = 5 * time.Second
	HotTierStaleSweep = 5 * time.Second
	HotTierStaleBound = HotTierStaleGrace + HotTierStaleSweep
)

// CertificateFile is the certificate chain nginx reads for site, under its prefix.
func CertificateFile(site string) string { return TLSDir + "/" + site + ".crt" }

// CertificateKeyFile is the private key nginx reads for site, under its prefix.
func CertificateKeyFile(site string) string { return TLSDir + "/" + site + ".key" }

// NginxCertificateFile and NginxCertificateKeyFile are CertificateFile and
// CertificateKeyFile as nginx.conf names them. nginx reads ssl_certificate(_key) relative
// to the directory of the nginx.conf it loads, not to its prefix (-p); the agent installs
// nginx.conf in a directory directly under its run directory (conf-N, reached as conf).
func NginxCertificateFile(site string) string { return "../" + CertificateFile(site) }

// NginxCertificateKeyFile: see NginxCertificateFile.
func NginxCertificateKeyFile(site string) string { return "../" + CertificateKeyFile(site) }

// DiskLinkDir holds, under nginx's prefix (the agent's run directory), one symlink per
// disk, which nginx.conf's proxy_cache_path names (DiskLink). The node agent points it at
// the disk's cache directory, or, while the disk is out of the node's split, at an empty
// directory nginx may not write to: nginx makes a missing cache directory whenever it
// tests or loads a configuration, and through the link it never makes one where a disk
// was unmounted, nor on another filesystem mounted in the disk's place.
const DiskLinkDir = "disks"

// DiskLink is the path, relative to nginx's prefix, through which nginx reaches a disk's cache.
func DiskLink(disk string) string {
	return DiskLinkDir + "/" + disk
}

// StubStatusPath is the location of nginx's stub_status on the loopback status port.
const StubStatusPath = "/stub_status"

// ModulesLink, under nginx's prefix, is the node agent's link to the directory of nginx's
// dynamic modules (ModulesDir): nginx.conf loads them through it, wherever nginx is.
const ModulesLink = "modules"

// BrotliModule is the brotli filter's module (Debian's libnginx-mod-http-brotli-filter),
// as nginx.conf loads it.
const BrotliModule = ModulesLink + "/ngx_http_brotli_filter_module.so"

// ModulesDir is where the Debian packages beside nginx put its dynamic modules:
// /usr/lib/nginx/modules for /usr/sbin/nginx, and the same under the directory the tests
// unpack those packages into.
func ModulesDir(nginxBinary string) string {
	return filepath.Join(filepath.Dir(filepath.Dir(nginxBinary)), "lib", "nginx", "modules")
}

// WithWorkers is conf as the node agent installs it when the CacheNode leaves
// worker_processes to it (workerProcesses: auto): with workers, the container's CPUs,
// first.
func WithWorkers(conf []byte, workers int) []byte {
	return append([]byte("worker_processes "+strconv.Itoa(workers)+"; # the container's CPUs, set by the node agent\n"), conf...)
}
