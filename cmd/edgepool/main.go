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

// Command edgepool is the offline CLI: `edgepool render -f cachenode.yaml` prints the
// nginx.conf the operator would render, for review in GitOps pipelines.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/edgepool/edgepool/internal/render"
)

const usage = `Usage:
  edgepool render -f FILE   print the nginx.conf rendered from a CacheNode manifest (- reads stdin)
`

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "edgepool:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "render" {
		return fmt.Errorf("unknown or missing command\n%s", usage)
	}
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	file := fs.String("f", "", "CacheNode manifest to render (- for stdin)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
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
	cn, err := render.DecodeCacheNode(data)
	if err != nil {
		return err
	}
	conf, err := render.NginxConf(&cn.Spec)
	if err != nil {
		return fmt.Errorf("render %s: %w", *file, err)
	}
	_, err = io.WriteString(stdout, conf)
	return err
}
