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

package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/edgepool/edgepool/internal/agent/atomicfile"
)

// TestWriteReplacesInPlace: the file holds the new content with the mode asked for, an
// older file is replaced, and no temporary file stays behind.
func TestWriteReplacesInPlace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	for _, content := range []string{"first", "second"} {
		if err := atomicfile.Write(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the directory holds %d entries, want only the file", len(entries))
	}
	if err := atomicfile.Write(filepath.Join(dir, "missing", "key"), nil, 0o600); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
}
