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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/edgepool/edgepool/internal/agentapi"
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

func TestParseDisk(t *testing.T) {
	g := NewWithT(t)
	d, err := ParseDisk("name=nvme0,path=/mnt/nvme0,media=NVMe")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d).To(Equal(Disk{Name: "nvme0", Path: "/mnt/nvme0", Media: "NVMe"}))
	g.Expect(d.String()).To(Equal("name=nvme0,path=/mnt/nvme0,media=NVMe"))
	for _, bad := range []string{"", "name=a", "name=a,path=rel,media=SSD", "name=a,path=/x,media=Tape", "name=a,path=/x,media=SSD,extra=1"} {
		_, err := ParseDisk(bad)
		g.Expect(err).To(HaveOccurred(), bad)
	}
}

func TestMediaMismatch(t *testing.T) {
	for _, tc := range []struct {
		media, dev string
		rotational bool
		mismatch   bool
	}{
		{"HDD", "sda", true, false},
		{"HDD", "nvme0n1", false, true},
		{"SSD", "sdb", false, false},
		{"SSD", "sda", true, true},
		{"NVMe", "nvme0n1", false, false},
		{"NVMe", "sdb", false, true},
	} {
		if got := mediaMismatch(tc.media, tc.dev, tc.rotational) != ""; got != tc.mismatch {
			t.Errorf("mediaMismatch(%s, %s, rotational=%v) = %v, want %v", tc.media, tc.dev, tc.rotational, got, tc.mismatch)
		}
	}
}

// writeConfig writes nginx.conf and agent.json into dir as the operator's ConfigMap holds them.
func writeConfig(t *testing.T, dir, conf string, facts agentapi.Facts) {
	t.Helper()
	data, err := json.Marshal(facts)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{agentapi.ConfigKey: []byte(conf), agentapi.FactsKey: data} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLoadConfig: the agent reads its facts, never nginx.conf's text; it sets the
// workers only where the facts leave them to it, and refuses facts about another file.
func TestLoadConfig(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	conf := "daemon off;\nhttp {\n}\n"
	policy := &agentapi.DefaultFailoverPolicy
	writeConfig(t, dir, conf, agentapi.Facts{ConfigHash: agentapi.Hash([]byte(conf)), Backlog: 4096, StatusPort: 18081, Failover: policy})
	cfg, err := loadConfig(dir, 3)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(cfg.effective)).To(HavePrefix("worker_processes 3; "))
	g.Expect(string(cfg.effective)).To(HaveSuffix(conf))
	g.Expect(cfg.workers).To(Equal(3))
	g.Expect(cfg.hash).To(Equal(agentapi.Hash([]byte(conf))), "the hash is the rendered file's, as in the CacheNode's status")
	g.Expect(cfg.facts.Backlog).To(Equal(4096))
	g.Expect(cfg.facts.StatusPort).To(Equal(18081))

	explicit := "daemon off;\nworker_processes 2;\nhttp {\n}\n"
	writeConfig(t, dir, explicit, agentapi.Facts{ConfigHash: agentapi.Hash([]byte(explicit)), WorkerProcesses: 2, Failover: policy})
	cfg, err = loadConfig(dir, 3)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(cfg.effective)).To(Equal(explicit))
	g.Expect(cfg.workers).To(Equal(2))

	writeConfig(t, dir, conf, agentapi.Facts{ConfigHash: agentapi.Hash([]byte(explicit))})
	_, err = loadConfig(dir, 3)
	g.Expect(err).To(MatchError(errTornRead))

	writeConfig(t, dir, "  \n", agentapi.Facts{})
	_, err = loadConfig(dir, 3)
	g.Expect(err).To(MatchError(ContainSubstring("is empty")))

	// The policy comes with every configuration: the agent has none of its own.
	writeConfig(t, dir, conf, agentapi.Facts{ConfigHash: agentapi.Hash([]byte(conf))})
	_, err = loadConfig(dir, 3)
	g.Expect(err).To(MatchError(ContainSubstring("no failover policy")))

	g.Expect(os.WriteFile(filepath.Join(dir, agentapi.FactsKey), []byte("{"), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, agentapi.ConfigKey), []byte(conf), 0o644)).To(Succeed())
	_, err = loadConfig(dir, 3)
	g.Expect(err).To(MatchError(ContainSubstring("agent.json")))
}

// TestClaim: the agent uses a disk only if it is empty or already marked as this
// CacheNode's, and leaves anything else exactly as it found it.
func TestClaim(t *testing.T) {
	own := DiskChecker{Owner: "edge/hdd-edge"}
	marker := func(dir string) string {
		data, _ := os.ReadFile(filepath.Join(dir, agentapi.DiskMarker))
		return string(data)
	}
	write := func(t *testing.T, dir, name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir string)
		refused string // substring of the error; "" for claimed
	}{
		{"empty", func(*testing.T, string) {}, ""},
		{"fresh filesystem", func(t *testing.T, dir string) { _ = os.Mkdir(filepath.Join(dir, "lost+found"), 0o700) }, ""},
		{"marked as ours", func(t *testing.T, dir string) {
			write(t, dir, agentapi.DiskMarker, `{"cacheNode":"edge/hdd-edge","disk":"old-name"}`)
			write(t, dir, "cache/a/bc/0123", "cached")
		}, ""},
		{"marked by another namespace's CacheNode", func(t *testing.T, dir string) {
			write(t, dir, agentapi.DiskMarker, `{"cacheNode":"shop/images","disk":"ssd1"}`)
		}, "claimed by a CacheNode of another namespace, per "},
		{"marked by another CacheNode of the namespace", func(t *testing.T, dir string) {
			write(t, dir, agentapi.DiskMarker, `{"cacheNode":"edge/images","disk":"ssd1"}`)
		}, "claimed by CacheNode images (its disk ssd1), per "},
		{"unreadable marker", func(t *testing.T, dir string) { write(t, dir, agentapi.DiskMarker, "{") }, "unreadable marker"},
		{"someone's files", func(t *testing.T, dir string) {
			write(t, dir, "backup.tar", "precious")
			write(t, dir, "photos/2026/a.jpg", "precious too")
		}, "holds backup.tar, photos, which edgepool did not make"},
		{"a cache directory edgepool did not mark", func(t *testing.T, dir string) { write(t, dir, "cache/x", "someone's") }, "holds cache,"},
		{"dotfiles count", func(t *testing.T, dir string) { write(t, dir, ".config", "x") }, "holds .config,"},
		{"many files are counted, not listed", func(t *testing.T, dir string) {
			for _, n := range []string{"a", "b", "c", "d", "e"} {
				write(t, dir, n, n)
			}
		}, "holds a, b, c and 2 more"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			tc.prepare(t, dir)
			before := treeOf(t, dir)
			err := own.Claim(Disk{Name: "hdd0", Path: dir, Media: "HDD"})
			if tc.refused != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.refused)))
				g.Expect(treeOf(t, dir)).To(Equal(before), "a refused disk was changed")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(marker(dir)).To(ContainSubstring(`"cacheNode":"edge/hdd-edge"`))
			g.Expect(filepath.Join(dir, agentapi.DiskCacheDir)).To(BeADirectory())
			for name, content := range before {
				g.Expect(treeOf(t, dir)).To(HaveKeyWithValue(name, content), "claiming changed %s", name)
			}
		})
	}
}

// treeOf maps every file under dir to its content (directories to "/").
func treeOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if e.IsDir() {
			out[rel] = "/"
			return nil
		}
		data, err := os.ReadFile(path)
		out[rel] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestCheckRefusesPathsOutsideTheAllowlist: the agent checks the cluster admin's allowlist
// again, before it looks at the disk at all.
func TestCheckRefusesPathsOutsideTheAllowlist(t *testing.T) {
	c := DiskChecker{Prefixes: []string{"/mnt"}, AllowUnmounted: true}
	if st := c.Check(Disk{Name: "d", Path: "/var/lib/etcd", Media: "SSD"}); st.Ready || !strings.Contains(st.Reason, "not under a prefix the cluster admin allows (/mnt)") {
		t.Errorf("/var/lib/etcd: %+v, want refused", st)
	}
	none := DiskChecker{Prefixes: []string{}, AllowUnmounted: true}
	if st := none.Check(Disk{Name: "d", Path: "/mnt/x", Media: "SSD"}); st.Ready {
		t.Errorf("an empty allowlist admitted %+v", st)
	}
}
