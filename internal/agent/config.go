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
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// nginxConfig is one version of the configuration: nginx.conf as rendered by the operator
// (its hash matches the CacheNode's status.configHash), the facts the operator wrote
// about it, and the file nginx runs.
type nginxConfig struct {
	hash      string
	facts     agentapi.Facts
	effective []byte
	workers   int
}

// errTornRead: the two files were read across a ConfigMap update, which the kubelet
// swaps in at once; the update's own file events bring the next read.
var errTornRead = errors.New("the ConfigMap changed while it was read")

// loadConfig reads the mounted nginx.conf and its facts from dir. Where the facts leave
// worker_processes to the agent, the installed copy starts with the given number of
// workers (the container's CPUs).
func loadConfig(dir string, workers int) (nginxConfig, error) {
	raw, err := os.ReadFile(filepath.Join(dir, agentapi.ConfigKey))
	if err != nil {
		return nginxConfig{}, err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nginxConfig{}, fmt.Errorf("%s is empty", agentapi.ConfigKey)
	}
	c := nginxConfig{hash: agentapi.Hash(raw), effective: raw}
	factsJSON, err := os.ReadFile(filepath.Join(dir, agentapi.FactsKey))
	if err != nil {
		return nginxConfig{}, err
	}
	if err := json.Unmarshal(factsJSON, &c.facts); err != nil {
		return nginxConfig{}, fmt.Errorf("%s: %w", agentapi.FactsKey, err)
	}
	if c.facts.ConfigHash != c.hash {
		return nginxConfig{}, fmt.Errorf("%w: %s describes configuration %.12s, %s is %.12s",
			errTornRead, agentapi.FactsKey, c.facts.ConfigHash, agentapi.ConfigKey, c.hash)
	}
	if c.facts.Failover == nil {
		return nginxConfig{}, fmt.Errorf("%s: no failover policy", agentapi.FactsKey)
	}
	if err := c.facts.Failover.Validate(); err != nil {
		return nginxConfig{}, fmt.Errorf("%s: %w", agentapi.FactsKey, err)
	}
	c.workers = c.facts.WorkerProcesses
	if c.workers == 0 {
		c.workers = workers
		c.effective = append([]byte("worker_processes "+strconv.Itoa(workers)+"; # the container's CPUs, set by the node agent\n"), raw...)
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
