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

package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// hitRatio prints the hit ratio per disk from a node agent's /metrics.
func hitRatio(args []string) error {
	fs := flag.NewFlagSet("hitratio", flag.ContinueOnError)
	url := fs.String("metrics", "", "the node agent's /metrics URL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return fmt.Errorf("hitratio needs -metrics")
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(*url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", *url, resp.Status)
	}
	disks, err := diskTraffic(resp.Body)
	if err != nil {
		return err
	}
	fmt.Fprint(os.Stdout, formatHitRatios(disks))
	return nil
}

// traffic is what one disk served: requests by cache status, and bytes sent.
type traffic struct {
	disk     string
	requests map[string]float64
	bytes    float64
}

func (t traffic) total() float64 {
	var n float64
	for _, v := range t.requests {
		n += v
	}
	return n
}

// diskTraffic reads edgepool_requests_total and edgepool_response_bytes_total per disk
// from a /metrics document, in disk order.
func diskTraffic(r io.Reader) ([]traffic, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	byDisk := map[string]*traffic{}
	of := func(m *dto.Metric) (*traffic, string) {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		d := labels["disk"]
		if byDisk[d] == nil {
			byDisk[d] = &traffic{disk: d, requests: map[string]float64{}}
		}
		return byDisk[d], labels["cache_status"]
	}
	for _, m := range families["edgepool_requests_total"].GetMetric() {
		t, status := of(m)
		t.requests[status] += m.GetCounter().GetValue()
	}
	for _, m := range families["edgepool_response_bytes_total"].GetMetric() {
		t, _ := of(m)
		t.bytes += m.GetCounter().GetValue()
	}
	out := make([]traffic, 0, len(byDisk))
	for _, t := range byDisk {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].disk < out[j].disk })
	return out, nil
}

// formatHitRatios writes a line per disk and one for all: requests, hits, hit ratio, the
// other cache statuses, and bytes sent.
func formatHitRatios(disks []traffic) string {
	if len(disks) == 0 {
		return "no requests counted yet\n"
	}
	all := traffic{disk: "all", requests: map[string]float64{}}
	var b strings.Builder
	line := func(t traffic) {
		total := t.total()
		ratio := 0.0
		if total > 0 {
			ratio = t.requests["HIT"] / total
		}
		var others []string
		for status, n := range t.requests {
			if status != "HIT" && n > 0 {
				others = append(others, fmt.Sprintf("%s=%.0f", status, n))
			}
		}
		sort.Strings(others)
		fmt.Fprintf(&b, "%-6s hit ratio %5.1f%%  %6.0f requests, %6.0f hits  %-30s %8.1f MiB sent\n",
			t.disk+":", 100*ratio, total, t.requests["HIT"], strings.Join(others, " "), t.bytes/(1<<20))
	}
	for _, t := range disks {
		line(t)
		for status, n := range t.requests {
			all.requests[status] += n
		}
		all.bytes += t.bytes
	}
	line(all)
	return b.String()
}
