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

package shard

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgepool/edgepool/internal/test/testkit"
)

// TestSmoke runs S1 small: the harness cannot rot, the fleets serve the stream without a
// failure, and the table comes out. Ratios are reported, not asserted, beyond what holds
// by construction: a sharded fleet fetches each object once when its disks hold them all.
func TestSmoke(t *testing.T) {
	opts := Options{Nodes: 3, Objects: 300, Requests: 1500, ZipfS: 1.01, DiskBytes: 4 << 20, Clients: 4,
		MoveKeys: 150, ChurnDuration: 3 * time.Second, NginxBin: os.Getenv("NGINX_BIN"), Log: testkit.LogWriter(t.Log)}
	if opts.NginxBin == "" {
		t.Fatal("NGINX_BIN is unset: run `make test`, which installs nginx")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Independent.Failed+res.Sharded.Failed+res.ShardedHot.Failed+res.ChurnFailed != 0 {
		t.Errorf("failed requests: independent %d, sharded %d, with a hot tier %d, churn %d",
			res.Independent.Failed, res.Sharded.Failed, res.ShardedHot.Failed, res.ChurnFailed)
	}
	if res.ShardedHot.HotHits == 0 {
		t.Error("the hot tier answered no request")
	}
	if res.Sharded.OriginRequests != int64(res.Sharded.Distinct) {
		t.Errorf("sharded: the origin served %d requests for %d objects", res.Sharded.OriginRequests, res.Sharded.Distinct)
	}
	if res.MovedOnLeave <= 0 || res.MovedOnLeave >= 1 || res.MovedOnJoin <= 0 || res.MovedOnJoin >= 1 {
		t.Errorf("keys moved: leave %.3f, join %.3f; want some, not all", res.MovedOnLeave, res.MovedOnJoin)
	}
	md := res.Markdown()
	if !strings.Contains(md, "| origin requests per distinct object |") {
		t.Errorf("table lacks its row:\n%s", md)
	}
	t.Logf("\n%s", md)
}

// TestIdealLRU: the reference cache holds what fits and drops the least recently used.
func TestIdealLRU(t *testing.T) {
	// Objects 0, 4 and 8 are 4 KiB, 1 is 8 KiB; room for two of 4 KiB.
	hits, byteHits := idealLRU([]int{0, 4, 0, 8, 0, 4, 1, 0}, 8<<10)
	// 0 miss, 4 miss, 0 hit, 8 miss (drops 4), 0 hit, 4 miss (drops 8), 1 miss (drops
	// 0 and 4), 0 miss (drops 1).
	if want := 2.0 / 8; hits != want {
		t.Errorf("hit ratio %v, want %v", hits, want)
	}
	if want := 8.0 / 36; byteHits != want {
		t.Errorf("byte hit ratio %v, want %v", byteHits, want)
	}
}
