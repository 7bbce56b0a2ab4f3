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

// Package agentapi is the contract between the operator and the node agent: what the
// operator writes for the agent beside nginx.conf, and the agent's /status document. The
// agent links only this, not the API types.
package agentapi

import "time"

// StatusPath is the agent's status endpoint.
const StatusPath = "/status"

// Status is what a node agent reports about its cache.
type Status struct {
	// ConfigHash is the SHA-256 of the configuration nginx is running (the ConfigMap's
	// nginx.conf as rendered by the operator); empty before nginx started.
	ConfigHash string `json:"configHash"`
	// ConfigError is why the newest configuration was rejected, if it was.
	ConfigError string `json:"configError,omitempty"`
	// Disks are the results of the disk checks, in declaration order.
	Disks []DiskStatus `json:"disks"`
	// WindowSeconds is the span of Overflows.
	WindowSeconds int `json:"windowSeconds"`
	// Overflows counts thread-pool queue overflows per pool within the window; pools
	// without overflows are left out.
	Overflows []PoolOverflow `json:"overflows,omitempty"`
	// WorkerProcesses is the number of nginx workers in effect.
	WorkerProcesses int `json:"workerProcesses"`
	// Backlog is the configured listen backlog; Somaxconn the kernel's cap on it.
	Backlog   int `json:"backlog"`
	Somaxconn int `json:"somaxconn"`
	// FailoverError is why the agent could not apply its failover (nginx -t refused it, or
	// nginx could not be signalled): the disks it reports out may still get their keys.
	FailoverError string `json:"failoverError,omitempty"`
	// Certificates are the sites' TLS certificates (Facts.Certificates), in their order.
	Certificates []CertificateStatus `json:"certificates,omitempty"`
}

// CertificateState says what a site's nginx serves and whether its Secret is usable.
type CertificateState string

// The states of a site's certificate, the worst first when several apply.
const (
	// CertificatePlaceholder: no good pair was ever seen for the site (its Secret is
	// missing or malformed since the pod started): nginx serves a self-signed placeholder
	// so that the other sites serve; this site does not, to any client that checks.
	CertificatePlaceholder CertificateState = "Placeholder"
	// CertificateMissing: the Secret is missing or empty; the last good pair serves.
	CertificateMissing CertificateState = "Missing"
	// CertificateInvalid: the Secret does not parse, its key does not match, or its chain
	// is out of order; the last good pair serves.
	CertificateInvalid CertificateState = "Invalid"
	// CertificateExpired and CertificateNotYetValid: the pair serving is outside its
	// validity (served anyway: better than none).
	CertificateExpired     CertificateState = "Expired"
	CertificateNotYetValid CertificateState = "NotYetValid"
	// CertificateHostnameMismatch: the certificate serving covers none of the site's
	// hostnames (served anyway).
	CertificateHostnameMismatch CertificateState = "HostnameMismatch"
	// CertificateServing: the Secret's pair serves, valid, for the site's hostnames.
	CertificateServing CertificateState = "Serving"
)

// CertificateStates lists every state, the worst first.
var CertificateStates = []CertificateState{CertificatePlaceholder, CertificateMissing, CertificateInvalid,
	CertificateExpired, CertificateNotYetValid, CertificateHostnameMismatch, CertificateServing}

// CertificateStatus is one site's certificate as its node agent sees it.
type CertificateStatus struct {
	Site       string           `json:"site"`
	SecretName string           `json:"secretName"`
	State      CertificateState `json:"state"`
	// NotAfter is when the certificate nginx serves expires; zero before one serves.
	NotAfter time.Time `json:"notAfter,omitzero"`
	// Fingerprint is the SHA-256 of the serving leaf certificate (DER), in hex.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Message says what is wrong, if anything (never the key).
	Message string `json:"message,omitempty"`
}

// DiskStatus is the result of checking one disk, and whether the agent took it out of the
// node's split.
type DiskStatus struct {
	Name  string `json:"name"`
	Path  string `json:"path"`
	Ready bool   `json:"ready"`
	// Reason says why the disk is not ready: its latest check failed.
	Reason string `json:"reason,omitempty"`
	// Device is the block device behind the path, where the kernel tells.
	Device string `json:"device,omitempty"`
	// Out says that the agent took the disk out of this node's split while nginx runs: its
	// keys go to the other disks (as misses filled from the origin) until it is healthy again
	// for CooldownSeconds. The operator's configuration is unchanged.
	Out bool `json:"out,omitempty"`
	// OutReason says why the disk was taken out.
	OutReason string `json:"outReason,omitempty"`
	// OutSince is when the disk was taken out.
	OutSince time.Time `json:"outSince,omitzero"`
	// CooldownSeconds is how long a disk that is out must pass its checks before it is put
	// back; it doubles each time the disk fails again soon after its return.
	CooldownSeconds int `json:"cooldownSeconds,omitempty"`
	// OtherFilesystem says that another filesystem is where the disk was (another device,
	// or its marker gone or replaced): the agent does not write to it, and the disk stays
	// out until the filesystem nginx started on is back or the pod restarts.
	OtherFilesystem bool `json:"otherFilesystem,omitempty"`
}

// PoolOverflow counts the queue overflows of one thread pool.
type PoolOverflow struct {
	Pool  string `json:"pool"`
	Count int64  `json:"count"`
}
