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
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// RangeObject is an origin's large object that exists only as a rule: the byte at offset
// i is ObjectByte(i). It serves GET and HEAD with Range (http.ServeContent), a fixed ETag
// and Last-Modified, cacheable for an hour, and records the Range of every request.
type RangeObject struct {
	Size int64

	mu     sync.Mutex
	ranges []string
}

// ObjectByte is the byte a RangeObject holds at offset i: it differs between
// neighbouring slices, so a slice served at the wrong offset shows.
func ObjectByte(i int64) byte { return byte(i ^ i>>8 ^ i>>16 ^ i>>24 ^ i>>32) }

// ObjectBytes are the bytes of a RangeObject from first to last, inclusive.
func ObjectBytes(first, last int64) []byte {
	b := make([]byte, last-first+1)
	for i := range b {
		b[i] = ObjectByte(first + int64(i))
	}
	return b
}

func (o *RangeObject) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.ranges = append(o.ranges, r.Header.Get("Range"))
	o.mu.Unlock()
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("ETag", `"range-object"`)
	http.ServeContent(w, r, "object", time.Unix(1700000000, 0), &objectReader{size: o.Size})
}

// Ranges are the Range headers of the requests so far ("" for none), sorted.
func (o *RangeObject) Ranges() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(slices.Values(o.ranges))
}

// Reset forgets the requests so far.
func (o *RangeObject) Reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ranges = nil
}

// objectReader reads a RangeObject's bytes.
type objectReader struct{ size, off int64 }

func (r *objectReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), r.size-r.off))
	for i := range n {
		p[i] = ObjectByte(r.off + int64(i))
	}
	r.off += int64(n)
	return n, nil
}

func (r *objectReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.off
	case io.SeekEnd:
		offset += r.size
	}
	if offset < 0 {
		return 0, errors.New("seek before the start")
	}
	r.off = offset
	return offset, nil
}

// SliceRanges are the Range headers nginx's slice module sends for the slices of size
// that cover the byte ranges [first, last] given in pairs, sorted.
func SliceRanges(size, objectSize int64, firstLast ...int64) []string {
	seen := map[int64]bool{}
	for i := 0; i+1 < len(firstLast); i += 2 {
		for s := firstLast[i] / size; s <= min(firstLast[i+1], objectSize-1)/size; s++ {
			seen[s] = true
		}
	}
	var ranges []string
	for s := range seen {
		ranges = append(ranges, "bytes="+strconv.FormatInt(s*size, 10)+"-"+strconv.FormatInt((s+1)*size-1, 10))
	}
	slices.Sort(ranges)
	return ranges
}
