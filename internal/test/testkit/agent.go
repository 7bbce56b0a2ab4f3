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
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
)

// nobody is the user the agent and nginx run as, unprivileged, as in the cache pod.
const nobody = 65534

// Agent is a running edgepool-agent, in a process group of its own with its nginx.
type Agent struct {
	*Process
	Addr string // of /metrics, /readyz and /status
}

// StartAgent runs the agent binary as nobody with args, listening on addr; its output
// goes to out. Its environment has an NGINX variable, as a machine's may: the agent must
// keep it from nginx, which would read it as inherited sockets and log an error about
// its "NGINX environment variable".
func StartAgent(binary, addr string, args []string, out io.Writer) (*Agent, error) {
	cmd := exec.Command(binary, append([]string{"--listen", addr}, args...)...)
	cmd.Env = append(os.Environ(), "NGINX=/usr/sbin/nginx")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	p, err := Start(cmd)
	if err != nil {
		return nil, err
	}
	return &Agent{Process: p, Addr: addr}, nil
}

var (
	agentClient = &http.Client{Timeout: 5 * time.Second}
	agentAPI    = agentapi.NewClient(5 * time.Second)
)

// Fetch GETs path from the agent, whatever the status.
func (a *Agent) Fetch(ctx context.Context, path string) (*Response, error) {
	return Fetch(ctx, agentClient, "http://"+a.Addr+path, nil)
}

// WaitReady polls /readyz until the disks passed their checks and nginx answers.
func (a *Agent) WaitReady(ctx context.Context) error {
	return a.Poll(ctx, 20*time.Millisecond, "the agent to be ready", func() error {
		_, err := Get(ctx, agentClient, "http://"+a.Addr+"/readyz")
		return err
	})
}

// Status reads /status, with the operator's client.
func (a *Agent) Status(ctx context.Context) (agentapi.Status, error) {
	st, err := agentAPI.Status(ctx, a.Addr)
	if err != nil {
		return agentapi.Status{}, err
	}
	return *st, nil
}

// Metrics reads /metrics.
func (a *Agent) Metrics(ctx context.Context) (Metrics, error) {
	body, err := Get(ctx, agentClient, "http://"+a.Addr+"/metrics")
	if err != nil {
		return nil, err
	}
	return ParseMetrics(body)
}

// ConfigDir imitates a kubelet ConfigMap volume: each file is a symlink into ..data,
// which is swapped atomically on every Write. The agent's --config-dir.
type ConfigDir struct {
	Dir  string
	seq  int
	last map[string][]byte
}

// WriteConf writes conf, and the facts about it the operator renders from spec, as the
// operator's ConfigMap holds them.
func (c *ConfigDir) WriteConf(spec *v1alpha1.CacheNodeSpec, conf string) error {
	facts, err := json.Marshal(render.Facts(spec, conf))
	if err != nil {
		return err
	}
	return c.Write(map[string][]byte{agentapi.ConfigKey: []byte(conf), agentapi.FactsKey: facts})
}

// VolumeHash is the agentapi.VolumeHash of the version last written: what the operator
// announces on a pod for it.
func (c *ConfigDir) VolumeHash() string {
	data := make(map[string]string, len(c.last))
	for name, b := range c.last {
		data[name] = string(b)
	}
	return agentapi.VolumeHash(data)
}

// Write swaps in a new version holding files, by name.
func (c *ConfigDir) Write(files map[string][]byte) error {
	c.last = files
	c.seq++
	version := fmt.Sprintf("..v%03d", c.seq)
	if err := os.Mkdir(filepath.Join(c.Dir, version), 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, version, name), data, 0o644); err != nil {
			return err
		}
	}
	tmp := filepath.Join(c.Dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		return err
	}
	old, _ := os.Readlink(filepath.Join(c.Dir, "..data"))
	if err := os.Rename(tmp, filepath.Join(c.Dir, "..data")); err != nil {
		return err
	}
	for name := range files {
		link := filepath.Join(c.Dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			return err
		}
	}
	if old != "" {
		return os.RemoveAll(filepath.Join(c.Dir, old))
	}
	return nil
}
