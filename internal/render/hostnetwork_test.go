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

package render

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgepool/edgepool/api/v1alpha1"
)

// Origin hosts that reach the node itself or a cloud's metadata service from the node's
// network namespace, each in a spelling nginx or glibc's resolver accepts (the
// schema's host:port pattern admits them all), and hosts that do not.
var (
	hazardousOrigins = []string{
		"127.0.0.1", "127.255.255.254", "127.1", "127.0.1", "2130706433", "0x7f000001", "0x7f.1",
		"0177.0.0.1", "0127.0.0.1", "017700000001", "0", "0.0.0.0", "0.1.2.3",
		"localhost", "localhost4", "localhost6", "localhost.localdomain", "localhost6.localdomain6",
		"ip6-localhost", "ip6-loopback", "cache.localhost",
		"[::1]", "[0:0:0:0:0:0:0:1]", "[::]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::ffff:10.0.0.1]",
		"169.254.169.254", "169.254.170.2", "169.254.0.1", "0xa9fea9fe", "2852039166",
		"[fe80::1]", "[febf:ffff::1]", "[FE80::1]",
		"100.100.100.200", "168.63.129.16", "[fd00:ec2::254]", "[fd00:ec2:0:0:0:0:0:254]", "[fd00:ec2::23]", "[fd20:ce::254]",
		"metadata", "metadata.google.internal", "instance-data", "instance-data.ec2.internal",
		"[127.0.0.1]",
	}
	safeOrigins = []string{
		"origin.example.svc", "origin", "10.0.0.10", "126.255.255.255", "128.0.0.1", "169.253.255.255", "169.255.0.1",
		"1.0.0.0", "100.100.100.201", "[2001:db8::1]", "[fec0::1]", "[fc00::1]", "[fd00:ec2::255]", "[::127.0.0.1]",
		"localhost.example.com", "mylocalhost", "localhost-origin", "metadata.example", "0x7f000001.example",
		"127.0.0.1.example", "1e100.net",
	}
)

func TestOriginHazard(t *testing.T) {
	for _, h := range hazardousOrigins {
		if OriginHazard(h) == "" {
			t.Errorf("OriginHazard(%q) = \"\": it reaches the node or a metadata service", h)
		}
	}
	for _, h := range safeOrigins {
		if why := OriginHazard(h); why != "" {
			t.Errorf("OriginHazard(%q) = %q, want \"\"", h, why)
		}
	}
}

// TestHostNetworkRefusesWhatReachesTheNode: with hostNetwork, the renderer refuses node
// daemons' ports on every port of the cache and origins that reach the node or a metadata
// service, naming the field; without hostNetwork it accepts them (the pod's own loopback
// holds only the pod's sockets, and the pod network reaches what any pod reaches).
func TestHostNetworkRefusesWhatReachesTheNode(t *testing.T) {
	type tc struct {
		name   string
		mutate func(*v1alpha1.CacheNodeSpec)
		field  string
	}
	var cases []tc
	for _, port := range NodeDaemonPorts {
		cases = append(cases,
			tc{fmt.Sprintf("port %d", port), func(s *v1alpha1.CacheNodeSpec) { s.Listener.Port = port }, "spec.listener.port"},
			tc{fmt.Sprintf("statusPort %d", port), func(s *v1alpha1.CacheNodeSpec) { s.Listener.StatusPort = port }, "spec.listener.statusPort"},
			tc{fmt.Sprintf("agentPort %d", port), func(s *v1alpha1.CacheNodeSpec) { s.Listener.AgentPort = port }, "spec.listener.agentPort"})
	}
	for _, h := range hazardousOrigins {
		if validateHostPort(h+":80") != nil {
			continue // the host:port allowlist refuses it already, with or without hostNetwork
		}
		cases = append(cases, tc{"origin " + h, func(s *v1alpha1.CacheNodeSpec) {
			s.Origin.Servers = []string{"origin.example:80", h + ":80"}
		}, "spec.origin.servers[1]"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := loadSpec(t, goldenCases["sample"])
			c.mutate(spec)
			if _, err := NginxConf(spec); err != nil {
				t.Fatalf("refused without hostNetwork: %v", err)
			}
			spec.HostNetwork = true
			conf, err := NginxConf(spec)
			if err == nil {
				t.Fatalf("rendered with hostNetwork:\n%s", conf)
			}
			if !strings.Contains(err.Error(), c.field+":") || !strings.Contains(err.Error(), "hostNetwork") {
				t.Errorf("error does not name %s and hostNetwork: %v", c.field, err)
			}
		})
	}

	spec := loadSpec(t, goldenCases["sample"])
	spec.HostNetwork = true
	spec.Listener.Port, spec.Listener.StatusPort, spec.Listener.AgentPort = 10251, 10258, 2382
	for _, h := range safeOrigins {
		spec.Origin.Servers = append(spec.Origin.Servers[:0:0], h+":80")
		if _, err := NginxConf(spec); err != nil {
			t.Errorf("refused with hostNetwork: %v", err)
		}
	}
}

// inetAton reads s as glibc's inet_aton does (getaddrinfo uses it for numeric hosts): one
// to four parts, each decimal, octal (leading 0) or hex (0x); the last part fills the
// bytes the others leave.
func inetAton(s string) (uint32, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return 0, false
	}
	var vals []uint64
	for _, p := range parts {
		var v uint64
		var err error
		switch {
		case strings.HasPrefix(p, "0x"):
			// strtoul reads "0x" as 0 followed by an x, which inet_aton refuses.
			v, err = strconv.ParseUint(p[2:], 16, 32)
		case len(p) > 1 && p[0] == '0':
			v, err = strconv.ParseUint(p[1:], 8, 32)
		default:
			v, err = strconv.ParseUint(p, 10, 32)
		}
		if err != nil || p == "" {
			return 0, false
		}
		vals = append(vals, v)
	}
	var addr uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 255 {
			return 0, false
		}
		addr |= v << (24 - 8*i)
	}
	last, bits := vals[len(vals)-1], 32-8*(len(vals)-1)
	if last >= 1<<bits {
		return 0, false
	}
	return uint32(addr | last), true
}

// ngxInetAddr reads s as nginx's ngx_inet_addr does (tried before the resolver): exactly
// four decimal parts, leading zeros read as decimal.
func ngxInetAddr(s string) (uint32, bool) {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return 0, false
	}
	var addr uint32
	for _, p := range parts {
		v := 0
		for _, c := range p {
			if c < '0' || c > '9' {
				return 0, false
			}
			if v = v*10 + int(c-'0'); v > 255 {
				return 0, false
			}
		}
		addr = addr<<8 | uint32(v)
	}
	return addr, true
}

func hazardousV4(a uint32) bool {
	addr := netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
	return addressHazard(addr) != ""
}

// spell writes a in n parts (1 to 4), each in a random base, as inet_aton reads them.
func spell(r *rand.Rand, a uint32, n int) string {
	var vals []uint32
	for i := range n - 1 {
		vals = append(vals, a>>(24-8*i)&0xff)
	}
	vals = append(vals, uint32(uint64(a)&(1<<(32-8*(n-1))-1)))
	parts := make([]string, n)
	for i, v := range vals {
		switch r.IntN(3) {
		case 0:
			parts[i] = strconv.FormatUint(uint64(v), 10)
		case 1:
			parts[i] = "0" + strconv.FormatUint(uint64(v), 8)
		default:
			parts[i] = "0x" + strconv.FormatUint(uint64(v), 16)
		}
	}
	return strings.Join(parts, ".")
}

// TestEverySpellingOfANodeAddressIsRefused: every way inet_aton can write an address of
// 127.0.0.0/8, 0.0.0.0/8 or 169.254.0.0/16 (one to four parts, each decimal, octal or hex)
// is refused, and so is every numeric host that glibc or nginx reads as one of them.
func TestEverySpellingOfANodeAddressIsRefused(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 4))
	ranges := []struct{ base, size uint32 }{{127 << 24, 1 << 24}, {0, 1 << 24}, {169<<24 | 254<<16, 1 << 16}}
	for range 20000 {
		rg := ranges[r.IntN(len(ranges))]
		a := rg.base + r.Uint32N(rg.size)
		s := spell(r, a, 1+r.IntN(4))
		if got, ok := inetAton(s); !ok || got != a {
			t.Fatalf("test bug: inetAton(%q) = %x, %v; want %x", s, got, ok, a)
		}
		if !hostnameRE.MatchString(s) {
			continue // the host:port allowlist refuses it anyway
		}
		if OriginHazard(s) == "" {
			t.Errorf("%q (%d.%d.%d.%d to inet_aton) is not refused", s, a>>24, a>>16&0xff, a>>8&0xff, a&0xff)
		}
	}

	// Random strings of digits, x, a-f and dots: whatever either parser makes of them.
	const alphabet = "0123456789abcdefx."
	for range 200000 {
		b := make([]byte, 1+r.IntN(16))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		s := string(b)
		if !hostnameRE.MatchString(s) {
			continue
		}
		glibc, okG := inetAton(s)
		ngx, okN := ngxInetAddr(s)
		if (okG && hazardousV4(glibc)) || (okN && hazardousV4(ngx)) {
			if OriginHazard(s) == "" {
				t.Errorf("%q reaches the node (inet_aton %x %v, ngx_inet_addr %x %v) and is not refused", s, glibc, okG, ngx, okN)
			}
		}
	}
}

// TestLoopbackSpellingsReachLoopbackInNginx shows why OriginHazard refuses numbers that are
// not dotted-decimal: the real nginx proxies each of these spellings to a server on
// 127.0.0.1. (0177.0.0.1 is left out: nginx reads it as 177.0.0.1, off this machine.)
func TestLoopbackSpellingsReachLoopbackInNginx(t *testing.T) {
	nginx := nginxBinary(t)
	spellings := []string{"127.0.0.1", "127.1", "127.0.1", "2130706433", "0x7f000001", "0x7f.1", "017700000001",
		"0127.0.0.1", "0", "0.0.0.0", "localhost", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]"}

	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "from the loopback origin")
	}))
	defer origin.Close()
	originPort := origin.Listener.Addr().(*net.TCPAddr).Port
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	_ = l.Close()

	var conf strings.Builder
	// Every path under the prefix: nginx's compiled-in temp paths (/var/lib/nginx) exist
	// only where a distribution's nginx package was once installed.
	fmt.Fprintf(&conf, "daemon off;\npid nginx.pid;\nerror_log stderr error;\nevents {}\nhttp {\n    access_log off;\n")
	for _, t := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&conf, "    %s_temp_path %s_temp;\n", t, t)
	}
	fmt.Fprintf(&conf, "    server {\n        listen %s;\n", listen)
	for i, s := range spellings {
		if OriginHazard(s) == "" {
			t.Errorf("OriginHazard(%q) = \"\"", s)
		}
		fmt.Fprintf(&conf, "        location = /%d { proxy_pass http://%s:%d/; }\n", i, s, originPort)
	}
	conf.WriteString("    }\n}\n")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(nginx, "-p", dir+"/", "-c", "nginx.conf", "-e", "stderr")
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second // bounds the wait for nginx's workers, which share stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		// TERM, not KILL: the master stops its workers before it exits.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()

	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for i, s := range spellings {
		for {
			resp, err := c.Get(fmt.Sprintf("http://%s/%d", listen, i))
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if string(body) != "from the loopback origin" {
					t.Errorf("%s: nginx answered %d %q, not the loopback origin", s, resp.StatusCode, body)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("nginx did not answer: %v\n%s", err, stderr.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// The renderer refuses what the CRD refuses, with the same words: an IPv4-mapped address
// in brackets (the CRD's ip() takes none), where `edgepool render` used to render it.
func TestIPv4MappedOriginsAreRefused(t *testing.T) {
	for _, h := range []string{"[::ffff:192.0.2.1]", "[::ffff:c000:201]", "[0:0:0:0:0:ffff:192.0.2.1]"} {
		if err := validateHostPort(h + ":80"); err == nil || !strings.Contains(err.Error(), "not an IPv4-mapped one (write an IPv4 address without brackets)") {
			t.Errorf("%s: got %v", h, err)
		}
	}
	if err := validateHostPort("[2001:db8::1]:80"); err != nil {
		t.Errorf("an IPv6 address: %v", err)
	}
}
