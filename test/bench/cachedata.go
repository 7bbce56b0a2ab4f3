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
	"bytes"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// Objects are named /o/00000000 ... /o/99999999; object 0 is the hot one.
const objectPrefix = "/o/"

// ObjectPath is the URI of object id.
func ObjectPath(id int) string { return fmt.Sprintf("%s%08d", objectPrefix, id) }

// Body fills dest with the bytes of object id from off: a window of a fixed random
// pattern whose length is prime, shifted by id, so a byte of another object or (but for
// a multiple of the pattern's length) another offset differs. Copying is as cheap as a
// memcpy, so the emulated disks spend little CPU on content.
func Body(id int, dest []byte, off int64) {
	at := (off + int64(id)*patternStride) % int64(len(pattern))
	for len(dest) > 0 {
		n := copy(dest, pattern[at:])
		dest, at = dest[n:], 0
	}
}

const patternStride = 4099

var pattern = func() []byte {
	p := make([]byte, 1<<20-3) // 1,048,573 is prime
	for i := 0; i < len(p); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], mix(uint64(i)))
		copy(p[i:], w[:])
	}
	return p
}()

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// matchesBody says whether chunk is object id's bytes from off, comparing in place: the
// open-loop clients check every byte they receive at the cost of a memcmp.
func matchesBody(id int, chunk []byte, off int64) bool {
	at := (off + int64(id)*patternStride) % int64(len(pattern))
	for len(chunk) > 0 {
		n := min(len(chunk), len(pattern)-int(at))
		if !bytes.Equal(chunk[:n], pattern[at:int(at)+n]) {
			return false
		}
		chunk, at = chunk[n:], 0
	}
	return true
}

// VerifyBody returns an error naming the first byte of body that is not object id's.
func VerifyBody(id int, size int64, body []byte) error {
	if int64(len(body)) != size {
		return fmt.Errorf("object %d: %d bytes, want %d", id, len(body), size)
	}
	want := make([]byte, 64<<10)
	for off := 0; off < len(body); off += len(want) {
		chunk := body[off:min(off+len(want), len(body))]
		Body(id, want[:len(chunk)], int64(off))
		if i := firstDiff(chunk, want[:len(chunk)]); i >= 0 {
			return fmt.Errorf("object %d: wrong byte at offset %d", id, off+i)
		}
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// CacheData is an nginx proxy_cache directory holding every object, as nginx itself
// would have written it: a slowdisk.DataSet. The per-file header (nginx's binary header,
// the cache key and the origin's response headers) comes from a template learned from
// a file that nginx wrote (LearnTemplate), so no nginx internals are hard-coded here.
type CacheData struct {
	Objects  int
	BodySize int64 // bytes per object
	t        *Template
}

// Template is the header of a cache file nginx wrote for one object, and where in it
// the object's key, the key's CRC32 and the key's MD5 sit.
type Template struct {
	Header     []byte
	Key        string // the cache key of the object the header was taken from
	keyAt      []int
	crcAt      []int
	md5At      []int
	objectSize int64
}

// NewCacheData is the cache directory content for objects of size bytes.
func NewCacheData(t *Template, objects int) *CacheData {
	return &CacheData{Objects: objects, BodySize: t.objectSize, t: t}
}

func (c *CacheData) Len() int { return c.Objects }

// Path is nginx's levels=1:2 path of the object's cache file, in the disk's cache
// directory.
func (c *CacheData) Path(i int) string {
	h := hex.EncodeToString(c.md5(i))
	return filepath.Join(agentapi.DiskCacheDir, h[31:], h[29:31], h)
}

func (c *CacheData) Size(int) int64 { return int64(len(c.t.Header)) + c.BodySize }

func (c *CacheData) ReadAt(i int, dest []byte, off int64) {
	if h := int64(len(c.t.Header)); off < h {
		n := copy(dest, c.header(i)[off:])
		dest, off = dest[n:], off+int64(n)
	}
	Body(i, dest, off-int64(len(c.t.Header)))
}

func (c *CacheData) key(i int) string {
	return strings.Replace(c.t.Key, ObjectPath(0), ObjectPath(i), 1)
}

func (c *CacheData) md5(i int) []byte {
	sum := md5.Sum([]byte(c.key(i)))
	return sum[:]
}

// header is the template with object i's key, CRC32 and MD5 in place.
func (c *CacheData) header(i int) []byte {
	return c.t.headerFor(c.key(i))
}

func (t *Template) headerFor(key string) []byte {
	h := bytes.Clone(t.Header)
	for _, at := range t.keyAt {
		copy(h[at:], key)
	}
	for _, at := range t.crcAt {
		binary.LittleEndian.PutUint32(h[at:], crc32.ChecksumIEEE([]byte(key)))
	}
	sum := md5.Sum([]byte(key))
	for _, at := range t.md5At {
		copy(h[at:], sum[:])
	}
	return h
}

// parseCacheFile reads the cache key of a file nginx wrote ("\nKEY: ...\n").
func parseCacheFile(data []byte) (string, error) {
	_, rest, ok := bytes.Cut(data, []byte("\nKEY: "))
	if !ok {
		return "", fmt.Errorf("no KEY line")
	}
	key, _, ok := bytes.Cut(rest, []byte("\n"))
	if !ok {
		return "", fmt.Errorf("KEY line not terminated")
	}
	return string(key), nil
}

// newTemplate learns a template from the cache file nginx wrote for object 0 and
// checks it against the file nginx wrote for object other: the header made from the
// template for other's key must be byte for byte the one nginx wrote.
func newTemplate(file0, fileOther []byte, other int, objectSize int64) (*Template, error) {
	if int64(len(file0)) <= objectSize {
		return nil, fmt.Errorf("cache file of %d bytes holds no %d-byte body", len(file0), objectSize)
	}
	header := file0[:int64(len(file0))-objectSize]
	key, err := parseCacheFile(header)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(key, ObjectPath(0)) {
		return nil, fmt.Errorf("cache key %q does not contain the URI %s", key, ObjectPath(0))
	}
	crc := binary.LittleEndian.AppendUint32(nil, crc32.ChecksumIEEE([]byte(key)))
	sum := md5.Sum([]byte(key))
	t := &Template{
		Header: bytes.Clone(header), Key: key, objectSize: objectSize,
		keyAt: indexAll(header, []byte(key)), crcAt: indexAll(header, crc), md5At: indexAll(header, sum[:]),
	}
	if len(t.keyAt) != 1 || len(t.crcAt) != 1 {
		return nil, fmt.Errorf("cache header holds the key %d times and its CRC32 %d times, want once each", len(t.keyAt), len(t.crcAt))
	}
	c := NewCacheData(t, other+1)
	want := fileOther[:min(len(fileOther), len(header))]
	if got := c.header(other); !bytes.Equal(got, want) {
		at := len(want) // fileOther is too short
		if len(want) == len(got) {
			at = firstDiff(got, want)
		}
		return nil, fmt.Errorf("nginx's cache header for %s differs from the template's at byte %d of %d",
			ObjectPath(other), at, len(got))
	}
	return t, nil
}

func indexAll(s, sep []byte) []int {
	var at []int
	for off := 0; ; {
		i := bytes.Index(s[off:], sep)
		if i < 0 {
			return at
		}
		at = append(at, off+i)
		off += i + 1
	}
}

// readCacheFiles reads every file under dirs, by the cache key each holds.
func readCacheFiles(dirs ...string) (map[string][]byte, error) {
	files := map[string][]byte{}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			key, err := parseCacheFile(data)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			files[key] = data
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}
