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

// Package agent_test runs the real edgepool-agent binary supervising real nginx, with
// configurations rendered by edgepool's renderer. The tests need root (as CI has) to
// mount filesystems for the disk checks and to run the agent as an unprivileged user,
// the way the cache pod runs it.
package agent_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

var agentBinary, nginxBinary string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "the agent tests need root (to mount test disks and drop to an unprivileged user); run them as root, as `make test` in CI does")
		os.Exit(1)
	}
	var err error
	if nginxBinary, err = testkit.NginxBinary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "edgepool-agent-bin-")
	if err != nil {
		panic(err)
	}
	must(os.Chmod(dir, 0o755))
	agentBinary = filepath.Join(dir, "edgepool-agent")
	if err := testkit.GoBuild(context.Background(), "", agentBinary, "github.com/edgepool/edgepool/cmd/agent"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}

// sharedDir is a temporary directory the unprivileged agent and nginx can use.
func sharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "edgepool-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func freePort(t testing.TB) int32 {
	t.Helper()
	port, err := testkit.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// refusingAddr is a loopback address whose connections are refused, for as long as the
// test runs: its port is bound to a socket that does not listen, so no other process
// (another test, in parallel) can listen on it meanwhile.
func refusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
}

// testSpec is a defaulted CacheNode spec with the given disks, listening on free ports
// and filling from origin.
func testSpec(t testing.TB, origin string, disks ...v1alpha1.Disk) *v1alpha1.CacheNodeSpec {
	t.Helper()
	spec := &v1alpha1.CacheNodeSpec{Disks: disks, Origin: v1alpha1.Origin{Servers: []string{origin}}}
	// Three different ports: a port freed after one call may be handed out again.
	ports := map[int32]bool{}
	for len(ports) < 3 {
		ports[freePort(t)] = true
	}
	distinct := slices.Collect(maps.Keys(ports))
	spec.Listener.Port, spec.Listener.StatusPort, spec.Listener.AgentPort = distinct[0], distinct[1], distinct[2]
	spec.Listener.WorkerProcesses = nil
	spec.Default()
	for i := range spec.Disks {
		spec.Disks[i].Size = resource.MustParse("1Gi")
	}
	return spec
}

func disk(name, path, media string) v1alpha1.Disk {
	return v1alpha1.Disk{Name: name, Path: path, Media: v1alpha1.Media(media)}
}

// configDir is a testkit.ConfigDir the unprivileged agent can read; a failed write fails
// the test.
type configDir struct{ *testkit.ConfigDir }

func newConfigDir(t testing.TB) configDir {
	return configDir{&testkit.ConfigDir{Dir: sharedDir(t)}}
}

// writeSpec renders spec and writes it as the operator's ConfigMap would.
func (c configDir) writeSpec(t testing.TB, spec *v1alpha1.CacheNodeSpec) {
	t.Helper()
	c.write(t, spec, renderConf(t, spec))
}

// write writes conf, and the facts about it that the operator renders from spec.
func (c configDir) write(t testing.TB, spec *v1alpha1.CacheNodeSpec, conf string) {
	t.Helper()
	if err := c.WriteConf(spec, conf); err != nil {
		t.Fatal(err)
	}
}

func renderConf(t testing.TB, spec *v1alpha1.CacheNodeSpec) string {
	t.Helper()
	conf, err := render.NginxConf(spec)
	if err != nil {
		t.Fatal(err)
	}
	return conf
}

// agentProc is a running edgepool-agent and its log.
type agentProc struct {
	*testkit.Agent
	log *testkit.Buffer
}

// startAgent runs the agent as nobody on the configuration in cfg. extra are more flags.
func startAgent(t testing.TB, cfg configDir, spec *v1alpha1.CacheNodeSpec, extra ...string) *agentProc {
	t.Helper()
	args := []string{"--nginx", nginxBinary, "--config-dir", cfg.Dir, "--run-dir", filepath.Join(sharedDir(t), "run"),
		"--debounce", "100ms", "--disk-recheck", "200ms"}
	for _, d := range spec.Disks {
		args = append(args, "--disk", fmt.Sprintf("name=%s,path=%s,media=%s", d.Name, d.Path, d.Media))
	}
	args = append(args, extra...)
	p := &agentProc{log: &testkit.Buffer{}}
	var err error
	if p.Agent, err = testkit.StartAgent(agentBinary, fmt.Sprintf("127.0.0.1:%d", spec.Listener.AgentPort), args, p.log); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop(15 * time.Second)
		if t.Failed() {
			t.Logf("agent log:\n%s", p.log)
		}
	})
	return p
}

// get GETs path from the agent and returns the status code and body, or 0 and the error.
func (p *agentProc) get(path string) (int, string) {
	r, err := p.Fetch(context.Background(), path)
	if err != nil {
		return 0, err.Error()
	}
	return r.Code, string(r.Body)
}

func (p *agentProc) status(t testing.TB) agentapi.Status {
	t.Helper()
	st, err := p.Status(context.Background())
	if err != nil {
		t.Fatalf("/status: %v", err)
	}
	return st
}

// metric sums the samples of /metrics named name whose labels include labels; it returns
// -1 if there is none, or /metrics cannot be read.
func (p *agentProc) metric(name string, labels map[string]string) float64 {
	m, err := p.Metrics(context.Background())
	if err != nil {
		return -1
	}
	if v, ok := m.Find(name, labels); ok {
		return v
	}
	return -1
}

// eventually polls cond every 20ms until it holds, and fails the test after timeout.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := testkit.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := testkit.Eventually(ctx, 20*time.Millisecond, what, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func (p *agentProc) waitReady(t testing.TB) {
	t.Helper()
	ctx, cancel := testkit.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}
