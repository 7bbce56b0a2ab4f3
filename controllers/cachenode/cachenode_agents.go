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

package cachenode

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// agentReport is what one cache pod's agent said, or why it could not be asked.
type agentReport struct {
	pod, node string
	status    *agentapi.Status
	err       error
}

// AgentPoller reads the node agents' /status documents.
type AgentPoller struct {
	// Client has a short timeout: an agent that does not answer is reported, not waited for.
	Client *http.Client
	// Concurrency bounds the agents asked at once for one CacheNode.
	Concurrency int
}

// maxStatusBytes bounds the /status document read from an agent.
const maxStatusBytes = 1 << 20

// pollable reports whether a pod runs an agent that can be asked: the pod runs and has
// an address. Pods that are not ready are asked too, since a failed disk check is what
// keeps them unready.
func pollable(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil && podAddress(pod) != ""
}

// podAddress is where the agent listens: the pod IP, which is the node's IP with hostNetwork.
func podAddress(pod *corev1.Pod) string {
	if pod.Status.PodIP != "" {
		return pod.Status.PodIP
	}
	return pod.Status.HostIP
}

// Poll asks the agents of the given pods for their status, in parallel.
func (p *AgentPoller) Poll(ctx context.Context, pods []corev1.Pod, port int32) []agentReport {
	reports := make([]agentReport, len(pods))
	sem := make(chan struct{}, max(1, p.Concurrency))
	var wg sync.WaitGroup
	for i := range pods {
		pod := &pods[i]
		reports[i] = agentReport{pod: pod.Name, node: pod.Spec.NodeName}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			reports[i].status, reports[i].err = p.status(ctx, net.JoinHostPort(podAddress(pod), strconv.Itoa(int(port))))
		}()
	}
	wg.Wait()
	return reports
}

func (p *AgentPoller) status(ctx context.Context, hostPort string) (*agentapi.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostPort+agentapi.StatusPath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	st := &agentapi.Status{}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxStatusBytes)).Decode(st); err != nil {
		return nil, fmt.Errorf("decode status: %w", err)
	}
	return st, nil
}
