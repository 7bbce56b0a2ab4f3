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

package disks

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/edgepool/edgepool/internal/agentapi"
)

func TestParseDisk(t *testing.T) {
	g := NewWithT(t)
	d, err := Parse("name=nvme0,path=/mnt/nvme0,media=NVMe")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d).To(Equal(Disk{Name: "nvme0", Path: "/mnt/nvme0", Media: "NVMe"}))
	g.Expect(d.String()).To(Equal("name=nvme0,path=/mnt/nvme0,media=NVMe"))
	d, err = Parse("name=hdd0,path=/mnt/hdd0,media=HDD,takeOverFrom=images")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d).To(Equal(Disk{Name: "hdd0", Path: "/mnt/hdd0", Media: "HDD", TakeOverFrom: "images"}))
	g.Expect(d.String()).To(Equal("name=hdd0,path=/mnt/hdd0,media=HDD,takeOverFrom=images"))
	for _, bad := range []string{"", "name=a", "name=a,path=rel,media=SSD", "name=a,path=/x,media=Tape", "name=a,path=/x,media=SSD,extra=1"} {
		_, err := Parse(bad)
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
func TestClaim(t *testing.T) {
	own := Checker{Owner: "edge/hdd-edge"}
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

// TestTakeOver: a disk claimed by a CacheNode of the namespace is handed over only to the
// one that names it in takeOverFrom, only once no pod of the previous owner uses it (its
// lease lapsed),
// and only when it holds nothing but what edgepool made; the cache is emptied, the
// previous owner's purge record and tag index dropped, and the disk is the new owner's
// from then on.
func TestTakeOver(t *testing.T) {
	previousOwner := func(t *testing.T) (string, Checker) {
		t.Helper()
		dir := t.TempDir()
		prev := Checker{Owner: "edge/images"}
		if err := prev.Claim(Disk{Name: "ssd1", Path: dir, Media: "SSD"}); err != nil {
			t.Fatal(err)
		}
		for name, content := range map[string]string{"cache/a/bc/0123": "images' object", agentapi.DiskPurgeRecord: `{"applied":["uid-1"]}`,
			agentapi.DiskTagIndex: "# edgepool tag index 1 headers=Surrogate-Key\n# clean\n"} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir, prev
	}
	next := Checker{Owner: "edge/hdd-edge", LeaseTimeout: time.Minute}
	// lapse makes the disk's lease as old as a pod that stopped a while ago left it.
	lapse := func(t *testing.T, dir string) {
		t.Helper()
		then := time.Now().Add(-2 * time.Minute)
		if err := os.Chtimes(filepath.Join(dir, agentapi.DiskLease), then, then); err != nil {
			t.Fatal(err)
		}
	}
	disk := func(dir, from string) Disk { return Disk{Name: "hdd0", Path: dir, Media: "HDD", TakeOverFrom: from} }

	t.Run("waits for the previous owner's pod, then empties and claims", func(t *testing.T) {
		g := NewWithT(t)
		dir, prev := previousOwner(t)
		before := treeOf(t, dir)
		g.Expect(next.Claim(disk(dir, "images"))).To(MatchError(MatchRegexp(
			`claimed by CacheNode images, whose pod on this node used it [0-9]+s ago: taken over once it has not for 1m0s`)))
		g.Expect(treeOf(t, dir)).To(Equal(before), "a disk in use was changed")

		lapse(t, dir) // its pod ended
		g.Expect(next.Claim(disk(dir, "images"))).To(Succeed())
		data, err := os.ReadFile(filepath.Join(dir, agentapi.DiskMarker))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(data)).To(ContainSubstring(`"cacheNode":"edge/hdd-edge"`))
		g.Eventually(func() []string { // removed in the background
			entries, _ := os.ReadDir(dir)
			var released []string
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), agentapi.DiskReleasedPrefix) {
					released = append(released, e.Name())
				}
			}
			return released
		}).Should(BeEmpty())
		g.Expect(treeOf(t, dir)).To(Equal(map[string]string{
			agentapi.DiskMarker: string(data), agentapi.DiskLease: "", agentapi.DiskCacheDir: "/",
		}), "the previous cache, purge record and tag index are gone, nothing else is there")

		// From then on it is the new owner's: the previous one is refused, and the new
		// owner's pod keeps it (a takeover of its own claim is no takeover).
		g.Expect(prev.Claim(Disk{Name: "ssd1", Path: dir, Media: "SSD"})).To(MatchError(ContainSubstring("claimed by CacheNode hdd-edge (its disk hdd0)")))
		g.Expect(next.Claim(disk(dir, "images"))).To(Succeed())
	})
	for _, tc := range []struct {
		name, from, marker, extra, refused string
	}{
		{"not asked for", "", "", "", "claimed by CacheNode images (its disk ssd1)"},
		{"from another CacheNode", "video", "", "", "claimed by CacheNode images (its disk ssd1)"},
		{"from another namespace's", "images", `{"cacheNode":"shop/images","disk":"ssd1"}`, "", "claimed by a CacheNode of another namespace"},
		{"holding someone's files too", "images", "", "backup.tar", "claimed by CacheNode images, but also holds backup.tar, which edgepool did not make: not taken over"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dir, _ := previousOwner(t)
			lapse(t, dir)
			if tc.marker != "" {
				g.Expect(os.WriteFile(filepath.Join(dir, agentapi.DiskMarker), []byte(tc.marker), 0o600)).To(Succeed())
			}
			if tc.extra != "" {
				g.Expect(os.WriteFile(filepath.Join(dir, tc.extra), []byte("precious"), 0o600)).To(Succeed())
			}
			before := treeOf(t, dir)
			g.Expect(next.Claim(disk(dir, tc.from))).To(MatchError(ContainSubstring(tc.refused)))
			g.Expect(treeOf(t, dir)).To(Equal(before), "a refused disk was changed")
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
	c := Checker{Prefixes: []string{"/mnt"}, AllowUnmounted: true}
	if st := c.Check(Disk{Name: "d", Path: "/var/lib/etcd", Media: "SSD"}); st.Ready || !strings.Contains(st.Reason, "not under a prefix the cluster admin allows (/mnt)") {
		t.Errorf("/var/lib/etcd: %+v, want refused", st)
	}
	none := Checker{Prefixes: []string{}, AllowUnmounted: true}
	if st := none.Check(Disk{Name: "d", Path: "/mnt/x", Media: "SSD"}); st.Ready {
		t.Errorf("an empty allowlist admitted %+v", st)
	}
}
