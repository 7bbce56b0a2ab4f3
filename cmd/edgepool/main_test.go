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
	"errors"
	"io"
	"os"
	"os/exec"
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

// TestRenderChecksTheDiskAllowlist: the review refuses what the operator would refuse, with
// the cluster admin's allowlist of disk path prefixes.
func TestRenderChecksTheDiskAllowlist(t *testing.T) {
	sample, err := os.ReadFile("../../config/samples/cache_v1alpha1_cachenode.yaml")
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := strings.Replace(string(sample), "path: /mnt/hdd0", "path: /var/lib/etcd", 1)
	err = run([]string{"render", "-f", "-"}, strings.NewReader(elsewhere), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `spec.disks[1].path: Invalid value: "/var/lib/etcd": must lie under a prefix the cluster admin allows: /mnt, /data, /srv`) {
		t.Errorf("a disk under /var/lib rendered, or the refusal does not name it: %v", err)
	}
	if err := run([]string{"render", "--allowed-disk-prefixes=/mnt,/var/lib", "-f", "-"}, strings.NewReader(elsewhere), &bytes.Buffer{}); err != nil {
		t.Errorf("with /var/lib allowed: %v", err)
	}
	if err := run([]string{"render", "--allowed-disk-prefixes=/", "-f", "-"}, strings.NewReader(elsewhere), &bytes.Buffer{}); err == nil {
		t.Error("the root was taken as an allowed prefix")
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

// cacheNode is a small CacheNode manifest named name, with extra appended to its spec.
func cacheNode(name, extra string) string {
	return "apiVersion: cache.edgepool.io/v1alpha1\nkind: CacheNode\nmetadata: {name: " + name + ", namespace: edge}\n" +
		"spec:\n  disks: [{name: d, path: /mnt/" + name + ", media: SSD, size: 1Gi}]\n  origin: {servers: ['o:80']}\n" + extra
}

func writeManifest(t *testing.T, manifest string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestRenderEveryDocument: kubectl apply -f applies every document of a file, so the review
// shows every CacheNode, in order, each under a header naming it; empty documents and
// comments are skipped as kubectl skips them.
func TestRenderEveryDocument(t *testing.T) {
	manifest := "# the edge\n---\n" + cacheNode("a", "  io: sync\n") + "---\n---\n# nothing\n---\n" + cacheNode("b", "")
	for name, args := range map[string][]string{
		"yaml file": {"render", "-f", writeManifest(t, manifest)},
		"stdin":     {"render", "-f", "-"},
	} {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := run(args, strings.NewReader(manifest), &out); err != nil {
				t.Fatal(err)
			}
			confs := strings.Split(out.String(), "# ---- ")
			if len(confs) != 3 || confs[0] != "" {
				t.Fatalf("want two headed configs, got:\n%s", out.String())
			}
			for i, want := range []string{"CacheNode edge/a, document 1 (line 3) ----\n", "CacheNode edge/b, document 2 (line 14) ----\n"} {
				if !strings.HasPrefix(confs[i+1], want) || !strings.Contains(confs[i+1], "daemon off;") {
					t.Errorf("config %d does not start with %q or is not a config:\n%s", i+1, want, confs[i+1])
				}
			}
			if strings.Contains(confs[1], "thread_pool") || !strings.Contains(confs[2], "thread_pool pool_d") {
				t.Error("the configs are not a's (io: sync) and b's")
			}
		})
	}
	// A stream of JSON objects, as kubectl takes them too.
	var out bytes.Buffer
	json := `{"apiVersion": "cache.edgepool.io/v1alpha1", "kind": "CacheNode", "metadata": {"name": "j1"}, "spec": {"disks": [{"name": "d", "path": "/mnt/d", "media": "SSD", "size": "1Gi"}], "origin": {"servers": ["o:80"]}}}`
	if err := run([]string{"render", "-f", "-"}, strings.NewReader(json+"\n"+strings.Replace(json, "j1", "j2", 1)), &out); err != nil {
		t.Fatal(err)
	}
	if strings.Count(out.String(), "daemon off;") != 2 || !strings.Contains(out.String(), "# ---- CacheNode j2, document 2 (line 2) ----") {
		t.Errorf("want j1's and j2's configs, got:\n%s", out.String())
	}
}

// TestRenderRefusals: a manifest with anything the API server would not take as a
// CacheNode is refused whole, naming each refused document, and nothing is printed.
func TestRenderRefusals(t *testing.T) {
	deployment := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\n"
	for _, tc := range []struct {
		name, manifest string
		want           []string
	}{
		{"another kind", cacheNode("a", "") + "---\n" + deployment,
			[]string{`document 2 (line 8): kind "Deployment" (apiVersion "apps/v1") is not a CacheNode`}},
		{"another version", cacheNode("a", "") + "---\n" + strings.Replace(cacheNode("b", ""), "v1alpha1", "v1beta1", 1),
			[]string{`document 2 (line 8): kind "CacheNode" (apiVersion "cache.edgepool.io/v1beta1") is not a CacheNode`}},
		{"a List", "apiVersion: v1\nkind: List\nitems: []\n", []string{`document 1 (line 1): kind "List"`}},
		{"not an object", "- a\n- b\n", []string{"document 1 (line 1): not a Kubernetes object"}},
		{"a duplicate key in the second document", cacheNode("a", "") + "---\n" + cacheNode("b", "  io: sync\n  io: threads\n"),
			[]string{"document 2", `key "io" already set in map`}},
		{"a duplicate key in a JSON object", `{"apiVersion": "cache.edgepool.io/v1alpha1", "kind": "CacheNode", "kind": "CacheNode"}`,
			[]string{"document 1", `key "kind" already set in map`}},
		{"an unknown field", cacheNode("a", "") + "---\n" + cacheNode("b", "  snippet: 'load_module x;'\n"),
			[]string{"document 2", `unknown field "spec.snippet"`}},
		{"a field in the wrong case", cacheNode("a", "") + "---\n" + cacheNode("b", "  IO: sync\n"),
			[]string{"document 2", `unknown field "spec.IO"`}},
		{"the same CacheNode twice", cacheNode("a", "") + "---\n" + cacheNode("a", "  io: sync\n"),
			[]string{"document 2 (line 8), CacheNode edge/a: the same CacheNode as document 1 (line 1)"}},
		{"a name the API server refuses", strings.Replace(cacheNode("a", ""), "name: a,", "name: 'a\n  load_module x;',", 1),
			[]string{"document 1 (line 1): metadata.name"}},
		{"every invalid document named", cacheNode("a", "  io: async\n") + "---\n" + cacheNode("b", "") + "---\n" + cacheNode("c", "  listener: {backlog: 70000}\n"),
			[]string{"document 1 (line 1), CacheNode edge/a:", `spec.io: Unsupported value: "async"`, "\ndocument 3 (line 16), CacheNode edge/c: ", "spec.listener.backlog"}},
		// What the Go types take and the API server does not: the CRD's own gate judges it.
		{"more client CIDRs than the schema allows", cacheNode("a", "  listener: {clientCIDRs: ["+strings.Repeat("'10.0.0.0/8', ", 32)+"'10.0.0.0/8']}\n"),
			[]string{"document 1 (line 1), CacheNode edge/a:", "spec.listener.clientCIDRs: Too many: 33: must have at most 32 items"}},
		{"an explicit zero", cacheNode("a", "  listener: {backlog: 0}\n"),
			[]string{"document 1 (line 1), CacheNode edge/a: ", "spec.listener.backlog: Invalid value: 0: spec.listener.backlog in body should be greater than or equal to 1"}},
		{"a size that is no quantity", strings.Replace(cacheNode("a", ""), "size: 1Gi", "size: 100MB", 1),
			[]string{"document 1 (line 1)", "spec.disks[0].size", "a number and a unit such as 512Mi"}},
		{"a bad document separator", cacheNode("a", "") + "--- x\n", []string{"line 7: invalid document separator: x"}},
		{"no CacheNode", "# nothing\n---\n", []string{"no CacheNode in it"}},
		{"an empty file", "", []string{"no CacheNode in it"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run([]string{"render", "-f", "-"}, strings.NewReader(tc.manifest), &out)
			if err == nil {
				t.Fatalf("rendered it:\n%s", out.String())
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q:\n%v", want, err)
				}
			}
			if out.Len() != 0 {
				t.Errorf("printed a config despite the error:\n%s", out.String())
			}
		})
	}
}

// TestRenderErrorsNeverEchoAHugeValue: a megabyte-long value, key or kind is clipped in
// the error to its first characters and its length.
func TestRenderErrorsNeverEchoAHugeValue(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		name, manifest, want string
	}{
		{"value", cacheNode("a", "") + "---\n" + strings.Replace(cacheNode("b", ""), "/mnt/b", "/mnt/"+huge, 1), "spec.disks[0].path"},
		{"values of several fields", strings.Replace(cacheNode("a", "  io: "+huge+"\n"), "/mnt/a", "/mnt/"+huge, 1), "spec.io"},
		// Keys of over 1024 characters must be explicit (? key) in YAML.
		{"unknown field", cacheNode("a", "  ? "+huge+"\n  : 1\n"), "unknown field"},
		{"duplicate key", cacheNode("a", "  ? "+huge+"\n  : 1\n  ? "+huge+"\n  : 2\n"), "already set in map"},
		{"kind", "apiVersion: v1\nkind: " + huge + "\n", "is not a CacheNode"},
		{"name", strings.Replace(cacheNode("a", ""), "name: a,", "name: "+huge+",", 1), "metadata.name"},
		{"separator", cacheNode("a", "") + "--- " + huge + "\n", "invalid document separator"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run([]string{"render", "-f", "-"}, strings.NewReader(tc.manifest), io.Discard)
			if err == nil {
				t.Fatal("rendered it")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error lacks %q: %.500s", tc.want, err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if len(line) > 300 {
					t.Errorf("an error line of %d bytes: %.300s…", len(line), line)
				}
			}
		})
	}
}

// TestMainExitsNonZero runs the command itself: a refusal exits 1 and prints nothing on
// stdout, only the error on stderr.
func TestMainExitsNonZero(t *testing.T) {
	manifest := cacheNode("a", "") + "---\napiVersion: apps/v1\nkind: Deployment\n"
	cmd := exec.Command(os.Args[0], "render", "-f", writeManifest(t, manifest))
	cmd.Env = append(os.Environ(), "EDGEPOOL_RUN_MAIN=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("want exit status 1, got %v (stderr %s)", err, stderr.String())
	}
	if stdout.Len() != 0 || !strings.Contains(stderr.String(), "document 2") {
		t.Errorf("stdout %q, stderr %q", stdout.String(), stderr.String())
	}
}

// TestHelpExitsZero: asking for the usage is no failure. Each form prints the usage (and
// the subcommand's flags) on stdout and exits 0; a flag that does not exist still exits 1.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}, {"render", "--help"}, {"render", "-h"}, {"purge", "--help"}, {"purge", "edge", "-h"}} {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "EDGEPOOL_RUN_MAIN=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Errorf("edgepool %s: %v (stderr %q)", strings.Join(args, " "), err, stderr.String())
			continue
		}
		want := "edgepool purge [-n NAMESPACE]" // in the usage
		if args[0] == "render" || args[0] == "purge" {
			want = "Flags of " + args[0] + ":"
		}
		if !strings.Contains(stdout.String(), want) || stderr.Len() != 0 {
			t.Errorf("edgepool %s: stdout %q lacks %q, or stderr %q is not empty", strings.Join(args, " "), stdout.String(), want, stderr.String())
		}
	}
	cmd := exec.Command(os.Args[0], "render", "--no-such-flag")
	cmd.Env = append(os.Environ(), "EDGEPOOL_RUN_MAIN=1")
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("edgepool render --no-such-flag: want exit status 1, got %v", err)
	}
}

func TestMain(m *testing.M) {
	if os.Getenv("EDGEPOOL_RUN_MAIN") == "1" {
		os.Args = append([]string{"edgepool"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}
