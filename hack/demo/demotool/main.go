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

// Command demotool serves the demo's origin, drives its load and reads a cache pod's hit
// ratio. It is part of `make demo` only: a deterministic origin, a bounded load generator
// (loopback only) and a reader of the node agent's metrics.
//
//	demotool origin -listen 127.0.0.1:9000
//	demotool load -url http://127.1.0.2:8080 -c 16 -n 2000 -objects 300 -size 262144
//	demotool hitratio -metrics http://10.214.1.3:9145/metrics
//	demotool cluster -name edgepool-demo -kwok-config tmp/demo/kwok.yaml
package main

import (
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgepool/edgepool/internal/test/testkit/clusterslot"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: demotool origin|load|hitratio|cluster [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "origin":
		err = origin(os.Args[2:])
	case "load":
		err = load(os.Args[2:])
	case "hitratio":
		err = hitRatio(os.Args[2:])
	case "cluster":
		err = cluster(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demotool:", err)
		os.Exit(1)
	}
}

// origin serves /obj/<n>?size=<bytes>: deterministic content, cacheable for an hour.
func origin(args []string) error {
	fs := flag.NewFlagSet("origin", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9000", "address to listen on (loopback)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		size, err := strconv.Atoi(r.URL.Query().Get("size"))
		if err != nil || size <= 0 || size > 64<<20 {
			size = 256 << 10
		}
		seed := byte(len(r.URL.Path))
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		chunk := make([]byte, 32<<10)
		for i := range chunk {
			chunk[i] = 'a' + (seed+byte(i))%26
		}
		for size > 0 {
			n := min(size, len(chunk))
			if _, err := w.Write(chunk[:n]); err != nil {
				return
			}
			size -= n
		}
	})
	return http.ListenAndServe(*listen, handler)
}

// load sends n GETs of random objects with c concurrent clients and prints a summary.
func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	url := fs.String("url", "", "cache base URL")
	conc := fs.Int("c", 16, "concurrent clients")
	n := fs.Int("n", 1000, "requests in all")
	objects := fs.Int("objects", 200, "distinct objects")
	size := fs.Int("size", 256<<10, "object size in bytes")
	timeout := fs.Duration("timeout", 2*time.Minute, "stop after this long, whatever is left")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return fmt.Errorf("load needs -url")
	}
	var next, failed atomic.Int64
	var mu sync.Mutex
	statuses := map[string]int{}
	deadline := time.Now().Add(*timeout)
	start := time.Now()
	var wg sync.WaitGroup
	for range *conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 30 * time.Second}
			for next.Add(1) <= int64(*n) && time.Now().Before(deadline) {
				obj := rand.IntN(*objects)
				cache := "FAILED"
				resp, err := client.Get(fmt.Sprintf("%s/obj/%d?size=%d", *url, obj, *size))
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close() // drained: a failed close loses nothing
					if err == nil && resp.StatusCode == http.StatusOK {
						cache = resp.Header.Get("X-Cache-Status")
					}
				}
				if cache == "FAILED" {
					failed.Add(1)
				}
				mu.Lock()
				statuses[cache]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var parts []string
	done := 0
	for k, v := range statuses {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
		done += v
	}
	sort.Strings(parts)
	fmt.Printf("%d requests in %s (%.0f req/s), %d failed; X-Cache-Status: %s\n",
		done, elapsed.Round(time.Millisecond), float64(done)/elapsed.Seconds(), failed.Load(), strings.Join(parts, " "))
	return nil
}

// cluster writes the kwokctl configuration of a local cluster's slot (its ports and
// addresses, apart from every other local cluster's: see package clusterslot) and prints
// its real node's settings as shell exports, for hack/node/node.sh.
func cluster(args []string) error {
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	name := fs.String("name", clusterslot.Demo.Name, "the cluster's name")
	kwokConfig := fs.String("kwok-config", "", "file to write kwokctl's configuration to")
	checkPorts := fs.Bool("check-ports", false, "fail, naming it, if a port of the cluster is taken")
	if err := fs.Parse(args); err != nil {
		return err
	}
	slot, err := clusterslot.Named(*name)
	if err != nil {
		return err
	}
	if *checkPorts {
		if err := slot.CheckPortsFree(); err != nil {
			return err
		}
	}
	if *kwokConfig != "" {
		if err := os.WriteFile(*kwokConfig, []byte(slot.KwokConfig(clusterslot.KwokSettings{})), 0o644); err != nil {
			return err
		}
	}
	if env := slot.NodeEnv(); len(env) > 0 {
		fmt.Println("export " + strings.Join(env, " "))
	}
	return nil
}
