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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/agent/disks"
	"github.com/edgepool/edgepool/internal/agent/nginx"
	"github.com/edgepool/edgepool/internal/agent/nginxlog"
	"github.com/edgepool/edgepool/internal/agent/requestlog"
	"github.com/edgepool/edgepool/internal/agentapi"
)

type metrics struct {
	registry      *prometheus.Registry
	overflows     *prometheus.CounterVec
	reloads       prometheus.Counter
	reloadsFailed prometheus.Counter
	lastReloadOK  prometheus.Gauge
	configInfo    *prometheus.GaugeVec

	diskErrors      *prometheus.CounterVec
	diskOuts        *prometheus.CounterVec
	failoverReloads prometheus.Counter

	purges           *prometheus.CounterVec
	purgedFiles      prometheus.Counter
	purgeWalks       prometheus.Counter
	requests         *requestlog.Metrics
	accessLogDropped prometheus.Counter

	certificateReloads *prometheus.CounterVec
	hotTierLeftovers   prometheus.Counter
	hotTierStale       prometheus.Counter
	hotTierPurged      prometheus.Counter
}

// newMetrics registers the agent's metrics; scrape reads, at each scrape, what changes
// on its own. The per-request metrics name only the given disks.
func newMetrics(scrape func() scrapeState, diskNames []string) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: requestlog.NewMetrics(diskNames),
		overflows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgepool_thread_pool_queue_overflows_total",
			Help: "Tasks nginx failed because a thread pool's queue was full, per pool.",
		}, []string{"pool"}),
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgepool_config_reloads_total", Help: "Configuration changes installed and signalled to nginx.",
		}),
		reloadsFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edgepool_config_reloads_failed_total", Help: "Configuration changes rejected (nginx -t failed) or not installed.",
		}),
		lastReloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edgepool_config_last_reload_successful", Help: "1 if the last configuration change was installed, 0 if it was rejected.",
		}),
		configInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edgepool_config_info", Help: "The configuration nginx runs; hash is the SHA-256 of the rendered nginx.conf.",
		}, []string{"hash"}),
	}
	m.diskErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_disk_errors_total",
		Help: "Failed reads and writes nginx logged on a disk, by errno (EIO, EROFS, ENOSPC, ...).",
	}, []string{"disk", "errno"})
	m.diskOuts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_disk_outs_total", Help: "Times the agent took a failing disk out of this node's split.",
	}, []string{"disk"})
	m.failoverReloads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "edgepool_failover_reloads_total",
		Help: "Reloads of the running configuration that took disks out of this node's split or put them back (not configuration changes).",
	})
	m.purges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_purges_total", Help: "Purges the operator asked for that ran on this pod, by result (Done, Failed).",
	}, []string{"result"})
	m.purgedFiles = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "edgepool_purged_files_total", Help: "Cache files purges removed (a file that several purges sharing a walk matched counts for each).",
	})
	m.purgeWalks = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "edgepool_purge_walks_total", Help: "Walks of the disks' caches for purges of prefixes or of everything; purges that wait for a walk share the next.",
	})
	// Counters of the declared disks start at zero, so that their first increase shows in
	// rate() and increase() (a series that appears at 1 shows none).
	for _, name := range diskNames {
		m.overflows.WithLabelValues("pool_" + name)
		m.diskOuts.WithLabelValues(name)
		m.diskErrors.WithLabelValues(name, nginxlog.ErrnoName(unix.EIO))
	}
	m.lastReloadOK.Set(1)
	m.registry.MustRegister(m.overflows, m.reloads, m.reloadsFailed, m.lastReloadOK, m.configInfo,
		m.diskErrors, m.diskOuts, m.failoverReloads, m.purges, m.purgedFiles, m.purgeWalks,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		scrapeCollector(scrape))
	m.accessLogDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "edgepool_access_log_lines_dropped_total",
		Help: "JSON access log lines not written: the agent's queue was full (its standard output behind), or a line was unreadable.",
	})
	m.registry.MustRegister(m.accessLogDropped)
	m.certificateReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edgepool_certificate_reloads_total",
		Help: "Renewed certificates nginx loaded with a graceful reload, per site.",
	}, []string{"site"})
	m.registry.MustRegister(m.certificateReloads)
	m.hotTierLeftovers = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "edgepool_hot_tier_leftovers_removed_total",
		Help: "Files that nginx's failed copies into a full hot tier left behind, which the agent removed.",
	})
	m.registry.MustRegister(m.hotTierLeftovers)
	m.hotTierStale = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "edgepool_hot_tier_stale_removed_total",
		Help: "Hot tier copies past their seconds that their owners did not confirm (they refused their answers, or failed), which the agent removed.",
	})
	m.registry.MustRegister(m.hotTierStale)
	m.hotTierPurged = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "edgepool_hot_tier_purged_total",
		Help: "Hot tier copies that purges named, which the agent removed.",
	})
	m.registry.MustRegister(m.hotTierPurged)
	m.registry.MustRegister(m.requests.Collectors()...)
	return m
}

func (m *metrics) configInstalled(hash string) {
	m.configInfo.Reset()
	m.configInfo.WithLabelValues(hash).Set(1)
}

func (m *metrics) reloaded(hash string) {
	m.reloads.Inc()
	m.lastReloadOK.Set(1)
	m.configInstalled(hash)
}

func (m *metrics) reloadFailed() {
	m.reloadsFailed.Inc()
	m.lastReloadOK.Set(0)
}

// scrapeState is what the agent knows at scrape time.
type scrapeState struct {
	status     agentapi.Status
	statusPort int // nginx's stub_status port on loopback
	// tagIndexReady says, per disk with a tag index, whether it is ready.
	tagIndexReady map[string]bool
}

// scrapeCollector reads what changes on its own at scrape time: the agent's state, disk
// usage, and nginx's stub_status.
type scrapeCollector func() scrapeState

var (
	diskReadyDesc   = prometheus.NewDesc("edgepool_disk_ready", "1 if the disk passed its checks.", []string{"disk", "path"}, nil)
	diskOutDesc     = prometheus.NewDesc("edgepool_disk_out", "1 if the agent took the disk out of this node's split: its keys go to the other disks.", []string{"disk"}, nil)
	diskUsedDesc    = prometheus.NewDesc("edgepool_disk_used_bytes", "Bytes used on the disk's filesystem.", []string{"disk"}, nil)
	diskAvailDesc   = prometheus.NewDesc("edgepool_disk_available_bytes", "Bytes available to nginx on the disk's filesystem.", []string{"disk"}, nil)
	workersDesc     = prometheus.NewDesc("edgepool_nginx_worker_processes", "nginx workers in effect (auto resolved from the CPU limit).", nil, nil)
	backlogDesc     = prometheus.NewDesc("edgepool_listen_backlog", "The configured listen backlog.", nil, nil)
	somaxconnDesc   = prometheus.NewDesc("edgepool_net_core_somaxconn", "The kernel's cap on listen backlogs; a lower value silently shortens the backlog.", nil, nil)
	nginxUpDesc     = prometheus.NewDesc("edgepool_nginx_up", "1 if nginx's stub_status answered.", nil, nil)
	connectionsDesc = prometheus.NewDesc("edgepool_nginx_connections", "Client connections by state, from stub_status.", []string{"state"}, nil)
	acceptedDesc    = prometheus.NewDesc("edgepool_nginx_connections_accepted_total", "Accepted client connections.", nil, nil)
	handledDesc     = prometheus.NewDesc("edgepool_nginx_connections_handled_total", "Handled client connections.", nil, nil)
	requestsDesc    = prometheus.NewDesc("edgepool_nginx_http_requests_total", "Client requests.", nil, nil)
	certExpiryDesc  = prometheus.NewDesc("edgepool_certificate_expiry_timestamp_seconds",
		"When the certificate nginx serves for the site expires (Unix time); absent while a placeholder serves.", []string{"site"}, nil)
	tagIndexReadyDesc = prometheus.NewDesc("edgepool_tag_index_ready",
		"1 if the disk's tag index names every tagged response (a purge by tag reads the files it names), 0 while it rebuilds (a purge by tag reads every cache file).",
		[]string{"disk"}, nil)
	certStateDesc = prometheus.NewDesc("edgepool_certificate_state",
		"1 for the state of the site's certificate (Serving, Placeholder, Missing, Invalid, Expired, NotYetValid, HostnameMismatch), 0 for the others.",
		[]string{"site", "state"}, nil)
)

func (c scrapeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{diskReadyDesc, diskOutDesc, diskUsedDesc, diskAvailDesc, workersDesc, backlogDesc, somaxconnDesc,
		nginxUpDesc, connectionsDesc, acceptedDesc, handledDesc, requestsDesc, certExpiryDesc, certStateDesc, tagIndexReadyDesc} {
		ch <- d
	}
}

func (c scrapeCollector) Collect(ch chan<- prometheus.Metric) {
	state := c()
	st := state.status
	for _, d := range st.Disks {
		ch <- prometheus.MustNewConstMetric(diskReadyDesc, prometheus.GaugeValue, boolFloat(d.Ready), d.Name, d.Path)
		ch <- prometheus.MustNewConstMetric(diskOutDesc, prometheus.GaugeValue, boolFloat(d.Out), d.Name)
		if d.Out || !d.Ready {
			continue // a failing disk's statfs can hang a scrape
		}
		if used, avail, err := disks.Usage(d.Path); err == nil {
			ch <- prometheus.MustNewConstMetric(diskUsedDesc, prometheus.GaugeValue, float64(used), d.Name)
			ch <- prometheus.MustNewConstMetric(diskAvailDesc, prometheus.GaugeValue, float64(avail), d.Name)
		}
	}
	for disk, ready := range state.tagIndexReady {
		ch <- prometheus.MustNewConstMetric(tagIndexReadyDesc, prometheus.GaugeValue, boolFloat(ready), disk)
	}
	ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(st.WorkerProcesses))
	ch <- prometheus.MustNewConstMetric(backlogDesc, prometheus.GaugeValue, float64(st.Backlog))
	ch <- prometheus.MustNewConstMetric(somaxconnDesc, prometheus.GaugeValue, float64(st.Somaxconn))
	for _, c := range st.Certificates {
		if !c.NotAfter.IsZero() && c.State != agentapi.CertificatePlaceholder {
			ch <- prometheus.MustNewConstMetric(certExpiryDesc, prometheus.GaugeValue, float64(c.NotAfter.Unix()), c.Site)
		}
		for _, state := range agentapi.CertificateStates {
			ch <- prometheus.MustNewConstMetric(certStateDesc, prometheus.GaugeValue, boolFloat(c.State == state), c.Site, string(state))
		}
	}

	s, err := nginx.FetchStubStatus(state.statusPort)
	ch <- prometheus.MustNewConstMetric(nginxUpDesc, prometheus.GaugeValue, boolFloat(err == nil))
	if err != nil {
		return
	}
	for state, v := range map[string]int64{"active": s.Active, "reading": s.Reading, "writing": s.Writing, "waiting": s.Waiting} {
		ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.GaugeValue, float64(v), state)
	}
	ch <- prometheus.MustNewConstMetric(acceptedDesc, prometheus.CounterValue, float64(s.Accepts))
	ch <- prometheus.MustNewConstMetric(handledDesc, prometheus.CounterValue, float64(s.Handled))
	ch <- prometheus.MustNewConstMetric(requestsDesc, prometheus.CounterValue, float64(s.Requests))
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
