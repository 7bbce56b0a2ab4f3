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

package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agent/nginxlog"
	"github.com/edgepool/edgepool/internal/agent/requestlog"
	"github.com/edgepool/edgepool/internal/nginxconf"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// nginxProc is an nginx master started on a rendered configuration. As root, its
// workers run as nginx's default user (nobody), like the unprivileged cache pod.
type nginxProc struct {
	*testkit.Process
	prefix  string
	hotTier string // the hot tier's tmpfs, mounted under prefix
	log     *testkit.Buffer
	// The node agent's reader, queue and parser of the per-request lines, in nginx's
	// working directory (lines) with the metrics they count.
	lines    string
	requests *requestlog.Listener
	metrics  *requestlog.Metrics
}

// listenRequests reads the per-request lines as the node agent does, in a directory of
// their own where nginx's workers (nobody) may send them.
func (n *nginxProc) listenRequests(diskNames []string) error {
	dir, err := os.MkdirTemp("", "edgepool-bench-lines-")
	if err != nil {
		return err
	}
	n.lines, n.metrics = dir, requestlog.NewMetrics(diskNames)
	path := filepath.Join(dir, nginxconf.RequestLogSocket)
	if n.requests, err = requestlog.Listen(path, 4096, n.metrics.Dropped(requestlog.DropQueueFull)); err != nil {
		return err
	}
	go n.requests.Serve(n.metrics.Handle)
	return errors.Join(os.Chmod(dir, 0o755), os.Chmod(path, 0o777))
}

// diskNames are the names of spec's disks.
func diskNames(spec *v1alpha1.CacheNodeSpec) []string {
	names := make([]string, len(spec.Disks))
	for i, d := range spec.Disks {
		names[i] = d.Name
	}
	return names
}

// lineCounts are the per-request lines counted, and those dropped (by nginx, which said
// so in its error stream, or by the reader).
func (n *nginxProc) lineCounts() (counted, dropped int64) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(n.metrics.Collectors()...)
	families, _ := reg.Gather()
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "edgepool_requests_total":
				counted += int64(m.GetCounter().GetValue())
			case "edgepool_request_lines_dropped_total":
				dropped += int64(m.GetCounter().GetValue())
			}
		}
	}
	for _, line := range strings.Split(n.log.String(), "\n") {
		if nginxlog.Classify(line).Kind == nginxlog.RequestLineDropped {
			dropped++
		}
	}
	return counted, dropped
}

func startNginx(ctx context.Context, bin, conf string, spec *v1alpha1.CacheNodeSpec) (*nginxProc, error) {
	return startNginxWith(ctx, bin, conf, spec, nil, 0)
}

// startNginxWith is startNginx with files (by path relative to nginx's prefix: the
// certificates the node agent would write) in place first, at niceness nice.
func startNginxWith(ctx context.Context, bin, conf string, spec *v1alpha1.CacheNodeSpec, files map[string][]byte, nice int) (*nginxProc, error) {
	prefix, err := os.MkdirTemp("", "edgepool-bench-nginx-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(prefix, 0o755); err != nil { // the workers, as nobody, reach the disks through it
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(prefix, "tmp"), 0o755); err != nil {
		return nil, err
	}
	if err := testkit.LinkPrefix(prefix, bin, spec.Disks); err != nil {
		return nil, err
	}
	for name, data := range files {
		path := filepath.Join(prefix, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, data, 0o600); err != nil { // read by the master, as root
			return nil, err
		}
	}
	// In a directory under the prefix, as the node agent installs it: nginx reads the
	// certificates relative to it.
	if err := os.Mkdir(filepath.Join(prefix, "conf"), 0o755); err != nil {
		return nil, err
	}
	file := filepath.Join(prefix, "conf", "nginx.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, bin, "-t", "-q", "-p", prefix, "-c", file).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nginx -t: %v: %s", err, out)
	}
	n := &nginxProc{prefix: prefix, log: &testkit.Buffer{}}
	if err := n.mountHotTier(spec); err != nil {
		n.stop()
		return nil, err
	}
	if err := n.listenRequests(diskNames(spec)); err != nil {
		n.stop()
		return nil, err
	}
	cmd := niced(context.WithoutCancel(ctx), nice, bin, "-p", prefix, "-c", file)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdout, cmd.Stderr, cmd.Dir = n.log, n.log, n.lines
	if n.Process, err = testkit.Start(cmd); err != nil {
		n.stop()
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", spec.Listener.Port)
	listenCtx, cancel := testkit.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := n.Poll(listenCtx, 20*time.Millisecond, "nginx to listen on "+addr, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		n.stop()
		return nil, fmt.Errorf("%w: %s", err, n.log)
	}
	return n, nil
}

// mountHotTier mounts, for a spec with a hot tier, a tmpfs of the pod's volume's size
// where nginx keeps the copies, as the pod's memory-backed volume: on the machine's own
// disk the copies could leave the page cache under the cold load.
func (n *nginxProc) mountHotTier(spec *v1alpha1.CacheNodeSpec) error {
	if spec.Sharding == nil || spec.Sharding.HotTier == nil {
		return nil
	}
	dir := filepath.Join(n.prefix, nginxconf.HotTierDir)
	if err := os.MkdirAll(dir, 0o755); err != nil { // nginx -t may have made it
		return err
	}
	// As an emptyDir: writable by nginx's workers.
	opts := fmt.Sprintf("size=%d,mode=0777", spec.Sharding.HotTier.VolumeBytes())
	if err := syscall.Mount("edgepool-bench-hot", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount the hot tier's tmpfs on %s: %w", dir, err)
	}
	n.hotTier = dir
	return nil
}

// stop shuts nginx down fast (SIGTERM) and kills what is left after 10 s.
func (n *nginxProc) stop() {
	if n.Process != nil {
		_ = n.Stop(10 * time.Second)
	}
	if n.requests != nil {
		_ = n.requests.Close()
	}
	if n.hotTier != "" {
		_ = syscall.Unmount(n.hotTier, syscall.MNT_DETACH)
	}
	_ = os.RemoveAll(n.lines)
	_ = os.RemoveAll(n.prefix)
}

// logTail is the end of nginx's log, for an error to show.
func (n *nginxProc) logTail() string {
	log := n.log.String()
	if len(log) > 2048 {
		log = "..." + log[len(log)-2048:]
	}
	if log == "" {
		return "(empty)"
	}
	return log
}

// count returns how many lines of nginx's log contain s.
func (n *nginxProc) count(s string) int { return strings.Count(n.log.String(), s) }

// origin serves every object with fixed headers (no Date, ETag or Last-Modified), so
// nginx writes the same response headers into every cache file.
type origin struct {
	srv      *http.Server
	addr     string
	size     int64
	requests atomic.Int64
}

func startOrigin(size int64) (*origin, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := &origin{addr: l.Addr().String(), size: size}
	o.srv = &http.Server{Handler: o, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = o.srv.Serve(l) }()
	return o, nil
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.requests.Add(1)
	id, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, objectPrefix))
	if err != nil || !strings.HasPrefix(r.URL.Path, objectPrefix) {
		http.NotFound(w, r)
		return
	}
	w.Header()["Date"] = nil
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(o.size, 10))
	buf := make([]byte, 64<<10)
	for off := int64(0); off < o.size; off += int64(len(buf)) {
		chunk := buf[:min(int64(len(buf)), o.size-off)]
		Body(id, chunk, off)
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

func (o *origin) close() { _ = o.srv.Close() }

// fetchObject GETs object id from the cache at addr, checks every byte and returns the
// response's header.
func fetchObject(ctx context.Context, c *http.Client, addr string, id int, size int64) (http.Header, error) {
	r, err := testkit.Fetch(ctx, c, "http://"+addr+ObjectPath(id), nil)
	if err != nil {
		return nil, err
	}
	if r.Code != http.StatusOK {
		return nil, fmt.Errorf("%s: %d %s", ObjectPath(id), r.Code, http.StatusText(r.Code))
	}
	return r.Header, VerifyBody(id, size, r.Body)
}

// copyHotObject asks for the hot object until a hot tier answers it from its copy (the
// copy is made at the hot tier's minUses-th request), so that a window measures the copy
// in use, not the moment it is made (the requests that arrive meanwhile go to the owner:
// a closed-loop window's first requests).
func copyHotObject(ctx context.Context, c *http.Client, addr string, size int64) error {
	const tries = 10
	for range tries {
		header, err := fetchObject(ctx, c, addr, 0, size)
		if err != nil {
			return err
		}
		if header.Get("X-Hot-Cache-Status") == "HIT" {
			return nil
		}
	}
	return fmt.Errorf("the hot tier did not answer %s from a copy in %d requests", ObjectPath(0), tries)
}
