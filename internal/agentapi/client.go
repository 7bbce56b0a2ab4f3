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

package agentapi

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Bounds of what the operator reads from an agent: a compromised cache pod must not make
// it buffer without end.
const (
	MaxStatusBytes = 1 << 20
	MaxAnswerBytes = 64 << 10
)

// Client is the operator's client of the node agents: each request bounded in time and
// its answer in size, and it follows no redirect. An agent answers for itself; a
// compromised cache pod must not send the operator to another address (inside the
// cluster, or a cloud's metadata endpoint) and have that answer, or its error, end up in a
// status its namespace can read. A redirect comes back as the 3xx it is, refused as any
// status but 200.
type Client struct {
	http *http.Client
}

// NewClient makes a Client whose requests each take at most timeout.
func NewClient(timeout time.Duration) *Client {
	return &Client{http: &http.Client{
		Timeout: timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}}
}

// Status asks the agent at hostPort for its /status.
func (c *Client) Status(ctx context.Context, hostPort string) (*Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort+StatusPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	st := &Status{}
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxStatusBytes)).Decode(st); err != nil {
		return nil, fmt.Errorf("decode status: %w", err)
	}
	return st, nil
}

// Purge signs req with the operator's key, sends it to the agent at hostPort, and reads
// how far the purge got there.
func (c *Client) Purge(ctx context.Context, hostPort string, key ed25519.PrivateKey, req PurgeRequest) (PurgeResult, error) {
	signed, err := SignPurge(key, req)
	if err != nil {
		return PurgeResult{}, err
	}
	body, err := json.Marshal(signed)
	if err != nil {
		return PurgeResult{}, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+hostPort+PurgePath, bytes.NewReader(body))
	if err != nil {
		return PurgeResult{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(hreq)
	if err != nil {
		return PurgeResult{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes))
	if err != nil {
		return PurgeResult{}, err
	}
	if resp.StatusCode != http.StatusOK {
		var refusal struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(data, &refusal)
		return PurgeResult{}, fmt.Errorf("the agent refused the purge (%s): %s", resp.Status, refusal.Error)
	}
	var res PurgeResult
	if err := json.Unmarshal(data, &res); err != nil {
		return PurgeResult{}, fmt.Errorf("decode the agent's answer: %w", err)
	}
	if res.UID != req.UID {
		return PurgeResult{}, fmt.Errorf("the agent answered for purge %.40q", res.UID)
	}
	return res, nil
}
