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

// Package httpcache_test checks the HTTP caching edgepool renders against RFC 9111, the
// way the public HTTP caching test suite (cache-tests.fyi) and leak probes do: a real
// nginx runs a configuration rendered from a CacheNode spec, in front of a real origin
// (net/http) that numbers its responses and records the requests it gets. Each test
// names the section of the RFC it checks. A response "shared" with a second client is
// one the second client got without the origin hearing of its request.
package httpcache_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agent/requestlog"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

var nginxBinary string

func TestMain(m *testing.M) {
	nginxBinary = os.Getenv("NGINX_BIN")
	if nginxBinary == "" {
		var err error
		if nginxBinary, err = exec.LookPath("nginx"); err != nil {
			fmt.Fprintln(os.Stderr, "nginx not found: run `make test`, which installs it, or set NGINX_BIN")
			os.Exit(1)
		}
	}
	compressAll = os.Getenv(compressAllEnv) != "" // a test run again in a namespace of its own
	code := m.Run()
	if code == 0 && !compressAll && !testkit.InNetnsRun() {
		// The suite again, every cache compressing and every request of get accepting gzip:
		// the loopback servers a compressing cache fills through keep every rule it checks.
		fmt.Println("=== the suite again, with compression (compressAll)")
		compressAll = true
		os.Setenv(compressAllEnv, "1")
		code = m.Run()
	}
	os.Exit(code)
}

// compressAll is set for the suite's second pass: see TestMain.
var compressAll bool

// compressAllEnv passes compressAll to the tests testkit.InOwnNetns runs again.
const compressAllEnv = "EDGEPOOL_HTTPCACHE_COMPRESS_ALL"

// compressing turns compression on in spec for the suite's second pass.
func compressing(t testing.TB, spec *v1alpha1.CacheNodeSpec) {
	if compressAll && spec.Compression == nil {
		t.Log("the suite's second pass: with compression")
		spec.Compression = &v1alpha1.Compression{}
		spec.Default()
	}
}

// origin is the origin server. Tests register a handler per path; every response is
// numbered per path, and the requests are kept.
type origin struct {
	addr string

	mu       sync.Mutex
	handlers map[string]http.HandlerFunc
	requests map[string][]http.Header
}

func startOrigin(t testing.TB) *origin {
	t.Helper()
	o := &origin{handlers: map[string]http.HandlerFunc{}, requests: map[string][]http.Header{}}
	srv := httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(srv.Close)
	o.addr = srv.Listener.Addr().String()
	return o
}

func (o *origin) serve(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	h := o.handlers[r.URL.Path]
	hdr := r.Header.Clone()
	hdr.Set("Host", r.Host)
	o.requests[r.URL.Path] = append(o.requests[r.URL.Path], hdr)
	o.mu.Unlock()
	if h == nil {
		http.NotFound(w, r)
		return
	}
	h(w, r)
}

// handle serves path with h.
func (o *origin) handle(path string, h http.HandlerFunc) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.handlers[path] = h
}

// respond serves path with status and header; the body names the path, the response's
// number and the credentials of the request it answers, so a response served to the
// wrong client shows.
func (o *origin) respond(path string, status int, header http.Header) {
	o.handle(path, func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
		fmt.Fprintf(w, "%s response %d for %q %q", path, o.count(path), r.Header.Get("Authorization"), r.Header.Get("Cookie"))
	})
}

// count is the number of requests for path the origin received.
func (o *origin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.requests[path])
}

// last is the last request for path the origin received.
func (o *origin) last(path string) http.Header {
	o.mu.Lock()
	defer o.mu.Unlock()
	reqs := o.requests[path]
	if len(reqs) == 0 {
		return nil
	}
	return reqs[len(reqs)-1]
}

// cacheNode is a running nginx on a configuration rendered from a CacheNode spec.
type cacheNode struct {
	base   string
	client *http.Client
	proc   *testkit.Process
	// file is its nginx.conf.
	file string
	// metrics are what the node agent would count of its per-request lines.
	metrics *requestlog.Metrics
	// log is nginx's stderr.
	log *testkit.Buffer
}

// startCache renders a defaulted CacheNode spec whose cache policy is changed by policy
// (the defaults if nil), with one disk in a temporary directory, filling from o, and
// runs nginx on it. Without the node agent nginx runs one worker (the agent would set
// worker_processes); as root, the worker runs as nobody, like the cache pod's.
func startCache(t testing.TB, o *origin, policy func(*v1alpha1.CachePolicy)) *cacheNode {
	t.Helper()
	return startCacheSpec(t, o, func(spec *v1alpha1.CacheNodeSpec) {
		if policy != nil {
			policy(&spec.Cache)
		}
	})
}

// startCacheSpec is startCache with the defaulted spec changed by edit.
func startCacheSpec(t testing.TB, o *origin, edit func(*v1alpha1.CacheNodeSpec)) *cacheNode {
	t.Helper()
	dir, prefix, disk := cacheDirs(t)
	spec := &v1alpha1.CacheNodeSpec{
		Disks:  []v1alpha1.Disk{{Name: "disk0", Path: disk, Media: v1alpha1.MediaSSD, Size: resource.MustParse("256Mi")}},
		Origin: v1alpha1.Origin{Servers: []string{o.addr}},
	}
	for _, p := range []*int32{&spec.Listener.Port, &spec.Listener.StatusPort} {
		port, err := testkit.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		*p = port
	}
	spec.Default()
	edit(spec)
	compressing(t, spec)
	conf, err := render.NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	return runNginx(t, dir, prefix, conf, spec.Disks, fmt.Sprintf("127.0.0.1:%d", spec.Listener.Port))
}

// cacheDirs makes the directories of a cache: a temporary directory holding nginx's
// prefix (with its tmp/) and a disk.
func cacheDirs(t testing.TB) (dir, prefix, disk string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "edgepool-httpcache-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	prefix, disk = filepath.Join(dir, "prefix"), filepath.Join(dir, "disk")
	for _, d := range []string{dir, prefix, filepath.Join(prefix, "tmp"), disk} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil { // the worker may run as nobody
			t.Fatal(err)
		}
	}
	return dir, prefix, disk
}

// runNginx runs nginx on conf (written into dir) under prefix with disks linked as the
// node agent links them, and waits until addr, its client port, accepts connections.
func runNginx(t testing.TB, dir, prefix, conf string, disks []v1alpha1.Disk, addr string) *cacheNode {
	t.Helper()
	if err := testkit.LinkPrefix(prefix, nginxBinary, disks); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}

	metrics := requestlog.NewMetrics(nil)
	sink, err := testkit.NewRequestLogSinkFunc(metrics.Handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sink.Close() })
	log := &testkit.Buffer{}
	cmd := exec.Command(nginxBinary, "-e", "stderr", "-p", prefix+"/", "-c", file)
	cmd.Stdout, cmd.Stderr, cmd.Dir = log, log, sink.Dir
	proc, err := testkit.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = proc.Stop(10 * time.Second)
		if t.Failed() {
			conf, _ := os.ReadFile(file)
			t.Logf("nginx.conf:\n%s\nnginx log:\n%s", conf, log)
		}
	})
	ctx, cancel := testkit.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := proc.Poll(ctx, 20*time.Millisecond, "nginx to listen on "+addr, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	return &cacheNode{
		base: "http://" + addr,
		// No redirects followed, no Accept-Encoding added: the test's request is all
		// that is sent.
		client: &http.Client{
			Timeout:       10 * time.Second,
			Transport:     &http.Transport{DisableCompression: true},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		proc:    proc,
		file:    file,
		metrics: metrics,
		log:     log,
	}
}

// droppedLines is the number of per-request lines nginx could not send: a datagram
// socket queues 10 (net.unix.max_dgram_qlen), and a burst of requests can find the
// reader behind. nginx logs each.
func (n *cacheNode) droppedLines() int {
	return strings.Count(n.log.String(), "send() to syslog failed while logging request")
}

// storedFile is the cache file of key on disk: the response stored under key or, of a
// compressing cache, under the key of one of its encodings; "" if there is none.
func storedFile(disk, key string) string {
	for _, k := range append([]string{key}, encodedKeys(key)...) {
		file := filepath.Join(disk, agentapi.DiskCacheDir, agentapi.CacheFile(k))
		if _, err := os.Stat(file); err == nil {
			return file
		}
	}
	return ""
}

// encodedKeys are the keys of key's encodings.
func encodedKeys(key string) []string {
	var keys []string
	for _, e := range agentapi.Encodings {
		keys = append(keys, e+":"+key)
	}
	return keys
}

// get requests path with the given header fields (key, value, key, value, ...).
func (c *cacheNode) get(t testing.TB, path string, header ...string) *testkit.Response {
	t.Helper()
	return c.getOver(t, c.client, path, header...)
}

// getOver is get over client's connections.
func (c *cacheNode) getOver(t testing.TB, client *http.Client, path string, header ...string) *testkit.Response {
	t.Helper()
	h := http.Header{}
	for i := 0; i+1 < len(header); i += 2 {
		h.Add(header[i], header[i+1])
	}
	if _, ok := h["Accept-Encoding"]; compressAll && !ok {
		h.Set("Accept-Encoding", "gzip")
	}
	r, err := testkit.Fetch(context.Background(), client, c.base+path, h)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return r
}

// cacheStatus is nginx's $upstream_cache_status for a response: HIT, MISS, EXPIRED,
// STALE, REVALIDATED, BYPASS, UPDATING, or empty when the cache was not consulted.
func cacheStatus(r *testkit.Response) string { return r.Header.Get("X-Cache-Status") }

func describe(r *testkit.Response) string {
	return fmt.Sprintf("%d %s, cache status %q: %q", r.Code, http.StatusText(r.Code), cacheStatus(r), r.Body)
}

// untilNotHit requests path (with the header fields) until the cache stops answering it as a fresh HIT (the
// stored response went stale), and returns that response.
func (c *cacheNode) untilNotHit(t testing.TB, path string, header ...string) *testkit.Response {
	t.Helper()
	ctx, cancel := testkit.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var r *testkit.Response
	if err := testkit.Eventually(ctx, 100*time.Millisecond, path+" to go stale", func() error {
		r = c.get(t, path, header...)
		if cacheStatus(r) == "HIT" {
			return errors.New("still a HIT")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return r
}

// exchange is what two clients got for the same path, one after the other.
type exchange struct {
	first, second *testkit.Response
	requests      int // requests for the path the origin received
}

// twoClients requests path as one client with the header fields first, then as another
// with second.
func (c *cacheNode) twoClients(t testing.TB, o *origin, path string, first, second []string) exchange {
	t.Helper()
	var e exchange
	e.first = c.get(t, path, first...)
	e.second = c.get(t, path, second...)
	e.requests = o.count(path)
	return e
}

// shared says whether the second client got the first client's response from the cache.
func (e exchange) shared() bool {
	return e.requests < 2 || string(e.second.Body) == string(e.first.Body)
}

func (e exchange) String() string {
	return fmt.Sprintf("first client got %s; second got %s; the origin received %d requests",
		describe(e.first), describe(e.second), e.requests)
}

// header is an http.Header of key, value pairs.
func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// holdUntilReleased is a channel for an origin's handler to wait on, closed by release,
// or at the test's end.
func holdUntilReleased(t testing.TB) (held <-chan struct{}, release func()) {
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	return ch, release
}

// overOneConnection is a client that keeps one connection to a cache and sends each
// request over it while the cache lets it, as a load balancer's pool or a browser does.
// A request the cache did not read within 5s fails.
func overOneConnection() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableCompression: true, MaxConnsPerHost: 1}}
}

// pathFor turns a test name into a path of its own, of letters, digits and - _ only.
func pathFor(t testing.TB) string {
	return "/" + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_':
			return r
		case r == '/':
			return '-'
		}
		return '_'
	}, t.Name())
}
