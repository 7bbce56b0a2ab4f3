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

package bench

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/nginxconf"
	"github.com/edgepool/edgepool/internal/render"
	"github.com/edgepool/edgepool/internal/test/testkit"
	"github.com/edgepool/edgepool/test/bench/slowdisk"
)

// SamplePath is the CacheNode the benchmark measures, relative to the repository root.
const SamplePath = "config/samples/cache_v1alpha1_cachenode.yaml"

// sampleSpec reads the sample CacheNode and defaults it as the API server would.
func sampleSpec(repoRoot string) (*v1alpha1.CacheNodeSpec, error) {
	data, err := os.ReadFile(filepath.Join(repoRoot, SamplePath))
	if err != nil {
		return nil, err
	}
	cn, err := render.DecodeCacheNode(data)
	if err != nil {
		return nil, err
	}
	cn.Spec.Default()
	return &cn.Spec, nil
}

// localize points a spec at this machine, changing nothing on the I/O path: disk paths
// (by disk name), free loopback ports, the local origin, and cache validity long
// enough that no object expires during a run.
func localize(spec *v1alpha1.CacheNodeSpec, paths map[string]string, originAddr string, dataBytes int64) error {
	for i := range spec.Disks {
		d := &spec.Disks[i]
		p, ok := paths[d.Name]
		if !ok {
			return fmt.Errorf("no path for disk %s", d.Name)
		}
		d.Path = p
		// max_size above the data set: nginx's cache manager must never evict (unlink).
		if min := resource.NewQuantity(2*dataBytes, resource.BinarySI); d.Size.Cmp(*min) < 0 {
			d.Size = resource.MustParse(fmt.Sprintf("%dGi", 2*dataBytes>>30+1))
		}
		d.Inactive = "365d"
	}
	// A port is free once its probe closes, so the next probe may draw it again.
	taken := map[int32]bool{}
	for _, p := range []*int32{&spec.Listener.Port, &spec.Listener.StatusPort, &spec.Listener.AgentPort} {
		for {
			port, err := testkit.FreePort()
			if err != nil {
				return err
			}
			if !taken[port] {
				*p, taken[port] = port, true
				break
			}
		}
	}
	spec.Origin.Servers = []string{originAddr}
	for i := range spec.Cache.Valid {
		spec.Cache.Valid[i].Duration = "365d"
	}
	return nil
}

// mediaModel is the emulated timing of a disk of the given media.
func mediaModel(m v1alpha1.Media) slowdisk.Model {
	switch m {
	case v1alpha1.MediaNVMe:
		return slowdisk.NVMe()
	case v1alpha1.MediaSSD:
		return slowdisk.SSD()
	default:
		return slowdisk.HDD()
	}
}

// A variant turns the configuration edgepool renders into a baseline to compare with.
// Variants only rewrite the lines that make the difference, and fail if those lines are
// not exactly where the renderer puts them.
type variant struct {
	rewrite func(conf string) (string, error)
	// handWritten is nginx configured by hand, as its users run it: without what the node
	// agent does to a running nginx (its pools below its event loops).
	handWritten bool
}

// rendered is edgepool's configuration, unchanged.
var rendered = variant{rewrite: func(conf string) (string, error) { return conf, nil }}

// defaultPool is nginx's minimal `aio threads;`: the default pool (32 threads, one FIFO
// queue) for every disk, instead of one pool per disk.
var defaultPool = variant{handWritten: true, rewrite: func(conf string) (string, error) {
	return rewritePools(conf, "", "aio threads;")
}}

// sharedPool is one hand-written pool of threads for all disks.
func sharedPool(threads int32) variant {
	return variant{handWritten: true, rewrite: func(conf string) (string, error) {
		return rewritePools(conf, fmt.Sprintf("thread_pool pool_shared threads=%d max_queue=65536;", threads),
			"aio threads=pool_shared;")
	}}
}

// withoutRequestLines is edgepool's configuration without the per-request lines to the
// node agent: the server's and its fallback location's.
var withoutRequestLines = variant{rewrite: dropRequestLines}

func dropRequestLines(conf string) (string, error) {
	const prefix = "access_log syslog:server=unix:" + nginxconf.RequestLogSocket + ","
	var out []string
	for _, line := range strings.Split(conf, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), prefix) {
			out = append(out, line)
		}
	}
	if removed := strings.Count(conf, "\n") + 1 - len(out); removed == 0 {
		return "", fmt.Errorf("rendered configuration has no %q line; the variant expects some", prefix)
	}
	return strings.Join(out, "\n"), nil
}

func rewritePools(conf, poolLine, aioLine string) (string, error) {
	const aio = "aio threads=" + render.ThreadPool + ";"
	var out []string
	pools, aios := 0, 0
	for _, line := range strings.Split(conf, "\n") {
		switch trimmed := strings.TrimSpace(line); {
		case strings.HasPrefix(trimmed, "thread_pool "):
			if pools++; pools == 1 && poolLine != "" {
				out = append(out, poolLine)
			}
			continue
		case trimmed == aio:
			aios++
			line = strings.Replace(line, aio, aioLine, 1)
		}
		out = append(out, line)
	}
	if pools == 0 || aios != 1 {
		return "", fmt.Errorf("rendered configuration has %d thread_pool and %d %q lines; the variant expects per-disk pools", pools, aios, aio)
	}
	return strings.Join(out, "\n"), nil
}

// learnTemplate has nginx fill objects 0 and 1 from the origin into scratch directories
// with the spec's configuration, and learns the cache file layout from what it wrote.
// A fill that straddles a second boundary gives different timestamps; it is retried.
func learnTemplate(ctx context.Context, nginxBin string, spec *v1alpha1.CacheNodeSpec, o *origin) (*Template, error) {
	dir, err := os.MkdirTemp("", "edgepool-bench-learn-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil { // nginx's workers run as nobody
		return nil, err
	}
	s := spec.DeepCopy()
	var paths []string
	for i := range s.Disks {
		s.Disks[i].Path = filepath.Join(dir, s.Disks[i].Name)
		paths = append(paths, s.Disks[i].Path)
	}
	conf, err := render.NginxConf(s)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", s.Listener.Port)
	var lastErr error
	for range 3 {
		for _, p := range paths {
			if err := os.RemoveAll(p); err != nil {
				return nil, err
			}
			if err := os.Mkdir(p, 0o777); err != nil {
				return nil, err
			}
			if err := os.Chmod(p, 0o777); err != nil { // past the umask: workers run as nobody
				return nil, err
			}
		}
		n, err := startNginx(ctx, nginxBin, conf, s)
		if err != nil {
			return nil, err
		}
		for id := range 2 {
			if _, err = fetchObject(ctx, http.DefaultClient, addr, id, o.size); err != nil {
				break
			}
		}
		n.stop()
		if err != nil {
			return nil, fmt.Errorf("fill through nginx: %w: %s", err, n.log)
		}
		files, err := readCacheFiles(paths...)
		if err != nil {
			return nil, err
		}
		var f0, f1 []byte
		for key, data := range files {
			switch {
			case strings.Contains(key, ObjectPath(0)):
				f0 = data
			case strings.Contains(key, ObjectPath(1)):
				f1 = data
			}
		}
		if f0 == nil || f1 == nil {
			return nil, fmt.Errorf("nginx wrote %d cache files, not the two objects it served", len(files))
		}
		t, err := newTemplate(f0, f1, 1, o.size)
		if err == nil {
			return t, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("learn nginx's cache file layout: %w", lastErr)
}
