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

// Package shard is benchmark scenario S1: one cache across the nodes (spec.sharding)
// against as many independent caches, side by side in one run. Each node is a real nginx
// on the configuration the operator renders, on a loopback address of its own with a
// directory for its disk, in front of one origin; a Zipf-distributed stream of keys whose
// working set is larger than one node's disk reaches the nodes round robin, as a Service
// spreads clients. It measures origin requests per distinct object, the hit ratio against
// one LRU cache as large as all the disks together, the keys moved when a node leaves or
// joins the ring, the latency the peer hop adds to a hit, and failed requests while a node
// leaves and joins under load.
//
// What differs from a cluster: no node agent (nginx runs one worker, with no disk checks
// or metrics), and the bench is the operator (it renders each node's ring and reloads it).
package shard

import (
	"container/list"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/edgepool/edgepool/internal/render"
)

// Options size the scenario.
type Options struct {
	// Nodes in each fleet.
	Nodes int
	// Objects is the key space; Requests are drawn from it by a Zipf law of exponent ZipfS.
	Objects  int
	Requests int
	ZipfS    float64
	// DiskBytes is each node's disk (max_size).
	DiskBytes int64
	// Clients send the stream at once (closed loop).
	Clients int
	// MoveKeys are the keys the ring changes are measured on.
	MoveKeys int
	// ChurnDuration is the load during which a node leaves and joins.
	ChurnDuration time.Duration
	NginxBin      string
	Log           io.Writer
}

// DefaultOptions: 10 nodes of 12 MiB each, 10,000 objects of 4-16 KiB (about 98 MiB),
// 60,000 requests.
func DefaultOptions() Options {
	return Options{Nodes: 10, Objects: 10000, Requests: 60000, ZipfS: 1.01, DiskBytes: 12 << 20,
		Clients: 8, MoveKeys: 2000, ChurnDuration: 12 * time.Second}
}

// Result is what S1 measured.
type Result struct {
	Options Options `json:"options"`
	// Independent, Sharded and ShardedHot (with a 4 MiB hot tier per node) are the
	// fleets on the same stream.
	Independent Stream `json:"independent"`
	Sharded     Stream `json:"sharded"`
	ShardedHot  Stream `json:"shardedHot"`
	// IdealHitRatio and IdealByteHitRatio are one LRU cache as large as the fleet's
	// disks together, fed the stream in order.
	IdealHitRatio     float64 `json:"idealHitRatio"`
	IdealByteHitRatio float64 `json:"idealByteHitRatio"`
	// MovedOnLeave and MovedOnJoin are the shares of MoveKeys whose owner changed when
	// the last node left the ring, and joined it again.
	MovedOnLeave float64 `json:"movedOnLeave"`
	MovedOnJoin  float64 `json:"movedOnJoin"`
	// HitLatency: sequential hits on the hottest keys, one client, microseconds.
	IndependentHitP50Us, IndependentHitP99Us float64
	ShardedHitP50Us, ShardedHitP99Us         float64
	ShardedHotHitP50Us, ShardedHotHitP99Us   float64
	// Churn: requests under load while a node left and joined, and those that failed.
	ChurnRequests int64 `json:"churnRequests"`
	ChurnFailed   int64 `json:"churnFailed"`
}

// Stream is one fleet's run of the key stream.
type Stream struct {
	Requests          int64   `json:"requests"`
	Failed            int64   `json:"failed"`
	Distinct          int     `json:"distinct"`
	OriginRequests    int64   `json:"originRequests"`
	OriginBytes       int64   `json:"originBytes"`
	ClientBytes       int64   `json:"clientBytes"`
	HitRatio          float64 `json:"hitRatio"`
	ByteHitRatio      float64 `json:"byteHitRatio"`
	OriginPerObject   float64 `json:"originPerObject"`
	DurationSeconds   float64 `json:"durationSeconds"`
	RequestsPerSecond float64 `json:"requestsPerSecond"`
	// HotHits are the requests a hot tier answered, with no peer hop.
	HotHits int64 `json:"hotHits"`
}

func ptrIntStr(n int) *intstr.IntOrString { v := intstr.FromInt(n); return &v }

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "S1: "+format+"\n", args...)
	}
}

// Run runs S1.
func Run(ctx context.Context, opts Options) (*Result, error) {
	res := &Result{Options: opts}
	res.Options.Log = nil
	stream := zipfStream(opts.Objects, opts.Requests, opts.ZipfS)
	res.IdealHitRatio, res.IdealByteHitRatio = idealLRU(stream, int64(opts.Nodes)*opts.DiskBytes)

	for _, m := range []mode{independent, sharded, shardedHot} {
		o, err := startOrigin()
		if err != nil {
			return nil, err
		}
		f, err := startFleet(ctx, opts.Nodes, opts.NginxBin, o.addr, opts.DiskBytes, m)
		if err != nil {
			o.close()
			return nil, err
		}
		err = func() error {
			defer o.close()
			defer f.close()
			s, err := runStream(ctx, f, o, stream, opts.Clients)
			if err != nil {
				return err
			}
			p50, p99, err := hitLatency(ctx, f, 2000)
			if err != nil {
				return err
			}
			switch m {
			case independent:
				res.Independent, res.IndependentHitP50Us, res.IndependentHitP99Us = s, p50, p99
				opts.logf("independent: %+v", s)
				return nil
			case shardedHot:
				res.ShardedHot, res.ShardedHotHitP50Us, res.ShardedHotHitP99Us = s, p50, p99
				opts.logf("sharded with a hot tier: %+v", s)
				return nil
			}
			res.Sharded, res.ShardedHitP50Us, res.ShardedHitP99Us = s, p50, p99
			opts.logf("sharded: %+v", s)
			if res.MovedOnLeave, res.MovedOnJoin, err = keysMoved(ctx, f, o, opts.MoveKeys); err != nil {
				return err
			}
			res.ChurnRequests, res.ChurnFailed, err = churn(ctx, f, stream, opts.Clients, opts.ChurnDuration)
			return err
		}()
		if err != nil {
			return nil, err
		}
	}
	return res, nil
}

// zipfStream draws requests object ids from a Zipf law over objects, with a fixed seed.
func zipfStream(objects, requests int, s float64) []int {
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 27)), s, 1, uint64(objects-1))
	ids := make([]int, requests)
	for i := range ids {
		ids[i] = int(z.Uint64())
	}
	return ids
}

// idealLRU is the hit ratio (of requests and of bytes) of one LRU cache of capacity
// bytes fed the stream in order.
func idealLRU(stream []int, capacity int64) (hits, byteHits float64) {
	lru := list.New() // front: most recently used id
	at := map[int]*list.Element{}
	var used, hitN, hitBytes, allBytes int64
	for _, id := range stream {
		size := objectBytes(id)
		allBytes += size
		if e, ok := at[id]; ok {
			hitN++
			hitBytes += size
			lru.MoveToFront(e)
			continue
		}
		at[id] = lru.PushFront(id)
		for used += size; used > capacity; {
			old := lru.Remove(lru.Back()).(int)
			delete(at, old)
			used -= objectBytes(old)
		}
	}
	return float64(hitN) / float64(len(stream)), float64(hitBytes) / float64(allBytes)
}

// runStream sends the stream to the fleet's nodes round robin from clients at once.
func runStream(ctx context.Context, f *fleet, o *origin, stream []int, clients int) (Stream, error) {
	var s Stream
	var next, failed, clientBytes, hotHits atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(stream) {
					return
				}
				n := f.nodes[i%len(f.nodes)]
				size, hot, err := fetch(ctx, n, fmt.Sprintf("/o/%d", stream[i]))
				if err != nil {
					failed.Add(1)
					continue
				}
				clientBytes.Add(size)
				if hot == "HIT" {
					hotHits.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return s, err
	}
	s.DurationSeconds = time.Since(start).Seconds()
	distinct := map[int]bool{}
	for _, id := range stream {
		distinct[id] = true
	}
	s.Requests, s.Failed, s.Distinct = int64(len(stream)), failed.Load(), len(distinct)
	s.OriginRequests, s.OriginBytes, s.ClientBytes = o.requests.Load(), o.bytes.Load(), clientBytes.Load()
	s.HitRatio = 1 - float64(s.OriginRequests)/float64(s.Requests)
	s.ByteHitRatio = 1 - float64(s.OriginBytes)/float64(max(s.ClientBytes, 1))
	s.OriginPerObject = float64(s.OriginRequests) / float64(s.Distinct)
	s.RequestsPerSecond = float64(s.Requests) / s.DurationSeconds
	s.HotHits = hotHits.Load()
	return s, nil
}

// get requests path from node n; anything but a whole 200 is an error.
func get(ctx context.Context, n *node, path string) (int64, error) {
	size, _, err := fetch(ctx, n, path)
	return size, err
}

// fetch is get, with the hot tier's cache status.
func fetch(ctx context.Context, n *node, path string) (size int64, hot string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.url(path), nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = "shard.test"
	resp, err := n.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	hot = resp.Header.Get("X-Hot-Cache-Status")
	if size, err = io.Copy(io.Discard, resp.Body); err != nil {
		return size, hot, err
	}
	if resp.StatusCode != http.StatusOK {
		return size, hot, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return size, hot, nil
}

// hitLatency requests the 100 hottest objects (ids 0-99, warm after the stream)
// sequentially through the nodes in turn, and returns the p50 and p99 of count requests.
func hitLatency(ctx context.Context, f *fleet, count int) (p50, p99 float64, err error) {
	lat := make([]float64, 0, count)
	for i := range count {
		n := f.nodes[i%len(f.nodes)]
		t0 := time.Now()
		if _, err := get(ctx, n, fmt.Sprintf("/o/%d", i%100)); err != nil {
			return 0, 0, err
		}
		lat = append(lat, float64(time.Since(t0).Microseconds()))
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[len(lat)*99/100], nil
}

// keysMoved measures the share of keys whose owner changes when the last node leaves
// the ring, and when it joins again: keys stored through one ring and requested again
// through the other reach the origin again exactly when their owner changed (the new
// owner's disk never held them).
func keysMoved(ctx context.Context, f *fleet, o *origin, keys int) (leave, join float64, err error) {
	all, survivors := f.members(), f.members()[:len(f.nodes)-1]
	measure := func(prefix string, before, after []render.Member) (float64, error) {
		if err := reloadAll(ctx, f.nodes, before); err != nil {
			return 0, err
		}
		for i := range keys {
			if _, err := get(ctx, f.nodes[0], fmt.Sprintf("/%s/%d", prefix, i)); err != nil {
				return 0, err
			}
		}
		if err := reloadAll(ctx, f.nodes, after); err != nil {
			return 0, err
		}
		moved := 0
		for i := range keys {
			path := fmt.Sprintf("/%s/%d", prefix, i)
			if _, err := get(ctx, f.nodes[0], path); err != nil {
				return 0, err
			}
			if o.fetched(path) > 1 {
				moved++
			}
		}
		return float64(moved) / float64(keys), nil
	}
	if leave, err = measure("leave", all, survivors); err != nil {
		return 0, 0, err
	}
	if join, err = measure("join", survivors, all); err != nil {
		return 0, 0, err
	}
	return leave, join, nil
}

// churn sends the stream, round robin over every node but the last, from clients for
// d; a third of the way in the last node leaves (the ring drops it and its nginx quits
// gracefully, as a drained pod's), and two thirds in it starts again (its disk kept, as
// a hostPath's) and joins. It returns the requests sent and those that failed.
func churn(ctx context.Context, f *fleet, stream []int, clients int, d time.Duration) (sent, failed int64, err error) {
	stop := make(chan struct{})
	var next, failures atomic.Int64
	var wg sync.WaitGroup
	serving := f.nodes[:len(f.nodes)-1]
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := next.Add(1) - 1
				n := serving[int(i)%len(serving)]
				if _, err := get(ctx, n, fmt.Sprintf("/o/%d", stream[int(i)%len(stream)])); err != nil {
					failures.Add(1)
				}
			}
		})
	}
	err = func() error {
		last := f.nodes[len(f.nodes)-1]
		time.Sleep(d / 3)
		done := make(chan error, 1)
		go func() { done <- last.quit() }()
		if err := reloadAll(ctx, serving, f.members()[:len(f.nodes)-1]); err != nil {
			return err
		}
		if err := <-done; err != nil {
			return err
		}
		time.Sleep(d / 3)
		if err := last.start(ctx, f.members()); err != nil {
			return err
		}
		if err := reloadAll(ctx, serving, f.members()); err != nil {
			return err
		}
		time.Sleep(d / 3)
		return nil
	}()
	close(stop)
	wg.Wait()
	return next.Load(), failures.Load(), err
}
