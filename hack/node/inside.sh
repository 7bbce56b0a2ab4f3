#!/usr/bin/env bash
# PID 1 of the real node's namespaces (started by node.sh up): makes the node's own view of
# the machine, then runs containerd and the kubelet until it is killed.
set -euo pipefail

HIERARCHIES="cpu cpuacct cpuset memory devices freezer blkio pids"
mkdir -p "$NODE_DIR/logs"

# --- mounts: everything below is private to this mount namespace -------------------------
mount --make-rprivate /
# This mount namespace starts as a copy of the machine's. A copy of someone else's mount (a
# test's FUSE filesystem or loop disk under /tmp) would keep their filesystem busy after they
# unmount it, so those copies are dropped here, deepest first, except the mounts that hold
# the node's own files.
keep() {
	local m=$1 p
	for p in "$NODE_DIR" "$IMAGES" "$KUBELET"; do
		case $p/ in "$m"/*) return 0 ;; esac
	done
	return 1
}
while read -r m; do
	keep "$m" || umount -l "$m" 2>/dev/null || true
done < <(awk '{ split($0, halves, " - "); split(halves[2], f, " "); mp = $5
	gsub(/\\040/, " ", mp)
	if (f[1] ~ /^fuse/ || mp ~ "^/(tmp|mnt|media|run|var/lib|var/log)(/|$)") print mp }' /proc/self/mountinfo | sort -r)
mount -t sysfs sysfs /sys # this network namespace's view of /sys/class/net
mount -t tmpfs -o mode=755 cgroup-root /sys/fs/cgroup
for h in $HIERARCHIES; do
	mkdir -p "/sys/fs/cgroup/$h"
	mount -t cgroup -o "$h" cgroup "/sys/fs/cgroup/$h"
done
mkdir -p /sys/fs/cgroup/systemd /sys/fs/cgroup/unified
mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
mount -t cgroup2 cgroup2 /sys/fs/cgroup/unified

# The kubelet writes /var/lib/kubelet/device-plugins whatever --root-dir says, containerd and
# the CNI plugins write /run and /var/lib, and pods' logs go to /var/log: all private here.
# (Not over a directory that holds the node's own folder, e.g. a checkout under /tmp.)
for d in /run /var/lib /var/log /mnt /tmp; do
	keep "$d" || mount -t tmpfs -o mode=755 "node${d//\//-}" "$d"
done
keep /tmp || chmod 1777 /tmp
# The rest of the machine's filesystem is read-only in the node, so a write outside the
# node's own folder and the tmpfs above fails instead of landing on the machine (this view
# is the node's: the machine's own mounts are unchanged).
mount --bind "$NODE_DIR" "$NODE_DIR"
mount -o remount,bind,ro /
# With NODEFS_DEV, the kubelet's root directory (pods' emptyDirs) and /var/log (their logs)
# share one small filesystem: the node's nodefs, which the kubelet watches for pressure.
KUBELET_ROOT=$NODE_DIR/kubelet/root
NODEFS_AVAILABLE=1%
if [ -n "${NODEFS_DEV:-}" ]; then
	mkdir -p "$NODE_DIR/nodefs"
	mount "$NODEFS_DEV" "$NODE_DIR/nodefs"
	mkdir -p "$NODE_DIR/nodefs/kubelet" "$NODE_DIR/nodefs/log"
	mount --bind "$NODE_DIR/nodefs/log" /var/log
	KUBELET_ROOT=$NODE_DIR/nodefs/kubelet
	NODEFS_AVAILABLE=25%
fi
mkdir -p /run/containerd /var/lib/kubelet /var/log/pods

# The kubelet checks these kernel defaults (protectKernelDefaults) and would write them
# otherwise; it is shown the values it expects, read-only. /proc/sys is read-only in the node
# but for net, which belongs to the node's own network namespace (the CNI bridge turns on
# forwarding there). The machine's own values stay as they are.
mount --bind /proc/sys /proc/sys
mount --bind /proc/sys/net /proc/sys/net
mkdir -p "$NODE_DIR/sysctl"
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
	kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
	f=$NODE_DIR/sysctl/${kv%%=*}
	mkdir -p "$(dirname "$f")"
	echo "${kv#*=}" >"$f"
	mount --bind -o ro "$f" "/proc/sys/${kv%%=*}"
done
mount -o remount,bind,ro /proc/sys

# The disks, at /mnt/edgepool/NAME; a fresh filesystem's root is root's, as on a real node.
for nd in $NODE_DISKS_DEV; do
	mkdir -p "/mnt/edgepool/${nd%%:*}"
	mount "${nd#*:}" "/mnt/edgepool/${nd%%:*}"
done
# Mounts made in the node from now on (a disk attached later) propagate into the pods that ask.
mount --make-rshared /

# --- network ------------------------------------------------------------------------------
hostname "$NODE_NAME"
ip link set lo up
for _ in $(seq 1 600); do [ -e "$NODE_DIR/link-ready" ] && break; sleep 0.1; done
ip link set "$LINK_IF-n" name eth0
ip addr add "$LINK_NODE/30" dev eth0
ip link set eth0 up
ip route add default via "$LINK_HOST"
# The kubelet's port answers the API server, over the link, and the node itself; not the
# pods (its own, on the bridge, or other nodes', over the pair links): it takes anonymous
# requests (below), which would let any pod list and exec into the node's pods.
iptables -A INPUT -p tcp --dport 10250 -i eth0 -j ACCEPT
iptables -A INPUT -p tcp --dport 10250 -i lo -j ACCEPT
iptables -A INPUT -p tcp --dport 10250 -j REJECT --reject-with tcp-reset

# The pods' networks: POD_CIDR and, when the kernel has IPv6, an IPv6 /64 derived from it
# (10.214.N.0/24: fd00:10:214:N::/64): pods are dual-stack, IPv4 first (status.podIP), as
# in a dual-stack cluster. Nodes joined by node.sh join reach each other's pods over IPv4.
ranges="[{\"subnet\": \"$POD_CIDR\"}]" routes='{"dst": "0.0.0.0/0"}'
if [ "$(cat /proc/sys/net/ipv6/conf/all/disable_ipv6 2>/dev/null)" = 0 ]; then
	IFS=./ read -r o1 o2 o3 _ <<<"$POD_CIDR"
	ranges="$ranges, [{\"subnet\": \"fd00:$o1:$o2:$o3::/64\"}]" routes="$routes, {\"dst\": \"::/0\"}"
fi

cat >"$NODE_DIR/cni/net.d/10-edgepool.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "edgepool-node",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [$ranges], "routes": [$routes], "dataDir": "/run/cni-ipam"}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

# --- containerd ---------------------------------------------------------------------------
cat >"$NODE_DIR/containerd/config.toml" <<EOF
version = 2
root = "$NODE_DIR/containerd/root"
state = "/run/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$NODE_DIR/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This VM takes CAP_SYS_RESOURCE from every process: runc must not lower oom_score_adj.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$NODE_DIR/cni/net.d"
EOF
containerd --config "$NODE_DIR/containerd/config.toml" >"$NODE_DIR/logs/containerd.log" 2>&1 &
for _ in $(seq 1 100); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.1; done
for img in "$IMAGES"/*.tar; do
	ctr --address /run/containerd/containerd.sock -n k8s.io images import --no-unpack "$img" >>"$NODE_DIR/logs/images.log" 2>&1
done

# --- kubelet ------------------------------------------------------------------------------
cat >"$NODE_DIR/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine is cgroup v1.
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
address: $LINK_NODE
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
# The API server of the local control plane has no kubelet client certificate; the kubelet's
# port is reachable only over the node's private link (pods are refused, see the network).
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
protectKernelDefaults: true
failSwapOn: false
# The images exist only here (no registry): never garbage-collect them, and evict only when
# the machine really runs out.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "$NODEFS_AVAILABLE", imagefs.available: "1%", nodefs.inodesFree: "1%"}
evictionPressureTransitionPeriod: 10s
# emptyDirs measured every second (default 1m): the eviction manager ranks pods by what they
# use, and a pod that filled its emptyDir since the last measure would rank as using nothing.
volumeStatsAggPeriod: 1s
serializeImagePulls: false
resolvConf: /etc/resolv.conf
# Not the default under /usr/libexec, which is the machine's.
volumePluginDir: $NODE_DIR/kubelet/volume-plugins
clusterDomain: cluster.local
EOF
"$KUBELET" --config "$NODE_DIR/kubelet/config.yaml" --kubeconfig "$NODE_DIR/kubelet.kubeconfig" \
	--root-dir "$KUBELET_ROOT" --cert-dir "$NODE_DIR/kubelet/pki" \
	--hostname-override "$NODE_NAME" --node-ip "$LINK_NODE" --node-labels "$NODE_LABELS" \
	--register-with-taints "$NODE_TAINTS" \
	>"$NODE_DIR/logs/kubelet.log" 2>&1 &

# --- kube-proxy ---------------------------------------------------------------------------
# Services on the node, in iptables mode: its chains live in this network namespace, like the
# kubelet's. It writes no sysctl outside net (conntrack sizes and timeouts are left as they
# are: nf_conntrack_max is the machine's, not the node's), no route_localnet (node ports on
# the node's link address only, not on localhost), and does not ask for a lower OOM score
# (this VM refuses it).
cat >"$NODE_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: $NODE_DIR/kubelet.kubeconfig
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
nodePortAddresses: ["$LINK_NODE/32"]
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
EOF
"$KUBE_PROXY" --config "$NODE_DIR/kube-proxy.yaml" >"$NODE_DIR/logs/kube-proxy.log" 2>&1 &

touch "$NODE_DIR/ready"
wait -n || true
echo "inside: containerd, the kubelet or kube-proxy exited" >&2
exit 1
