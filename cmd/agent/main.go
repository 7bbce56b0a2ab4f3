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

// Command edgepool-agent runs in every cache pod: it checks the disks, supervises nginx
// as its child, reloads it in place when the configuration changes, and serves metrics
// and a status document. It needs no Kubernetes credentials.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/edgepool/edgepool/internal/agent"
	"github.com/edgepool/edgepool/internal/agent/disks"
	"github.com/edgepool/edgepool/internal/agent/nginx"
	"github.com/edgepool/edgepool/internal/agentapi"
)

type diskFlags []disks.Disk

func (d *diskFlags) String() string {
	parts := make([]string, len(*d))
	for i, disk := range *d {
		parts[i] = disk.String()
	}
	return strings.Join(parts, " ")
}

func (d *diskFlags) Set(s string) error {
	disk, err := disks.Parse(s)
	if err != nil {
		return err
	}
	*d = append(*d, disk)
	return nil
}

func main() {
	var (
		opts       agent.Options
		disks      diskFlags
		listen     string
		listenIP   string
		cgroupRoot string
		adopt      bool
		cacheUID   int
	)
	flag.StringVar(&opts.Nginx, "nginx", "nginx", "The nginx binary (built with thread pools).")
	flag.StringVar(&opts.ConfigDir, "config-dir", "/etc/edgepool", "The mounted ConfigMap: nginx.conf rendered by the operator, and agent.json, the facts about it.")
	flag.StringVar(&opts.AnnouncedHashFile, "announced-config-hash-file", "", "The pod's edgepool.io/config-hash annotation, projected by the kubelet: nginx runs only a mounted ConfigMap whose hash it names. Unset, any.")
	flag.DurationVar(&opts.AnnounceGrace, "announce-grace", 30*time.Second, "How long the mounted ConfigMap may differ from the announced one before /status reports it.")
	flag.StringVar(&opts.TLSSecretsDir, "tls-secrets-dir", agentapi.TLSSecretsDir, "Where the sites' kubernetes.io/tls Secrets are mounted, one directory per site.")
	flag.StringVar(&opts.RunDir, "run-dir", "/run/edgepool", "A writable directory: nginx's prefix (installed config, pid, temp files).")
	flag.Var(&disks, "disk", "A declared disk, name=NAME,path=PATH,media=NVMe|SSD|HDD (repeat for each disk).")
	flag.Func("allowed-disk-prefixes", "Comma-separated prefixes the disk paths must lie under (the cluster admin's allowlist); unset, any.", func(v string) error {
		opts.Checker.Prefixes = []string{}
		if v != "" {
			opts.Checker.Prefixes = strings.Split(v, ",")
		}
		return nil
	})
	flag.StringVar(&opts.Checker.Owner, "cache-node", "", "The CacheNode (namespace/name) whose disks these are: written into each disk's marker, and a disk another CacheNode marked is refused.")
	flag.BoolVar(&opts.Checker.AllowUnmounted, "allow-unmounted", false, "Accept disk paths that are not mount points. For development only: the cache may land on the root filesystem.")
	flag.StringVar(&listen, "listen", ":9145", "Address of /metrics, /healthz, /readyz, /status and /purge (the operator's signed purges).")
	flag.StringVar(&listenIP, "listen-ip", "", "Listen on this address only, at --listen's port: with hostNetwork, the pod's (the node's) own address rather than every address of the node.")
	flag.StringVar(&cgroupRoot, "cgroup-root", "/sys/fs/cgroup", "Where the container's cgroup filesystem is mounted.")
	flag.DurationVar(&opts.Debounce, "debounce", 500*time.Millisecond, "Wait this long after a configuration change for more changes before reloading.")
	flag.DurationVar(&opts.Resync, "resync", time.Minute, "How often the configuration is read again without a file event, in case one was missed.")
	flag.DurationVar(&opts.DiskRecheck, "disk-recheck", 5*time.Second, "How often failed disk checks are retried before nginx starts, and how often each disk is checked while it runs (every second while a disk is suspect).")
	flag.DurationVar(&opts.CheckTimeout, "disk-check-timeout", 2*time.Second, "A check of a running disk (a write, fsync and read back) that has not returned by then counts as failed: a hung disk.")
	flag.StringVar(&opts.Pod, "pod", "", "This cache pod, namespace/name (from the downward API): the operator's purge requests must name it. Unset, purges are refused.")
	flag.IntVar(&opts.PurgeRate, "purge-rate", 2000, "Cache files per second and disk that a purge of prefixes or of everything goes through, so that it does not crowd nginx's reads (0: no bound).")
	flag.DurationVar(&opts.OverflowWindow, "overflow-window", 5*time.Minute, "Span of the overflow counts in /status.")
	flag.IntVar(&opts.RequestQueue, "request-queue", 4096, "Per-request lines from nginx that wait for the parser before more are dropped (and counted).")
	flag.BoolVar(&adopt, "adopt-fresh-disks", false, "Run once, as root with CAP_CHOWN, before the cache starts: give each disk that passes its checks and is a fresh filesystem (nothing but lost+found) to --cache-uid, then exit.")
	flag.IntVar(&cacheUID, "cache-uid", 101, "The cache's user and group, for --adopt-fresh-disks.")
	flag.Parse()
	if opts.RequestQueue < 1 || opts.CheckTimeout <= 0 || opts.DiskRecheck <= 0 || opts.PurgeRate < 0 {
		fmt.Fprintln(os.Stderr, "--request-queue must be at least 1, the durations positive, and --purge-rate not negative")
		os.Exit(2)
	}

	opts.Checker.MountInfo, opts.Checker.SysRoot = "/proc/self/mountinfo", "/sys"
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if adopt {
		if err := adoptFreshDisks(opts.Checker, disks, cacheUID, log); err != nil {
			log.Error("Could not adopt the disks", "err", err)
			os.Exit(1)
		}
		return
	}
	if listenIP != "" {
		_, port, err := net.SplitHostPort(listen)
		if err != nil || net.ParseIP(listenIP) == nil {
			fmt.Fprintf(os.Stderr, "--listen-ip %q: want an IP address, and --listen host:port\n", listenIP)
			os.Exit(2)
		}
		listen = net.JoinHostPort(listenIP, port)
	}
	if err := run(opts, disks, listen, cgroupRoot, log); err != nil {
		log.Error("Agent stopped", "err", err)
		os.Exit(1)
	}
}

// adoptFreshDisks hands new filesystems to the cache user. A disk that fails its checks is
// not an error here: the agent in the cache container reports it, and keeps checking.
func adoptFreshDisks(checker disks.Checker, disks []disks.Disk, uid int, log *slog.Logger) error {
	var errs []error
	for _, d := range disks {
		changed, reason, err := checker.AdoptFresh(d, uid, uid)
		if err != nil {
			// One disk's error does not keep the others from their cache.
			log.Error("Could not adopt disk", "disk", d.Name, "path", d.Path, "err", err)
			errs = append(errs, fmt.Errorf("disk %s: %w", d.Name, err))
			continue
		}
		log.Info("Checked disk", "disk", d.Name, "path", d.Path, "adopted", changed, "reason", reason)
	}
	if len(errs) == len(disks) && len(disks) > 0 {
		return errors.Join(errs...)
	}
	return nil
}

func run(opts agent.Options, disks []disks.Disk, listen, cgroupRoot string, log *slog.Logger) error {
	opts.Disks = disks
	opts.Stderr, opts.Stdout = os.Stderr, os.Stdout
	opts.Log = log

	limit, limited, err := agent.CPULimit(cgroupRoot)
	if err != nil {
		log.Error("Could not read the CPU limit; using the available CPUs", "err", err)
	}
	opts.Workers = agent.Workers(limit, limited, runtime.NumCPU())
	if opts.Somaxconn, err = agent.Somaxconn("/proc"); err != nil {
		log.Error("Could not read net.core.somaxconn", "err", err)
	}

	// The reaper and the HTTP server outlive the shutdown signal: they stop after nginx.
	base, cancel := context.WithCancel(context.Background())
	defer cancel()
	reaper, err := nginx.NewReaper(base)
	if err != nil {
		return err
	}
	// SIGTERM from the kubelet (or SIGQUIT, SIGINT) shuts nginx down gracefully.
	ctx, stop := signal.NotifyContext(base, unix.SIGTERM, unix.SIGQUIT, unix.SIGINT)
	defer stop()

	a := agent.New(opts, reaper)
	serveErr := make(chan error, 1)
	go func() { serveErr <- a.Serve(base, listen) }()
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(ctx) }()
	select {
	case err := <-runErr:
		return err
	case err := <-serveErr:
		stop() // nginx shuts down before the agent reports the serve error
		return errors.Join(fmt.Errorf("serve %s: %w", listen, err), <-runErr)
	}
}
