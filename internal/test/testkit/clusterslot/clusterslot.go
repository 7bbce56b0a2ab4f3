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

// Package clusterslot lists the local clusters this repository starts (the demo, the e2e
// suite, the benchmarks' kwok clusters) and what each one holds on the machine: kwokctl's
// cluster name and its components' ports, the loopback ranges of its fake pods and nodes,
// and its real node's name, link and pod network. No two slots share any of it, so each
// cluster can run beside any other (a demo kept running while `make test` runs, and
// `go test ./...` running several packages at once).
//
// The ports are the reason this exists: left to itself, kwokctl picks the first free port
// counting down from 32767, and two kwokctl creating clusters at once pick the same ones
// (kwok v0.8.0, pkg/utils/net/unused_port.go); one cluster then talks to the other's API
// server or has no kwok controller at all.
package clusterslot

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Slot is what one local cluster holds on this machine.
type Slot struct {
	// Name is kwokctl's cluster name.
	Name string
	// PortBase is the first of the PortCount ports kwokctl's components listen on (see
	// Ports): below the ephemeral range, and apart from where kwokctl picks ports itself.
	PortBase int
	// PodCIDR and NodeIP are where kwok gives its fake pods and nodes addresses, on the
	// loopback network, so that an operator dialling a fake pod reaches only this machine,
	// and only its own cluster's agents.
	PodCIDR, NodeIP string
	// RealNodes are the real nodes (hack/node/node.sh) the cluster may run: the first one
	// always, the others when a test asks for several (a fleet across nodes).
	RealNodes []RealNode
}

// RealNode is a real node's share of the machine (see hack/node/node.sh).
type RealNode struct {
	// Name is the Node's name.
	Name string
	// LinkIf names the veth pair (LinkIf-h here, LinkIf-n in the node); LinkHost and
	// LinkNode are its two ends' addresses, in a /24 of their own.
	LinkIf, LinkHost, LinkNode string
	// PodCIDR is the pods' network inside the node, routed through the link.
	PodCIDR string
}

// Env is the environment hack/node/node.sh takes for the node.
func (n RealNode) Env() []string {
	return []string{"NODE_NAME=" + n.Name, "LINK_IF=" + n.LinkIf, "LINK_HOST=" + n.LinkHost, "LINK_NODE=" + n.LinkNode, "POD_CIDR=" + n.PodCIDR}
}

// PairLink is the link `node.sh join` makes between two real nodes' network namespaces, so
// that their pods reach each other without this machine forwarding (it does not): the
// interface's name in each node (to-<the other's LinkIf>, within the 15 bytes an interface
// name may take) and the two ends' addresses, a /30 of 10.215.0.0/16 picked by the nodes'
// links (each link is a /24 of 10.213.0.0/16 of its own, so no two pairs share one).
func PairLink(a, b RealNode) (ifA, ifB, addrA, addrB string) {
	third := func(addr string) int { return int(netip.MustParseAddr(addr).As4()[2]) }
	x, y := third(a.LinkHost), third(b.LinkHost)
	lo, hi := min(x, y), max(x, y)
	base := netip.AddrFrom4([4]byte{10, 215, byte(lo), byte(4 * (hi % 64))})
	first, second := base.Next(), base.Next().Next()
	if x > y {
		first, second = second, first
	}
	return "to-" + b.LinkIf, "to-" + a.LinkIf, first.String(), second.String()
}

// PortCount is how many ports a slot holds from its PortBase.
const PortCount = 6

// Ports are the ports of kwokctl's components in a slot.
type Ports struct {
	EtcdPeer, Etcd, KubeAPIServer, KwokController, KubeControllerManager, KubeScheduler int
}

// Ports returns the slot's ports.
func (s Slot) Ports() Ports {
	b := s.PortBase
	return Ports{EtcdPeer: b, Etcd: b + 1, KubeAPIServer: b + 2, KwokController: b + 3, KubeControllerManager: b + 4, KubeScheduler: b + 5}
}

// The clusters. Their fake pods' ranges are loopback /24s (C3's fleet a /19) of
// 127.1.0.0/16; the real nodes' links are /24s of 10.213.0.0/16, their pods /24s of
// 10.214.0.0/16, the links between two real nodes /30s of 10.215.0.0/16 (PairLink).
var (
	// E2E is the e2e suite's cluster (test/e2e) and its real nodes: the first runs for the
	// whole suite, the others for the tests of a fleet across nodes.
	E2E = Slot{Name: "edgepool-e2e", PortBase: 27100, PodCIDR: "127.1.0.1/24", NodeIP: "127.1.1.1",
		RealNodes: []RealNode{
			{Name: "edge-real-1", LinkIf: "epnode", LinkHost: "10.213.0.1", LinkNode: "10.213.0.2", PodCIDR: "10.214.0.0/24"},
			{Name: "edge-real-2", LinkIf: "epnode2", LinkHost: "10.213.2.1", LinkNode: "10.213.2.2", PodCIDR: "10.214.2.0/24"},
			{Name: "edge-real-3", LinkIf: "epnode3", LinkHost: "10.213.3.1", LinkNode: "10.213.3.2", PodCIDR: "10.214.3.0/24"},
		}}
	// Demo is make demo's cluster and its real node.
	Demo = Slot{Name: "edgepool-demo", PortBase: 27110, PodCIDR: "127.1.2.1/24", NodeIP: "127.1.3.1",
		RealNodes: []RealNode{{Name: "edge-hdd-real", LinkIf: "epdemo", LinkHost: "10.213.1.1", LinkNode: "10.213.1.2", PodCIDR: "10.214.1.0/24"}}}
	// PurgeFanout is P1's cluster (test/bench/fanout): its agents run as processes on the
	// fake pods' addresses.
	PurgeFanout = Slot{Name: "edgepool-p1", PortBase: 27120, PodCIDR: "127.1.200.1/24", NodeIP: "127.1.201.1"}
	// Fleet is C3's cluster (test/bench/fleet), up to 8,000 fake pods.
	Fleet = Slot{Name: "edgepool-c3", PortBase: 27130, PodCIDR: "127.1.64.1/19", NodeIP: "127.1.202.1"}
	// FleetSmoke is C3's smoke in make test.
	FleetSmoke = Slot{Name: "edgepool-c3-smoke", PortBase: 27140, PodCIDR: "127.1.203.1/24", NodeIP: "127.1.204.1"}
)

// All returns every slot.
func All() []Slot { return []Slot{E2E, Demo, PurgeFanout, Fleet, FleetSmoke} }

// Named returns the slot of the cluster name.
func Named(name string) (Slot, error) {
	for _, s := range All() {
		if s.Name == name {
			return s, nil
		}
	}
	return Slot{}, fmt.Errorf("no cluster slot %q", name)
}

// KwokSettings tune kwok for a cluster's size.
type KwokSettings struct {
	// Parallelism of kwok's pod and node stages (default 4).
	Parallelism int
	// NodeLeaseSeconds is the fake nodes' lease duration (default 40).
	NodeLeaseSeconds int
}

// KwokConfig is kwokctl's configuration for the slot: kwok gives addresses from the slot's
// ranges and manages only the fake nodes (kwokctl forces --manage-all-nodes=true in its
// binary runtime; the flags below come after it, so kwok leaves a real node to its
// kubelet), the components listen on the slot's ports, and the API server reaches a real
// node's kubelet at its InternalIP (for logs and exec) and names the link's host end in its
// certificate (pods on a real node reach it there).
func (s Slot) KwokConfig(k KwokSettings) string {
	if k.Parallelism == 0 {
		k.Parallelism = 4
	}
	if k.NodeLeaseSeconds == 0 {
		k.NodeLeaseSeconds = 40
	}
	p := s.Ports()
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  cidr: %s
  nodeIP: %s
  podPlayStageParallelism: %d
  nodePlayStageParallelism: %[3]d
  nodeLeaseParallelism: %[3]d
  podsOnNodeSyncParallelism: 1
  nodeLeaseDurationSeconds: %d
---
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  etcdPeerPort: %d
  etcdPort: %d
  kubeApiserverPort: %d
  kwokControllerPort: %d
  kubeControllerManagerPort: %d
  kubeSchedulerPort: %d
`, s.PodCIDR, s.NodeIP, k.Parallelism, k.NodeLeaseSeconds,
		p.EtcdPeer, p.Etcd, p.KubeAPIServer, p.KwokController, p.KubeControllerManager, p.KubeScheduler)
	if len(s.RealNodes) > 0 {
		hosts := make([]string, len(s.RealNodes))
		for i, n := range s.RealNodes {
			hosts[i] = strconv.Quote(n.LinkHost)
		}
		fmt.Fprintf(&b, "  kubeApiserverCertSANs: [%s]\n", strings.Join(hosts, ", "))
	}
	b.WriteString(`componentsPatches:
  - name: kwok-controller
    extraArgs:
      - key: manage-all-nodes
        value: "false"
      - key: manage-nodes-with-annotation-selector
        value: kwok.x-k8s.io/node=fake
  - name: kube-apiserver
    extraArgs:
      - key: kubelet-preferred-address-types
        value: InternalIP
`)
	return b.String()
}

// NodeEnv is the environment hack/node/node.sh takes for the slot's first real node.
func (s Slot) NodeEnv() []string {
	if len(s.RealNodes) == 0 {
		return nil
	}
	return s.RealNodes[0].Env()
}

// CheckPortsFree fails, naming the port and its component, when one of the slot's ports is
// taken on this machine: by a run of the same cluster still going, or by something else.
func (s Slot) CheckPortsFree() error {
	p := s.Ports()
	for _, c := range []struct {
		name string
		port int
	}{{"etcd's peer port", p.EtcdPeer}, {"etcd", p.Etcd}, {"kube-apiserver", p.KubeAPIServer}, {"kwok-controller", p.KwokController},
		{"kube-controller-manager", p.KubeControllerManager}, {"kube-scheduler", p.KubeScheduler}} {
		for _, host := range []string{"127.0.0.1", ""} {
			l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(c.port)))
			if err != nil {
				return fmt.Errorf("cluster %s: port %d (%s) is taken: is another run of this cluster still going? (%w)", s.Name, c.port, c.name, err)
			}
			_ = l.Close()
		}
	}
	return nil
}
