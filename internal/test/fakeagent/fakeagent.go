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

// Package fakeagent serves the node agent's side of the wire contract (agentapi) from a
// test: the /status document the test sets, and purges checked as the real agent checks
// them (the operator's signature, the pod they are for, the time) and answered as the
// test says. The operator's controllers talk to it with their real agentapi.Client over
// real HTTP; the real agent's side is tested in test/agent.
package fakeagent

import (
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// State is what the fake agent answers; a test changes it with Set.
type State struct {
	// Status is the /status document.
	Status agentapi.Status
	// Hang, while open, holds every /status answer until it is closed.
	Hang chan struct{}
	// Pod is the cache pod (namespace/name) the agent is: a purge for another is refused.
	Pod string
	// Down answers every purge 503, as an agent that is not ready.
	Down bool
	// Slow answers this many purge requests Running before one is Done.
	Slow int
	// Removes is how many files a purge reports removed.
	Removes int64
}

// Agent is a fake node agent listening on a loopback port.
type Agent struct {
	srv         *httptest.Server
	keys        []ed25519.PublicKey
	statusAsked atomic.Int64

	mu     sync.Mutex
	state  State
	purges []agentapi.PurgeRequest
}

// Start serves a fake agent that trusts the operator keys given, until the test ends.
func Start(t testing.TB, operatorKeys []ed25519.PublicKey, state State) *Agent {
	a := &Agent{keys: operatorKeys, state: state}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+agentapi.StatusPath, a.status)
	mux.HandleFunc("POST "+agentapi.PurgePath, a.purge)
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// Set changes what the agent answers from now on.
func (a *Agent) Set(change func(*State)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	change(&a.state)
}

// StatusAsked counts the /status requests.
func (a *Agent) StatusAsked() int64 { return a.statusAsked.Load() }

// Purges are the purge requests the agent accepted, oldest first.
func (a *Agent) Purges() []agentapi.PurgeRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]agentapi.PurgeRequest(nil), a.purges...)
}

// Port is the agent's port on 127.0.0.1.
func (a *Agent) Port() int32 {
	_, port, _ := net.SplitHostPort(a.srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	return int32(p)
}

func (a *Agent) status(w http.ResponseWriter, r *http.Request) {
	a.statusAsked.Add(1)
	a.mu.Lock()
	st, hang := a.state.Status, a.state.Hang
	a.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-r.Context().Done():
			return
		}
	}
	_ = json.NewEncoder(w).Encode(st)
}

func (a *Agent) purge(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, agentapi.MaxSignedPurgeBytes))
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state.Down {
		http.Error(w, `{"error":"not ready"}`, http.StatusServiceUnavailable)
		return
	}
	req, err := agentapi.VerifyPurge(body, a.keys, a.state.Pod, time.Now())
	if err != nil {
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	a.purges = append(a.purges, req)
	res := agentapi.PurgeResult{UID: req.UID, State: agentapi.PurgeDone, Removed: a.state.Removes, Finished: time.Now()}
	if a.state.Slow > 0 {
		a.state.Slow--
		res = agentapi.PurgeResult{UID: req.UID, State: agentapi.PurgeRunning}
	}
	_ = json.NewEncoder(w).Encode(res)
}
