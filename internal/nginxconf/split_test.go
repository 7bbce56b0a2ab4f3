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

package nginxconf

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/edgepool/edgepool/internal/agentapi"
)

func TestSplitPercentages(t *testing.T) {
	for _, tc := range []struct {
		weights []int32
		want    string
	}{
		{[]int32{1}, "100.00%"},
		{[]int32{1, 1, 1}, "33.33% 33.33% 33.33%"},
		{[]int32{3, 1}, "75.00% 25.00%"},
		{[]int32{1, 100, 100}, "0.49% 49.75% 49.75%"},
	} {
		if got := strings.Join(SplitPercentages(tc.weights), " "); got != tc.want {
			t.Errorf("weights %v: got %s, want %s", tc.weights, got, tc.want)
		}
	}
}

var splitLineRE = regexp.MustCompile(`^\s*([0-9]+)\.([0-9]{2})% ([a-z0-9-]+);$`)

// parseSplit reads a rendered split_clients block: the listed shares in hundredths of a
// percent, and the disks in order (the last one takes "*").
func parseSplit(t *testing.T, block string) (shares []int, disks []string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(block), "\n")
	for i, line := range lines[1 : len(lines)-1] {
		if m := splitLineRE.FindStringSubmatch(line); m != nil {
			whole, _ := strconv.Atoi(m[1])
			frac, _ := strconv.Atoi(m[2])
			shares = append(shares, whole*100+frac)
			disks = append(disks, m[3])
			continue
		}
		name, ok := strings.CutPrefix(strings.TrimSpace(line), "* ")
		if !ok || i != len(lines)-3 {
			t.Fatalf("line %q: want a share, or * on the last line", line)
		}
		disks = append(disks, strings.TrimSuffix(name, ";"))
	}
	return shares, disks
}

// TestSplitProperty: for any weights and any disks taken out, the listed shares never pass
// 100.00% and the rest, which the last disk takes, is at least its own share, so every key
// maps to a disk; the operator's split names every disk in order, and the failover split
// exactly the disks still in, while the map sends exactly the disks out to it.
func TestSplitProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		s := agentapi.Split{Key: agentapi.SplitKeys[rng.IntN(len(agentapi.SplitKeys))]}
		for i := range 1 + rng.IntN(16) {
			s.Disks = append(s.Disks, agentapi.SplitDisk{Name: fmt.Sprintf("d%d", i), Weight: 1 + rng.Int32N(100)})
		}
		var out []string
		for _, d := range s.Disks {
			if rng.IntN(3) == 0 {
				out = append(out, d.Name)
			}
		}
		conf, err := SplitConf(s, "    ")
		if err != nil {
			t.Fatal(err)
		}
		block := conf[strings.Index(conf, "split_clients") : strings.Index(conf, "}")+1]
		checkSplit(t, block, s.Disks)

		files, err := FailoverFiles(s, out)
		if err != nil {
			t.Fatal(err)
		}
		var in []agentapi.SplitDisk
		for _, d := range s.Disks {
			if !slices.Contains(out, d.Name) {
				in = append(in, d)
			}
		}
		if len(out) == 0 {
			if len(files) != 0 {
				t.Fatalf("no disk out: want no failover files, got %v", files)
			}
			continue
		}
		if len(in) == 0 {
			want := "# Rendered by the edgepool node agent: every disk is out of this node's split.\n"
			for _, name := range out {
				want += name + ` "` + NoDisk + "\";\n"
			}
			if len(files) != 1 || files[FailoverMapFile] != want {
				t.Fatalf("every disk out: want only %s sending each disk to %q, got %v", FailoverMapFile, NoDisk, files)
			}
			continue
		}
		split := files[FailoverSplitFile]
		if !strings.Contains(split, fmt.Sprintf(`split_clients "%s%s" %s {`, failoverSalt, s.Key, FailoverVariable)) {
			t.Fatalf("failover split hashes something else:\n%s", split)
		}
		checkSplit(t, split[strings.Index(split, "split_clients"):], in)
		var mapped []string
		for _, line := range strings.Split(strings.TrimSpace(files[FailoverMapFile]), "\n")[1:] {
			name, ok := strings.CutSuffix(line, " "+FailoverVariable+";")
			if !ok {
				t.Fatalf("map line %q", line)
			}
			mapped = append(mapped, name)
		}
		if !slices.Equal(mapped, out) {
			t.Fatalf("map sends %v to the failover split, want the disks out %v", mapped, out)
		}
	}
}

func checkSplit(t *testing.T, block string, disks []agentapi.SplitDisk) {
	t.Helper()
	shares, names := parseSplit(t, block)
	var want []string
	var total, sum int64
	for _, d := range disks {
		want = append(want, d.Name)
		total += int64(d.Weight)
	}
	if !slices.Equal(names, want) {
		t.Fatalf("split names %v, want %v:\n%s", names, want, block)
	}
	for i, share := range shares {
		if share < 0 || int64(share) != int64(disks[i].Weight)*10000/total {
			t.Fatalf("disk %s: share %d hundredths, want its weight's rounded down", names[i], share)
		}
		sum += int64(share)
	}
	last := int64(disks[len(disks)-1].Weight) * 10000 / total
	if rest := 10000 - sum; rest < last || rest > last+int64(len(disks)) {
		t.Fatalf("the last disk takes %d hundredths, want its share %d (plus rounding)", rest, last)
	}
}

// TestSplitValidate: a split outside the allowlists is refused, and never rendered.
func TestSplitValidate(t *testing.T) {
	good := agentapi.Split{Key: agentapi.SplitKeys[0], Disks: []agentapi.SplitDisk{{Name: "a", Weight: 1}, {Name: "b-2", Weight: 100}}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]agentapi.Split{
		"free-text key":   {Key: "$cookie_x", Disks: good.Disks},
		"injection key":   {Key: `$host"; include /etc/passwd; "`, Disks: good.Disks},
		"no disks":        {Key: agentapi.SplitKeys[0]},
		"disk name ;":     {Key: agentapi.SplitKeys[0], Disks: []agentapi.SplitDisk{{Name: "a;b", Weight: 1}}},
		"disk name brace": {Key: agentapi.SplitKeys[0], Disks: []agentapi.SplitDisk{{Name: "a}", Weight: 1}}},
		"duplicate disk":  {Key: agentapi.SplitKeys[0], Disks: []agentapi.SplitDisk{{Name: "a", Weight: 1}, {Name: "a", Weight: 1}}},
		"weight 0":        {Key: agentapi.SplitKeys[0], Disks: []agentapi.SplitDisk{{Name: "a", Weight: 0}}},
		"weight 101":      {Key: agentapi.SplitKeys[0], Disks: []agentapi.SplitDisk{{Name: "a", Weight: 101}}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if _, err := SplitConf(bad, ""); err == nil {
			t.Errorf("%s: SplitConf rendered it", name)
		}
		if _, err := FailoverFiles(bad, nil); err == nil {
			t.Errorf("%s: FailoverFiles rendered it", name)
		}
	}
	if _, err := FailoverFiles(good, []string{"c"}); err == nil {
		t.Error("FailoverFiles took out a disk the split does not have")
	}
}
