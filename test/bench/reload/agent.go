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

package reload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/testkit"
)

// nobody runs the agent and nginx, unprivileged, as the cache pod runs them.
const nobody = 65534

var errNotRoot = errors.New("the reload benchmark needs root, to run the agent and nginx as nobody as the cache pod runs them unprivileged")

// sharedDir makes a directory in parent that the unprivileged agent and nginx can write.
func sharedDir(parent, name string) (string, error) {
	dir := filepath.Join(parent, name)
	if err := os.Mkdir(dir, 0o777); err != nil {
		return "", err
	}
	return dir, os.Chmod(dir, 0o777) // past the umask
}

// configDir imitates a kubelet ConfigMap volume: nginx.conf is a symlink into ..data,
// which is swapped atomically on every update.
type configDir struct {
	dir string
	seq int
}

func (c *configDir) file() string { return filepath.Join(c.dir, "nginx.conf") }

func (c *configDir) write(conf string) error {
	c.seq++
	version := fmt.Sprintf("..v%03d", c.seq)
	if err := os.Mkdir(filepath.Join(c.dir, version), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, version, "nginx.conf"), []byte(conf), 0o644); err != nil {
		return err
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(c.dir, "..data"))
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		return err
	}
	if c.seq == 1 {
		if err := os.Symlink(filepath.Join("..data", "nginx.conf"), c.file()); err != nil {
			return err
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(c.dir, old))
	}
	return nil
}

// agentProc is a running edgepool-agent, in a process group of its own with its nginx.
type agentProc struct {
	*testkit.Process
	addr string // of /metrics, /readyz and /status
}

// startAgent runs the agent binary as nobody with args; its output goes to log.
func startAgent(binary, addr string, args []string, log io.Writer) (*agentProc, error) {
	cmd := exec.Command(binary, append([]string{"--listen", addr}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	p, err := testkit.Start(cmd)
	if err != nil {
		return nil, err
	}
	return &agentProc{Process: p, addr: addr}, nil
}

// stop shuts the agent down with SIGTERM (nginx then finishes in-flight requests) and
// kills the process group if it takes longer than 15s.
func (p *agentProc) stop() { _ = p.Stop(15 * time.Second) }

var agentClient = &http.Client{Timeout: 5 * time.Second}

func (p *agentProc) get(ctx context.Context, path string) (string, error) {
	return testkit.Get(ctx, agentClient, "http://"+p.addr+path)
}

// waitReady polls /readyz until the disks passed their checks and nginx answers.
func (p *agentProc) waitReady(ctx context.Context) error {
	return p.Poll(ctx, 20*time.Millisecond, "the agent to be ready", func() error {
		_, err := p.get(ctx, "/readyz")
		return err
	})
}

func (p *agentProc) status(ctx context.Context) (agentapi.Status, error) {
	var st agentapi.Status
	body, err := p.get(ctx, agentapi.StatusPath)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal([]byte(body), &st)
}

// metrics reads the agent's /metrics.
func (p *agentProc) metrics(ctx context.Context) (testkit.Metrics, error) {
	body, err := p.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	return testkit.ParseMetrics(body)
}
