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
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRenderSample(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"render", "-f", "../../config/samples/cache_v1alpha1_cachenode.yaml"}, nil, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"thread_pool pool_nvme0 threads=64", "split_clients", "listen 8080 reuseport"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

func TestRenderFromStdin(t *testing.T) {
	sample, err := os.ReadFile("../../config/samples/cache_v1alpha1_cachenode.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"render", "-f", "-"}, bytes.NewReader(sample), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "thread_pool pool_hdd0") {
		t.Error("stdin was not rendered")
	}
}

func TestRenderErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	manifest := "apiVersion: cache.edgepool.io/v1alpha1\nkind: CacheNode\nmetadata: {name: x}\n" +
		"spec:\n  disks: [{name: d, path: '/mnt/a;b', media: SSD, size: 1Gi}]\n  origin: {servers: ['o:80']}\n"
	if err := os.WriteFile(bad, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "unknown or missing command"},
		{[]string{"render"}, "render needs -f FILE"},
		{[]string{"render", "-f", "/does/not/exist.yaml"}, "no such file"},
		{[]string{"render", "-f", bad}, "spec.disks[0].path"},
	} {
		var out bytes.Buffer
		err := run(tc.args, nil, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
		}
		if out.Len() != 0 {
			t.Errorf("run(%q) printed a config despite the error", tc.args)
		}
	}
}
