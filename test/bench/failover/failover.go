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

// Package failover is benchmark scenario F1: the real edgepool-agent supervising real
// nginx on real disks (ext4 on loop devices). Under load, the kernel fails one disk and
// the agent takes it out of the node's split. It measures the time to detection and to
// nginx serving without the disk, the failed requests before, while detecting, while
// nginx switches and after, and the healthy disks' throughput before, during and after.
package failover

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
)

// The faults a run injects into its failing disk.
const (
	// Dead: every read and write of the filesystem fails with EIO (ext4's shutdown), as
	// when its device goes away.
	Dead = "dead"
	// ReadOnly: the filesystem is remounted read-only, as the kernel does after errors
	// with errors=remount-ro. Its cached objects can still be read.
	ReadOnly = "read-only"
)

// Options configure a run.
type Options struct {
	// Faults are injected one per run, each on fresh disks. Default: Dead, ReadOnly.
	Faults []string
	// Disks is the number of disks; the first one fails. Default 3.
	Disks int
	// Objects is the number of objects, cached before the load. Default 300.
	Objects int
	// ObjectSize is the size of each object. Default 64 KiB.
	ObjectSize int
	// Clients is the number of keep-alive clients for the healthy disks' keys, and for the
	// failing disk's. Default 2.
	Clients int
	// Window is how long the load runs before the failure, and after nginx switched.
	// Default 3s.
	Window time.Duration
	// NginxBin is the nginx binary, built with thread pools. Required.
	NginxBin string
	// AgentBin is the edgepool-agent binary, run as nobody. Default: built from RepoRoot.
	AgentBin string
	// RepoRoot is the repository root, where ./cmd/agent is built. Default ".".
	RepoRoot string
	// Log receives progress lines and, on failure, the agent's log.
	Log io.Writer
}

func (o Options) withDefaults() (Options, error) {
	if o.NginxBin == "" {
		return o, errors.New("failover: NginxBin is required")
	}
	if len(o.Faults) == 0 {
		o.Faults = []string{Dead, ReadOnly}
	}
	for _, f := range o.Faults {
		if f != Dead && f != ReadOnly {
			return o, fmt.Errorf("failover: unknown fault %q (have %s, %s)", f, Dead, ReadOnly)
		}
	}
	o.Disks = cmpOr(o.Disks, 3)
	if o.Disks < 2 {
		return o, errors.New("failover: at least 2 disks, one to fail and one to serve")
	}
	o.Objects = cmpOr(o.Objects, 300)
	o.ObjectSize = cmpOr(o.ObjectSize, 64<<10)
	o.Clients = cmpOr(o.Clients, 2)
	o.Window = cmpOr(o.Window, 3*time.Second)
	o.RepoRoot = cmpOr(o.RepoRoot, ".")
	if o.Log == nil {
		o.Log = io.Discard
	}
	return o, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Phase is what the load saw in one phase of a run.
type Phase struct {
	Requests int `json:"requests"`
	// Failed requests: a 5xx, or no status or a body cut short (a connection broken).
	Failed int `json:"failed"`
	// FailedHealthy are the failed requests for keys of the healthy disks.
	FailedHealthy int `json:"failedHealthy"`
	// HealthyFailures say how the first few of those failed: the object, the status (0:
	// none, the connection broke or the body was cut short) and nginx's cache status.
	HealthyFailures []string `json:"healthyFailures,omitempty"`
	// HealthyMBps is the healthy disks' keys served (bytes of successful responses), per second.
	HealthyMBps float64 `json:"healthyMBps"`
	Ms          float64 `json:"ms"`
}

// FaultRun is one fault injected under load.
type FaultRun struct {
	Fault string `json:"fault"`
	// DetectionMs: the failure -> the agent took the disk out (its log).
	DetectionMs float64 `json:"detectionMs"`
	// Reason is why the agent took it out.
	Reason string `json:"reason"`
	// SwitchedMs: the failure -> nginx's workers of before the failure all gone; from then
	// on only the split without the disk serves.
	SwitchedMs float64 `json:"switchedMs"`
	Before     Phase   `json:"before"`
	Detecting  Phase   `json:"detecting"` // the failure -> detection
	Switching  Phase   `json:"switching"` // detection -> switched
	After      Phase   `json:"after"`
}

// DuringRatio is the healthy disks' throughput from the failure to the switch, as a
// fraction of before; AfterRatio, after the switch.
func (r *FaultRun) DuringRatio() float64 {
	during := r.Detecting.HealthyMBps*r.Detecting.Ms + r.Switching.HealthyMBps*r.Switching.Ms
	return during / (r.Detecting.Ms + r.Switching.Ms) / r.Before.HealthyMBps
}

func (r *FaultRun) AfterRatio() float64 { return r.After.HealthyMBps / r.Before.HealthyMBps }

// Result is what F1 measured.
type Result struct {
	Disks      int         `json:"disks"`
	Objects    int         `json:"objects"`
	ObjectSize int         `json:"objectSize"`
	Clients    int         `json:"clients"`
	Runs       []*FaultRun `json:"runs"`
}

// Run builds the agent (unless AgentBin is given) and runs every fault of opts.
func Run(ctx context.Context, opts Options) (*Result, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "edgepool-bench-failover-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil { // nobody runs the agent binary from here
		return nil, err
	}
	agentBin, err := testkit.AgentBinary(ctx, opts.AgentBin, opts.RepoRoot, work)
	if err != nil {
		return nil, err
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write(bytes.Repeat([]byte{'x'}, opts.ObjectSize))
	}))
	defer origin.Close()

	res := &Result{Disks: opts.Disks, Objects: opts.Objects, ObjectSize: opts.ObjectSize, Clients: opts.Clients}
	for i, fault := range opts.Faults {
		fmt.Fprintf(opts.Log, "F1: %s disk under load\n", fault)
		dir := filepath.Join(work, fmt.Sprintf("run%d", i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		r, err := runFault(ctx, opts, dir, agentBin, strings.TrimPrefix(origin.URL, "http://"), fault)
		if err != nil {
			return nil, fmt.Errorf("F1 %s: %w", fault, err)
		}
		res.Runs = append(res.Runs, r)
	}
	return res, nil
}

func runFault(ctx context.Context, opts Options, dir, agentBin, origin, fault string) (r *FaultRun, err error) {
	spec := &v1alpha1.CacheNodeSpec{Origin: v1alpha1.Origin{Servers: []string{origin}}}
	var disks []*testkit.FaultDisk
	for i := range opts.Disks {
		name := fmt.Sprintf("d%d", i)
		path := filepath.Join(dir, name)
		if err := os.Mkdir(path, 0o755); err != nil {
			return nil, err
		}
		disk, err := testkit.NewFaultDisk(path, filepath.Join(dir, name+".img"), "128M")
		if err != nil {
			return nil, err
		}
		defer func() { err = errors.Join(err, disk.Close()) }()
		disks = append(disks, disk)
		media, err := testkit.DeviceMedia(disk.Dev)
		if err != nil {
			return nil, err
		}
		spec.Disks = append(spec.Disks, v1alpha1.Disk{Name: name, Path: path, Media: v1alpha1.Media(media), Size: resource.MustParse("100Mi")})
	}
	failing := spec.Disks[0]
	for _, port := range []*int32{&spec.Listener.Port, &spec.Listener.StatusPort, &spec.Listener.AgentPort} {
		if *port, err = testkit.FreePort(); err != nil {
			return nil, err
		}
	}
	spec.Default()
	conf, err := render.NginxConf(spec)
	if err != nil {
		return nil, err
	}
	cfgDir := filepath.Join(dir, "config")
	if err := os.Mkdir(cfgDir, 0o755); err != nil {
		return nil, err
	}
	cfg := &testkit.ConfigDir{Dir: cfgDir}
	if err := cfg.WriteConf(spec, conf); err != nil {
		return nil, err
	}
	runDir := filepath.Join(dir, "run")
	if err := os.Mkdir(runDir, 0o777); err != nil {
		return nil, err
	}
	if err := os.Chmod(runDir, 0o777); err != nil { // past the umask: the agent runs as nobody
		return nil, err
	}
	// The agent's defaults, as in a cache pod: checks every 5 s.
	args := []string{"--nginx", opts.NginxBin, "--config-dir", cfgDir, "--run-dir", runDir}
	for _, d := range spec.Disks {
		args = append(args, "--disk", fmt.Sprintf("name=%s,path=%s,media=%s", d.Name, d.Path, d.Media))
	}
	log := &testkit.Buffer{}
	agent, err := testkit.StartAgent(agentBin, fmt.Sprintf("127.0.0.1:%d", spec.Listener.AgentPort), args, log)
	if err != nil {
		return nil, err
	}
	defer func() {
		_ = agent.Stop(15 * time.Second)
		if err != nil {
			fmt.Fprintf(opts.Log, "agent log:\n%s\n", log)
		}
	}()
	readyCtx, cancel := testkit.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := agent.WaitReady(readyCtx); err != nil {
		return nil, err
	}

	onFailing, err := warm(spec, opts.Objects, failing.Path)
	if err != nil {
		return nil, err
	}
	kids, err := testkit.Children(agent.Pid())
	if err != nil || len(kids) != 1 {
		return nil, fmt.Errorf("the agent's children: %v, %v; want exactly nginx", kids, err)
	}
	master := kids[0]
	oldWorkers, err := testkit.NginxWorkers(master)
	if err != nil {
		return nil, err
	}

	// The healthy disks' keys and the failing disk's have clients of their own: a client
	// held up by the failing disk would otherwise slow the healthy disks' figures too.
	var healthy, failingKeys []int
	for i := range opts.Objects {
		if onFailing[i] {
			failingKeys = append(failingKeys, i)
		} else {
			healthy = append(healthy, i)
		}
	}
	if len(failingKeys) == 0 || len(healthy) == 0 {
		return nil, fmt.Errorf("%d of %d objects on the failing disk: the split should give it some, not all", len(failingKeys), opts.Objects)
	}
	stop := make(chan struct{})
	samples := make(chan []testkit.Sample, 2)
	loadStart := time.Now()
	for _, keys := range [][]int{healthy, failingKeys} {
		go func() { samples <- testkit.Load(spec.Listener.Port, keys, opts.Clients, stop) }()
	}
	stopLoad := func() []testkit.Sample {
		if stop != nil {
			close(stop)
			stop = nil
		}
		return append(<-samples, <-samples...)
	}
	defer func() {
		if stop != nil {
			stopLoad()
		}
	}()
	time.Sleep(opts.Window)

	failed := time.Now()
	if fault == Dead {
		err = disks[0].Shutdown()
	} else {
		err = disks[0].ReadOnly()
	}
	if err != nil {
		return nil, err
	}
	detectCtx, cancel := testkit.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := testkit.Eventually(detectCtx, 10*time.Millisecond, "the failing disk to be out", func() error {
		st, err := agent.Status(detectCtx)
		if err != nil {
			return err
		}
		if !st.Disks[0].Out {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := testkit.Eventually(detectCtx, 10*time.Millisecond, "nginx's old workers to leave", func() error {
		workers, err := testkit.NginxWorkers(master)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(workers, func(pid int) bool { return slices.Contains(oldWorkers, pid) }) {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	switched := time.Now()
	time.Sleep(opts.Window)
	all := stopLoad()
	loadEnd := time.Now()

	tookOut, reason := logged(log.String(), "Took disk out")
	if tookOut.IsZero() {
		return nil, errors.New("the agent's log does not say when it took the disk out")
	}
	r = &FaultRun{Fault: fault, Reason: reason, DetectionMs: testkit.Millis(tookOut.Sub(failed)), SwitchedMs: testkit.Millis(switched.Sub(failed))}
	bounds := []time.Time{loadStart, failed, tookOut, switched, loadEnd}
	phases := []*Phase{&r.Before, &r.Detecting, &r.Switching, &r.After}
	for i, p := range phases {
		p.Ms = testkit.Millis(bounds[i+1].Sub(bounds[i]))
	}
	healthyBytes := make([]int64, len(phases))
	for _, s := range all {
		i := 0
		for i < len(phases)-1 && s.Start.After(bounds[i+1]) {
			i++
		}
		p := phases[i]
		p.Requests++
		ok := s.Code == http.StatusOK
		if !ok {
			p.Failed++
		}
		if !onFailing[s.Object] {
			if ok {
				healthyBytes[i] += s.Bytes
			} else {
				p.FailedHealthy++
				if len(p.HealthyFailures) < 5 {
					p.HealthyFailures = append(p.HealthyFailures, fmt.Sprintf("/obj/%d at +%dms: status %d, X-Cache-Status %q",
						s.Object, s.Start.Sub(bounds[i]).Milliseconds(), s.Code, s.Cache))
				}
			}
		}
	}
	for i, p := range phases {
		if p.Ms > 0 {
			p.HealthyMBps = float64(healthyBytes[i]) / (1 << 20) / (p.Ms / 1000)
		}
	}
	return r, nil
}

// warm requests every object twice, checks the second is a HIT, and returns which of them
// are on the disk at failing.
func warm(spec *v1alpha1.CacheNodeSpec, objects int, failing string) (map[int]bool, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	on := map[int]bool{}
	for i := range objects {
		path := fmt.Sprintf("/obj/%d", i)
		for try := range 2 {
			code, cache, _ := testkit.FetchObject(c, spec.Listener.Port, path)
			if code != http.StatusOK || (try == 1 && cache != "HIT") {
				return nil, fmt.Errorf("warming %s: %d %s", path, code, cache)
			}
		}
		// nginx's levels=1:2 file for the key $host$request_uri.
		sum := md5.Sum([]byte("127.0.0.1" + path))
		h := hex.EncodeToString(sum[:])
		_, err := os.Stat(filepath.Join(failing, agentapi.DiskCacheDir, h[31:], h[29:31], h))
		on[i] = err == nil
	}
	return on, nil
}

// logged finds the first line of the agent's log whose message starts with msg, and
// returns its time and reason.
func logged(log, msg string) (time.Time, string) {
	s := bufio.NewScanner(strings.NewReader(log))
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		var entry struct {
			Time   time.Time `json:"time"`
			Msg    string    `json:"msg"`
			Reason string    `json:"reason"`
		}
		if json.Unmarshal(s.Bytes(), &entry) == nil && strings.HasPrefix(entry.Msg, msg) {
			return entry.Time, entry.Reason
		}
	}
	return time.Time{}, ""
}
