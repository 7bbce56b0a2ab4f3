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
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/testkit"
)

const nobody = 65534

var agentBinary, nginxBinary string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "the agent tests need root (to mount test disks and drop to an unprivileged user); run them as root, as `make test` in CI does")
		os.Exit(1)
	}
	var err error
	if nginxBinary, err = exec.LookPath("nginx"); err != nil {
		fmt.Fprintln(os.Stderr, "nginx not found: run `make test`, which installs it")
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "edgepool-agent-bin-")
	if err != nil {
		panic(err)
	}
	must(os.Chmod(dir, 0o755))
	agentBinary = filepath.Join(dir, "edgepool-agent")
	build := exec.Command("go", "build", "-o", agentBinary, "github.com/edgepool/edgepool/cmd/agent")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build agent:", err)
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

// testSpec is a defaulted CacheNode spec with the given disks, listening on free ports
// and filling from origin.
func testSpec(t testing.TB, origin string, disks ...v1alpha1.Disk) *v1alpha1.CacheNodeSpec {
	t.Helper()
	spec := &v1alpha1.CacheNodeSpec{Disks: disks, Origin: v1alpha1.Origin{Servers: []string{origin}}}
	spec.Listener.Port = freePort(t)
	spec.Listener.StatusPort = freePort(t)
	spec.Listener.AgentPort = freePort(t)
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

// configDir imitates a kubelet ConfigMap volume: files are symlinks into ..data, which
// is swapped atomically on every update.
type configDir struct {
	dir string
	seq int
}

func newConfigDir(t testing.TB) *configDir {
	return &configDir{dir: sharedDir(t)}
}

func (c *configDir) file() string { return filepath.Join(c.dir, "nginx.conf") }

func (c *configDir) write(t testing.TB, conf string) {
	t.Helper()
	c.seq++
	version := fmt.Sprintf("..v%03d", c.seq)
	must(os.Mkdir(filepath.Join(c.dir, version), 0o755))
	must(os.WriteFile(filepath.Join(c.dir, version, "nginx.conf"), []byte(conf), 0o644))
	tmp := filepath.Join(c.dir, "..data_tmp")
	must(os.Symlink(version, tmp))
	old, _ := os.Readlink(filepath.Join(c.dir, "..data"))
	must(os.Rename(tmp, filepath.Join(c.dir, "..data")))
	if c.seq == 1 {
		must(os.Symlink(filepath.Join("..data", "nginx.conf"), c.file()))
	}
	if old != "" {
		must(os.RemoveAll(filepath.Join(c.dir, old)))
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

// agentProc is a running edgepool-agent.
type agentProc struct {
	cmd    *exec.Cmd
	addr   string // the agent's HTTP address
	stderr *testkit.Buffer
	done   chan struct{} // closed when the agent exited; err is then its exit error
	err    error
}

// startAgent runs the agent as nobody on the configuration in cfg. extra are more flags.
func startAgent(t testing.TB, cfg *configDir, spec *v1alpha1.CacheNodeSpec, extra ...string) *agentProc {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", spec.Listener.AgentPort)
	args := []string{"--nginx", nginxBinary, "--config", cfg.file(), "--run-dir", filepath.Join(sharedDir(t), "run"),
		"--listen", addr, "--debounce", "100ms", "--disk-recheck", "200ms"}
	for _, d := range spec.Disks {
		args = append(args, "--disk", fmt.Sprintf("name=%s,path=%s,media=%s", d.Name, d.Path, d.Media))
	}
	args = append(args, extra...)
	cmd := exec.Command(agentBinary, args...)
	// NGINX in the agent's environment must not reach nginx (it means inherited sockets there).
	cmd.Env = append(os.Environ(), "NGINX="+nginxBinary)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	p := &agentProc{cmd: cmd, addr: addr, stderr: &testkit.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("agent stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

func (p *agentProc) get(t testing.TB, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func (p *agentProc) status(t testing.TB) agentapi.Status {
	t.Helper()
	code, body := p.get(t, agentapi.StatusPath)
	if code != http.StatusOK {
		t.Fatalf("/status: %d %s", code, body)
	}
	var st agentapi.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// metric returns the value of one sample line of /metrics, e.g.
// `edgepool_config_reloads_failed_total`, or -1 if it is absent.
func (p *agentProc) metric(t testing.TB, sample string) float64 {
	t.Helper()
	_, body := p.get(t, "/metrics")
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err == nil {
				return v
			}
		}
	}
	return -1
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *agentProc) waitReady(t testing.TB) {
	t.Helper()
	eventually(t, 20*time.Second, "the agent to be ready", func() bool {
		code, _ := p.get(t, "/readyz")
		return code == http.StatusOK
	})
}
