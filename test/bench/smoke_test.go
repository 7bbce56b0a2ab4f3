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

package bench

import (
	"context"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/test/testkit"
)

// TestSmoke runs every disk scenario once, small and short, and every configuration and
// kind of load in it but not every level (Options.Smoke), so the harness cannot rot:
// the emulated disks mount, nginx serves the rendered configurations from them, wrk and
// the open-loop clients load them, content is verified byte for byte, and the tables
// and charts come out. It asserts no performance figure.
func TestSmoke(t *testing.T) {
	nginx, wrk := benchTools(t)
	opts := Options{
		RepoRoot: "../..", NginxBin: nginx, WrkBin: wrk, Log: testkit.LogWriter(t.Log),
		ObjectSize: 256 << 10, DataSetBytes: 16 << 20,
		Duration: 500 * time.Millisecond, Ramp: 250 * time.Millisecond, Rounds: 1, Slowdown: 1, Workers: 2, HeavyLoad: 1.25, ColdCapMBps: 200, Smoke: true,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := RunScenarios(ctx, opts, Scenarios)
	if err != nil {
		t.Fatal(err)
	}

	if want := 11 + 5 + 2 + 8 + 1 + 4; len(res.Runs) != want {
		t.Errorf("%d runs, want %d", len(res.Runs), want)
	}
	for _, r := range res.Runs {
		for _, c := range []*clientResult{r.Hot, r.Cold} {
			if c != nil && c.Errors != 0 {
				t.Errorf("%s: %d errors", r.summary(), c.Errors)
			}
		}
		// In a half-second window the load may starve a hot client (the thread-less
		// baseline's: that is what D1 and D4 measure), the slow disk's client in D2, and
		// with D2's shared pool every disk's (the sick disk's reads hold all its threads:
		// what D2 measures). The hot client alone and any other run's cold load as a whole
		// must get through.
		sharedPool := r.Scenario == "D2" && strings.HasPrefix(r.Config, "one shared pool")
		if (r.Cold != nil && r.Cold.Requests == 0 && !sharedPool) || (r.Cold == nil && r.Hot != nil && r.Hot.starved()) || (r.Cold == nil && r.Hot == nil) {
			t.Errorf("%s: no request completed", r.summary())
		}
		// Every open-loop client sent its requests; the hot client alone got through. (The
		// open-loop clients check every response's bytes: a wrong one fails the run.)
		for _, c := range []*clientResult{r.Hot, r.Cold} {
			if c != nil && c.open() && (c.Sent == 0 || c.OfferedPerSec <= 0) {
				t.Errorf("%s: open loop sent %d requests at %.1f/s", r.summary(), c.Sent, c.OfferedPerSec)
			}
		}
		if r.Cold == nil && r.Hot.open() && r.Hot.Requests == 0 {
			t.Errorf("%s: no open-loop request completed", r.summary())
		}
		if r.Checked == 0 {
			t.Errorf("%s: content not verified", r.summary())
		}
		// Every configuration sends its per-request lines to the agent's parser, but the
		// one of L1 that leaves them out.
		if off := r.Config == "per-request lines off"; (r.LinesCounted == 0) != off {
			t.Errorf("%s: %d per-request lines counted", r.summary(), r.LinesCounted)
		}
	}
	if _, err := json.Marshal(res); err != nil {
		t.Errorf("the results do not encode as JSON: %v", err)
	}
	md := res.Markdown()
	for _, s := range Scenarios {
		if !strings.Contains(md, "| "+s+" | ") {
			t.Errorf("the table has no row for %s:\n%s", s, md)
		}
	}
	for _, r := range res.Ratios {
		if len(r.Values) != 1 { // the smoke's data set fits in RAM: its ratios mean nothing
			t.Errorf("ratio %s %q: %v", r.Scenario, r.Name, r.Values)
		}
	}
	if !strings.Contains(md, "| D5 | edgepool (sample CacheNode) | 1 | hdd0 |") {
		t.Errorf("the disk table has no row for D5's hdd0:\n%s", md)
	}
	t.Log("\n" + md)

	charts, err := res.WriteCharts(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(charts) != 2 {
		t.Errorf("charts %v, want D1's and D4's", charts)
	}
	for _, c := range charts {
		f, err := os.Open(c)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("%s: %v", c, err)
		} else if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 300 {
			t.Errorf("%s: %v", c, b)
		}
	}
}

// TestTLSSmoke runs T1 once, short: HTTPS with each certificate serves the cached object,
// no connection fails, full handshakes are full and resumed ones resume from the shared
// session cache whichever of nginx's workers takes the connection. It asserts no
// performance figure.
func TestTLSSmoke(t *testing.T) {
	nginx, wrk := benchTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := RunTLS(ctx, TLSOptions{NginxBin: nginx, WrkBin: wrk, Duration: time.Second, Rounds: 1, Clients: 4, Log: testkit.LogWriter(t.Log)})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Markdown())
	if !strings.HasPrefix(res.Protocol, "TLS 1.3") {
		t.Errorf("negotiated %s, want TLS 1.3", res.Protocol)
	}
	for _, k := range append(res.KeepAlive, res.NewConns...) {
		if k.PerSecond == 0 || k.Errors > 0 {
			t.Errorf("%s: %.0f/s, %d failed (the first: %s)", k.Name, k.PerSecond, k.Errors, k.FirstError)
		}
	}
	for i, k := range res.NewConns {
		resumes := strings.Contains(k.Name, "resumed")
		// Each client's first connection is a full handshake.
		if (resumes && k.Resumed < 0.9) || (!resumes && k.Resumed > 0) || (i == 0 && k.Resumed > 0) {
			t.Errorf("%s: %.0f%% of the connections resumed a session", k.Name, 100*k.Resumed)
		}
	}
}

// TestCompressionSmoke runs Z1 once, short: each site serves the page in the encoding it
// should (checked as Z1 warms), no request fails, and the compressed responses are
// smaller. It asserts no performance figure.
func TestCompressionSmoke(t *testing.T) {
	nginx, wrk := benchTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := RunCompression(ctx, CompressionOptions{NginxBin: nginx, WrkBin: wrk, Duration: time.Second, Rounds: 1, Clients: 4, Log: testkit.LogWriter(t.Log)})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Markdown())
	for i, k := range res.Kinds {
		if k.PerSecond == 0 || k.Errors > 0 {
			t.Errorf("%s: %.0f/s, %d failed", k.Name, k.PerSecond, k.Errors)
		}
		if i > 0 && k.BytesPerResponse*3 > res.Kinds[0].BytesPerResponse {
			t.Errorf("%s: %.0f bytes per response, identity %.0f", k.Name, k.BytesPerResponse, res.Kinds[0].BytesPerResponse)
		}
	}
}

// benchTools are the nginx and wrk the smoke tests run: `make test` installs them.
func benchTools(t *testing.T) (nginx, wrk string) {
	t.Helper()
	if nginx = os.Getenv("NGINX_BIN"); nginx == "" {
		t.Fatal("NGINX_BIN is unset: run `make test`, which installs nginx and wrk")
	}
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		t.Fatal("wrk not found: run `make test`, which installs it")
	}
	return nginx, wrk
}
