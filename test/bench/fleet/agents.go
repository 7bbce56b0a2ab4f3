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

package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// behaviour is how one fake agent answers the operator.
type behaviour int

const (
	// healthy answers /status at once, as the real agent does.
	healthy behaviour = iota
	// slow answers after slowDelay, beyond the operator's timeout.
	slow
	// hung accepts the connection and never answers (a stuck process; the kernel still
	// completes the handshake).
	hung
	// dead refuses connections: nothing listens on its pod's address.
	dead
)

func (b behaviour) String() string {
	return [...]string{"healthy", "slow", "hung", "dead"}[b]
}

// fakePod is what the agents know of one cache pod.
type fakePod struct {
	name, cacheNode string
	behaviour       behaviour
}

// ask is one request the operator made to a fake agent.
type ask struct {
	arrived, ended time.Time
}

// agents serves every cache pod's agent from this process: a listener on each address of
// the pod range (the agent port), one HTTP server behind them all. A pod's behaviour
// follows from its node's index; its answer from its CacheNode's spec (the configuration
// hash the operator expects and each disk ready), so that healthy agents report what a
// real agent on a good node reports.
type agents struct {
	port      int
	slowDelay time.Duration
	server    *http.Server

	mu        sync.Mutex
	listeners map[netip.Addr]net.Listener
	pods      map[netip.Addr]fakePod
	// status is the answer for each CacheNode's healthy pods.
	status map[string][]byte
	// asks are the requests each pod's agent received, by pod name, in order.
	asks  map[string][]ask
	conns sync.WaitGroup
}

// startAgents listens on every address of prefix (but the network's first) at port.
func startAgents(prefix netip.Prefix, port int, slowDelay time.Duration) (*agents, error) {
	a := &agents{port: port, slowDelay: slowDelay, listeners: map[netip.Addr]net.Listener{},
		pods: map[netip.Addr]fakePod{}, status: map[string][]byte{}, asks: map[string][]ask{}}
	a.server = &http.Server{Handler: http.HandlerFunc(a.serveStatus), ReadHeaderTimeout: 10 * time.Second}
	// Every host address: not the network's, nor the broadcast's.
	for addr := prefix.Masked().Addr().Next(); prefix.Contains(addr.Next()); addr = addr.Next() {
		if err := a.listen(addr); err != nil {
			a.stop()
			return nil, fmt.Errorf("fake agents: %w", err)
		}
	}
	return a, nil
}

// listen serves the agent port on addr; the caller holds mu, or no one else runs yet.
func (a *agents) listen(addr netip.Addr) error {
	l, err := net.Listen("tcp", net.JoinHostPort(addr.String(), strconv.Itoa(a.port)))
	if err != nil {
		return err
	}
	a.listeners[addr] = l
	go func() { _ = a.server.Serve(&holdingListener{Listener: l, a: a}) }()
	return nil
}

// setStatus sets the answer of a CacheNode's healthy agents.
func (a *agents) setStatus(cacheNode string, st *agentapi.Status) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status[cacheNode] = data
	return nil
}

// learn records a running pod's address; a dead pod's listener is closed, so that its
// address refuses connections, and opened again when kwok gives the address to a live pod
// (it reuses a deleted pod's address).
func (a *agents) learn(pod *corev1.Pod, cacheNode string, b behaviour) error {
	addr, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pods[addr] = fakePod{name: pod.Name, cacheNode: cacheNode, behaviour: b}
	switch l := a.listeners[addr]; {
	case b == dead && l != nil:
		_ = l.Close()
		delete(a.listeners, addr)
	case b != dead && l == nil:
		if err := a.listen(addr); err != nil {
			return fmt.Errorf("fake agent of pod %s: %w", pod.Name, err)
		}
	}
	return nil
}

// podAt names the pod on the connection's local address; it waits a little for a pod the
// bench's watch has not delivered yet (the operator's may be ahead of it).
func (a *agents) podAt(local net.Addr) (fakePod, bool) {
	tcp, ok := local.(*net.TCPAddr)
	if !ok {
		return fakePod{}, false
	}
	addr, _ := netip.AddrFromSlice(tcp.IP)
	addr = addr.Unmap()
	for range 20 {
		a.mu.Lock()
		p, ok := a.pods[addr]
		a.mu.Unlock()
		if ok {
			return p, true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fakePod{}, false
}

// describe says what the fake agents hold at a pod's address: the pod they answer as
// there, and whether its port is open.
func (a *agents) describe(podIP string) string {
	addr, err := netip.ParseAddr(podIP)
	if err != nil {
		return fmt.Sprintf("%q (not an address)", podIP)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, open := a.listeners[addr]
	p, known := a.pods[addr]
	if !known {
		return fmt.Sprintf("%s (no pod learned there; port open %v)", addr, open)
	}
	return fmt.Sprintf("%s (answered as %s, %s; port open %v)", addr, p.name, p.behaviour, open)
}

func (a *agents) record(pod string, arrived time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asks[pod] = append(a.asks[pod], ask{arrived: arrived, ended: time.Now()})
}

// serveStatus answers /status as the pod's behaviour says.
func (a *agents) serveStatus(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	pod, ok := a.podAt(local)
	if !ok || r.URL.Path != agentapi.StatusPath {
		http.NotFound(w, r)
		return
	}
	defer func() { a.record(pod.name, arrived) }()
	switch pod.behaviour {
	case slow:
		select {
		case <-time.After(a.slowDelay):
		case <-r.Context().Done(): // the operator gave up
			return
		}
	case hung: // on a connection accepted before the pod was known
		<-r.Context().Done()
		return
	}
	a.mu.Lock()
	body := a.status[pod.cacheNode]
	a.mu.Unlock()
	if body == nil {
		http.Error(w, "no status yet", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// holdingListener hands the HTTP server every connection but a hung pod's, which it
// holds, unanswered, until the operator closes it.
type holdingListener struct {
	net.Listener
	a *agents
}

func (l *holdingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.a.mu.Lock()
		addr, _ := netip.AddrFromSlice(c.LocalAddr().(*net.TCPAddr).IP)
		pod, known := l.a.pods[addr.Unmap()]
		l.a.mu.Unlock()
		if !known || pod.behaviour != hung {
			return c, nil
		}
		l.a.conns.Add(1)
		go func() {
			defer l.a.conns.Done()
			arrived := time.Now()
			_, _ = io.Copy(io.Discard, c) // until the operator gives up
			_ = c.Close()
			l.a.record(pod.name, arrived)
		}()
	}
}

// asksOf returns a copy of every pod's requests.
func (a *agents) asksOf() map[string][]ask {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string][]ask, len(a.asks))
	for k, v := range a.asks {
		out[k] = append([]ask(nil), v...)
	}
	return out
}

// stop closes every listener and the held connections' server.
func (a *agents) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a.mu.Lock()
	for _, l := range a.listeners {
		_ = l.Close()
	}
	a.mu.Unlock()
	if err := a.server.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = a.server.Close()
	}
}
