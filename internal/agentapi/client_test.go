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

package agentapi_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/agentapi"
	"github.com/edgepool/edgepool/internal/test/fakeagent"
)

// TestClientFollowsNoRedirect: an agent that redirects gets its 3xx refused, and the
// address it names is never asked.
func TestClientFollowsNoRedirect(t *testing.T) {
	var asked atomic.Int32
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		_, _ = w.Write([]byte(`{"configHash":"forged"}`))
	}))
	defer elsewhere.Close()
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+agentapi.StatusPath, http.StatusFound)
	}))
	defer agent.Close()

	_, err := agentapi.NewClient(5*time.Second).Status(context.Background(), strings.TrimPrefix(agent.URL, "http://"))
	if err == nil || !strings.Contains(err.Error(), "302") || asked.Load() != 0 {
		t.Errorf("got %v, the redirect's target asked %d times; want the 302 refused and no ask", err, asked.Load())
	}
}

// TestClientBoundsTheAnswer: a /status larger than MaxStatusBytes is refused, not read on.
func TestClientBoundsTheAnswer(t *testing.T) {
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"configHash":"` + strings.Repeat("a", agentapi.MaxStatusBytes) + `"}`))
	}))
	defer agent.Close()
	if _, err := agentapi.NewClient(5*time.Second).Status(context.Background(), strings.TrimPrefix(agent.URL, "http://")); err == nil {
		t.Error("a status past the bound was read")
	}
}

// TestClientTalksToTheAgent: the typed client against an agent speaking the contract: the
// status as served; a purge signed for the pod asked is done; one the agent refuses (for
// another pod, or while it is not ready) is an error naming why; a hanging agent costs
// the timeout.
func TestClientTalksToTheAgent(t *testing.T) {
	ctx := context.Background()
	public, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	agent := fakeagent.Start(t, []ed25519.PublicKey{public}, fakeagent.State{
		Status: agentapi.Status{ConfigHash: "abc", WorkerProcesses: 2}, Pod: "ns/edge-x", Removes: 7})
	addr := "127.0.0.1:" + strconv.Itoa(int(agent.Port()))
	c := agentapi.NewClient(time.Second)

	st, err := c.Status(ctx, addr)
	if err != nil || st.ConfigHash != "abc" || st.WorkerProcesses != 2 {
		t.Errorf("status %+v, %v", st, err)
	}
	req := agentapi.PurgeRequest{UID: "5d6e0a3c-2f4b-4c1e-9a7d-0b8c9d1e2f3a", Audience: "ns/edge-x", IssuedAt: time.Now().Unix(),
		Spec: agentapi.PurgeSpec{Scope: "All"}}
	if res, err := c.Purge(ctx, addr, key, req); err != nil || res.State != agentapi.PurgeDone || res.Removed != 7 {
		t.Errorf("purge: %+v, %v", res, err)
	}
	other := req
	other.Audience = "ns/edge-y"
	if _, err := c.Purge(ctx, addr, key, other); err == nil || !strings.Contains(err.Error(), "the agent refused the purge (403 Forbidden)") {
		t.Errorf("a purge for another pod: %v, want refused", err)
	}
	agent.Set(func(s *fakeagent.State) { s.Down = true })
	if _, err := c.Purge(ctx, addr, key, req); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("an agent not ready: %v, want refused", err)
	}
	if n := len(agent.Purges()); n != 1 {
		t.Errorf("the agent accepted %d purges, want 1", n)
	}
	hang := make(chan struct{})
	defer close(hang)
	agent.Set(func(s *fakeagent.State) { s.Hang = hang })
	start := time.Now()
	if _, err := c.Status(ctx, addr); err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("a hanging agent: %v after %s, want a timeout after 1s", err, time.Since(start))
	}
}
