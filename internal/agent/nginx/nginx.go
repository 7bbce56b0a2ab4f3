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

// Package nginx supervises one nginx master: it prepares each configuration in a
// directory of its own under the run dir and tests it with nginx -t, starts nginx on
// one, swaps in the next and signals a reload, and stops nginx gracefully. It owns
// nginx's process (its PID, its process group, its error stream) and the configuration
// directories; what to run is the agent's decision.
package nginx

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/nginxconf"
)

// ConfigFile is the name of nginx.conf in a configuration directory.
const ConfigFile = "nginx.conf"

// testTimeout bounds nginx -t.
const testTimeout = 30 * time.Second

// Supervisor runs one nginx with its prefix, temp files and configurations in RunDir.
type Supervisor struct {
	binary, runDir string
	reaper         *Reaper
	// seq numbers the configuration directories.
	seq int

	mu        sync.Mutex
	pid       int    // nginx's master; 0 when it does not run
	installed string // the configuration directory nginx loads
}

// New supervises binary in runDir; every process it starts is waited for through reaper.
func New(binary, runDir string, reaper *Reaper) *Supervisor {
	return &Supervisor{binary: binary, runDir: runDir, reaper: reaper}
}

// Init makes the run dir and its link to nginx's modules, and removes the configuration directories a previous agent
// left in it (a container restart keeps the pod's emptyDir): they are not nginx's any more.
func (s *Supervisor) Init() error {
	if err := os.MkdirAll(filepath.Join(s.runDir, "tmp"), 0o755); err != nil {
		return fmt.Errorf("create run dir: %w", err)
	}
	// nginx.conf loads nginx's dynamic modules through this link, beside nginx wherever it is.
	if bin, err := exec.LookPath(s.binary); err == nil {
		if err := SwapLink(filepath.Join(s.runDir, nginxconf.ModulesLink), nginxconf.ModulesDir(bin)); err != nil {
			return fmt.Errorf("link nginx's modules: %w", err)
		}
	}
	stale, _ := filepath.Glob(filepath.Join(s.runDir, "conf-*"))
	for _, dir := range stale {
		_ = os.RemoveAll(dir)
	}
	return nil
}

// PID is nginx's master's, or 0 when nginx does not run.
func (s *Supervisor) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pid
}

// Prepare writes conf and the files it includes (paths relative to its directory) into a
// new directory of the run dir and tests them with nginx -t. nginx resolves includes
// against the directory of the nginx.conf it loads, so what passed is what Start or
// Reload installs. A configuration that fails leaves nothing behind.
func (s *Supervisor) Prepare(ctx context.Context, conf []byte, includes map[string]string) (string, error) {
	s.seq++
	dir := filepath.Join(s.runDir, fmt.Sprintf("conf-%d", s.seq))
	if err := s.write(dir, conf, includes); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("write candidate configuration: %w", err)
	}
	tctx, cancel := context.WithTimeout(ctx, testTimeout)
	defer cancel()
	if out, err := s.reaper.Run(tctx, s.command("-t", "-q", "-c", filepath.Join(dir, ConfigFile))); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("nginx -t: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return dir, nil
}

// write writes conf and its includes into a new directory dir.
func (s *Supervisor) write(dir string, conf []byte, includes map[string]string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	files := map[string][]byte{ConfigFile: conf}
	for name, content := range includes {
		files[name] = []byte(content)
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, content, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Start installs dir and starts nginx on it. nginx's error stream comes out of errors,
// which the caller must read (nginx never waits for it: see errorPipe); exited says when
// nginx's master is gone.
func (s *Supervisor) Start(dir string) (exited <-chan unix.WaitStatus, errors io.ReadCloser, err error) {
	if err := s.install(dir); err != nil {
		return nil, nil, err
	}
	r, w, err := errorPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd := s.command("-c", s.activePath())
	cmd.Stdout, cmd.Stderr = w, w
	// Its own process group, so workers left behind by a master that died can be killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	exited, err = s.reaper.Start(cmd)
	w.Close() // the child holds its own copy
	if err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("start nginx: %w", err)
	}
	s.mu.Lock()
	s.pid = cmd.Process.Pid
	s.mu.Unlock()
	return exited, r, nil
}

// Reload installs dir and has nginx load it: its master reads the configuration (and
// the certificates it names) and starts new workers; the old ones finish their
// connections.
func (s *Supervisor) Reload(dir string) error {
	pid := s.PID()
	if pid == 0 {
		return fmt.Errorf("signal nginx: it does not run")
	}
	if err := s.install(dir); err != nil {
		return err
	}
	if err := unix.Kill(pid, unix.SIGHUP); err != nil {
		return fmt.Errorf("signal nginx: %w", err)
	}
	return nil
}

// Exited kills what is left of a master that exited on its own (workers of a dead master
// must not serve on), and returns how it ended.
func (s *Supervisor) Exited(ws unix.WaitStatus) string {
	s.mu.Lock()
	pid := s.pid
	s.pid = 0
	s.mu.Unlock()
	if pid != 0 {
		_ = unix.Kill(-pid, unix.SIGKILL)
	}
	return describe(ws)
}

// Stop shuts nginx down gracefully (SIGQUIT: in-flight requests finish; its SIGTERM
// drops connections), waits for it, then kills what is left of its process group.
func (s *Supervisor) Stop(exited <-chan unix.WaitStatus) {
	pid := s.PID()
	if pid == 0 {
		return
	}
	_ = unix.Kill(pid, unix.SIGQUIT)
	<-exited
	_ = unix.Kill(-pid, unix.SIGKILL)
	s.mu.Lock()
	s.pid = 0
	s.mu.Unlock()
}

// command is nginx with args, its prefix the run dir, its error log the stream it is
// given. The run dir is its working directory: nginx.conf names the request log socket
// relative to it.
func (s *Supervisor) command(args ...string) *exec.Cmd {
	cmd := exec.Command(s.binary, append([]string{"-e", "stderr", "-p", s.runDir + "/"}, args...)...)
	cmd.Env, cmd.Dir = env(), s.runDir
	return cmd
}

// activePath is the nginx.conf nginx loads: through the symlink RunDir/conf, which
// install swaps to a prepared directory before nginx reloads.
func (s *Supervisor) activePath() string {
	return filepath.Join(s.runDir, "conf", ConfigFile)
}

// install makes dir the configuration nginx loads next and removes the one before it.
func (s *Supervisor) install(dir string) error {
	if err := SwapLink(filepath.Join(s.runDir, "conf"), filepath.Base(dir)); err != nil {
		return fmt.Errorf("install configuration: %w", err)
	}
	s.mu.Lock()
	old := s.installed
	s.installed = dir
	s.mu.Unlock()
	if old != "" && old != dir {
		_ = os.RemoveAll(old)
	}
	return nil
}

// SwapLink makes link a symlink to target, replacing what is there in one rename.
func SwapLink(link, target string) error {
	if now, err := os.Readlink(link); err == nil && now == target {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return err
	}
	tmp := link + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}

// env is nginx's environment: nothing of the agent's but PATH and TZ. nginx reads
// NGINX as listening sockets inherited in a binary upgrade, so a stray NGINX variable
// (a common name for "the nginx binary") must never reach it.
func env() []string {
	var env []string
	for _, key := range []string{"PATH", "TZ"} {
		if v, ok := os.LookupEnv(key); ok {
			env = append(env, key+"="+v)
		}
	}
	return env
}

// errorPipe is the pipe of nginx's error stream. Its write end does not block, so that
// nginx never waits for the agent: were the agent a whole pipe (1 MiB where the kernel
// allows) behind, nginx's lines would be dropped (nginx ignores a failed write to its
// error log) rather than its workers stalled.
func errorPipe() (r, w *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("pipe for nginx's error stream: %w", err)
	}
	_, _ = unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, 1<<20) // else the default 64 KiB
	if err := unix.SetNonblock(fds[1], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("pipe for nginx's error stream: %w", err)
	}
	// os.NewFile keeps a descriptor that is non-blocking as it is, also in the child.
	return os.NewFile(uintptr(fds[0]), "nginx-errors"), os.NewFile(uintptr(fds[1]), "nginx-errors"), nil
}
