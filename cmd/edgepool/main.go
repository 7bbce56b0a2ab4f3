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

// Command edgepool is the CLI: `edgepool render -f cachenodes.yaml` prints, offline, the
// nginx.conf the operator would render for every CacheNode of the file, for review in
// GitOps pipelines; `edgepool purge edge --url https://www.example.com/` creates a
// CachePurge with the user's kubeconfig and waits until it is Complete, as kubectl wait
// would.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/edgepool/edgepool/api/v1alpha1"
	"github.com/edgepool/edgepool/internal/crdgate"
	"github.com/edgepool/edgepool/internal/render"
)

const usage = `Usage:
  edgepool render -f FILE   print the nginx.conf rendered from each CacheNode of a manifest
                            (YAML documents or JSON objects, as kubectl apply -f takes them;
                            - reads stdin). Any other kind, duplicate key, unknown field or
                            invalid value is refused, and then nothing is printed. Disk
                            paths must lie under --allowed-disk-prefixes (/mnt,/data,/srv).
  edgepool purge [-n NAMESPACE] CACHENODE (--url URL ... | --prefix HOST/PATH ... |
                 --tag TAG ... | --all) [--soft] [--name NAME] [--wait=false] [--timeout 5m]
                 [--kubeconfig FILE] [--context NAME]
                            create a CachePurge of the CacheNode (named after it unless --name)
                            and wait until it is Complete, printing the nodes done and the
                            objects removed; fail naming the failed nodes, or after --timeout.
                            --soft marks the objects stale instead: each is revalidated with
                            the origin (a 304 if it did not change) before it is served again.
                            Hosts as the cache key holds them: lower case, no port; e.g.
                            --url https://www.example.com/a.css --prefix www.example.com/img/;
                            --tag purges what the origin labelled with the tag (Surrogate-Key,
                            Cache-Tag).
`

func main() {
	err := run(os.Args[1:], os.Stdin, os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return // the usage asked for went to stdout
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "edgepool:", err)
		os.Exit(1)
	}
}

// showUsage prints the usage, and the flags of fs when given, to stdout for a user who asked
// for it (-h, --help, help), and returns flag.ErrHelp, which main takes as success.
func showUsage(stdout io.Writer, fs *flag.FlagSet) error {
	_, _ = io.WriteString(stdout, usage)
	if fs != nil {
		fmt.Fprintf(stdout, "\nFlags of %s:\n", fs.Name())
		fs.SetOutput(stdout)
		fs.PrintDefaults()
	}
	return flag.ErrHelp
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help"):
		return showUsage(stdout, nil)
	case len(args) > 0 && args[0] == "purge":
		return purge(args[1:], stdout)
	case len(args) == 0 || args[0] != "render":
		return fmt.Errorf("unknown or missing command\n%s", usage)
	}
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error, with the usage, is returned
	file := fs.String("f", "", "CacheNode manifest to render (- for stdin)")
	prefixes := render.DefaultDiskPrefixes
	fs.Func("allowed-disk-prefixes", "Comma-separated prefixes disk paths must lie under, as the cluster admin set them (default /mnt,/data,/srv).", func(v string) (err error) {
		prefixes, err = render.ParseDiskPrefixes(v)
		return err
	})
	if err := fs.Parse(args[1:]); errors.Is(err, flag.ErrHelp) {
		return showUsage(stdout, fs)
	} else if err != nil {
		return fmt.Errorf("%w\n%s", err, usage)
	}
	if *file == "" {
		return fmt.Errorf("render needs -f FILE\n%s", usage)
	}
	var data []byte
	var err error
	if *file == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(*file)
	}
	if err != nil {
		return err
	}
	out, err := renderAll(data, prefixes)
	if err != nil {
		return fmt.Errorf("%s: %w", *file, err)
	}
	_, err = io.WriteString(stdout, out)
	return err
}

// renderAll renders every CacheNode of a manifest, each under a header naming it. A
// manifest holding anything else, or a CacheNode that does not render, is refused whole,
// with every refused document named: the review must show all that kubectl would apply.
func renderAll(data []byte, diskPrefixes []string) (string, error) {
	docs, err := documents(data)
	if err != nil {
		return "", errors.New(clip(err.Error()))
	}
	var out strings.Builder
	var errs []error
	seen := map[string]document{}
	n := 0
	for _, doc := range docs {
		cn, err := decode(doc.data)
		if err == nil && cn == nil {
			continue // empty, or comments only: kubectl skips it too, and it is not counted
		}
		n++
		doc.n = n
		what := ""
		if cn != nil {
			what = fmt.Sprintf("CacheNode %s", cn.Name)
			if cn.Namespace != "" {
				what = fmt.Sprintf("CacheNode %s/%s", cn.Namespace, cn.Name)
			}
		}
		if err != nil {
			errs = append(errs, &docError{doc: doc, what: what, err: fileLines(err, doc.line)})
			continue
		}
		if first, dup := seen[what]; dup {
			errs = append(errs, &docError{doc: doc, what: what, err: fmt.Errorf("the same CacheNode as %s", first)})
			continue
		}
		seen[what] = doc
		conf, err := render.NginxConf(&cn.Spec)
		if paths := render.DiskPathsAllowed(&cn.Spec, diskPrefixes); err == nil && len(paths) > 0 {
			err = paths.ToAggregate()
		}
		if err != nil {
			errs = append(errs, &docError{doc: doc, what: what, err: err})
			continue
		}
		if out.Len() > 0 {
			out.WriteString("\n")
		}
		fmt.Fprintf(&out, "# ---- %s, %s ----\n%s", what, doc, conf)
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	if len(seen) == 0 {
		return "", errors.New("no CacheNode in it")
	}
	return out.String(), nil
}

// document is one document of a manifest, located by its first line, and numbered from 1
// among those that are not empty.
type document struct {
	n, line int
	data    []byte
}

func (d document) String() string {
	return fmt.Sprintf("document %d (line %d)", d.n, d.line)
}

// documents splits a manifest as kubectl apply -f does: a stream of JSON objects, or YAML
// documents separated by lines starting with --- (followed by nothing but a comment).
// Like kubectl, it drops the empty documents between two separators.
func documents(data []byte) ([]document, error) {
	var docs []document
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		dec := json.NewDecoder(bytes.NewReader(data))
		for {
			start := dec.InputOffset()
			var raw json.RawMessage
			if err := dec.Decode(&raw); err == io.EOF {
				return docs, nil
			} else if err != nil {
				return nil, fmt.Errorf("document %d: %w", len(docs)+1, err)
			}
			skipped := len(data[start:]) - len(bytes.TrimLeft(data[start:], " \t\r\n"))
			line := 1 + bytes.Count(data[:int(start)+skipped], []byte("\n"))
			docs = append(docs, document{line: line, data: raw})
		}
	}
	var buf []byte
	start := 1
	flush := func(next int) {
		if len(buf) > 0 {
			docs = append(docs, document{line: start, data: buf})
		}
		buf, start = nil, next
	}
	for i, line := range bytes.SplitAfter(data, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("---")); ok {
			if rest = bytes.TrimSpace(rest); len(rest) > 0 && rest[0] != '#' {
				return nil, fmt.Errorf("line %d: invalid document separator: %s", i+1, rest)
			}
			flush(i + 2)
			continue
		}
		buf = append(buf, line...)
	}
	flush(0)
	return docs, nil
}

// decode reads one document: nil for an empty one, an error naming the kind of anything
// but a CacheNode, and a CacheNode read strictly (duplicate keys and unknown fields are
// errors) and defaulted, with a name the API server would take, and judged by the API
// server's validators with the CRD this binary was built with. A CacheNode that decoded
// is returned with the error that refuses it, so that the error can name it.
func decode(doc []byte) (*v1alpha1.CacheNode, error) {
	// Strict: a key given twice is an error, not the last one winning unseen.
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, err
	}
	if string(bytes.TrimSpace(j)) == "null" {
		return nil, nil
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(j, &head); err != nil {
		return nil, errors.New("not a Kubernetes object")
	}
	if want := v1alpha1.GroupVersion.String(); head.Kind != "CacheNode" || head.APIVersion != want {
		return nil, fmt.Errorf("kind %q (apiVersion %q) is not a CacheNode (apiVersion %s)", head.Kind, head.APIVersion, want)
	}
	cn, err := render.DecodeCacheNode(doc)
	if err != nil {
		return nil, err
	}
	// The name is printed in a header of the config: hold it to what the API server takes.
	var errs []string
	if len(cn.Name) > 52 {
		errs = append(errs, "must be at most 52 characters")
	}
	errs = append(errs, validation.IsDNS1123Subdomain(cn.Name)...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("metadata.name %q: %s", cn.Name, strings.Join(errs, "; "))
	}
	if cn.Namespace != "" {
		if errs := validation.IsDNS1123Label(cn.Namespace); len(errs) > 0 {
			return nil, fmt.Errorf("metadata.namespace %q: %s", cn.Namespace, strings.Join(errs, "; "))
		}
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(j, &obj); err != nil { // numbers as the API server reads them
		return nil, err
	}
	gate, err := crdgate.CacheNodes()
	if err != nil {
		return nil, err
	}
	if errs := gate.Validate(context.Background(), obj); len(errs) > 0 {
		return cn, errs.ToAggregate()
	}
	return cn, nil
}

var yamlLineRE = regexp.MustCompile(`\bline ([0-9]+)\b`)

// fileLines makes the line numbers of a YAML error, which count from the document's first
// line, count from the file's.
func fileLines(err error, first int) error {
	msg := err.Error()
	if !strings.Contains(msg, "yaml: ") {
		return err
	}
	return errors.New(yamlLineRE.ReplaceAllStringFunc(msg, func(m string) string {
		n, _ := strconv.Atoi(strings.TrimPrefix(m, "line "))
		return fmt.Sprintf("line %d", n+first-1)
	}))
}

// docError is a refused document, with one line per error, each clipped.
type docError struct {
	doc  document
	what string // CacheNode NAMESPACE/NAME, once known
	err  error
}

func (e *docError) Error() string {
	var b strings.Builder
	b.WriteString(e.doc.String())
	if e.what != "" {
		fmt.Fprintf(&b, ", %s", e.what)
	}
	var agg utilerrors.Aggregate
	if errors.As(e.err, &agg) && len(agg.Errors()) > 1 {
		b.WriteString(":")
		for _, err := range agg.Errors() {
			b.WriteString("\n  " + clip(err.Error()))
		}
		return b.String()
	}
	return b.String() + ": " + clip(e.err.Error())
}

// maxLine bounds a line of an error: a manifest may hold a megabyte-long value, key or
// kind, and an error never echoes it whole.
const maxLine = 200

var (
	quotedRE    = regexp.MustCompile(`"(?:[^"\\]|\\.){48,}"`)
	colonLineRE = regexp.MustCompile(`:\s*\n\s*`)
	newlineRE   = regexp.MustCompile(`\s*\n\s*`)
)

// clip makes a message one line of at most maxLine characters: quoted values longer than
// 48 characters keep their first 32 and their length, and the line is cut at maxLine.
func clip(msg string) string {
	msg = colonLineRE.ReplaceAllString(msg, ": ")
	msg = newlineRE.ReplaceAllString(msg, "; ")
	msg = quotedRE.ReplaceAllStringFunc(msg, func(q string) string {
		return fmt.Sprintf(`%s…" (%d bytes)`, truncate(q, 33), len(q)-2)
	})
	if utf8.RuneCountInString(msg) > maxLine {
		msg = truncate(msg, maxLine-1) + "…"
	}
	return msg
}

// truncate returns s's first n runes.
func truncate(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}
