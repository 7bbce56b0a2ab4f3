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

// Package sites_test runs a real nginx on configurations rendered from CacheNodes with
// sites, in front of real origins (net/http), and talks to it as clients do: SNI, HTTP/2
// over TLS, session resumption, redirects, unmatched hosts. The certificates are made in
// the test; nginx reads them where the node agent puts them.
package sites_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/certs"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// origin answers every request with its name, the Host it was asked for and the path,
// cacheable for a minute, and keeps the Host headers it got.
type origin struct {
	name string
	addr string

	mu    sync.Mutex
	hosts []string
}

func startOrigin(t testing.TB, name string) *origin {
	t.Helper()
	o := &origin{name: name}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.hosts = append(o.hosts, r.Host)
		o.mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "%s %s %s", o.name, r.Host, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	o.addr = srv.Listener.Addr().String()
	return o
}

func (o *origin) lastHost() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.hosts) == 0 {
		return ""
	}
	return o.hosts[len(o.hosts)-1]
}

// cache is a running nginx on a configuration rendered from a CacheNode with sites.
type cache struct {
	plain, tls string // 127.0.0.1:port
	roots      *x509.CertPool
	nginx      *testkit.Process
}

// startCache renders spec (its disks, ports and workers are filled in here: two
// workers with reuseport) with a self-signed certificate per site with tls, and runs
// nginx on it as the node agent would: nginx.conf in a directory under the prefix, the
// pairs under the prefix's tls/.
func startCache(t testing.TB, spec *v1alpha1.CacheNodeSpec) *cache {
	t.Helper()
	nginxBin, err := testkit.NginxBinary()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "edgepool-sites-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	prefix, disk, confDir := filepath.Join(dir, "prefix"), filepath.Join(dir, "disk"), filepath.Join(dir, "prefix", "conf-1")
	for _, d := range []string{dir, prefix, filepath.Join(prefix, "tmp"), disk, confDir} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil { // the workers may run as nobody
			t.Fatal(err)
		}
	}
	spec.Disks = []v1alpha1.Disk{{Name: "disk0", Path: disk, Media: v1alpha1.MediaSSD, Size: resource.MustParse("256Mi")}}
	for _, p := range []*int32{&spec.Listener.Port, &spec.Listener.StatusPort, &spec.Listener.TLSPort} {
		port, err := testkit.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		*p = port
	}
	spec.Listener.WorkerProcesses = ptr.To(intstr.FromInt32(2))
	spec.Listener.ReusePort = ptr.To(true)
	spec.Default()
	conf, err := render.NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	for _, c := range render.Facts(spec, conf).Certificates {
		cert, key, err := certs.SelfSigned(nil, c.Hostnames...)
		if err != nil {
			t.Fatal(err)
		}
		if err := certs.WriteCertificate(prefix, c.Site, cert, key); err != nil {
			t.Fatal(err)
		}
		roots.AppendCertsFromPEM(cert)
	}
	if err := testkit.LinkPrefix(prefix, nginxBin, spec.Disks); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(confDir, agentapi.ConfigKey)
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	sink, err := testkit.NewRequestLogSink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	log := &testkit.Buffer{}
	cmd := exec.Command(nginxBin, "-e", "stderr", "-p", prefix+"/", "-c", file)
	cmd.Stdout, cmd.Stderr, cmd.Dir = log, log, sink.Dir
	proc, err := testkit.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = proc.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("nginx.conf:\n%s\nnginx log:\n%s", conf, log)
		}
	})
	c := &cache{
		plain: fmt.Sprintf("127.0.0.1:%d", spec.Listener.Port),
		tls:   fmt.Sprintf("127.0.0.1:%d", spec.Listener.TLSPort),
		roots: roots, nginx: proc,
	}
	ctx, cancel := testkit.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := proc.Poll(ctx, 20*time.Millisecond, "nginx's two workers to listen", func() error {
		if workers, err := testkit.NginxWorkers(proc.Pid()); err != nil || len(workers) != 2 {
			return fmt.Errorf("workers %v: %v", workers, err)
		}
		conn, err := net.DialTimeout("tcp", c.plain, time.Second)
		if err == nil {
			conn.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	return c
}

// client is an HTTP client that reaches the cache whatever the URL's host: the URL's
// host is the Host asked for and, over https, the SNI and the name verified.
func (c *cache) client(h2 bool) *http.Client {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		target := c.plain
		if strings.HasSuffix(addr, ":443") {
			target = c.tls
		}
		return (&net.Dialer{}).DialContext(ctx, network, target)
	}
	tr := &http.Transport{
		DialContext:        dial,
		TLSClientConfig:    &tls.Config{RootCAs: c.roots},
		ForceAttemptHTTP2:  h2,
		DisableCompression: true,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{} // HTTP/1.1 only
	}
	return &http.Client{
		Timeout:       10 * time.Second,
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// get GETs url through client and returns the response with its body read.
func get(t testing.TB, client *http.Client, url string) *testkit.Response {
	t.Helper()
	r, err := testkit.Fetch(context.Background(), client, url, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return r
}

// handshake opens a TLS connection to the cache's TLS port with cfg.
func (c *cache) handshake(cfg *tls.Config) (*tls.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", c.tls, cfg)
}

// request sends one HTTP/1.1 request for path on conn and reads the response: over TLS
// 1.3 the session tickets arrive after the handshake, with the first data read.
func request(conn *tls.Conn, host, path string) (*http.Response, error) {
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	_, err = bufio.NewReader(resp.Body).WriteTo(discard{})
	return resp, err
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// worker is the nginx worker that holds the server side of conn, a connection from this
// process to the cache.
func (c *cache) worker(conn net.Conn) (int, error) {
	return c.workerOf(conn.LocalAddr().(*net.TCPAddr).Port)
}

// workerOf is the nginx worker that holds the server side of the loopback connection
// from clientPort: the process whose file descriptors include the socket whose
// addresses are the client's, swapped (from /proc/net/tcp).
func (c *cache) workerOf(clientPort int) (int, error) {
	inode := ""
	for _, f := range procNetTCP() {
		// Established (01) and held by a process: a connection of an earlier test that
		// used the same client port lingers in TIME_WAIT, with inode 0.
		if port(f[2]) == clientPort && port(f[1]) != clientPort && f[3] == "01" && f[9] != "0" {
			inode = f[9]
		}
	}
	if inode == "" {
		return 0, fmt.Errorf("no socket to port %d in /proc/net/tcp", clientPort)
	}
	workers, err := testkit.NginxWorkers(c.nginx.Pid())
	if err != nil {
		return 0, err
	}
	for _, w := range workers {
		if holds(w, inode) {
			return w, nil
		}
	}
	return 0, fmt.Errorf("no worker of %v holds socket %s", workers, inode)
}

// clientPort is the local port of process pid's TCP connection.
func clientPort(pid int) (int, error) {
	for _, f := range procNetTCP() {
		if f[3] == "01" && holds(pid, f[9]) { // ESTABLISHED
			return port(f[1]), nil
		}
	}
	return 0, fmt.Errorf("process %d has no established TCP connection", pid)
}

// procNetTCP are the fields of /proc/net/tcp's lines: local, remote address (hex
// ip:port) at 1 and 2, state at 3, inode at 9.
func procNetTCP() [][]string {
	data, _ := os.ReadFile("/proc/net/tcp")
	var out [][]string
	for _, line := range strings.Split(string(data), "\n")[1:] {
		if f := strings.Fields(line); len(f) >= 10 {
			out = append(out, f)
		}
	}
	return out
}

// holds says whether process pid has socket inode open.
func holds(pid int, inode string) bool {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); link == "socket:["+inode+"]" {
			return true
		}
	}
	return false
}

// port reads the port of a /proc/net/tcp address (hex ip:hex port).
func port(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	v, _ := strconv.ParseUint(p, 16, 16)
	return int(v)
}
