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

package clusterslot

import (
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestSlotsShareNothing: no two clusters share a name, a port, an address range, a node
// name or a link, and every port lies below both the ephemeral range (32768-60999) and the
// ports kwokctl picks for clusters it is not told about (32767 downwards).
func TestSlotsShareNothing(t *testing.T) {
	names, ports, nodes, links := map[string]string{}, map[int]string{}, map[string]string{}, map[string]string{}
	var ranges []struct {
		owner  string
		prefix netip.Prefix
	}
	claim := func(set map[string]string, key, owner, what string) {
		if other, ok := set[key]; ok {
			t.Errorf("%s and %s share the %s %s", owner, other, what, key)
		}
		set[key] = owner
	}
	addRange := func(owner, cidr string) {
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			t.Errorf("%s: %v", owner, err)
			return
		}
		for _, r := range ranges {
			if r.prefix.Overlaps(p) {
				t.Errorf("%s's %s overlaps %s's %s", owner, p, r.owner, r.prefix)
			}
		}
		ranges = append(ranges, struct {
			owner  string
			prefix netip.Prefix
		}{owner, p.Masked()})
	}
	for _, s := range All() {
		claim(names, s.Name, s.Name, "cluster name")
		if s.PortBase < 20000 || s.PortBase+PortCount > 32000 {
			t.Errorf("%s: ports %d-%d, want them within 20000-32000", s.Name, s.PortBase, s.PortBase+PortCount-1)
		}
		for p := s.PortBase; p < s.PortBase+PortCount; p++ {
			if other, ok := ports[p]; ok {
				t.Errorf("%s and %s share port %d", s.Name, other, p)
			}
			ports[p] = s.Name
		}
		if a := netip.MustParseAddr(s.NodeIP); !a.IsLoopback() {
			t.Errorf("%s: node IP %s is not a loopback address", s.Name, a)
		}
		if p := netip.MustParsePrefix(s.PodCIDR); !p.Addr().IsLoopback() {
			t.Errorf("%s: pod CIDR %s is not on the loopback network", s.Name, p)
		}
		addRange(s.Name+" pods", s.PodCIDR)
		addRange(s.Name+" node", s.NodeIP+"/32")
		for _, n := range s.RealNodes {
			claim(nodes, n.Name, s.Name, "real node name")
			claim(links, n.LinkIf, s.Name, "link name")
			if len(n.LinkIf)+2 > 15 {
				t.Errorf("%s: link %s-h is longer than an interface name may be", s.Name, n.LinkIf)
			}
			addRange(s.Name+" link", netip.PrefixFrom(netip.MustParseAddr(n.LinkHost), 24).Masked().String())
			if !netip.PrefixFrom(netip.MustParseAddr(n.LinkHost), 24).Masked().Contains(netip.MustParseAddr(n.LinkNode)) {
				t.Errorf("%s: the link's ends %s and %s are not in one /24", s.Name, n.LinkHost, n.LinkNode)
			}
			addRange(s.Name+" real pods", n.PodCIDR)
		}
	}
	// The links between two real nodes (of any slots, though only a slot's own are joined).
	var all []RealNode
	for _, s := range All() {
		all = append(all, s.RealNodes...)
	}
	for i, a := range all {
		for _, b := range all[i+1:] {
			ifA, ifB, addrA, addrB := PairLink(a, b)
			pair := netip.MustParsePrefix(addrA + "/30").Masked()
			if !pair.Contains(netip.MustParseAddr(addrB)) || addrA == addrB || addrA == pair.Addr().String() {
				t.Errorf("%s-%s: ends %s and %s are not two hosts of one /30", a.Name, b.Name, addrA, addrB)
			}
			addRange(a.Name+"-"+b.Name+" pair link", pair.String())
			if ifA2, ifB2, addrA2, addrB2 := PairLink(b, a); ifA2 != ifB || ifB2 != ifA || addrA2 != addrB || addrB2 != addrA {
				t.Errorf("%s-%s: PairLink is not the same link seen from the other end", a.Name, b.Name)
			}
			for _, name := range []string{ifA, ifB} {
				if len(name) > 15 {
					t.Errorf("%s-%s: interface %s is longer than an interface name may be", a.Name, b.Name, name)
				}
			}
		}
	}
}

// TestKwokConfigNamesThePorts: the configuration kwokctl reads carries every port of the
// slot, and a real node's link in the API server's certificate.
func TestKwokConfigNamesThePorts(t *testing.T) {
	for _, s := range All() {
		docs := strings.Split(s.KwokConfig(KwokSettings{}), "\n---\n")
		if len(docs) != 2 {
			t.Fatalf("%s: %d documents", s.Name, len(docs))
		}
		var kwokctl struct {
			Kind    string         `json:"kind"`
			Options map[string]any `json:"options"`
		}
		if err := yaml.Unmarshal([]byte(docs[1]), &kwokctl); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		p := s.Ports()
		for key, want := range map[string]int{"etcdPeerPort": p.EtcdPeer, "etcdPort": p.Etcd, "kubeApiserverPort": p.KubeAPIServer,
			"kwokControllerPort": p.KwokController, "kubeControllerManagerPort": p.KubeControllerManager, "kubeSchedulerPort": p.KubeScheduler} {
			if got, _ := kwokctl.Options[key].(float64); int(got) != want {
				t.Errorf("%s: %s = %v, want %d", s.Name, key, kwokctl.Options[key], want)
			}
		}
		sans, _ := kwokctl.Options["kubeApiserverCertSANs"].([]any)
		var want []any
		for _, n := range s.RealNodes {
			want = append(want, n.LinkHost)
		}
		if !reflect.DeepEqual(sans, want) {
			t.Errorf("%s: certificate SANs %v, want the links' host ends %v", s.Name, sans, want)
		}
	}
}

// TestCheckPortsFree names the port that is taken and its component.
func TestCheckPortsFree(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	err = Slot{Name: "probe", PortBase: port}.CheckPortsFree()
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("port %d (etcd's peer port) is taken", port)) {
		t.Errorf("CheckPortsFree with port %d taken: %v", port, err)
	}
}
