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

// Package cachefile makes cache files as nginx writes them, for tests of what reads them.
package cachefile

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"time"
)

// real is a file nginx 1.22.1 wrote for the key 127.0.0.1/a/b?c=1 (the header of 1.26's is
// the same: NGX_HTTP_CACHE_VERSION 5).
//
//go:embed nginx-1.22.1-cache-file
var real []byte

// Offsets in the header (ngx_http_file_cache_header_t on a 64-bit machine).
const (
	validSecAt    = 8
	headerStartAt = 54
	bodyStartAt   = 56
	keyAt         = 336 + len("\nKEY: ")
)

// Real is nginx's own file.
func Real() []byte { return bytes.Clone(real) }

// With is nginx's file with its key replaced, fresh until validUntil, with headers (whole
// lines, e.g. "Surrogate-Key: a b") after the status line.
func With(key string, validUntil time.Time, headers ...string) []byte {
	start := int(binary.LittleEndian.Uint16(real[headerStartAt:]))
	bodyStart := int(binary.LittleEndian.Uint16(real[bodyStartAt:]))
	status, rest, _ := bytes.Cut(real[start:bodyStart], []byte("\r\n"))
	b := bytes.Clone(real[:keyAt])
	binary.LittleEndian.PutUint64(b[validSecAt:], uint64(validUntil.Unix()))
	b = append(b, key...)
	b = append(b, '\n')
	binary.LittleEndian.PutUint16(b[headerStartAt:], uint16(len(b)))
	b = append(append(b, status...), "\r\n"...)
	for _, h := range headers {
		b = append(append(b, h...), "\r\n"...)
	}
	b = append(b, rest...)
	binary.LittleEndian.PutUint16(b[bodyStartAt:], uint16(len(b)))
	return append(b, real[bodyStart:]...)
}
