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
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

func TestOverflowWindow(t *testing.T) {
	g := NewWithT(t)
	now := time.Unix(1000, 0)
	w := NewOverflowWindow(time.Minute, func() time.Time { return now })
	for range 3 {
		w.Add("pool_hdd0")
	}
	w.Add("pool_nvme0")
	g.Expect(w.Recent()).To(Equal([]agentapi.PoolOverflow{{Pool: "pool_hdd0", Count: 3}, {Pool: "pool_nvme0", Count: 1}}))

	now = now.Add(30 * time.Second)
	w.Add("pool_nvme0")
	w.Add("pool_nvme0")
	w.Add("pool_nvme0")
	g.Expect(w.Recent()).To(Equal([]agentapi.PoolOverflow{{Pool: "pool_nvme0", Count: 4}, {Pool: "pool_hdd0", Count: 3}}))

	now = now.Add(31 * time.Second) // the first four fell out of the window
	g.Expect(w.Recent()).To(Equal([]agentapi.PoolOverflow{{Pool: "pool_nvme0", Count: 3}}))
	now = now.Add(time.Minute)
	g.Expect(w.Recent()).To(BeEmpty())
}

func TestCPULimit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		files   map[string]string
		cpus    int
		limited bool
		wantErr bool
	}{
		{"v2 two CPUs", map[string]string{"cpu.max": "200000 100000\n"}, 2, true, false},
		{"v2 half a CPU rounds up", map[string]string{"cpu.max": "50000 100000\n"}, 1, true, false},
		{"v2 2.5 CPUs rounds up", map[string]string{"cpu.max": "250000 100000\n"}, 3, true, false},
		{"v2 no limit", map[string]string{"cpu.max": "max 100000\n"}, 0, false, false},
		{"v2 garbage", map[string]string{"cpu.max": "lots\n"}, 0, false, true},
		{"v1 four CPUs", map[string]string{"cpu/cpu.cfs_quota_us": "400000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 4, true, false},
		{"v1 combined controller dir", map[string]string{"cpu,cpuacct/cpu.cfs_quota_us": "150000\n", "cpu,cpuacct/cpu.cfs_period_us": "100000\n"}, 2, true, false},
		{"v1 no limit", map[string]string{"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0, false, false},
		{"no cgroup files", map[string]string{}, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tc.files {
				path := filepath.Join(root, name)
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cpus, limited, err := CPULimit(root)
			if (err != nil) != tc.wantErr || cpus != tc.cpus || limited != tc.limited {
				t.Errorf("CPULimit = %d, %v, %v; want %d, %v, error %v", cpus, limited, err, tc.cpus, tc.limited, tc.wantErr)
			}
		})
	}
}

func TestWorkers(t *testing.T) {
	for _, tc := range []struct {
		limit, available, want int
		limited                bool
	}{
		{2, 16, 2, true},   // the CPU limit, not the host's 16 CPUs
		{32, 16, 16, true}, // a limit above the CPUs we may run on
		{0, 8, 8, false},   // no limit
		{0, 0, 1, false},
	} {
		if got := Workers(tc.limit, tc.limited, tc.available); got != tc.want {
			t.Errorf("Workers(%d, %v, %d) = %d, want %d", tc.limit, tc.limited, tc.available, got, tc.want)
		}
	}
}

func configFiles(t *testing.T, conf string, facts agentapi.Facts) map[string]string {
	t.Helper()
	data, err := json.Marshal(facts)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{agentapi.ConfigKey: conf, agentapi.FactsKey: string(data)}
}

// TestLoadConfig: the agent reads its facts, never nginx.conf's text; it sets the
// workers only where the facts leave them to it, and refuses facts about another file.
func TestLoadConfig(t *testing.T) {
	g := NewWithT(t)
	conf := "daemon off;\nhttp {\n}\n"
	policy := &agentapi.DefaultFailoverPolicy
	cfg, err := loadConfig(configFiles(t, conf, agentapi.Facts{ConfigHash: agentapi.Hash([]byte(conf)), Backlog: 4096, StatusPort: 18081, Failover: policy}), 3)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(cfg.effective)).To(HavePrefix("worker_processes 3; "))
	g.Expect(string(cfg.effective)).To(HaveSuffix(conf))
	g.Expect(cfg.workers).To(Equal(3))
	g.Expect(cfg.hash).To(Equal(agentapi.Hash([]byte(conf))), "the hash is the rendered file's, as in the CacheNode's status")
	g.Expect(cfg.facts.Backlog).To(Equal(4096))
	g.Expect(cfg.facts.StatusPort).To(Equal(18081))

	explicit := "daemon off;\nworker_processes 2;\nhttp {\n}\n"
	cfg, err = loadConfig(configFiles(t, explicit, agentapi.Facts{ConfigHash: agentapi.Hash([]byte(explicit)), WorkerProcesses: 2, Failover: policy}), 3)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(cfg.effective)).To(Equal(explicit))
	g.Expect(cfg.workers).To(Equal(2))

	_, err = loadConfig(configFiles(t, conf, agentapi.Facts{ConfigHash: agentapi.Hash([]byte(explicit))}), 3)
	g.Expect(err).To(MatchError(errTornRead))

	_, err = loadConfig(configFiles(t, "  \n", agentapi.Facts{}), 3)
	g.Expect(err).To(MatchError(ContainSubstring("is empty")))

	// The policy comes with every configuration: the agent has none of its own.
	_, err = loadConfig(configFiles(t, conf, agentapi.Facts{ConfigHash: agentapi.Hash([]byte(conf))}), 3)
	g.Expect(err).To(MatchError(ContainSubstring("no failover policy")))

	_, err = loadConfig(map[string]string{agentapi.ConfigKey: conf, agentapi.FactsKey: "{"}, 3)
	g.Expect(err).To(MatchError(ContainSubstring("agent.json")))
	_, err = loadConfig(map[string]string{agentapi.ConfigKey: conf}, 3)
	g.Expect(err).To(MatchError(ContainSubstring("agent.json is missing")))
}

// TestReadVolume: the files are read at the version the kubelet's ..data link names,
// without the link's own entries or the versions' directories, as the operator's
// ConfigMap holds them; a plain directory is read as is.
func TestReadVolume(t *testing.T) {
	g := NewWithT(t)
	vol := &testkit.ConfigDir{Dir: t.TempDir()}
	first := map[string][]byte{agentapi.ConfigKey: []byte("a"), agentapi.FactsKey: []byte("{}"), agentapi.ActivePurgesKey: []byte("[]")}
	g.Expect(vol.Write(first)).To(Succeed())
	g.Expect(readVolume(vol.Dir)).To(Equal(map[string]string{agentapi.ConfigKey: "a", agentapi.FactsKey: "{}", agentapi.ActivePurgesKey: "[]"}))
	// A key the next version drops leaves a dangling link in the directory: not read.
	g.Expect(vol.Write(map[string][]byte{agentapi.ConfigKey: []byte("b")})).To(Succeed())
	g.Expect(readVolume(vol.Dir)).To(Equal(map[string]string{agentapi.ConfigKey: "b"}))

	plain := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(plain, agentapi.ConfigKey), []byte("c"), 0o644)).To(Succeed())
	g.Expect(readVolume(plain)).To(Equal(map[string]string{agentapi.ConfigKey: "c"}))
}

// TestCheckAnnounced: the volume runs only when the announced hash names exactly its
// files (the operator's keys aside); a missing or empty announcement is no announcement.
func TestCheckAnnounced(t *testing.T) {
	g := NewWithT(t)
	files := map[string]string{agentapi.ConfigKey: "conf", agentapi.FactsKey: "{}", agentapi.ActivePurgesKey: "[]"}
	announced := filepath.Join(t.TempDir(), agentapi.AnnouncedHashFile)
	g.Expect(checkAnnounced(files, announced)).To(MatchError(errUnannounced), "no file")

	g.Expect(os.WriteFile(announced, nil, 0o644)).To(Succeed())
	g.Expect(checkAnnounced(files, announced)).To(MatchError(ContainSubstring("nothing is announced yet")))

	g.Expect(os.WriteFile(announced, []byte(agentapi.VolumeHash(files)), 0o644)).To(Succeed())
	g.Expect(checkAnnounced(files, announced)).To(Succeed())
	withKeys := maps.Clone(files)
	withKeys[agentapi.OperatorKeysKey] = "a new operator's key"
	g.Expect(checkAnnounced(withKeys, announced)).To(Succeed(), "the operator's keys are not announced")

	for name, edited := range map[string]map[string]string{
		"nginx.conf edited": {agentapi.ConfigKey: "conf; proxy_pass http://169.254.169.254;", agentapi.FactsKey: "{}", agentapi.ActivePurgesKey: "[]"},
		"purges edited":     {agentapi.ConfigKey: "conf", agentapi.FactsKey: "{}", agentapi.ActivePurgesKey: "[{}]"},
		"a key added":       {agentapi.ConfigKey: "conf", agentapi.FactsKey: "{}", agentapi.ActivePurgesKey: "[]", "extra.conf": ""},
		"a key removed":     {agentapi.ConfigKey: "conf", agentapi.FactsKey: "{}"},
	} {
		g.Expect(checkAnnounced(edited, announced)).To(MatchError(errUnannounced), name)
	}
}

// TestClaim: the agent uses a disk only if it is empty or already marked as this
// CacheNode's, and leaves anything else exactly as it found it.
