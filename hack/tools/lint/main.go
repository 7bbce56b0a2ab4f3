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

// Command golangci-lint is golangci-lint with two module plugins compiled in:
// kube-api-linter (as "kubeapilinter") and Kubernetes' logcheck (as "logcheck").
//
// `golangci-lint custom` would build the same thing, but it clones golangci-lint's
// sources from GitHub, which this project's machines cannot reach. A module plugin
// is only a package whose init() registers itself with plugin-module-register, so
// importing the registration packages next to golangci-lint's command entry point
// is all the generated binary does; the Go module proxy serves every piece.
package main

import (
	"fmt"
	"os"
	"runtime/debug"
	"strings"

	"github.com/golangci/golangci-lint/v2/pkg/commands"
	"github.com/golangci/golangci-lint/v2/pkg/exitcodes"

	// Module plugins: each registers itself by name in an init(), as the plugins.go
	// that `golangci-lint custom` generates would import them.
	_ "sigs.k8s.io/kube-api-linter"             // "kubeapilinter", with all its rules
	_ "sigs.k8s.io/logtools/logcheck/gclplugin" // "logcheck"
)

func main() {
	if err := commands.Execute(buildInfo()); err != nil {
		fmt.Fprintf(os.Stderr, "The command is terminated due to an error: %v\n", err)
		os.Exit(exitcodes.Failure)
	}
}

// buildInfo reports the golangci-lint version this binary was built from (read from
// the module graph), so `golangci-lint version` and its cache keys stay meaningful.
func buildInfo() commands.BuildInfo {
	info := commands.BuildInfo{Version: "unknown", Commit: "hack/tools/lint", Date: "unknown", GoVersion: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	info.GoVersion = bi.GoVersion
	for _, dep := range bi.Deps {
		if dep.Path == "github.com/golangci/golangci-lint/v2" {
			info.Version = strings.TrimPrefix(dep.Version, "v") + "-custom"
		}
	}
	return info
}
