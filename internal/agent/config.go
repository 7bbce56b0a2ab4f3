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
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/nginxconf"
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

// errUnannounced: the mounted ConfigMap is not the one the operator announced on this
// pod. Anyone who may edit the namespace's ConfigMaps could have written it (where the
// cluster lacks edgepool's admission policies); the operator writes the ConfigMap and
// then the pod's annotation, and the kubelet swaps both volumes in at the pod's next
// sync, so a mismatch that lasts is reported.
var errUnannounced = errors.New("the mounted ConfigMap is not the one the operator announced on this pod")

// readVolume reads the files of a ConfigMap volume at one version: the kubelet swaps a
// version in by renaming the directory's ..data link, so the link is resolved once and
// the files are read from the version it names. A directory without one is read as is.
func readVolume(dir string) (map[string]string, error) {
	version := dir
	if target, err := os.Readlink(filepath.Join(dir, "..data")); err == nil {
		version = target
		if !filepath.IsAbs(target) {
			version = filepath.Join(dir, target)
		}
	}
	entries, err := os.ReadDir(version)
	if errors.Is(err, fs.ErrNotExist) && version != dir {
		return nil, errTornRead // the kubelet removed the version after the swap
	}
	if err != nil {
		return nil, err
	}
	files := map[string]string{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "..") || e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(version, e.Name()))
		if errors.Is(err, fs.ErrNotExist) && version != dir {
			return nil, errTornRead
		}
		if err != nil {
			return nil, err
		}
		files[e.Name()] = string(data)
	}
	return files, nil
}

// checkAnnounced compares the volume's files with the hash in announcedFile (the pod's
// own annotation, projected by the kubelet).
func checkAnnounced(files map[string]string, announcedFile string) error {
	data, err := os.ReadFile(announcedFile)
	if err != nil {
		return fmt.Errorf("%w: %w", errUnannounced, err)
	}
	announced, mounted := strings.TrimSpace(string(data)), agentapi.VolumeHash(files)
	switch {
	case announced == "":
		return fmt.Errorf("%w: nothing is announced yet", errUnannounced)
	case announced != mounted:
		return fmt.Errorf("%w: it announced %.12s, the volume holds %.12s", errUnannounced, announced, mounted)
	}
	return nil
}

// loadConfig takes nginx.conf and its facts from the ConfigMap volume's files. Where the
// facts leave worker_processes to the agent, the installed copy starts with the given
// number of workers (the container's CPUs).
func loadConfig(files map[string]string, workers int) (nginxConfig, error) {
	raw, ok := files[agentapi.ConfigKey]
	if !ok {
		return nginxConfig{}, fmt.Errorf("%s is missing", agentapi.ConfigKey)
	}
	if len(strings.TrimSpace(raw)) == 0 {
		return nginxConfig{}, fmt.Errorf("%s is empty", agentapi.ConfigKey)
	}
	c := nginxConfig{hash: agentapi.Hash([]byte(raw)), effective: []byte(raw)}
	factsJSON, ok := files[agentapi.FactsKey]
	if !ok {
		return nginxConfig{}, fmt.Errorf("%s is missing", agentapi.FactsKey)
	}
	if err := json.Unmarshal([]byte(factsJSON), &c.facts); err != nil {
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
		c.effective = nginxconf.WithWorkers([]byte(raw), workers)
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
