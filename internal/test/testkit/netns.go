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

package testkit

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// netnsEnv names, in a test run again in a network namespace of its own, that test.
const netnsEnv = "EDGEPOOL_TEST_NETNS"

// InOwnNetns runs the calling test again, alone, in a network namespace of its own
// (unshare --net: only loopback, up), where it may add addresses without touching the
// machine's. It returns true there, where the test goes on, and false in the test that
// called it, which has then reported the run's output and fails if that run failed or
// did not run the test.
func InOwnNetns(t testing.TB) bool {
	t.Helper()
	if os.Getenv(netnsEnv) == t.Name() {
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			t.Fatalf("ip link set lo up: %v: %s", err, out)
		}
		return true
	}
	cmd := exec.Command("unshare", "--net", "--", os.Args[0],
		"-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), netnsEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Logf("in a network namespace of its own:\n%s", out)
	if err != nil {
		t.Fatalf("unshare --net %s: %v", t.Name(), err)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+t.Name()+" ")) {
		t.Fatalf("%s did not pass in its network namespace", t.Name())
	}
	return false
}

// InNetnsRun says whether this test binary is the run of one test that InOwnNetns made.
func InNetnsRun() bool { return os.Getenv(netnsEnv) != "" }

// AddLoopbackAddr adds a to the loopback interface of a network namespace InOwnNetns
// made; the namespace goes with it.
func AddLoopbackAddr(t testing.TB, a netip.Addr) {
	t.Helper()
	if os.Getenv(netnsEnv) != t.Name() {
		t.Fatal("AddLoopbackAddr outside the test's own network namespace")
	}
	args := []string{"addr", "add", fmt.Sprintf("%s/%d", a, a.BitLen()), "dev", "lo"}
	if a.Is6() {
		args = append([]string{"-6"}, append(args, "nodad")...)
	}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}
