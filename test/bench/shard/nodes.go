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

package shard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// node is one cache pod: nginx on a loopback address of its own, with one disk (a
// directory), on the configuration the operator renders; each listen names the node's
// address, as a pod's network namespace has only its own.
type node struct {
	addr   netip.Addr
	dir    string
	spec   *v1alpha1.CacheNodeSpec
	file   string
	sink   *testkit.RequestLogSink
	proc   *testkit.Process
	log    *testkit.Buffer
	nginx  string
	client *http.Client
}

// newNode prepares node i of a fleet (127.0.0.2+i) whose nginx fills from origin.
func newNode(i int, nginx, origin string, ports [3]int32, diskBytes int64, m mode) (*node, error) {
	dir, err := os.MkdirTemp("", "edgepool-bench-shard-")
	if err != nil {
		return nil, err
	}
	n := &node{addr: netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + i)}), dir: dir, nginx: nginx, log: &testkit.Buffer{}}
	disk := filepath.Join(dir, "disk")
	for _, d := range []string{dir, filepath.Join(dir, "prefix", "tmp"), disk} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			return nil, err
		}
		if err := os.Chmod(d, 0o777); err != nil { // the workers run as nobody
			return nil, err
		}
	}
	n.spec = &v1alpha1.CacheNodeSpec{
		Disks:    []v1alpha1.Disk{{Name: "disk0", Path: disk, Media: v1alpha1.MediaSSD, Size: *resource.NewQuantity(diskBytes, resource.BinarySI)}},
		Origin:   v1alpha1.Origin{Servers: []string{origin}},
		Listener: v1alpha1.Listener{Port: ports[0], StatusPort: ports[1], WorkerProcesses: ptrIntStr(1)},
	}
	if m != independent {
		n.spec.Sharding = &v1alpha1.Sharding{PeerPort: ports[2]}
	}
	if m == shardedHot {
		n.spec.Sharding.HotTier = &v1alpha1.HotTier{Size: *resource.NewQuantity(hotTierBytes, resource.BinarySI)}
	}
	n.spec.Default()
	if err := testkit.LinkPrefix(n.prefix(), n.nginx, n.spec.Disks); err != nil {
		return nil, err
	}
	n.file = filepath.Join(dir, "nginx.conf")
	n.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DisableCompression: true, MaxIdleConnsPerHost: 64, IdleConnTimeout: 2 * time.Second}}
	return n, nil
}

// mode is how a fleet's nodes share the keys.
type mode int

const (
	independent mode = iota // each node a cache of its own
	sharded                 // spec.sharding
	shardedHot              // spec.sharding with a hot tier of hotTierBytes
)

// hotTierBytes is each node's hot tier in the shardedHot fleet.
const hotTierBytes = 4 << 20

func (n *node) prefix() string { return filepath.Join(n.dir, "prefix") }

// url is the node's client-facing address.
func (n *node) url(path string) string {
	return "http://" + netip.AddrPortFrom(n.addr, uint16(n.spec.Listener.Port)).String() + path
}

// write renders the node's nginx.conf with ring members.
func (n *node) write(members []render.Member) error {
	conf, err := render.NginxConfRing(n.spec, members)
	if err != nil {
		return err
	}
	return os.WriteFile(n.file, []byte(testkit.ListenOn(conf, n.addr)), 0o644)
}

// start runs nginx on the ring members and waits until it listens.
func (n *node) start(ctx context.Context, members []render.Member) error {
	if err := n.write(members); err != nil {
		return err
	}
	if n.sink == nil {
		sink, err := testkit.NewRequestLogSink()
		if err != nil {
			return err
		}
		n.sink = sink
	}
	cmd := exec.Command(n.nginx, "-e", "stderr", "-p", n.prefix()+"/", "-c", n.file)
	cmd.Stdout, cmd.Stderr, cmd.Dir = n.log, n.log, n.sink.Dir
	proc, err := testkit.Start(cmd)
	if err != nil {
		return err
	}
	n.proc = proc
	addr := netip.AddrPortFrom(n.addr, uint16(n.spec.Listener.Port)).String()
	wait, cancel := testkit.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := proc.Poll(wait, 20*time.Millisecond, "nginx to listen on "+addr, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}); err != nil {
		return fmt.Errorf("%w: %s", err, n.log)
	}
	return nil
}

// reload has nginx load the ring members, as the agent does on a new configuration.
func (n *node) reload(members []render.Member) error {
	if err := n.write(members); err != nil {
		return err
	}
	return syscall.Kill(n.proc.Pid(), syscall.SIGHUP)
}

// reloadAll reloads nodes with members and waits until each runs it.
func reloadAll(ctx context.Context, nodes []*node, members []render.Member) error {
	olds := make([][]int, len(nodes))
	for i, n := range nodes {
		var err error
		if olds[i], err = testkit.NginxWorkers(n.proc.Pid()); err != nil {
			return err
		}
		if err := n.reload(members); err != nil {
			return err
		}
	}
	wait, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for i, n := range nodes {
		n.client.CloseIdleConnections()
		if err := testkit.WaitWorkersReplaced(wait, n.proc.Pid(), olds[i]); err != nil {
			return err
		}
	}
	return nil
}

// quit stops nginx gracefully (SIGQUIT, as the agent on the pod's SIGTERM): it finishes
// the requests it holds.
func (n *node) quit() error {
	if err := syscall.Kill(n.proc.Pid(), syscall.SIGQUIT); err != nil {
		return err
	}
	select {
	case <-n.proc.Done():
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("nginx did not quit within 30 s")
	}
}

func (n *node) close() {
	if n.proc != nil {
		_ = n.proc.Stop(10 * time.Second)
	}
	if n.sink != nil {
		_ = n.sink.Close()
	}
	_ = os.RemoveAll(n.dir)
}

// fleet is the nodes of one configuration (sharded or not) and their ring.
type fleet struct {
	nodes []*node
}

func (f *fleet) members() []render.Member {
	m := make([]render.Member, len(f.nodes))
	for i, n := range f.nodes {
		m[i] = render.Member{Name: fmt.Sprintf("node-%d", i), Addr: n.addr}
	}
	return m
}

func startFleet(ctx context.Context, count int, nginx, origin string, diskBytes int64, m mode) (*fleet, error) {
	var ports [3]int32
	for i := range ports {
		p, err := testkit.FreePort()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	f := &fleet{}
	for i := range count {
		n, err := newNode(i, nginx, origin, ports, diskBytes, m)
		if err != nil {
			f.close()
			return nil, err
		}
		f.nodes = append(f.nodes, n)
	}
	for _, n := range f.nodes {
		if err := n.start(ctx, f.members()); err != nil {
			f.close()
			return nil, err
		}
	}
	return f, nil
}

func (f *fleet) close() {
	for _, n := range f.nodes {
		n.close()
	}
}

// origin serves object i of the bench's key space at /o/<i>, sizes by id, cacheable; it
// counts what it serves.
type origin struct {
	srv      *http.Server
	addr     string
	requests atomic.Int64
	bytes    atomic.Int64
	mu       sync.Mutex
	perPath  map[string]int
}

func startOrigin() (*origin, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := &origin{addr: l.Addr().String(), perPath: map[string]int{}}
	body := make([]byte, maxObjectBytes)
	o.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.Atoi(filepath.Base(r.URL.Path))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		size := objectBytes(id)
		o.requests.Add(1)
		o.bytes.Add(size)
		o.mu.Lock()
		o.perPath[r.URL.Path]++
		o.mu.Unlock()
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		_, _ = w.Write(body[:size])
	})}
	go func() { _ = o.srv.Serve(l) }()
	return o, nil
}

// fetched is how many requests for path the origin served.
func (o *origin) fetched(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.perPath[path]
}

func (o *origin) close() { _ = o.srv.Close() }

// Object sizes: 4 to 16 KiB by id, so bytes and requests weigh objects differently.
const maxObjectBytes = 16 << 10

func objectBytes(id int) int64 { return int64(4<<10) * int64(1+id%4) }
