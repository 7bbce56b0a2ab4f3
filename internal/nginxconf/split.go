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

// Package nginxconf holds the pieces of nginx's configuration that the renderer writes and
// the node agent writes or reads too: the spread of keys over a node's disks and the
// agent's failover files, and the per-request log lines the agent parses.
package nginxconf

import (
	"fmt"
	"slices"
	"strings"

	"github.com/edgepool/edgepool/internal/agentapi"
)

// How a request finds its disk. The operator's nginx.conf spreads keys across the disks by
// weight (SplitVariable), then maps that disk to the one that serves (DiskVariable). The
// map is the identity unless the node agent took a failing disk out of the node's split:
// then the agent writes FailoverDir next to the nginx.conf it installs, and the keys of the
// disks it took out are spread over the disks still in (FailoverVariable), each by weight,
// with a hash of its own so that they land evenly. A disk still in keeps every one of its
// keys: a failing disk costs only its own.
const (
	SplitVariable    = "$edgepool_split_disk"
	DiskVariable     = "$edgepool_disk"
	FailoverVariable = "$edgepool_failover_disk"
	// FailoverDir holds the agent's failover files, beside the installed nginx.conf. Both
	// includes are globs, which nginx accepts when they match nothing: the operator's
	// nginx.conf needs no file of the agent's to pass nginx -t.
	FailoverDir = "failover"
	// failoverSalt changes the hash of a key for the failover split, so that the keys of a
	// disk taken out (a band of the split's hash range) spread over the others by weight.
	failoverSalt = "edgepool-failover/"
	// NoDisk is what the agent maps every disk to when every disk is out of the split
	// (no disk name can be it): then nothing is cached, and the origin answers.
	NoDisk = "-"
	// CacheZoneVariable is the keys zone of DiskVariable's disk (CacheZonePrefix and its
	// name), or off with NoDisk.
	CacheZoneVariable = "$edgepool_cache_zone"
	CacheZonePrefix   = "cache_"
)

// SplitPercentages turns weights into split_clients percentages with two decimals. Each
// share is rounded down so that the listed ones never exceed 100%; the last disk takes the
// rest ("*"), so every key maps to a disk.
func SplitPercentages(weights []int32) []string {
	var total int64
	for _, w := range weights {
		total += int64(w)
	}
	out := make([]string, len(weights))
	for i, w := range weights {
		hundredths := int64(w) * 10000 / total
		out[i] = fmt.Sprintf("%d.%02d%%", hundredths/100, hundredths%100)
	}
	return out
}

// splitClients renders a split_clients block over disks, each line indented by indent.
func splitClients(key, variable string, disks []agentapi.SplitDisk, indent string) string {
	weights := make([]int32, len(disks))
	for i, d := range disks {
		weights[i] = d.Weight
	}
	shares := SplitPercentages(weights)
	var b strings.Builder
	fmt.Fprintf(&b, "%ssplit_clients \"%s\" %s {\n", indent, key, variable)
	for i, d := range disks {
		share := shares[i]
		if i == len(disks)-1 {
			share = "*"
		}
		fmt.Fprintf(&b, "%s    %s %s;\n", indent, share, d.Name)
	}
	fmt.Fprintf(&b, "%s}\n", indent)
	return b.String()
}

// SplitConf is the disk selection of nginx.conf's http block, each line indented by
// indent: the split by weight, and the map through which the node agent's failover
// files (if any) redirect the keys of the disks it took out.
func SplitConf(s agentapi.Split, indent string) (string, error) {
	if err := s.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(indent + "# Spread keys across disks by weight.\n")
	b.WriteString(splitClients(s.Key, SplitVariable, s.Disks, indent))
	b.WriteString(indent + "# The node agent takes a failing disk out of this node's split by writing\n")
	b.WriteString(indent + "# " + FailoverDir + "/ beside the nginx.conf it installs: the keys of that disk are spread\n")
	b.WriteString(indent + "# over the others, every other key stays where it is. Without the files, each\n")
	b.WriteString(indent + "# disk serves its own keys.\n")
	fmt.Fprintf(&b, "%sinclude %s/*.conf;\n", indent, FailoverDir)
	fmt.Fprintf(&b, "%smap %s %s {\n", indent, SplitVariable, DiskVariable)
	fmt.Fprintf(&b, "%s    default %s;\n", indent, SplitVariable)
	fmt.Fprintf(&b, "%s    include %s/*.map;\n", indent, FailoverDir)
	fmt.Fprintf(&b, "%s}\n", indent)
	b.WriteString(indent + "# With every disk out, the agent maps each to \"" + NoDisk + "\": nothing is cached, the origin answers.\n")
	fmt.Fprintf(&b, "%smap %s %s {\n", indent, DiskVariable, CacheZoneVariable)
	fmt.Fprintf(&b, "%s    default %s%s;\n", indent, CacheZonePrefix, DiskVariable)
	fmt.Fprintf(&b, "%s    \"%s\" off;\n", indent, NoDisk)
	fmt.Fprintf(&b, "%s}\n", indent)
	return b.String(), nil
}

// Failover files, in FailoverDir.
const (
	FailoverSplitFile = "split.conf"
	FailoverMapFile   = "out.map"
)

// FailoverFiles renders the node agent's failover for the disks of s named in out: the
// files of FailoverDir, by name. None are needed when no disk is out. With every disk out
// there is nothing to fail over to: the map sends every key to NoDisk, so that nginx
// caches nothing and the origin answers (the agent reports the node unready too).
func FailoverFiles(s agentapi.Split, out []string) (map[string]string, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var in []agentapi.SplitDisk
	var taken []string
	for _, d := range s.Disks {
		if slices.Contains(out, d.Name) {
			taken = append(taken, d.Name)
		} else {
			in = append(in, d)
		}
	}
	for _, name := range out {
		if !slices.ContainsFunc(s.Disks, func(d agentapi.SplitDisk) bool { return d.Name == name }) {
			return nil, fmt.Errorf("disk %q is not in the split", name)
		}
	}
	if len(taken) == 0 {
		return map[string]string{}, nil
	}
	if len(in) == 0 {
		var m strings.Builder
		m.WriteString("# Rendered by the edgepool node agent: every disk is out of this node's split.\n")
		for _, name := range taken {
			fmt.Fprintf(&m, "%s \"%s\";\n", name, NoDisk)
		}
		return map[string]string{FailoverMapFile: m.String()}, nil
	}
	var m strings.Builder
	m.WriteString("# Rendered by the edgepool node agent: disks taken out of this node's split.\n")
	for _, name := range taken {
		fmt.Fprintf(&m, "%s %s;\n", name, FailoverVariable)
	}
	return map[string]string{
		FailoverSplitFile: "# Rendered by the edgepool node agent: where the keys of the disks out of the split go.\n" +
			splitClients(failoverSalt+s.Key, FailoverVariable, in, ""),
		FailoverMapFile: m.String(),
	}, nil
}
