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

package agentapi

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// SplitKeys are the key expressions a Split may hash: nginx.conf is rendered from
// validated fields only, and the agent checks the facts against the same list.
// The last is a sharded cache's at the key's owner, where the scheme is the one the
// client used with the pod that passed the request on (PeerSchemeVariable).
var SplitKeys = []string{"$host$request_uri", "$scheme://$host$request_uri", "$" + PeerSchemeVariable + "://$host$request_uri"}

// PeerSchemeVariable is the nginx variable that holds, at a key's owner, the scheme of
// the client's request to the pod that passed it on.
const PeerSchemeVariable = "edgepool_scheme"

// diskNameRE is the renderer's disk name allowlist (and the CRD's).
var diskNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// Split is how keys are spread across a node's disks.
type Split struct {
	// Key is the hashed expression, one of SplitKeys.
	Key string `json:"key"`
	// Disks are the disks in declaration order, with their weights (1 to 100).
	Disks []SplitDisk `json:"disks"`
}

// SplitDisk is one disk of a Split.
type SplitDisk struct {
	Name   string `json:"name"`
	Weight int32  `json:"weight"`
}

// Validate checks a Split against the allowlists: it reaches nginx's configuration.
func (s Split) Validate() error {
	var errs []error
	if !slices.Contains(SplitKeys, s.Key) {
		errs = append(errs, fmt.Errorf("split key %q is not one of %s", s.Key, strings.Join(SplitKeys, ", ")))
	}
	if len(s.Disks) == 0 {
		errs = append(errs, errors.New("split has no disks"))
	}
	seen := map[string]bool{}
	for _, d := range s.Disks {
		switch {
		case !diskNameRE.MatchString(d.Name):
			errs = append(errs, fmt.Errorf("split disk name %q is not a disk name", d.Name))
		case seen[d.Name]:
			errs = append(errs, fmt.Errorf("split disk %s appears twice", d.Name))
		case d.Weight < 1 || d.Weight > 100:
			errs = append(errs, fmt.Errorf("split disk %s: weight %d is not from 1 to 100", d.Name, d.Weight))
		}
		seen[d.Name] = true
	}
	return errors.Join(errs...)
}
