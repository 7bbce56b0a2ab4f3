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
	"strings"
	"testing"
)

func TestHitRatios(t *testing.T) {
	const metrics = `# HELP edgepool_requests_total Client requests.
# TYPE edgepool_requests_total counter
edgepool_requests_total{cache_status="HIT",disk="hdd0",status_class="2xx"} 90
edgepool_requests_total{cache_status="MISS",disk="hdd0",status_class="2xx"} 9
edgepool_requests_total{cache_status="MISS",disk="hdd0",status_class="5xx"} 1
edgepool_requests_total{cache_status="HIT",disk="hdd1",status_class="2xx"} 25
edgepool_requests_total{cache_status="EXPIRED",disk="hdd1",status_class="2xx"} 75
# HELP edgepool_response_bytes_total Bytes sent.
# TYPE edgepool_response_bytes_total counter
edgepool_response_bytes_total{cache_status="HIT",disk="hdd0"} 1048576
edgepool_response_bytes_total{cache_status="MISS",disk="hdd0"} 1048576
edgepool_response_bytes_total{cache_status="HIT",disk="hdd1"} 524288
`
	disks, err := diskTraffic(strings.NewReader(metrics))
	if err != nil {
		t.Fatal(err)
	}
	got := formatHitRatios(disks)
	for _, want := range []string{
		"hdd0:  hit ratio  90.0%     100 requests,     90 hits  MISS=10",
		"hdd1:  hit ratio  25.0%     100 requests,     25 hits  EXPIRED=75",
		"all:   hit ratio  57.5%     200 requests,    115 hits  EXPIRED=75 MISS=10",
		"2.0 MiB sent", "0.5 MiB sent", "2.5 MiB sent",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if got := formatHitRatios(nil); got != "no requests counted yet\n" {
		t.Errorf("no traffic: %q", got)
	}
}
