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

package agent

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// Handler serves /metrics, /healthz, /readyz, /status and the operator's purges.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.metrics.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := a.Ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = io.WriteString(w, why+"\n")
	})
	mux.HandleFunc(agentapi.StatusPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(a.Status())
	})
	mux.HandleFunc(agentapi.PurgePath, a.handlePurge)
	return mux
}

// ServerLimits bound what the clients of the agent's port may cost it. With hostNetwork
// no NetworkPolicy keeps anyone from that port, so each client is bounded: in time (a
// request must arrive within ReadTimeout, slow bodies included), in number (MaxConns are
// served at once, the rest wait in the listen backlog), and in memory (a purge's body is
// read by at most maxPurgeReads requests at once, the others refused at once).
type ServerLimits struct {
	MaxConns    int
	ReadTimeout time.Duration
	IdleTimeout time.Duration
}

// DefaultServerLimits: the operator sends a purge of at most 1 MiB in well under a
// second, and keeps one connection per pod.
var DefaultServerLimits = ServerLimits{MaxConns: 1024, ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute}

// Serve serves Handler on addr until ctx ends.
func (a *Agent) Serve(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return a.ServeListener(ctx, ln)
}

// ServeListener serves Handler on ln, within the Options' ServerLimits, until ctx ends.
func (a *Agent) ServeListener(ctx context.Context, ln net.Listener) error {
	limits := a.opts.ServerLimits
	if limits == (ServerLimits{}) {
		limits = DefaultServerLimits
	}
	srv := &http.Server{
		Handler:           a.Handler(),
		ReadHeaderTimeout: min(5*time.Second, limits.ReadTimeout),
		ReadTimeout:       limits.ReadTimeout,
		// A purge is answered within purgeAnswerWait once read.
		WriteTimeout:   limits.ReadTimeout + purgeAnswerWait + 5*time.Second,
		IdleTimeout:    limits.IdleTimeout,
		MaxHeaderBytes: 16 << 10,
	}
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	if err := srv.Serve(netutil.LimitListener(ln, limits.MaxConns)); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}
