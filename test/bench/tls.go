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
	"bufio"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go/http3"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/nginxconf"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/certs"
)

// T1 measures what TLS costs the cache on this machine: nginx rendered from a CacheNode
// with two TLS sites (an ECDSA P-256 certificate and an RSA 2048 one, cert-manager's
// default), every request a cached 1 KiB object. Side by side in each round:
//   - keep-alive requests/s over plain HTTP and over HTTPS (wrk);
//   - new connections/s, each one request: plain HTTP, TLS with a full handshake per
//     connection (ECDSA and RSA), and TLS resumed from nginx's shared session cache;
//   - keep-alive requests/s over HTTP/1.1, HTTP/2 and HTTP/3 (QUIC), from one Go client
//     each, one connection per client;
//   - nginx's CPU time per connection of each kind, the handshake's cost on the server.
// The clients run on the same CPUs as nginx: the rates are this machine's, the ratios
// between them are what carries over.

// TLSOptions configure T1.
type TLSOptions struct {
	NginxBin, WrkBin string
	// Duration of every measured window. Default 5s.
	Duration time.Duration
	// Rounds, the kinds interleaved in each. Default 3.
	Rounds int
	// Clients are the concurrent connections of every kind. Default 16.
	Clients int
	Log     io.Writer
}

// TLSKind is one way of connecting, measured.
type TLSKind struct {
	Name string `json:"name"`
	// PerSecond is requests/s (keep-alive) or connections/s (one request each), the mean
	// of the rounds.
	PerSecond float64 `json:"perSecond"`
	// NginxCPUMicros is nginx's CPU time per request or connection.
	NginxCPUMicros float64 `json:"nginxCPUMicros"`
	Errors         int64   `json:"errors"`
	// FirstError is what the first failed request or connection of the kind failed with.
	FirstError string `json:"firstError,omitempty"`
	// Resumed is the share of connections that resumed a session (TLS kinds).
	Resumed float64 `json:"resumed"`

	cpu            time.Duration
	units, resumed int64
}

// TLSResult is what T1 measured.
type TLSResult struct {
	Clients   int       `json:"clients"`
	Seconds   float64   `json:"seconds"`
	Rounds    int       `json:"rounds"`
	Protocol  string    `json:"protocol"`
	KeepAlive []TLSKind `json:"keepAlive"`
	NewConns  []TLSKind `json:"newConnections"`
}

const (
	tlsECSite, tlsRSASite = "ecdsa", "rsa"
	tlsECHost, tlsRSAHost = "ecdsa.bench.test", "rsa.bench.test"
)

// tlsSpec is a CacheNode with two TLS sites on one disk; the ECDSA site also answers
// unmatched hosts (wrk names the address).
func tlsSpec(dir, originAddr string, port, tlsPort, statusPort int32) *v1alpha1.CacheNodeSpec {
	site := func(name, host string) v1alpha1.Site {
		return v1alpha1.Site{Name: name, Hostnames: []string{host},
			Origin: v1alpha1.Origin{Servers: []string{originAddr}},
			TLS:    &v1alpha1.SiteTLS{SecretName: name + "-tls", HTTP3: v1alpha1.HTTP3On}}
	}
	spec := &v1alpha1.CacheNodeSpec{
		Disks:       []v1alpha1.Disk{{Name: "d0", Path: dir, Media: v1alpha1.MediaSSD, Size: resource.MustParse("256Mi")}},
		Listener:    v1alpha1.Listener{Port: port, TLSPort: tlsPort, StatusPort: statusPort, AgentPort: 1}, // no agent
		Sites:       []v1alpha1.Site{site(tlsECSite, tlsECHost), site(tlsRSASite, tlsRSAHost)},
		DefaultSite: tlsECSite,
	}
	spec.Default()
	return spec
}

// RunTLS runs T1.
func RunTLS(ctx context.Context, opts TLSOptions) (*TLSResult, error) {
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
	o, err := startOrigin(1 << 10)
	if err != nil {
		return nil, err
	}
	defer o.close()
	dir, err := workersDir("edgepool-bench-tls-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	spec := tlsSpec(dir, o.addr, int32(ports[0]), int32(ports[1]), int32(ports[2]))
	conf, err := render.NginxConf(spec)
	if err != nil {
		return nil, err
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, c := range []struct {
		site, host string
		key        crypto.Signer
	}{{tlsECSite, tlsECHost, ecKey}, {tlsRSASite, tlsRSAHost, rsaKey}} {
		cert, key, err := certs.SelfSigned(c.key, c.host)
		if err != nil {
			return nil, err
		}
		files[nginxconf.CertificateFile(c.site)], files[nginxconf.CertificateKeyFile(c.site)] = cert, key
	}
	n, err := startNginxWith(ctx, opts.NginxBin, conf, spec, files, 0)
	if err != nil {
		return nil, err
	}
	defer n.stop()

	plain := fmt.Sprintf("127.0.0.1:%d", spec.Listener.Port)
	secure := fmt.Sprintf("127.0.0.1:%d", spec.Listener.TLSPort)
	full := func(host string) *tls.Config {
		return &tls.Config{ServerName: host, InsecureSkipVerify: true} //nolint:gosec // a self-signed certificate of the bench's own
	}
	resumed := full(tlsECHost)
	resumed.ClientSessionCache = tls.NewLRUClientSessionCache(opts.Clients)
	// Warm: the object cached, under each host (the cache key holds it).
	for _, c := range []*tls.Config{nil, full(tlsECHost), full(tlsRSAHost)} {
		addr := plain
		if c != nil {
			addr = secure
		}
		for range 2 {
			if _, _, err := oneRequest(ctx, addr, c); err != nil {
				return nil, fmt.Errorf("warm: %w", err)
			}
		}
	}
	res := &TLSResult{Clients: opts.Clients, Seconds: opts.Duration.Seconds(), Rounds: opts.Rounds}
	if res.Protocol, err = negotiated(ctx, secure); err != nil {
		return nil, err
	}
	// The protocols over TLS, each from the same Go client (wrk speaks HTTP/1.1 only).
	protocols := []struct {
		name   string
		major  int // the HTTP version the client must speak
		client func() *http.Client
	}{
		{"HTTP/1.1 over TLS (Go client)", 1, func() *http.Client {
			return &http.Client{Transport: &http.Transport{TLSClientConfig: full(tlsECHost), MaxConnsPerHost: 1}}
		}},
		{"HTTP/2 (Go client)", 2, func() *http.Client {
			return &http.Client{Transport: &http.Transport{TLSClientConfig: full(tlsECHost), ForceAttemptHTTP2: true, MaxConnsPerHost: 1}}
		}},
		{"HTTP/3 (Go client, quic-go)", 3, func() *http.Client {
			return &http.Client{Transport: &http3.Transport{TLSClientConfig: full(tlsECHost)}}
		}},
	}
	keepAlive := []TLSKind{{Name: "HTTP"}, {Name: "HTTPS"}}
	for _, p := range protocols {
		keepAlive = append(keepAlive, TLSKind{Name: p.name})
	}
	newConns := []TLSKind{{Name: "HTTP"}, {Name: "TLS, full handshake, ECDSA P-256"}, {Name: "TLS, full handshake, RSA 2048"}, {Name: "TLS, resumed (ECDSA)"}}
	tlsOf := []*tls.Config{nil, full(tlsECHost), full(tlsRSAHost), resumed}
	for round := range opts.Rounds {
		for i, p := range protocols {
			k := &keepAlive[2+i]
			before, err := treeCPU(n.Pid())
			if err != nil {
				return nil, err
			}
			t, err := requestLoop(ctx, p.client, p.major, "https://"+secure+ObjectPath(0), tlsECHost, opts.Clients, opts.Duration)
			if err != nil {
				return nil, fmt.Errorf("keep-alive %s: %w", k.Name, err)
			}
			after, err := treeCPU(n.Pid())
			if err != nil {
				return nil, err
			}
			k.add(float64(t.done)/opts.Duration.Seconds(), after-before, t, opts.Rounds)
			logf("T1 round %d: keep-alive %s: %.0f req/s", round+1, k.Name, float64(t.done)/opts.Duration.Seconds())
		}
		for i := range keepAlive[:2] {
			addr := plain
			if i == 1 {
				addr = secure
			}
			before, err := treeCPU(n.Pid())
			if err != nil {
				return nil, err
			}
			r, err := runWrk(ctx, opts.WrkBin, addr, wrkLoad{threads: 2, conns: opts.Clients, first: 0, count: 1, https: i == 1}, opts.Duration)
			if err != nil {
				return nil, fmt.Errorf("keep-alive %s: %w", keepAlive[i].Name, err)
			}
			after, err := treeCPU(n.Pid())
			if err != nil {
				return nil, err
			}
			keepAlive[i].add(r.ReqPerSec(), after-before, tally{done: r.Requests, failed: r.Errors}, opts.Rounds)
			logf("T1 round %d: keep-alive %s: %.0f req/s", round+1, keepAlive[i].Name, r.ReqPerSec())
		}
		for i := range newConns {
			addr := plain
			if tlsOf[i] != nil {
				addr = secure
			}
			before, err := treeCPU(n.Pid())
			if err != nil {
				return nil, err
			}
			t := connectLoop(ctx, addr, tlsOf[i], opts.Clients, opts.Duration)
			after, err := treeCPU(n.Pid())
			if err != nil {
				return nil, err
			}
			rate := float64(t.done) / opts.Duration.Seconds()
			newConns[i].add(rate, after-before, t, opts.Rounds)
			logf("T1 round %d: new connections, %s: %.0f/s, %d failed, %d resumed", round+1, newConns[i].Name, rate, t.failed, t.resumed)
		}
	}
	res.KeepAlive, res.NewConns = keepAlive, newConns
	return res, nil
}

// add accumulates one round into k: the rate's mean over the rounds, and nginx's CPU
// time per unit and the share resumed over all of them.
func (k *TLSKind) add(rate float64, cpu time.Duration, t tally, rounds int) {
	k.PerSecond += rate / float64(rounds)
	k.Errors += t.failed
	if k.FirstError == "" && t.firstFailure != nil {
		k.FirstError = t.firstFailure.Error()
	}
	k.cpu += cpu
	k.units += t.done
	k.resumed += t.resumed
	if k.units > 0 {
		k.NginxCPUMicros = float64(k.cpu.Microseconds()) / float64(k.units)
		k.Resumed = float64(k.resumed) / float64(k.units)
	}
}

// Markdown renders T1 as a table, each kind beside plain HTTP's.
func (r *TLSResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "T1 (TLS): nginx rendered from a CacheNode with two TLS sites, a cached 1 KiB object, %d concurrent clients on the same CPUs, %d round(s) of %.0fs per kind, interleaved. Negotiated by default: %s.\n\n",
		r.Clients, r.Rounds, r.Seconds, r.Protocol)
	var failures strings.Builder
	b.WriteString("| Connections | Kind | Per second | ÷ plain HTTP | nginx CPU per request or connection | Resumed | Failed |\n|---|---|---|---|---|---|---|\n")
	for _, group := range []struct {
		name  string
		kinds []TLSKind
	}{{"keep-alive, requests", r.KeepAlive}, {"new, one request each", r.NewConns}} {
		for _, k := range group.kinds {
			fmt.Fprintf(&b, "| %s | %s | %.0f | %.2f | %.0f µs | %.0f%% | %d |\n", group.name, k.Name, k.PerSecond,
				k.PerSecond/group.kinds[0].PerSecond, k.NginxCPUMicros, 100*k.Resumed, k.Errors)
			if k.FirstError != "" {
				fmt.Fprintf(&failures, "\n%s, %s: the first failure: %s\n", group.name, k.Name, k.FirstError)
			}
		}
	}
	b.WriteString(failures.String())
	return b.String()
}

// negotiated is the protocol and cipher suite nginx agrees to with a default client.
func negotiated(ctx context.Context, addr string) (string, error) {
	d := tls.Dialer{Config: &tls.Config{ServerName: tlsECHost, InsecureSkipVerify: true}} //nolint:gosec // the bench's own certificate
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	s := c.(*tls.Conn).ConnectionState()
	return tls.VersionName(s.Version) + " " + tls.CipherSuiteName(s.CipherSuite), nil
}

// oneRequest connects to addr (over TLS with c, unless nil), GETs the bench object on a
// connection that closes after it, and reads the whole answer.
func oneRequest(ctx context.Context, addr string, c *tls.Config) (ok, resumed bool, err error) {
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	conn, err := dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, false, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if c != nil {
		tc := tls.Client(conn, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			return false, false, err
		}
		resumed = tc.ConnectionState().DidResume
		conn = tc
	}
	host := tlsECHost
	if c != nil {
		host = c.ServerName
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", ObjectPath(0), host); err != nil {
		return false, resumed, err
	}
	br := bufio.NewReader(conn)
	status, err := br.ReadString('\n')
	if err != nil {
		return false, resumed, err
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return false, resumed, err
	}
	if !strings.HasPrefix(status, "HTTP/1.1 200") {
		return false, resumed, errors.New(strings.TrimSpace(status))
	}
	return true, resumed, nil
}

// tally counts a loop's requests or connections: those that succeeded, those that failed
// (and the first one's error) and those that resumed a TLS session.
type tally struct {
	done, failed, resumed int64
	firstFailure          error
}

// connectLoop has clients goroutines each connect, make one request and close, again and
// again for d.
func connectLoop(ctx context.Context, addr string, c *tls.Config, clients int, d time.Duration) tally {
	var nDone, nFailed, nResumed atomic.Int64
	var firstFailure atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				ok, res, err := oneRequest(ctx, addr, c)
				switch {
				case err != nil || !ok:
					nFailed.Add(1)
					if err == nil {
						err = errors.New("not answered")
					}
					firstFailure.CompareAndSwap(nil, err)
				default:
					nDone.Add(1)
					if res {
						nResumed.Add(1)
					}
				}
			}
		}()
	}
	wg.Wait()
	first, _ := firstFailure.Load().(error)
	return tally{done: nDone.Load(), failed: nFailed.Load(), resumed: nResumed.Load(), firstFailure: first}
}

// requestLoop has clients goroutines, each with a client of its own (one connection),
// GET url with Host host again and again for d; it counts the requests answered 200 and
// those that were not. An answer in another HTTP version than major is an error.
func requestLoop(ctx context.Context, newClient func() *http.Client, major int, url, host string, clients int, d time.Duration) (tally, error) {
	var nDone, nFailed atomic.Int64
	var firstErr, firstFailure atomic.Value
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for range clients {
		c := newClient()
		c.Timeout = 30 * time.Second
		wg.Go(func() {
			defer c.CloseIdleConnections()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				req.Host = host
				resp, err := c.Do(req)
				if err != nil {
					nFailed.Add(1)
					firstFailure.CompareAndSwap(nil, err)
					continue
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.ProtoMajor != major {
					firstErr.CompareAndSwap(nil, fmt.Errorf("answered over %s, want HTTP/%d", resp.Proto, major))
					return
				}
				if err != nil || resp.StatusCode != http.StatusOK {
					nFailed.Add(1)
					if err == nil {
						err = fmt.Errorf("answered %s", resp.Status)
					}
					firstFailure.CompareAndSwap(nil, err)
					continue
				}
				nDone.Add(1)
			}
		})
	}
	wg.Wait()
	if e, _ := firstErr.Load().(error); e != nil {
		return tally{}, e
	}
	first, _ := firstFailure.Load().(error)
	return tally{done: nDone.Load(), failed: nFailed.Load(), firstFailure: first}, nil
}

// freePorts are n TCP ports free on loopback now.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// logTo is a scenario's progress logger: a line to w, or nothing without one.
func logTo(w io.Writer) func(format string, args ...any) {
	return func(format string, args ...any) {
		if w != nil {
			fmt.Fprintf(w, format+"\n", args...)
		}
	}
}

// workersDir is a new temporary directory named by prefix that nginx's workers (nobody)
// may write a cache in.
func workersDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}
