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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"
)

// The operator writes two keys into a CacheNode's ConfigMap, which the cache pod mounts as
// files of one directory: the rendered nginx.conf, and the facts the agent needs about
// it, so that the agent never parses nginx.conf.
const (
	ConfigKey = "nginx.conf"
	FactsKey  = "agent.json"
)

// Facts are what the agent needs to know about one rendered nginx.conf.
type Facts struct {
	// ConfigHash is the Hash of the nginx.conf they describe: the agent reads the two
	// files one after the other, and a ConfigMap update can fall between the reads.
	ConfigHash string `json:"configHash"`
	// WorkerProcesses is the number of nginx workers; 0 leaves it to the agent (one per
	// CPU of the container; nginx's own auto counts the host's), and nginx.conf then has
	// no worker_processes directive.
	WorkerProcesses int `json:"workerProcesses,omitempty"`
	// Backlog is the listen backlog, reported beside the kernel's cap on it.
	Backlog int `json:"backlog"`
	// StatusPort is the loopback port of nginx's stub_status, at StubStatusPath.
	StatusPort int `json:"statusPort"`
	// Split is how nginx.conf spreads keys across the disks (SplitConf): the agent
	// renders from it the failover of the disks it takes out (FailoverFiles).
	Split Split `json:"split"`
	// Failover says when the agent takes a failing disk out of the split and puts it back
	// (the CacheNode's spec.diskFailover); without it, the agent's flags do.
	Failover *FailoverPolicy `json:"failover,omitempty"`
	// Certificates are the sites' certificates nginx.conf names (CertificateFile,
	// CertificateKeyFile): the agent fills them from the mounted Secrets.
	Certificates []Certificate `json:"certificates,omitempty"`
	// SlicedHosts are the hostnames whose responses are cached in byte-range slices (the
	// cache key ends in SliceKeySuffix): exact names, wildcards, or "*" for every host.
	SlicedHosts []string `json:"slicedHosts,omitempty"`
	// TagHeaders are the response headers whose tags a purge by tags matches: every
	// site's cache.tagHeaders.
	TagHeaders []string `json:"tagHeaders,omitempty"`
}

// PurgeKeys turns a valid purge into the cache keys it names under this configuration.
func (f *Facts) PurgeKeys(s PurgeSpec) (PurgeKeys, error) {
	k, err := s.Keys(f.Split.Key, f.SlicedHosts)
	if err != nil || len(k.Tags) == 0 {
		return k, err
	}
	if len(f.TagHeaders) == 0 {
		return PurgeKeys{}, errors.New("a purge by tags, but the configuration names no tag headers (an operator from before tags?)")
	}
	k.TagHeaders = f.TagHeaders
	return k, nil
}

// Certificate is one site's TLS certificate: the Secret the cache pod mounts at
// TLSSecretDir(Site) and the files nginx reads.
type Certificate struct {
	// Site is the site's name (spec.sites[].name).
	Site string `json:"site"`
	// SecretName is the kubernetes.io/tls Secret the pod mounts, named in reports.
	SecretName string `json:"secretName"`
	// Hostnames are the site's hostnames, which the certificate should cover.
	Hostnames []string `json:"hostnames"`
}

// FailoverPolicy is a CacheNode's spec.diskFailover as the operator sends it to the agent
// (the agent does not import the API's types): when a failing disk is taken out of the
// node's split and put back. The agent has no policy of its own.
type FailoverPolicy struct {
	IOErrors           int `json:"ioErrors"`
	CheckFailures      int `json:"checkFailures"`
	ErrorWindowSeconds int `json:"errorWindowSeconds"`
	CooldownSeconds    int `json:"cooldownSeconds"`
	MaxCooldownSeconds int `json:"maxCooldownSeconds"`
}

// DefaultFailoverPolicy is the CRD's default spec.diskFailover: the agent's policy until the
// first configuration sets one (a test in internal/render holds them equal).
var DefaultFailoverPolicy = FailoverPolicy{IOErrors: 5, CheckFailures: 2, ErrorWindowSeconds: 10, CooldownSeconds: 60, MaxCooldownSeconds: 1800}

// ErrorWindow is the window in which I/O errors and failed checks are counted.
func (p FailoverPolicy) ErrorWindow() time.Duration { return seconds(p.ErrorWindowSeconds) }

// Cooldown is how long a disk that is out must pass every check before it is put back.
func (p FailoverPolicy) Cooldown() time.Duration { return seconds(p.CooldownSeconds) }

// MaxCooldown bounds the cool-down, which doubles each time a disk fails again within
// this long of its return.
func (p FailoverPolicy) MaxCooldown() time.Duration { return seconds(p.MaxCooldownSeconds) }

func seconds(n int) time.Duration { return time.Duration(n) * time.Second }

// Validate says what is wrong with p, if anything.
func (p FailoverPolicy) Validate() error {
	switch {
	case p.IOErrors < 1, p.CheckFailures < 1, p.ErrorWindowSeconds < 1, p.CooldownSeconds < 1:
		return fmt.Errorf("failover policy %+v: every count and duration must be positive", p)
	case p.MaxCooldownSeconds < p.CooldownSeconds:
		return fmt.Errorf("failover policy %+v: maxCooldownSeconds must be at least cooldownSeconds", p)
	}
	return nil
}

// The layout of a disk the cache uses: a marker at the disk's root naming the CacheNode
// that claimed it, and nginx's cache in a directory of its own. nginx's cache loader
// deletes every file under a proxy_cache_path that is not a cache file (dotfiles too), so
// nothing else may live in DiskCacheDir, and the marker lives beside it.
// Every agent using a disk renews its DiskLease (the file's time) at each check of the
// disk; a CacheNode taking a disk over (spec.disks[].takeOverFrom) waits for it to lapse,
// so it never empties a cache another pod still serves. What it empties is renamed to a
// DiskReleasedPrefix name first, and removed in the background.
const (
	DiskMarker         = ".edgepool-disk"
	DiskCacheDir       = "cache"
	DiskLease          = ".edgepool-lease"
	DiskReleasedPrefix = ".edgepool-released-"
)

// TLSSecretsDir holds one mounted Secret per site with TLS (tls.crt, tls.key), which the
// agent copies to where nginx reads them (nginxconf.CertificateFile). Not under the config
// directory (/etc/edgepool): that is a ConfigMap volume, mounted read-only, and the
// container runtime cannot make mount points inside it.
const TLSSecretsDir = "/etc/edgepool-tls"

// AnnouncementDir is where the cache pod projects its own edgepool.io/config-hash
// annotation (a downwardAPI volume), in the file AnnouncedHashFile: the VolumeHash of
// the ConfigMap the operator announced on the pod.
const (
	AnnouncementDir   = "/etc/edgepool-announced"
	AnnouncedHashFile = "config-hash"
)

// TLSSecretDir is where the cache pod mounts site's Secret.
func TLSSecretDir(site string) string { return TLSSecretsDir + "/" + site }

// Hash is the SHA-256 of a rendered nginx.conf: a CacheNode's status.configHash and the
// hash each agent reports for the configuration it runs.
func Hash(conf []byte) string {
	sum := sha256.Sum256(conf)
	return hex.EncodeToString(sum[:])
}

// VolumeHash is the hash of what a cache pod reads from its ConfigMap volume and must have
// at once: every key but the operator's keys (OperatorKeysKey), so that a restarted
// operator's new key costs no pod a write. The operator announces it on each cache pod
// (the pod's edgepool.io/config-hash annotation, which only the operator may write), and
// the agent runs only a volume that matches it. encoding/json sorts the keys, so the hash
// is deterministic.
func VolumeHash(data map[string]string) string {
	announced := maps.Clone(data)
	delete(announced, OperatorKeysKey)
	encoded, _ := json.Marshal(announced) // a map of strings always marshals
	return Hash(encoded)
}
