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
	"crypto/ed25519"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/certs"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

var (
	soakFor  = flag.Duration("soak", 20*time.Second, "how long TestSoak keeps its load on (make soak: 30m)")
	soakRate = flag.Int("soak-rate", 150, "TestSoak's requests per second, open loop")
)

// The soak's cache: two disks of soakMaxSize each under a Zipf-distributed stream of
// soakObjects keys, whose working set (soakObjects x soakObjectSize, 188 MiB) is larger
// than the disks together, so nginx's cache manager evicts all along.
const (
	soakObjects    = 3000
	soakObjectSize = 64 << 10
	soakMaxSize    = "48Mi"
	soakClients    = 48
)

// TestSoak runs the real agent and nginx on two real disks (ext4 on loop devices) under a
// steady open-loop load, while, in turn: the configuration changes (a reload), a purge
// runs, a disk turns read-only and comes back, the TLS site's certificate is renewed and
// the agent restarts. It reports the requests that failed, by what was happening (none
// may fail in between), the agent's and nginx's memory and open files at the start,
// middle and end, and the most each disk held against its max_size. make test runs it
// for 20 s; make soak for 30 minutes.
func TestSoak(t *testing.T) {
	s := startSoak(t)
	s.warm(t)
	s.sample("start")
	stopLoad := s.load.start(s.spec.Listener.Port, *soakRate)
	stopDisk := s.watchDisks()
	every := min(max(*soakFor/10, 2*time.Second), 30*time.Second)
	events := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"reload", s.reload}, {"purge", s.purge}, {"disk out and back", s.diskOutAndBack},
		{"certificate renewal", s.renewCertificate}, {"agent restart", s.restartAgent},
	}
	begin := time.Now()
	middle := false
	for i := 0; time.Since(begin) < *soakFor || i < len(events); i++ { // each event once at least
		if !middle && time.Since(begin) >= *soakFor/2 {
			s.sample("middle")
			middle = true
		}
		e := events[i%len(events)]
		from := time.Now()
		e.run(t)
		s.events[e.name]++
		s.timeline = append(s.timeline, fmt.Sprintf("%s %s-%s", e.name, from.Format("15:04:05.000"), time.Now().Format("15:04:05.000")))
		time.Sleep(time.Until(begin.Add(time.Duration(i+1) * every)))
	}
	if !middle {
		s.sample("middle")
	}
	stopLoad()
	stopDisk()
	s.sample("end")
	s.report(t)
}

// soak is the running soak: the cache node and what is measured of it.
type soak struct {
	spec     *v1alpha1.CacheNodeSpec
	cfg      configDir
	operator ed25519.PrivateKey
	secrets  *secretVolumes
	ca       *certs.CA
	tlsPort  int32
	disks    []*testkit.FaultDisk
	agent    *agentProc
	logs     []*testkit.Buffer // every agent's, restarts included
	origin   *atomic.Int64
	load     *soakLoad
	reloads  int
	events   map[string]int
	timeline []string
	samples  []resourceSample
	mu       sync.Mutex
	// diskBytes is the most each disk's cache held, in steady state and in the minute and
	// a half after nginx started (indexing: its cache loader reads the disk after 60 s).
	diskBytes, indexingBytes map[string]int64
	started                  atomic.Int64 // when nginx last started, in Unix nanoseconds
	// maxFills is the most the origin sent in a span of managerPause: what nginx may write
	// between two passes of its cache manager, which trims to max_size after the fact.
	maxFills int64
}

// managerPause is the longest pause of nginx's cache manager between its passes (its
// expiry wait is at most 10 s), and a sample on either side: a fill counted at the origin
// up to a sample before or after the span may land on the disk within it.
const managerPause = 10*time.Second + 400*time.Millisecond

// indexing is how long after nginx starts its keys zones may not know every file on the
// disks: its cache loader starts 60 s after nginx does, and takes a while.
const indexing = 90 * time.Second

func startSoak(t *testing.T) *soak {
	t.Helper()
	var originRequests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		originRequests.Add(1)
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Length", strconv.Itoa(soakObjectSize))
		_, _ = w.Write(bytes.Repeat([]byte{r.URL.Path[len(r.URL.Path)-1]}, soakObjectSize))
	}))
	t.Cleanup(srv.Close)
	s := &soak{origin: &originRequests, operator: newOperatorKey(t), ca: newCA(t), tlsPort: freePort(t),
		load: &soakLoad{}, events: map[string]int{}, diskBytes: map[string]int64{}, indexingBytes: map[string]int64{}}
	var disks []v1alpha1.Disk
	for _, name := range []string{"d0", "d1"} {
		d, err := testkit.NewFaultDisk(diskDir(t, name), filepath.Join(sharedDir(t), name+".img"), "128M")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := d.Close(); err != nil {
				t.Errorf("clean up %s: %v", name, err)
			}
		})
		s.disks = append(s.disks, d)
		disks = append(disks, disk(name, d.Dir, mediaOf(t, d.Dir)))
	}
	s.spec = testSpec(t, originAddr(srv), disks...)
	for i := range s.spec.Disks {
		s.spec.Disks[i].Size = resource.MustParse(soakMaxSize)
	}
	s.spec.DiskFailover.CooldownSeconds = 1
	s.secrets = newSecretVolumes(t, "shop")
	s.secrets.write(t, "shop", issueLeaf(t, s.ca, "shop.example").SecretFiles())
	s.cfg = newConfigDir(t)
	s.publish(t)
	s.startAgent(t)
	return s
}

func (s *soak) startAgent(t testing.TB) {
	t.Helper()
	s.started.Store(time.Now().UnixNano())
	s.agent = startAgent(t, s.cfg, s.spec, "--pod", testPod, "--tls-secrets-dir", s.secrets.root)
	s.logs = append(s.logs, s.agent.log)
	s.agent.waitReady(t)
}

// publish writes the ConfigMap: the configuration with its TLS site, and the operator's key.
func (s *soak) publish(t testing.TB) string {
	t.Helper()
	conf, facts := tlsConf(t, s.spec, s.tlsPort, tlsSite{"shop", "shop.example"})
	keys, err := agentapi.EncodeOperatorKeys([]ed25519.PublicKey{s.operator.Public().(ed25519.PublicKey)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cfg.Write(map[string][]byte{agentapi.ConfigKey: []byte(conf), agentapi.FactsKey: facts, agentapi.OperatorKeysKey: keys}); err != nil {
		t.Fatal(err)
	}
	return agentapi.Hash([]byte(conf))
}

// warm fills the most requested tenth of the keys before the load starts.
func (s *soak) warm(t *testing.T) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	for i := range soakObjects / 10 {
		if code, cache, n := testkit.FetchObject(c, s.spec.Listener.Port, soakPath(i)); code != http.StatusOK || n != soakObjectSize {
			t.Fatalf("warming %s: %d %s, %d bytes", soakPath(i), code, cache, n)
		}
	}
}

func soakPath(i int) string { return fmt.Sprintf("/obj/%d", i) }

// reload changes the configuration (the cache lock's timeout) and waits until nginx runs it.
func (s *soak) reload(t *testing.T) {
	s.reloads++
	s.spec.Cache.LockTimeout = fmt.Sprintf("%ds", 5+s.reloads%2)
	hash := s.publish(t)
	eventually(t, 30*time.Second, "the new configuration to run", func() bool {
		st, err := s.agent.Status(context.Background())
		return err == nil && st.ConfigHash == hash
	})
}

// purge removes a prefix of keys, as the operator asks the agent to, and waits until it is done.
func (s *soak) purge(t *testing.T) {
	prefix := fmt.Sprintf("/obj/%d", 1+s.events["purge"]%9) // a ninth of the keys
	body := signed(t, s.operator, fmt.Sprintf("5d6e0a3c-2f4b-4c1e-9a7d-%012d", s.events["purge"]), time.Now(),
		agentapi.PurgeSpec{Scope: "Prefixes", Prefixes: []agentapi.PurgeHost{{Host: "127.0.0.1", Paths: []string{prefix}}}})
	url := fmt.Sprintf("http://127.0.0.1:%d%s", s.spec.Listener.AgentPort, agentapi.PurgePath)
	last := ""
	defer func() {
		if t.Failed() {
			t.Logf("purge %s: the agent's last answer: %s", prefix, last)
		}
	}()
	eventually(t, time.Minute, "purge "+prefix+" to be done", func() bool {
		resp, err := http.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		last = fmt.Sprintf("%s %s", resp.Status, data)
		if resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusForbidden {
			t.Fatalf("the agent refused purge %s: %s", prefix, last)
		}
		var res agentapi.PurgeResult
		if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &res) != nil {
			return false
		}
		if res.State == agentapi.PurgeFailed {
			t.Fatalf("purge %s failed: %+v", prefix, res)
		}
		return res.State == agentapi.PurgeDone
	})
}

// diskOutAndBack remounts d1 read-only until the agent takes it out, then writable until
// it is back in the split.
func (s *soak) diskOutAndBack(t *testing.T) {
	d := s.disks[1]
	s.load.during(diskFailing)
	defer s.load.during(steady)
	if err := d.ReadOnly(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "d1 to be out", func() bool { return s.diskOut(1) == 1 })
	if err := d.ReadWrite(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "d1 to be back", func() bool { return s.diskOut(1) == 0 })
}

// diskOut is 1 if the agent has disk i out of the split, 0 if in, -1 if it cannot tell.
func (s *soak) diskOut(i int) int {
	st, err := s.agent.Status(context.Background())
	if err != nil || len(st.Disks) <= i {
		return -1
	}
	if st.Disks[i].Out {
		return 1
	}
	return 0
}

// renewCertificate swaps in a new certificate, as the kubelet updates a Secret volume, and
// waits until nginx serves it.
func (s *soak) renewCertificate(t *testing.T) {
	leaf := issueLeaf(t, s.ca, "shop.example")
	s.secrets.write(t, "shop", leaf.SecretFiles())
	addr := fmt.Sprintf("127.0.0.1:%d", s.tlsPort)
	eventually(t, 30*time.Second, "the renewed certificate to be served", func() bool {
		c, err := servedLeaf(addr, "shop.example")
		return err == nil && fingerprint(c) == leaf.Fingerprint
	})
}

// restartAgent stops the agent (nginx finishes its requests and stops) and starts it again
// on the same disks: the pod's container restarting. Requests that fail meanwhile (refused,
// or reset in the accept queue nginx closed) are counted apart, as lost: the pod is down,
// and a Service sends new connections to the others once it is unready.
func (s *soak) restartAgent(t *testing.T) {
	s.sample(fmt.Sprintf("before restart %d", s.events["agent restart"]+1))
	s.load.during(restarting)
	defer s.load.during(steady)
	if err := s.agent.Stop(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	s.startAgent(t)
}

// watchDisks samples the bytes each disk's cache holds, and the origin's requests, every
// 200ms until stopped.
func (s *soak) watchDisks() (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		type count struct {
			at time.Time
			n  int64
		}
		var origin []count
		for {
			now := time.Now()
			origin = append(origin, count{now, s.origin.Load()})
			for len(origin) > 1 && now.Sub(origin[0].at) > managerPause {
				origin = origin[1:]
			}
			fills := (origin[len(origin)-1].n - origin[0].n) * soakObjectSize
			for _, d := range s.spec.Disks {
				n := cacheBytes(filepath.Join(d.Path, agentapi.DiskCacheDir))
				s.mu.Lock()
				if time.Since(time.Unix(0, s.started.Load())) < indexing {
					s.indexingBytes[d.Name] = max(s.indexingBytes[d.Name], n)
				} else {
					s.diskBytes[d.Name] = max(s.diskBytes[d.Name], n)
				}
				s.maxFills = max(s.maxFills, fills)
				s.mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

// cacheBytes is what the files under dir take on disk, as nginx counts them against
// max_size (the larger of a file's size and its blocks).
func cacheBytes(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil //nolint:nilerr // a file evicted under the walk is no longer there to count
		}
		if info, err := e.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				total += max(info.Size(), st.Blocks*512)
			}
		}
		return nil
	})
	return total
}

// resourceSample is the agent's and nginx's (master and children) resident memory and
// open files at one point of the soak.
type resourceSample struct {
	when               string
	agentRSS, agentFDs int64
	nginxRSS, nginxFDs int64
	nginxProcesses     int
}

func (s *soak) sample(when string) {
	r := resourceSample{when: when}
	pid := s.agent.Pid()
	r.agentRSS, r.agentFDs = processRSS(pid), processFDs(pid)
	if kids, err := testkit.Children(pid); err == nil && len(kids) == 1 {
		nginx := []int{kids[0]}
		if children, err := testkit.Children(kids[0]); err == nil {
			nginx = append(nginx, children...)
		}
		r.nginxProcesses = len(nginx)
		for _, p := range nginx {
			r.nginxRSS += processRSS(p)
			r.nginxFDs += processFDs(p)
		}
	}
	s.samples = append(s.samples, r)
}

// processRSS is a process's resident memory in bytes (VmRSS), 0 if it cannot be read.
func processRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// processFDs is the number of a process's open files, 0 if they cannot be read.
func processFDs(pid int) int64 {
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0
	}
	return int64(len(entries))
}

func (s *soak) report(t *testing.T) {
	t.Helper()
	l := s.load
	t.Logf("soak: %v at %d requests/s (open loop, %d clients), %d objects of %d KiB (Zipf s=1.1), disks d0 and d1 of max_size %s",
		*soakFor, *soakRate, soakClients, soakObjects, soakObjectSize>>10, soakMaxSize)
	t.Logf("events: %v", s.events)
	for _, e := range s.timeline {
		t.Logf("  %s", e)
	}
	t.Logf("requests: %d, failed: %d, cut by the failing disk: %d, lost while the agent restarted: %d, not sent (all clients busy): %d; origin requests: %d",
		l.requests.Load(), l.failed[steady].Load(), l.failed[diskFailing].Load(), l.failed[restarting].Load(), l.unsent.Load(), s.origin.Load())
	for _, f := range l.failures() {
		t.Logf("  %s", f)
	}
	t.Logf("%-18s %12s %10s %12s %10s %6s", "when", "agent RSS", "agent fds", "nginx RSS", "nginx fds", "procs")
	for _, r := range s.samples {
		t.Logf("%-18s %9.1f MiB %10d %9.1f MiB %10d %6d", r.when, float64(r.agentRSS)/(1<<20), r.agentFDs,
			float64(r.nginxRSS)/(1<<20), r.nginxFDs, r.nginxProcesses)
	}
	maxSize := resource.MustParse(soakMaxSize)
	// nginx's cache manager removes what exceeds max_size after the fact, at its next pass:
	// a disk may hold what the origin sent since, and a fill in flight per client. After
	// nginx starts, until its cache loader has read the disk, the files already there are
	// not counted: the disk may hold them (max_size) beside max_size of new fills.
	s.mu.Lock()
	bound := maxSize.Value() + s.maxFills + soakClients*soakObjectSize
	maxFills := s.maxFills
	s.mu.Unlock()
	for _, d := range s.spec.Disks {
		s.mu.Lock()
		most, indexed := s.diskBytes[d.Name], s.indexingBytes[d.Name]
		s.mu.Unlock()
		t.Logf("disk %s: at most %.1f MiB in the cache (%.2fx max_size %s), %.1f MiB (%.2fx) in the %v after nginx started; bound %.1f MiB (max_size, %.1f MiB filled in %v at most, a fill per client), %.1f MiB after a start",
			d.Name, float64(most)/(1<<20), float64(most)/float64(maxSize.Value()), soakMaxSize,
			float64(indexed)/(1<<20), float64(indexed)/float64(maxSize.Value()), indexing,
			float64(bound)/(1<<20), float64(maxFills)/(1<<20), managerPause, float64(bound+maxSize.Value())/(1<<20))
		if most > bound {
			t.Errorf("disk %s held %d bytes, more than max_size, a manager's pause of fills and a fill in flight per client (%d)", d.Name, most, bound)
		}
		if indexed > bound+maxSize.Value() {
			t.Errorf("disk %s held %d bytes after nginx started, more than what it held before and the bound (%d)", d.Name, indexed, bound+maxSize.Value())
		}
		if most+indexed == 0 {
			t.Errorf("disk %s held nothing: the load did not reach it", d.Name)
		}
	}
	enospc := 0
	for _, log := range s.logs {
		enospc += strings.Count(log.String(), "(28: No space left on device)")
	}
	if enospc > 0 {
		t.Errorf("nginx wrote into a full disk %d times", enospc)
	}
	if n := l.failed[steady].Load(); n != 0 {
		t.Errorf("%d of %d requests failed", n, l.requests.Load())
	}
	// A fill in flight on a disk that turns read-only fails after its response started
	// (nginx cannot finish it from the origin): at most one per client each time.
	if n, most := l.failed[diskFailing].Load(), int64(soakClients*s.events["disk out and back"]); n > most {
		t.Errorf("%d requests failed while a disk failed, more than its fills in flight can be (%d)", n, most)
	}
	if l.requests.Load() < int64(*soakRate)*int64(*soakFor/time.Second)/2 {
		t.Errorf("only %d requests in %v at %d/s: the load did not run", l.requests.Load(), *soakFor, *soakRate)
	}
	for _, e := range []string{"reload", "purge", "disk out and back", "certificate renewal", "agent restart"} {
		if s.events[e] == 0 {
			t.Errorf("no %s in the soak: it is too short for its events", e)
		}
	}
}

// soakLoad is the open-loop load: requests at a fixed rate, whatever the answers take,
// each one checked whole.
type soakLoad struct {
	requests, unsent atomic.Int64
	// failed counts the requests that failed, by what the soak was doing meanwhile.
	failed        [3]atomic.Int64
	phase         atomic.Int32
	mu            sync.Mutex
	firstFailures []string
}

// What the soak is doing to the cache, for the requests that fail meanwhile.
const (
	steady      = iota
	diskFailing // a disk turned read-only until the agent takes it out: its fills in flight fail
	restarting  // the agent and nginx stop and start: the pod is down
)

var phaseNames = [...]string{"failed", "cut by the failing disk", "lost while the agent restarted"}

func (l *soakLoad) during(phase int32) { l.phase.Store(phase) }

func (l *soakLoad) failures() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.firstFailures
}

// start sends rate requests a second to port, for Zipf-distributed keys, until the
// returned function is called; it waits for the requests in flight.
func (l *soakLoad) start(port int32, rate int) (stop func()) {
	paths := make(chan string, soakClients)
	var wg sync.WaitGroup
	for range soakClients {
		wg.Go(func() {
			c := &http.Client{Timeout: 30 * time.Second}
			defer c.CloseIdleConnections()
			for p := range paths {
				phase := l.phase.Load() // a request belongs to what was happening as it started
				code, cache, n := testkit.FetchObject(c, port, p)
				l.observe(p, phase, code, cache, n)
			}
		})
	}
	done := make(chan struct{})
	generated := make(chan struct{})
	go func() {
		defer close(generated)
		zipf := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, soakObjects-1)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				select {
				case paths <- soakPath(int(zipf.Uint64())):
				default:
					l.unsent.Add(1)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-generated
		close(paths)
		wg.Wait()
	}
}

func (l *soakLoad) observe(path string, phase int32, code int, cache string, n int64) {
	l.requests.Add(1)
	if code == http.StatusOK && n == soakObjectSize {
		return
	}
	l.failed[phase].Add(1)
	what := phaseNames[phase]
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.firstFailures) < 20 {
		l.firstFailures = append(l.firstFailures, fmt.Sprintf("%s: %s at %s: %d %q, %d bytes", what, path, time.Now().Format("15:04:05.000"), code, cache, n))
	}
}
