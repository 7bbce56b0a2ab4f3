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
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/render"
)

// Z1 measures what compression costs a hit: nginx rendered from a CacheNode with three
// sites answering the same cached HTML page, asked by wrk with Accept-Encoding: gzip (or
// br), side by side in each round:
//   - identity: no compression, the page as the origin sent it;
//   - stored compressed: spec.compression, the page compressed once when it was fetched
//     and served compressed from the cache, in gzip and in brotli;
//   - compressed per hit: nginx's gzip filter in the site's server (not a configuration
//     edgepool renders: the bench adds it), which compresses the cached page again for
//     every response, as a cache that stores only the origin's encoding must.
// It reports requests/s, nginx's CPU time per request and the bytes per response.

// CompressionOptions configure Z1.
type CompressionOptions struct {
	NginxBin, WrkBin string
	// Duration of every measured window. Default 5s.
	Duration time.Duration
	// Rounds, the sites interleaved in each. Default 3.
	Rounds int
	// Clients are wrk's keep-alive connections. Default 16.
	Clients int
	Log     io.Writer
}

// CompressionKind is one way of serving the page, measured.
type CompressionKind struct {
	Name           string  `json:"name"`
	PerSecond      float64 `json:"perSecond"`
	NginxCPUMicros float64 `json:"nginxCPUMicros"`
	// BytesPerResponse are the bytes wrk read per response, headers included.
	BytesPerResponse float64 `json:"bytesPerResponse"`
	Errors           int64   `json:"errors"`

	cpu          time.Duration
	units, bytes int64
}

// CompressionResult is what Z1 measured.
type CompressionResult struct {
	Clients   int               `json:"clients"`
	Seconds   float64           `json:"seconds"`
	Rounds    int               `json:"rounds"`
	PageBytes int               `json:"pageBytes"`
	Kinds     []CompressionKind `json:"kinds"`
}

// compressionPage is the page Z1 serves: about 32 KiB of HTML, with numbers that vary so
// that gzip finds less than a repeated string (it compresses it about 5 times).
func compressionPage() string {
	var b strings.Builder
	b.WriteString("<!doctype html><html><head><title>edgepool</title></head><body><table>\n")
	for i := 0; b.Len() < 32<<10; i++ {
		fmt.Fprintf(&b, "<tr><td class=\"n\">%d</td><td>item %x</td><td>%d.%02d</td><td><a href=\"/item/%d\">details</a></td></tr>\n",
			i, i*2654435761%1000003, (i*7919)%1000, i%100, i*31)
	}
	b.WriteString("</table></body></html>\n")
	return b.String()
}

const (
	zIdentity, zStored, zPerHit = "identity", "stored", "perhit"
)

// compressionSpec is the CacheNode of Z1: the three sites on one disk.
func compressionSpec(dir, originAddr string, port, statusPort int32) *v1alpha1.CacheNodeSpec {
	site := func(name string) v1alpha1.Site {
		return v1alpha1.Site{Name: name, Hostnames: []string{name + ".bench.test"}, Origin: v1alpha1.Origin{Servers: []string{originAddr}}}
	}
	spec := &v1alpha1.CacheNodeSpec{
		Disks:    []v1alpha1.Disk{{Name: "d0", Path: dir, Media: v1alpha1.MediaSSD, Size: resource.MustParse("256Mi")}},
		Listener: v1alpha1.Listener{Port: port, StatusPort: statusPort, AgentPort: 1}, // no agent
		Sites:    []v1alpha1.Site{site(zIdentity), site(zStored), site(zPerHit)},
	}
	spec.Sites[1].Compression = &v1alpha1.Compression{}
	spec.Default()
	return spec
}

// withGzipPerHit adds nginx's gzip filter, with the stored site's settings, to the server
// of the per-hit site.
func withGzipPerHit(conf string, c *v1alpha1.Compression) (string, error) {
	name := "server_name " + zPerHit + ".bench.test;"
	if strings.Count(conf, name) != 1 {
		return "", fmt.Errorf("Z1: the configuration has %d servers named %s", strings.Count(conf, name), zPerHit)
	}
	gzip := fmt.Sprintf("%s\n        gzip on;\n        gzip_comp_level %d;\n        gzip_min_length %d;\n        gzip_types %s;\n        gzip_proxied any;\n        gzip_vary on;",
		name, c.GzipLevel, *c.MinLength, strings.Join(slices.DeleteFunc(slices.Clone(c.Types), func(t string) bool { return t == "text/html" }), " "))
	return strings.Replace(conf, name, gzip, 1), nil
}

// RunCompression runs Z1.
func RunCompression(ctx context.Context, opts CompressionOptions) (*CompressionResult, error) {
	if opts.Duration == 0 {
		opts.Duration = 5 * time.Second
	}
	if opts.Rounds == 0 {
		opts.Rounds = 3
	}
	if opts.Clients == 0 {
		opts.Clients = 16
	}
	logf := logTo(opts.Log)
	page := compressionPage()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	origin := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "public, max-age=86400")
		_, _ = io.WriteString(w, page)
	})}
	go func() { _ = origin.Serve(l) }()
	defer origin.Close()

	dir, err := workersDir("edgepool-bench-gzip-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	spec := compressionSpec(dir, l.Addr().String(), int32(ports[0]), int32(ports[1]))
	conf, err := render.NginxConf(spec)
	if err != nil {
		return nil, err
	}
	if conf, err = withGzipPerHit(conf, spec.Sites[1].Compression); err != nil {
		return nil, err
	}
	n, err := startNginxWith(ctx, opts.NginxBin, conf, spec, nil, 0)
	if err != nil {
		return nil, err
	}
	defer n.stop()

	addr := fmt.Sprintf("127.0.0.1:%d", spec.Listener.Port)
	kinds := []CompressionKind{{Name: "identity (no compression)"}, {Name: "gzip, stored compressed (spec.compression)"},
		{Name: "brotli, stored compressed (spec.compression)"}, {Name: "gzip, compressed per hit (nginx's gzip filter after the cache)"}}
	asks := []struct{ site, encoding string }{{zIdentity, "gzip"}, {zStored, "gzip"}, {zStored, "br"}, {zPerHit, "gzip"}}
	// Warm: the page cached for each kind, and checked to be served as it should.
	for i, a := range asks {
		for range 2 {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+ObjectPath(0), nil)
			req.Host = a.site + ".bench.test"
			req.Header.Set("Accept-Encoding", a.encoding)
			resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
			if err != nil {
				return nil, fmt.Errorf("warm %s: %w", kinds[i].Name, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			want := a.encoding
			if i == 0 {
				want = ""
			}
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != want {
				return nil, fmt.Errorf("warm %s: %d, Content-Encoding %q", kinds[i].Name, resp.StatusCode, resp.Header.Get("Content-Encoding"))
			}
		}
	}
	for round := range opts.Rounds {
		for i, a := range asks {
			k := &kinds[i]
			before, err := treeCPU(n.Pid())
			if err != nil {
				return nil, err
			}
			r, err := runWrk(ctx, opts.WrkBin, addr, wrkLoad{threads: 2, conns: opts.Clients, first: 0, count: 1,
				headers: []string{"Host: " + a.site + ".bench.test", "Accept-Encoding: " + a.encoding}}, opts.Duration)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k.Name, err)
			}
			after, err := treeCPU(n.Pid())
			if err != nil {
				return nil, err
			}
			k.PerSecond += r.ReqPerSec() / float64(opts.Rounds)
			k.Errors += r.Errors
			k.cpu += after - before
			k.units += r.Requests
			k.bytes += r.Bytes
			if k.units > 0 {
				k.NginxCPUMicros = float64(k.cpu.Microseconds()) / float64(k.units)
				k.BytesPerResponse = float64(k.bytes) / float64(k.units)
			}
			logf("Z1 round %d: %s: %.0f req/s", round+1, k.Name, r.ReqPerSec())
		}
	}
	return &CompressionResult{Clients: opts.Clients, Seconds: opts.Duration.Seconds(), Rounds: opts.Rounds, PageBytes: len(page), Kinds: kinds}, nil
}

// Markdown renders Z1 as a table, each kind beside the identity's.
func (r *CompressionResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Z1 (compression): nginx rendered from a CacheNode, a cached HTML page of %d bytes asked with Accept-Encoding: gzip (br for brotli) by %d keep-alive clients on the same CPUs, %d round(s) of %.0fs per kind, interleaved.\n\n",
		r.PageBytes, r.Clients, r.Rounds, r.Seconds)
	b.WriteString("| Kind | Requests/s | ÷ identity | nginx CPU per request | ÷ identity | Bytes per response | Failed |\n|---|---|---|---|---|---|---|\n")
	base := r.Kinds[0]
	for _, k := range r.Kinds {
		fmt.Fprintf(&b, "| %s | %.0f | %.2f | %.1f µs | %.2f | %.0f | %d |\n", k.Name, k.PerSecond, k.PerSecond/base.PerSecond,
			k.NginxCPUMicros, k.NginxCPUMicros/base.NginxCPUMicros, k.BytesPerResponse, k.Errors)
	}
	return b.String()
}
