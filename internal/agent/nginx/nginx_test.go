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

package nginx

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/nginxconf"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// TestErrorPipeNeverBlocksNginx: a child writing more than the pipe holds to an error
// pipe nobody reads fails its writes instead of waiting.
func TestErrorPipeNeverBlocksNginx(t *testing.T) {
	r, w, err := errorPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", "head -c 4000000 /dev/zero >&2")
	cmd.Stderr = w
	err = cmd.Run()
	w.Close()
	if ctx.Err() != nil {
		t.Fatal("the writer blocked on the full pipe")
	}
	if err == nil {
		t.Error("the writer wrote 4 MB into a pipe nobody reads")
	}
}

func TestParseStubStatus(t *testing.T) {
	g := NewWithT(t)
	s, err := parseStubStatus(strings.NewReader("Active connections: 2 \nserver accepts handled requests\n 10 9 31 \nReading: 1 Writing: 1 Waiting: 0 \n"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s).To(Equal(StubStatus{Active: 2, Accepts: 10, Handled: 9, Requests: 31, Reading: 1, Writing: 1, Waiting: 0}))
	_, err = parseStubStatus(strings.NewReader("<html>404</html>"))
	g.Expect(err).To(HaveOccurred())
}

// conf is a configuration with every path under nginx's prefix, answering body on port,
// and including what the directory's body.conf says if include is set.
func conf(port int, body string, include bool) []byte {
	answer := fmt.Sprintf("return 200 %q;", body)
	if include {
		answer = "include body.conf;"
	}
	return fmt.Appendf(nil, `daemon off;
pid nginx.pid;
worker_processes 1;
error_log stderr warn;
events { worker_connections 64; }
http {
    client_body_temp_path tmp/client_body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
    access_log off;
    server {
        listen 127.0.0.1:%d;
        location = /stub_status { stub_status; }
        location / { %s }
    }
}
`, port, answer)
}

// TestSupervisorLifecycle runs a real nginx through its life: a configuration nginx -t
// refuses leaves nothing behind; one that passes starts nginx, with its includes beside
// it; a reload swaps the configuration and removes the one before; Stop ends nginx and
// its workers.
func TestSupervisorLifecycle(t *testing.T) {
	g := NewWithT(t)
	binary, err := testkit.NginxBinary()
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reaper, err := NewReaper(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	runDir := t.TempDir()
	g.Expect(os.Mkdir(filepath.Join(runDir, "conf-7"), 0o755)).To(Succeed()) // a previous agent's
	s := New(binary, runDir, reaper)
	g.Expect(s.Init()).To(Succeed())
	g.Expect(filepath.Join(runDir, "conf-7")).NotTo(BeADirectory())
	// The modules nginx.conf loads, beside this nginx, through the run dir's link.
	g.Expect(filepath.Join(runDir, nginxconf.BrotliModule)).To(BeARegularFile())
	g.Expect(s.Init()).To(Succeed()) // again, as after a container restart
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	get := func() string {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}

	_, err = s.Prepare(ctx, []byte("http { bogus; }"), nil)
	g.Expect(err).To(MatchError(ContainSubstring("nginx -t")))
	g.Expect(filepath.Glob(filepath.Join(runDir, "conf-*"))).To(BeEmpty())

	first, err := s.Prepare(ctx, conf(port, "", true), map[string]string{"body.conf": `return 200 "first";`})
	g.Expect(err).NotTo(HaveOccurred())
	exited, errs, err := s.Start(first)
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _, _ = io.Copy(io.Discard, errs) }()
	g.Expect(s.PID()).NotTo(BeZero())
	g.Eventually(func() error { _, err := FetchStubStatus(port); return err }, 10*time.Second, 50*time.Millisecond).Should(Succeed())
	g.Expect(get()).To(Equal("first"))

	second, err := s.Prepare(ctx, conf(port, "second", false), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Reload(second)).To(Succeed())
	g.Eventually(get, 10*time.Second, 50*time.Millisecond).Should(Equal("second"))
	g.Expect(first).NotTo(BeADirectory())

	pid := s.PID()
	s.Stop(exited)
	g.Expect(s.PID()).To(BeZero())
	g.Expect(unix.Kill(-pid, 0)).To(MatchError(unix.ESRCH), "nginx's process group outlived Stop")
	g.Expect(s.Reload(second)).To(MatchError(ContainSubstring("does not run")))
}
