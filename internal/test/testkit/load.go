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

package testkit

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"
)

// Sample is one request of a Load.
type Sample struct {
	Start  time.Time
	Object int
	// Code is the HTTP status, or 0 when the request failed without one (its connection
	// broke, or its body was cut short).
	Code int
	// Cache is nginx's X-Cache-Status.
	Cache string
	Bytes int64
}

// Load has clients keep-alive clients GET /obj/<n>, for n drawn at random from objects,
// from nginx at 127.0.0.1:port until stop is closed, and returns every request.
func Load(port int32, objects []int, clients int, stop <-chan struct{}) []Sample {
	var mu sync.Mutex
	var all []Sample
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 10 * time.Second}
			rng := rand.New(rand.NewPCG(uint64(w), uint64(len(objects))))
			var mine []Sample
			defer func() {
				mu.Lock()
				all = append(all, mine...)
				mu.Unlock()
			}()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := Sample{Start: time.Now(), Object: objects[rng.IntN(len(objects))]}
				s.Code, s.Cache, s.Bytes = FetchObject(c, port, fmt.Sprintf("/obj/%d", s.Object))
				mine = append(mine, s)
			}
		}()
	}
	wg.Wait()
	return all
}

// FetchObject GETs path from nginx at 127.0.0.1:port, reads the whole body and returns
// the status, X-Cache-Status and the body's length; the status is 0 when the request or
// the body failed.
func FetchObject(c *http.Client, port int32, path string) (code int, cache string, n int64) {
	resp, err := c.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
	if err != nil {
		return 0, err.Error(), 0
	}
	defer resp.Body.Close()
	n, err = io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, err.Error(), n
	}
	return resp.StatusCode, resp.Header.Get("X-Cache-Status"), n
}

// Objects are the numbers 0 to n-1, the objects of a Load.
func Objects(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i
	}
	return ids
}
