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

package agent_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agent/disks"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// cacheableOrigin serves /obj/N as 8 KiB that the cache may keep for an hour, and counts
// the requests that reach it.
func cacheableOrigin(t testing.TB) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write(bytes.Repeat([]byte(r.URL.Path+"\n"), 8192/(len(r.URL.Path)+1)+1)[:8192])
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// faultDisk is a testkit.FaultDisk at a fresh directory, removed with the test.
func faultDisk(t testing.TB, name string) *testkit.FaultDisk {
	t.Helper()
	d, err := testkit.NewFaultDisk(diskDir(t, name), filepath.Join(sharedDir(t), name+".img"), "64M")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("clean up %s: %v", name, err)
		}
	})
	return d
}

// twoDisks runs the agent on two fresh fault disks, d0 and d1, filling from origin, with
// a cool-down of cooldown seconds (0: the CacheNode's default), and waits until it is ready.
func twoDisks(t testing.TB, origin string, cooldown int32) (d0, d1 *testkit.FaultDisk, spec *v1alpha1.CacheNodeSpec, cfg configDir, agent *agentProc) {
	t.Helper()
	d0, d1 = faultDisk(t, "d0"), faultDisk(t, "d1")
	spec = testSpec(t, origin, disk("d0", d0.Dir, mediaOf(t, d0.Dir)), disk("d1", d1.Dir, mediaOf(t, d1.Dir)))
	if cooldown > 0 {
		spec.DiskFailover.CooldownSeconds = cooldown
	}
	cfg = newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent = startAgent(t, cfg, spec)
	agent.waitReady(t)
	return d0, d1, spec, cfg, agent
}

// cacheFile is where nginx keeps the response to path on a disk (levels=1:2), for the
// key $host$request_uri of a request to 127.0.0.1.
func cacheFile(diskPath, path string) string {
	sum := md5.Sum([]byte("127.0.0.1" + path))
	h := hex.EncodeToString(sum[:])
	return filepath.Join(diskPath, agentapi.DiskCacheDir, h[len(h)-1:], h[len(h)-3:len(h)-1], h)
}

// fetch GETs a path from nginx and returns the status and X-Cache-Status, or 0 on a
// transport error.
func fetch(c *http.Client, port int32, path string) (int, string) {
	code, cache, _ := testkit.FetchObject(c, port, path)
	return code, cache
}

// workerPIDs are nginx's worker processes under master.
func workerPIDs(t testing.TB, master int) []int {
	workers, err := testkit.NginxWorkers(master)
	if err != nil {
		t.Fatal(err)
	}
	return workers
}

// waitSwitched waits until none of nginx's old workers is left: nginx then serves only
// with the configuration loaded since.
func waitSwitched(t testing.TB, master int, old []int) {
	t.Helper()
	eventually(t, 15*time.Second, "nginx's old workers to leave", func() bool {
		for _, pid := range workerPIDs(t, master) {
			if slices.Contains(old, pid) {
				return false
			}
		}
		return true
	})
}

// TestDiskFailureUnderLoad: under load, one of two disks dies (every read and write of its
// filesystem fails with EIO, as when its device goes away). The agent takes it out of the
// split within 10 s; requests for its keys then go to the other disk as misses filled from
// the origin, and meanwhile the origin answers them (a fallback): no response is an error,
// and only a request in flight as the disk died may be cut. The other disk keeps every key
// it had. The disk, mounted again, rejoins after its
// cool-down without a restart, and serves what it had cached before it failed.
func TestDiskFailureUnderLoad(t *testing.T) {
	const objects, workers = 200, 4
	srv, originHits := cacheableOrigin(t)
	d0, d1, spec, _, agent := twoDisks(t, originAddr(srv), 2)
	port := spec.Listener.Port

	// Warm the cache and learn which disk holds each object.
	c := &http.Client{Timeout: 10 * time.Second}
	onD0 := map[int]bool{}
	for i := range objects {
		path := fmt.Sprintf("/obj/%d", i)
		if code, _ := fetch(c, port, path); code != http.StatusOK {
			t.Fatalf("warming %s: %d", path, code)
		}
		if code, cache := fetch(c, port, path); code != http.StatusOK || cache != "HIT" {
			t.Fatalf("%s again: %d %s, want a HIT", path, code, cache)
		}
		_, err0 := os.Stat(cacheFile(d0.Dir, path))
		_, err1 := os.Stat(cacheFile(d1.Dir, path))
		if (err0 == nil) == (err1 == nil) {
			t.Fatalf("%s is cached on d0: %v, on d1: %v; want exactly one", path, err0 == nil, err1 == nil)
		}
		onD0[i] = err0 == nil
	}
	t.Logf("%d of %d objects are on d0", len(onD0)-countFalse(onD0), objects)
	master := nginxMaster(t, agent.Pid())
	oldWorkers := workerPIDs(t, master)

	stop := make(chan struct{})
	results := make(chan []testkit.Sample, 1)
	loadStart := time.Now()
	go func() { results <- testkit.Load(port, testkit.Objects(objects), workers, stop) }()
	time.Sleep(time.Second)

	failed := time.Now()
	if err := d0.Shutdown(); err != nil {
		close(stop)
		<-results
		t.Fatal(err)
	}
	var detected, switched time.Time
	eventually(t, 15*time.Second, "d0 to be taken out", func() bool {
		st, err := agent.Status(context.Background())
		if err == nil && st.Disks[0].Out {
			detected = time.Now()
		}
		return !detected.IsZero()
	})
	waitSwitched(t, master, oldWorkers)
	switched = time.Now()
	time.Sleep(2 * time.Second)
	close(stop)
	loadEnd := time.Now()
	samples := <-results

	// Count the failures per phase, and per disk.
	type counts struct{ requests, failed, server, failedOnD1, hitsOnD1, missesOnD0 int }
	phases := map[string]*counts{"before": {}, "detecting": {}, "switching": {}, "after": {}}
	for _, s := range samples {
		phase := "before"
		switch {
		case s.Start.After(switched):
			phase = "after"
		case s.Start.After(detected):
			phase = "switching"
		case s.Start.After(failed):
			phase = "detecting"
		}
		p := phases[phase]
		p.requests++
		if s.Code >= 500 {
			p.server++
		}
		if s.Code != http.StatusOK {
			p.failed++
			if !onD0[s.Object] {
				p.failedOnD1++
			}
		}
		if !onD0[s.Object] && s.Cache == "HIT" {
			p.hitsOnD1++
		}
		if onD0[s.Object] && s.Cache != "HIT" {
			p.missesOnD0++
		}
	}
	tookOut, reason := logged(t, agent, "Took disk out")
	signalled, _ := logged(t, agent, "Reloaded nginx with this node's split changed")
	t.Logf("the agent took d0 out %s after the failure (%s), signalled nginx %s later; "+
		"/status said so %s after the failure; nginx's old workers were gone %s after it",
		tookOut.Sub(failed).Round(time.Millisecond), reason, signalled.Sub(tookOut).Round(time.Millisecond),
		detected.Sub(failed).Round(time.Millisecond), switched.Sub(failed).Round(time.Millisecond))
	if tookOut.IsZero() || tookOut.After(detected) {
		t.Fatalf("the agent's log does not say when d0 was taken out")
	}
	detected = tookOut
	for _, name := range []string{"before", "detecting", "switching", "after"} {
		p := phases[name]
		t.Logf("%-9s %5d requests, %4d failed (%d with a 5xx, %d for d1's keys); d1's keys: %d hits; d0's keys: %d not from the cache",
			name, p.requests, p.failed, p.server, p.failedOnD1, p.hitsOnD1, p.missesOnD0)
	}
	// Throughput is logged, not asserted: the machine is shared.
	perSecond := func(n int, from, to time.Time) float64 { return float64(n) / to.Sub(from).Seconds() }
	t.Logf("d1's keys served from d1's cache: %.0f/s before the failure, %.0f/s after nginx switched (d0's keys now fill into d1 too)",
		perSecond(phases["before"].hitsOnD1, loadStart, failed), perSecond(phases["after"].hitsOnD1, switched, loadEnd))
	if d := detected.Sub(failed); d > 10*time.Second {
		t.Errorf("detection took %s, want at most 10s", d)
	}
	// Until nginx stops using d0, a request for one of its keys that cannot be read from it
	// is answered by the origin (a fallback): no response is an error. Only a request in
	// flight when the disk died, its response started from d0 before, may be cut (at most
	// one per client, in the detecting phase, which starts just before the disk dies).
	if p := phases["after"]; p.requests == 0 {
		t.Errorf("no request after nginx switched")
	}
	for name, p := range phases {
		if p.server != 0 {
			t.Errorf("%s: %d of %d requests answered with a 5xx, want 0", name, p.server, p.requests)
		}
		if cut := p.failed; cut > 0 && (name != "detecting" || cut > workers) {
			t.Errorf("%s: %d of %d requests failed (%d for d1's keys), want 0", name, cut, p.requests, p.failedOnD1)
		}
	}
	t.Logf("fallbacks to the origin: %v", agent.metric("edgepool_fallbacks_total", map[string]string{"reason": "cache_error"}))

	// Only d0's keys moved: every key d1 held is still a HIT there.
	for i := range objects {
		path := fmt.Sprintf("/obj/%d", i)
		code, cache := fetch(c, port, path)
		if code != http.StatusOK {
			t.Errorf("%s with d0 out: %d", path, code)
		}
		if !onD0[i] && cache != "HIT" {
			t.Errorf("%s (on d1) with d0 out: %s, want a HIT: the failover moved a healthy disk's key", path, cache)
		}
	}
	st := agent.status(t)
	if d := st.Disks[0]; !d.Out || !strings.Contains(d.OutReason, "I/O") || d.CooldownSeconds != 2 || d.OutSince.IsZero() {
		t.Errorf("d0 status = %+v, want out for I/O errors, with a 2s cool-down", d)
	}
	if d := st.Disks[1]; d.Out || !d.Ready {
		t.Errorf("d1 status = %+v, want ready and in", d)
	}
	if st.ConfigHash != agentapi.Hash([]byte(renderConf(t, spec))) || st.FailoverError != "" {
		t.Errorf("/status configHash %.12s, failoverError %q: want the operator's configuration and no error", st.ConfigHash, st.FailoverError)
	}
	if code, body := agent.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz with d1 serving: %d %s, want ready", code, body)
	}
	for _, m := range []struct {
		name   string
		labels map[string]string
		want   func(float64) bool
	}{
		{"edgepool_disk_out", map[string]string{"disk": "d0"}, func(v float64) bool { return v == 1 }},
		{"edgepool_disk_out", map[string]string{"disk": "d1"}, func(v float64) bool { return v == 0 }},
		{"edgepool_disk_outs_total", map[string]string{"disk": "d0"}, func(v float64) bool { return v == 1 }},
		{"edgepool_failover_reloads_total", nil, func(v float64) bool { return v == 1 }},
		{"edgepool_config_reloads_total", nil, func(v float64) bool { return v == 0 }},
		{"edgepool_config_reloads_failed_total", nil, func(v float64) bool { return v == 0 }},
	} {
		if v := agent.metric(m.name, m.labels); !m.want(v) {
			t.Errorf("%s%v = %v", m.name, m.labels, v)
		}
	}
	t.Logf("d0 errors seen in nginx's error stream: EIO %v; requests that reached the origin: %d",
		agent.metric("edgepool_disk_errors_total", map[string]string{"disk": "d0", "errno": "EIO"}), originHits.Load())

	// The disk comes back: the same device, mounted again.
	if err := d0.Remount(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	eventually(t, 15*time.Second, "d0 to be put back", func() bool {
		st, err := agent.Status(context.Background())
		return err == nil && !st.Disks[0].Out && st.Disks[0].Ready
	})
	t.Logf("d0 rejoined %s after it was mounted again (cool-down 2s)", time.Since(back).Round(time.Millisecond))
	if !slices.Contains(children(t, agent.Pid()), master) {
		t.Errorf("nginx master %d is gone: want no restart", master)
	}
	eventually(t, 10*time.Second, "nginx to serve with d0 back", func() bool {
		return agent.metric("edgepool_failover_reloads_total", nil) == 2
	})
	time.Sleep(500 * time.Millisecond) // the new workers take over
	// What d0 cached before it failed is served from it again.
	reused := 0
	for i := range objects {
		if !onD0[i] {
			continue
		}
		code, cache := fetch(c, port, fmt.Sprintf("/obj/%d", i))
		if code != http.StatusOK {
			t.Errorf("/obj/%d after d0 rejoined: %d", i, code)
		}
		if cache == "HIT" {
			reused++
		}
	}
	if want := len(onD0) - countFalse(onD0); reused != want {
		t.Errorf("%d of d0's %d objects were HITs after it rejoined, want all: its cache survives", reused, want)
	}
	if code, _ := agent.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz after d0 rejoined: %d", code)
	}
}

// logged finds the first line of the agent's log whose message starts with msg, and
// returns its time and reason.
func logged(t testing.TB, agent *agentProc, msg string) (time.Time, string) {
	t.Helper()
	for _, line := range strings.Split(agent.log.String(), "\n") {
		var entry struct {
			Time   time.Time `json:"time"`
			Msg    string    `json:"msg"`
			Reason string    `json:"reason"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && strings.HasPrefix(entry.Msg, msg) {
			return entry.Time, entry.Reason
		}
	}
	return time.Time{}, ""
}

func countFalse(m map[int]bool) int {
	n := 0
	for _, v := range m {
		if !v {
			n++
		}
	}
	return n
}

// TestDiskReadOnlyOrFull: a disk that turns read-only or fills up is taken out at once and
// not written to; with every disk out the pod turns unready and says why, and what still
// reaches it is answered by the origin, twice for twice, nothing stored; each disk is put
// back once it is writable again for its cool-down, without a restart.
func TestDiskReadOnlyOrFull(t *testing.T) {
	srv, originHits := cacheableOrigin(t)
	d0, d1, spec, _, agent := twoDisks(t, originAddr(srv), 1)
	c := &http.Client{Timeout: 10 * time.Second}
	serves := func(what string) {
		t.Helper()
		for i := range 20 {
			if code, _ := fetch(c, spec.Listener.Port, fmt.Sprintf("/%s/%d", strings.ReplaceAll(what, " ", "-"), i)); code != http.StatusOK {
				t.Errorf("%s: request %d: %d", what, i, code)
			}
		}
	}
	out := func(disk int, reason string) func() bool {
		return func() bool {
			st, err := agent.Status(context.Background())
			return err == nil && st.Disks[disk].Out && strings.HasPrefix(st.Disks[disk].OutReason, reason)
		}
	}
	in := func(disk int) func() bool {
		return func() bool {
			st, err := agent.Status(context.Background())
			return err == nil && !st.Disks[disk].Out
		}
	}

	master := nginxMaster(t, agent.Pid())
	workers := workerPIDs(t, master)
	filler, err := d0.Fill()
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the full disk to be taken out", out(0, "full"))
	eventually(t, 10*time.Second, "nginx to be signalled", func() bool { return agent.metric("edgepool_failover_reloads_total", nil) == 1 })
	waitSwitched(t, master, workers)
	serves("d0 full")
	if code, _ := agent.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz with d0 full and d1 serving: %d, want ready", code)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "d0 to be put back once it has room", in(0))

	for _, d := range []*testkit.FaultDisk{d0, d1} {
		if err := d.ReadOnly(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "d0 to be taken out", out(0, "read-only"))
	eventually(t, 10*time.Second, "d1 to be taken out", out(1, "read-only"))
	eventually(t, 10*time.Second, "the pod to turn unready", func() bool {
		code, body := agent.get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "every disk is out of this node's split: d0: read-only") &&
			strings.Contains(body, "d1: read-only")
	})
	eventually(t, 10*time.Second, "nginx's workers to know every disk is out", func() bool {
		code, cache := fetch(c, spec.Listener.Port, "/no-disk-yet")
		return code == http.StatusOK && cache == ""
	})
	before := originHits.Load()
	for i := range 2 {
		if code, cache := fetch(c, spec.Listener.Port, "/no-disk"); code != http.StatusOK || cache != "" {
			t.Errorf("with every disk out, request %d: %d %q, want the origin's 200, not cached", i, code, cache)
		}
	}
	if got := originHits.Load() - before; got != 2 {
		t.Errorf("with every disk out, the origin was asked %d times for two requests, want 2", got)
	}
	for _, d := range []*testkit.FaultDisk{d0, d1} {
		if err := d.ReadWrite(); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "d0 to be put back", in(0))
	eventually(t, 10*time.Second, "d1 to be put back", in(1))
	agent.waitReady(t)
	serves("both back")
	if v := agent.metric("edgepool_config_reloads_failed_total", nil); v != 0 {
		t.Errorf("edgepool_config_reloads_failed_total = %v: a failover is not a configuration change", v)
	}
}

// faultFS mounts a testkit.FaultFS over a fresh FaultDisk: a disk whose reads, writes and
// fsyncs fail or stall on demand.
func faultFS(t testing.TB, name string) *testkit.FaultFS {
	t.Helper()
	backing := faultDisk(t, name+"-backing")
	f, err := testkit.MountFaultFS(backing.Dir, diskDir(t, name), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			_ = exec.Command("umount", "-l", f.Dir).Run()
		}
	})
	return f
}

// warm requests each object twice and returns which are on the disk at dir.
func warm(t testing.TB, port int32, objects int, dir string) map[int]bool {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	on := map[int]bool{}
	for i := range objects {
		path := fmt.Sprintf("/obj/%d", i)
		for range 2 {
			if code, _ := fetch(c, port, path); code != http.StatusOK {
				t.Fatalf("warming %s: %d", path, code)
			}
		}
		_, err := os.Stat(cacheFile(dir, path))
		on[i] = err == nil
	}
	return on
}

// TestFlakyDiskDoesNotFlap: a disk that fails 1% of its reads, writes and fsyncs is taken
// out under load, and stays out: its probes keep failing, so it never passes a whole
// cool-down, and it does not go in and out.
func TestFlakyDiskDoesNotFlap(t *testing.T) {
	const objects, workers = 200, 4
	srv, _ := cacheableOrigin(t)
	flaky, d1 := faultFS(t, "d0"), faultDisk(t, "d1")
	spec := testSpec(t, originAddr(srv), disk("d0", flaky.Dir, "SSD"), disk("d1", d1.Dir, mediaOf(t, d1.Dir)))
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	// The default cool-down: a disk that fails one probe in three would otherwise pass five
	// seconds of checks now and then, and come back only to go out again.
	agent := startAgent(t, cfg, spec)
	agent.waitReady(t)
	warm(t, spec.Listener.Port, objects, flaky.Dir)
	master := nginxMaster(t, agent.Pid())
	oldWorkers := workerPIDs(t, master)

	stop := make(chan struct{})
	results := make(chan []testkit.Sample, 1)
	go func() { results <- testkit.Load(spec.Listener.Port, testkit.Objects(objects), workers, stop) }()
	flaky.FailRate(0.01)
	failed := time.Now()
	eventually(t, 20*time.Second, "the flaky disk to be taken out", func() bool {
		st, err := agent.Status(context.Background())
		return err == nil && st.Disks[0].Out
	})
	waitSwitched(t, master, oldWorkers)
	switched := time.Now()
	time.Sleep(12 * time.Second)
	close(stop)
	samples := <-results

	tookOut, reason := logged(t, agent, "Took disk out")
	ops, failedOps := flaky.Counts()
	var before, after, failedBefore, failedAfter int
	for _, s := range samples {
		if s.Start.After(switched) {
			after++
			if s.Code != http.StatusOK {
				failedAfter++
			}
		} else {
			before++
			if s.Code != http.StatusOK {
				failedBefore++
			}
		}
	}
	t.Logf("the flaky disk failed %d of %d operations; it was taken out %s after the faults began (%s)",
		failedOps, ops, tookOut.Sub(failed).Round(time.Millisecond), reason)
	t.Logf("until nginx switched: %d of %d requests failed; in the %s after: %d of %d",
		failedBefore, before, 12*time.Second, failedAfter, after)
	if outs := agent.metric("edgepool_disk_outs_total", map[string]string{"disk": "d0"}); outs != 1 {
		t.Errorf("the flaky disk was taken out %v times, want once: it flaps", outs)
	}
	if st := agent.status(t); !st.Disks[0].Out {
		t.Errorf("the flaky disk is back in after %s: %+v", 12*time.Second, st.Disks[0])
	}
	if failedAfter != 0 || after == 0 {
		t.Errorf("%d of %d requests failed after nginx switched, want 0", failedAfter, after)
	}
}

// TestHungOrSlowDiskIsTakenOut: a disk that stops answering, or answers every operation
// 200ms late, is taken out by its checks, which give up after --disk-check-timeout
// instead of hanging the agent; the node keeps serving from the other disk.
func TestHungOrSlowDiskIsTakenOut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fault func(*testkit.FaultFS)
	}{
		{"hangs", func(f *testkit.FaultFS) { f.Hang(true) }},
		{"slows to 200ms per operation", func(f *testkit.FaultFS) { f.Delay(200 * time.Millisecond) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const objects = 100
			srv, _ := cacheableOrigin(t)
			sick, d1 := faultFS(t, "d0"), faultDisk(t, "d1")
			spec := testSpec(t, originAddr(srv), disk("d0", sick.Dir, "SSD"), disk("d1", d1.Dir, mediaOf(t, d1.Dir)))
			cfg := newConfigDir(t)
			cfg.writeSpec(t, spec)
			agent := startAgent(t, cfg, spec, "--disk-check-timeout", "1s")
			t.Cleanup(func() { sick.Hang(false); sick.Delay(0) }) // before the agent stops: nginx finishes what is stuck
			agent.waitReady(t)
			onD0 := warm(t, spec.Listener.Port, objects, sick.Dir)

			tc.fault(sick)
			faulted := time.Now()
			eventually(t, 15*time.Second, "the disk to be taken out", func() bool {
				st, err := agent.Status(context.Background())
				return err == nil && st.Disks[0].Out
			})
			tookOut, reason := logged(t, agent, "Took disk out")
			t.Logf("taken out %s after the fault: %s", tookOut.Sub(faulted).Round(time.Millisecond), reason)
			if d := tookOut.Sub(faulted); d > 10*time.Second {
				t.Errorf("detection took %s, want at most 10s", d)
			}
			eventually(t, 10*time.Second, "nginx to be signalled", func() bool {
				return agent.metric("edgepool_failover_reloads_total", nil) == 1
			})
			// The old workers keep what is stuck on the disk until it answers (or their
			// shutdown timeout): new connections go to the new ones.
			time.Sleep(500 * time.Millisecond)
			c := &http.Client{Timeout: 5 * time.Second}
			start := time.Now()
			for i := range objects {
				code, cache := fetch(c, spec.Listener.Port, fmt.Sprintf("/obj/%d", i))
				if code != http.StatusOK || (!onD0[i] && cache != "HIT") {
					t.Errorf("/obj/%d (on d0: %v) with d0 out: %d %s, want 200 (a HIT for d1's)", i, onD0[i], code, cache)
				}
			}
			t.Logf("%d requests with the disk out took %s", objects, time.Since(start).Round(time.Millisecond))
			if code, _ := agent.get("/readyz"); code != http.StatusOK {
				t.Errorf("/readyz: %d, want ready with d1 serving", code)
			}
		})
	}
}

// TestUnmountedDiskFailsOver: nginx makes every missing cache directory whenever it tests
// or loads a configuration, so a disk unmounted under it would get a cache on the
// filesystem beneath its mount point. nginx reaches each disk through the agent's link,
// which points elsewhere while the disk is out: the agent takes the disk out, the pod
// stays ready, its keys are served from the other disk, and nothing is written beneath the
// mount point, nor to another filesystem mounted in its place. Mounted again (the same
// device), the disk rejoins after its cool-down, with its cache; the cool-down is changed
// on the running agent, through the CacheNode's spec.diskFailover, from 60s to 1s.
func TestUnmountedDiskFailsOver(t *testing.T) {
	srv, _ := cacheableOrigin(t)
	_, d1, spec, cfg, agent := twoDisks(t, originAddr(srv), 0)
	const objects = 40
	onD1 := warm(t, spec.Listener.Port, objects, d1.Dir)
	if n := len(onD1) - countFalse(onD1); n == 0 || n == objects {
		t.Fatalf("%d of %d objects on d1: the split should give it some", n, objects)
	}

	master := nginxMaster(t, agent.Pid())
	oldWorkers := workerPIDs(t, master)
	if err := d1.Unmount(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the unmounted disk to be out of the split", func() bool {
		st, err := agent.Status(context.Background())
		return err == nil && st.Disks[1].Out && strings.Contains(st.Disks[1].Reason, "not a mount point") &&
			st.FailoverError == "" && agent.metric("edgepool_failover_reloads_total", nil) == 1
	})
	agent.waitReady(t)
	waitSwitched(t, master, oldWorkers) // requests in flight on d1 until then may fail
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range objects {
		if code, _ := fetch(client, spec.Listener.Port, fmt.Sprintf("/obj/%d", i)); code != http.StatusOK {
			t.Errorf("object %d: %d with d1 unmounted, want 200 (from d0 or the origin)", i, code)
		}
	}
	if entries, err := os.ReadDir(d1.Dir); err != nil || len(entries) != 0 {
		t.Errorf("something was written beneath the unmounted disk's mount point: %v, %v", entries, err)
	}

	// Another disk mounted in its place is not written to, and keeps d1 out.
	other := faultDisk(t, "other")
	if err := other.Unmount(); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", "-t", "ext4", other.Dev, d1.Dir)
	eventually(t, 10*time.Second, "the other filesystem to be named", func() bool {
		st, err := agent.Status(context.Background())
		return err == nil && st.Disks[1].Out && st.Disks[1].OtherFilesystem && strings.Contains(st.Disks[1].Reason, "another filesystem is mounted at "+d1.Dir)
	})
	time.Sleep(time.Second) // five more checks
	if entries, err := os.ReadDir(d1.Dir); err != nil || len(entries) != 1 || entries[0].Name() != "lost+found" {
		t.Errorf("the other filesystem was written to: %v, %v", entries, err)
	}
	if code, _ := agent.get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d with another filesystem in d1's place, want 200: d0 serves", code)
	}
	unmountUnderneath(t, d1.Dir)

	// The CacheNode's policy reaches the running agent with the configuration: the
	// default cool-down of a minute, cut to a second.
	spec.DiskFailover.CooldownSeconds = 1
	cfg.writeSpec(t, spec)
	if err := d1.Mount(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the disk to be put back", func() bool {
		st, err := agent.Status(context.Background())
		return err == nil && !st.Disks[1].Out && st.FailoverError == "" && agent.metric("edgepool_failover_reloads_total", nil) == 2
	})
	for i, on := range onD1 {
		if on {
			if _, status := fetch(client, spec.Listener.Port, fmt.Sprintf("/obj/%d", i)); status != "HIT" {
				t.Errorf("object %d, cached on d1 before the unmount: %s after it rejoined, want HIT", i, status)
			}
		}
	}
}

// TestStartsWithoutAFailingDisk: a disk that fails its checks when the pod starts costs
// only its own keys too. nginx starts on the disks that pass, the pod is ready, and the
// failing disk is out, named with its reason, and not touched: here it holds someone's
// file, then is missing. Once it passes its checks (a fresh filesystem mounted), it joins
// after its cool-down and its keys are cached on it.
func TestStartsWithoutAFailingDisk(t *testing.T) {
	srv, _ := cacheableOrigin(t)
	d0, d1 := diskDir(t, "d0"), diskDir(t, "d1")
	mountTmpfs(t, d0)
	mountTmpfs(t, d1)
	foreign := filepath.Join(d1, "backup.tar")
	if err := os.WriteFile(foreign, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := testSpec(t, originAddr(srv), disk("d0", d0, "SSD"), disk("d1", d1, "SSD"))
	spec.DiskFailover.CooldownSeconds = 1
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec)
	agent.waitReady(t)

	st := agent.status(t)
	if d := st.Disks[1]; !d.Out || d.Ready || !d.OtherFilesystem || !strings.Contains(d.Reason, "holds backup.tar") {
		t.Errorf("d1 = %+v, want out and not ready, naming the foreign file", d)
	}
	if d := st.Disks[0]; d.Out || !d.Ready {
		t.Errorf("d0 = %+v, want ready and in", d)
	}
	const objects = 40
	c := &http.Client{Timeout: 10 * time.Second}
	for i := range objects {
		if code, _ := fetch(c, spec.Listener.Port, fmt.Sprintf("/obj/%d", i)); code != http.StatusOK {
			t.Errorf("/obj/%d with d1 out: %d", i, code)
		}
	}
	time.Sleep(time.Second) // five more checks of d1
	if entries, err := os.ReadDir(d1); err != nil || len(entries) != 1 {
		t.Errorf("d1 holds %v (%v), want only the foreign file", entries, err)
	}

	// Unmounted, foreign file and all: still out, now for the missing disk.
	unmountUnderneath(t, d1)
	eventually(t, 10*time.Second, "d1 to be reported missing", func() bool {
		d := agent.status(t).Disks[1]
		return d.Out && strings.Contains(d.Reason, "not a mount point")
	})
	time.Sleep(time.Second)
	if entries, err := os.ReadDir(d1); err != nil || len(entries) != 0 {
		t.Errorf("something was written beneath d1's mount point: %v, %v", entries, err)
	}

	master := nginxMaster(t, agent.Pid())
	oldWorkers := workerPIDs(t, master)
	mountTmpfs(t, d1)
	eventually(t, 10*time.Second, "d1 to join", func() bool {
		d := agent.status(t).Disks[1]
		// One reload, the join's: the disk out at the start was in nginx's first split, and
		// its links change without reloads.
		return !d.Out && d.Ready && agent.metric("edgepool_failover_reloads_total", nil) == 1
	})
	waitSwitched(t, master, oldWorkers)
	c.CloseIdleConnections()
	for i := range objects {
		fetch(c, spec.Listener.Port, fmt.Sprintf("/obj/%d", i))
	}
	onD1 := 0
	for i := range objects {
		if _, err := os.Stat(cacheFile(d1, fmt.Sprintf("/obj/%d", i))); err == nil {
			onD1++
		}
	}
	if onD1 == 0 {
		t.Errorf("none of %d objects is cached on d1 after it joined", objects)
	}
	if _, err := os.Stat(filepath.Join(d1, agentapi.DiskMarker)); err != nil {
		t.Errorf("d1 was not claimed when it joined: %v", err)
	}
}

// TestCacheLargerThanItsFilesystemNeverFillsIt: a disk whose size (nginx's max_size) is
// more than its filesystem holds. nginx's cache manager trims a cache to max_size only
// (nginx #868), so the fills would run the filesystem out of space, and the agent would
// take their failed writes for a failing disk. min_free (1% of size, here 51 MiB of the
// 64 MiB filesystem) has the manager evict first: at a fill rate below min_free per 10 s
// (the manager's longest pause between passes), no write fails and the disk stays in.
func TestCacheLargerThanItsFilesystemNeverFillsIt(t *testing.T) {
	const objects, objectSize, perSecond = 80, 1 << 20, 4 // 80 MiB through a 64 MiB filesystem, 40 MiB per 10 s
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write(bytes.Repeat([]byte{'x'}, objectSize))
	}))
	t.Cleanup(srv.Close)
	d := faultDisk(t, "d0")
	spec := testSpec(t, originAddr(srv), disk("d0", d.Dir, mediaOf(t, d.Dir)))
	spec.Disks[0].Size = resource.MustParse("5Gi")
	cfg := newConfigDir(t)
	cfg.writeSpec(t, spec)
	agent := startAgent(t, cfg, spec)
	agent.waitReady(t)

	c := &http.Client{Timeout: 10 * time.Second}
	leastFree := uint64(1) << 62
	tick := time.NewTicker(time.Second / perSecond)
	defer tick.Stop()
	for i := range objects {
		<-tick.C
		if code, cache, n := testkit.FetchObject(c, spec.Listener.Port, fmt.Sprintf("/big/%d", i)); code != http.StatusOK || n != objectSize {
			t.Fatalf("object %d: %d %q, %d bytes", i, code, cache, n)
		}
		if _, free, err := disks.Usage(d.Dir); err == nil {
			leastFree = min(leastFree, free)
		}
	}
	t.Logf("the filesystem had at least %.1f MiB free", float64(leastFree)/(1<<20))
	if st := agent.status(t); st.Disks[0].Out {
		t.Errorf("the disk was taken out: %s", st.Disks[0].OutReason)
	}
	if strings.Contains(agent.log.String(), "No space left on device") {
		t.Error("nginx wrote into a full filesystem")
	}
	if leastFree == 0 {
		t.Error("the filesystem ran out of space")
	}
}
