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

package agent

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strconv"

	"github.com/edgepool/edgepool/internal/render"
)

// nginxConfig is one version of the configuration: as rendered by the operator (and
// hashed, so the hash matches the CacheNode's status.configHash) and as nginx runs it.
type nginxConfig struct {
	hash       string
	effective  []byte
	backlog    int
	statusPort int // stub_status port on loopback, 0 if none
}

var (
	workersAutoRE = regexp.MustCompile(`(?m)^worker_processes auto;$`)
	backlogRE     = regexp.MustCompile(`(?m)^\s*listen [0-9]+(?: reuseport)? backlog=([0-9]+);$`)
	statusPortRE  = regexp.MustCompile(`(?m)^\s*listen 127\.0\.0\.1:([0-9]+);$`)
)

// loadConfig reads the mounted configuration and resolves worker_processes auto to the
// given number of workers, since nginx's auto counts the host's CPUs, not the
// container's CPU limit.
func loadConfig(path string, workers int) (nginxConfig, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nginxConfig{}, err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nginxConfig{}, fmt.Errorf("%s is empty", path)
	}
	c := nginxConfig{
		hash:      render.Hash(string(raw)),
		effective: workersAutoRE.ReplaceAll(raw, []byte("worker_processes "+strconv.Itoa(workers)+";")),
	}
	if m := backlogRE.FindSubmatch(raw); m != nil {
		c.backlog, _ = strconv.Atoi(string(m[1]))
	}
	if m := statusPortRE.FindSubmatch(raw); m != nil {
		c.statusPort, _ = strconv.Atoi(string(m[1]))
	}
	return c, nil
}

// Somaxconn reads the kernel's cap on listen backlogs.
func Somaxconn(procRoot string) (int, error) {
	data, err := os.ReadFile(procRoot + "/sys/net/core/somaxconn")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(string(bytes.TrimSpace(data)))
}
