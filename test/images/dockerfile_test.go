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

// Package images checks the Dockerfiles without a Docker engine: it builds the binaries
// exactly as the images do, and checks what each Dockerfile copies and runs against the
// repository and against what the operator's objects expect of the images. It also checks
// the OCI archives `make images` builds (bin/images): that they are reproducible and
// describe the same images as the Dockerfiles.
package images

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/controllers/cachenode"
)

const root = "../.."

// instruction is one Dockerfile instruction with its stage.
type instruction struct {
	stage      int
	cmd, args  string
	copyFrom   string
	copySource []string
	copyDest   string
}

// parse reads a Dockerfile: continuation lines joined, comments dropped.
func parse(t *testing.T, file string) []instruction {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	stage := -1
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cmd, args, _ := strings.Cut(line, " ")
		in := instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		if in.cmd == "FROM" {
			stage++
		}
		in.stage = stage
		if in.cmd == "COPY" {
			fields := strings.Fields(in.args)
			for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
				if from, ok := strings.CutPrefix(fields[0], "--from="); ok {
					in.copyFrom = from
				}
				fields = fields[1:]
			}
			in.copySource, in.copyDest = fields[:len(fields)-1], fields[len(fields)-1]
		}
		out = append(out, in)
	}
	return out
}

var goBuildRE = regexp.MustCompile(`CGO_ENABLED=0 go build (.*) -o (\S+) (\./cmd/\S+)`)

// dockerfile is what a Dockerfile's final stage says of its image.
type dockerfile struct {
	file       string
	entrypoint []string
	user       string // USER as written
	uid        int
	// copies maps each path the final stage copies a built binary to, to that binary as
	// this test built it (with the Dockerfile's flags).
	copies map[string]string
}

// checkImage checks one Dockerfile and returns what it says of the final image.
func checkImage(t *testing.T, file string) dockerfile {
	t.Helper()
	ins := parse(t, file)
	final := ins[len(ins)-1].stage
	built := map[string]string{}
	d := dockerfile{file: file, copies: map[string]string{}}
	var entrypoint string
	var uid int
	for _, in := range ins {
		switch {
		case in.cmd == "COPY" && in.copyFrom == "":
			for _, src := range in.copySource {
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("%s copies %s, which is not in the repository", file, src)
				}
			}
		case in.cmd == "RUN" && goBuildRE.MatchString(in.args):
			m := goBuildRE.FindStringSubmatch(in.args)
			built[m[2]] = buildStatic(t, shellWords(m[1]), m[3])
		case in.cmd == "COPY" && in.copyFrom != "" && in.stage == final:
			for _, src := range in.copySource {
				if built[src] == "" {
					t.Errorf("%s copies %s from the build stage, which no go build produces", file, src)
				}
				dest := in.copyDest
				if strings.HasSuffix(dest, "/") {
					dest += path.Base(src)
				}
				d.copies[dest] = built[src]
			}
			entrypoint = in.copyDest // checked against ENTRYPOINT below
		case in.cmd == "USER" && in.stage == final:
			d.user = in.args
			user, _, _ := strings.Cut(in.args, ":")
			var err error
			if uid, err = strconv.Atoi(user); err != nil || uid == 0 {
				t.Errorf("%s: USER %q must be a numeric non-root UID (runAsNonRoot can only check numbers)", file, in.args)
			}
		case in.cmd == "ENTRYPOINT" && in.stage == final:
			var argv []string
			if err := json.Unmarshal([]byte(in.args), &argv); err != nil || len(argv) == 0 {
				t.Fatalf("%s: ENTRYPOINT %s is not an exec-form array", file, in.args)
			}
			if argv[0] != entrypoint {
				t.Errorf("%s: ENTRYPOINT %s is not the binary copied into the image (%s)", file, argv[0], entrypoint)
			}
			d.entrypoint = argv
		}
	}
	if entrypoint == "" || uid == 0 || len(d.entrypoint) == 0 {
		t.Fatalf("%s: no binary copied into the final stage, no USER or no ENTRYPOINT", file)
	}
	d.uid = uid
	return d
}

// buildStatic builds pkg as the Dockerfile does, for the images' platform (linux/amd64),
// checks the binary is static, since the images' bases have no C library to load
// (distroless static) or another one, and returns it.
func buildStatic(t *testing.T, flags []string, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), path.Base(pkg))
	args := append([]string{"build"}, flags...)
	cmd := exec.Command("go", append(args, "-o", out, pkg)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v: %s", pkg, err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked", pkg)
		}
	}
	return out
}

// shellWords splits s into words as a shell would, for the quoting Dockerfiles use here
// (single quotes, no escapes).
func shellWords(s string) []string {
	var words []string
	var word strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}

func TestOperatorImage(t *testing.T) {
	d := checkImage(t, "images/operator/Dockerfile")
	entrypoint, uid := d.entrypoint[0], d.uid
	if entrypoint != "/manager" {
		t.Errorf("operator entrypoint %s", entrypoint)
	}
	// The manifests that run the image run it as the image's user.
	var values struct {
		PodSecurityContext struct {
			RunAsUser int `json:"runAsUser"`
		} `json:"podSecurityContext"`
	}
	data, err := os.ReadFile(filepath.Join(root, "charts/edgepool/values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	if values.PodSecurityContext.RunAsUser != uid {
		t.Errorf("the chart runs the operator as %d, the image's USER is %d", values.PodSecurityContext.RunAsUser, uid)
	}
	manager, err := os.ReadFile(filepath.Join(root, "config/manager/manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(manager), "runAsUser: "+strconv.Itoa(uid)) {
		t.Errorf("config/manager does not run the operator as the image's USER %d", uid)
	}
	// The archive make images built is the image the Dockerfile describes, named as
	// config/manager runs it.
	m := regexp.MustCompile(`image: (\S+)`).FindSubmatch(manager)
	if m == nil {
		t.Fatal("config/manager/manager.yaml names no image")
	}
	checkArchive(t, "operator", d, normalize(string(m[1])))
}

func TestCacheImage(t *testing.T) {
	d := checkImage(t, "images/cache/Dockerfile")
	entrypoint, uid := d.entrypoint[0], d.uid
	// The DaemonSet starts the agent by name from PATH, as the image's user.
	if path.Base(entrypoint) != cachenode.AgentCommand || path.Dir(entrypoint) != "/usr/local/bin" {
		t.Errorf("the cache image puts the agent at %s; the DaemonSet runs %q from PATH", entrypoint, cachenode.AgentCommand)
	}
	if uid != cachenode.CacheUID {
		t.Errorf("the cache image's USER is %d; the DaemonSet runs it as %d", uid, cachenode.CacheUID)
	}
	// nginx comes from Debian's nginx-light, built --with-threads (checked at build time).
	data, err := os.ReadFile(filepath.Join(root, "images/cache/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"nginx-light", "grep -q -- --with-threads"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("images/cache/Dockerfile lacks %q", want)
		}
	}
	// The archive make images built is the image the Dockerfile describes, named as a
	// CacheNode's default image; TestCacheImageNginx checks its nginx.
	img := checkArchive(t, "cache", d, normalize(cachenode.DefaultCacheImage))
	for _, dir := range []string{path.Dir(entrypoint), "/usr/sbin"} {
		if !slices.Contains(pathDirs(img), dir) {
			t.Errorf("the cache image's PATH %q lacks %s: the DaemonSet runs the agent, and the agent nginx, from PATH",
				img.config.Config.Env, dir)
		}
	}
}
