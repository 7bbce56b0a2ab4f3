#!/usr/bin/env bash
# A real Kubernetes node on this machine: containerd + runc + kubelet + kube-proxy + a CNI bridge, running
# the images `make images` built, with loop-device disks, registered with a local control plane.
#
#   hack/node/node.sh up     start the node (see the variables below); prints its facts
#   hack/node/node.sh down   stop it and remove everything it made
#   hack/node/node.sh exec CMD...  run CMD inside the node's mount and network namespaces
#   hack/node/node.sh join   link this node's network namespace to another running node's
#                            (PEER_NODE_DIR, PEER_POD_CIDR, PAIR_IF, PEER_PAIR_IF, PAIR_ADDR,
#                            PEER_PAIR_ADDR), so that their pods reach each other
#
# The machine's process accounting, sysctls, mounts and network are not ours, so the node
# lives in namespaces of its own (../shared/TOOLCHAIN.md):
# - cgroups: a child named per run under the cgroup this script runs in, in every v1
#   hierarchy; containerd, kubelet and the pods run in a cgroup namespace rooted there, so
#   kubepods is created below it and nothing at the hierarchies' real roots (checked below);
# - mounts: a private mount namespace with its own /var/lib, /run, /var/log and /mnt, where the
#   disks are mounted (a mount made outside would not reach the pods);
# - network: a network namespace joined to this one by a veth pair; the CNI bridge and the
#   kubelet's and kube-proxy's iptables chains live inside it (checked below: the machine's
#   own tables hold no KUBE- chain); the only host change is a route to the pods. Two nodes'
#   pods reach each other over a veth pair between the two nodes' namespaces (join): this
#   machine does not forward, and need not;
# - sysctls: the kubelet runs with protectKernelDefaults and is shown the values it checks
#   through read-only bind mounts; the rest of /proc/sys but net is read-only in the node.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
# All the node's state. Unset, the node of this checkout: tmp/node, or the demo's when only
# the demo's is there (KEEP=1 make demo), so `node.sh exec` finds it.
if [ -z "${NODE_DIR:-}" ] && [ ! -e "$ROOT/tmp/node/init.pid" ] && [ -e "$ROOT/tmp/demo/node/init.pid" ]; then
	NODE_DIR=$ROOT/tmp/demo/node
fi
: "${NODE_DIR:=$ROOT/tmp/node}"
: "${NODE_NAME:=edge-real-1}"
: "${KUBELET:=$ROOT/bin/k8s-v1.36.3/kubelet}"
: "${KUBE_PROXY:=$(dirname "$KUBELET")/kube-proxy}" # Services: ClusterIPs and node ports
: "${IMAGES:=$ROOT/bin/images}"           # OCI archives to import: *.tar
: "${PAUSE_IMAGE:=docker.io/edgepool/pause:0.1.0}"
# Disks: NAME:MEDIA:MiB, each a sparse file on a loop device with ext4, mounted at
# /mnt/edgepool/NAME inside the node, its rotational flag set to match the media.
: "${NODE_DISKS:=ssd0:SSD:512 hdd0:HDD:512}"
: "${NODE_LABELS:=}"                      # extra labels, k=v,k=v
: "${NODE_TAINTS:=}"                      # taints to register with, k=v:NoSchedule,...
# NODEFS_MIB: when set, the kubelet's root directory and /var/log (pods' emptyDirs and logs)
# live on a loop filesystem of that size, with an eviction threshold at a quarter of it, so
# a test can put the node under disk pressure. Unset: they share the machine's disk.
: "${NODEFS_MIB:=}"
# The link between this machine and the node, and the pods' network (inside the node).
: "${LINK_HOST:=10.213.0.1}" "${LINK_NODE:=10.213.0.2}" "${POD_CIDR:=10.214.0.0/24}"
: "${LINK_IF:=epnode}" # the veth pair: LINK_IF-h here, LINK_IF-n in the node (then eth0)

RUN_ID_FILE=$NODE_DIR/run-id
# Every hierarchy mounted here, the v2 one ("unified") included: runc and the kubelet make
# cgroups in each, so the node's root must be a child of ours in each.
CGROUP_HIERARCHIES="cpu cpuacct cpuset memory devices freezer blkio pids systemd unified"

log() { printf '    node: %s\n' "$*" >&2; }
die() { printf 'node: %s\n' "$*" >&2; exit 1; }

# The cgroup this script runs in, per hierarchy (name=systemd is mounted at "systemd", the
# v2 hierarchy, line 0::, at "unified").
own_cgroup() {
	local h=$1 key=$1
	[ "$h" = systemd ] && key=name=systemd
	if [ "$h" = unified ]; then
		awk -F: '$1 == "0" { print $3 }' /proc/self/cgroup
		return
	fi
	awk -F: -v k="$key" '{ n = split($2, c, ","); for (i = 1; i <= n; i++) if (c[i] == k) print $3 }' /proc/self/cgroup
}

init_pid() { cat "$NODE_DIR/init.pid" 2>/dev/null; }

in_node() {
	local pid
	pid=$(init_pid) || die "the node is not running"
	nsenter -t "$pid" -m -n -- "$@"
}

up() {
	[ "$(id -u)" = 0 ] || die "needs root (containerd, kubelet, loop devices)"
	[ -n "${KUBECONFIG:-}" ] || die "KUBECONFIG: the admin kubeconfig of the control plane"
	# A failed start leaves nothing behind.
	trap 'rc=$?; [ "$rc" = 0 ] || down_quiet; exit "$rc"' EXIT
	for b in containerd runc ctr unshare nsenter losetup mkfs.ext4 iptables "$KUBELET" "$KUBE_PROXY"; do
		command -v "$b" >/dev/null || die "$b not found: run make cluster-tools"
	done
	[ -d /usr/lib/cni ] || die "/usr/lib/cni not found: install containernetworking-plugins"
	down_quiet
	mkdir -p "$NODE_DIR"/{logs,disks,cni/net.d,containerd,kubelet}
	local run_id
	run_id=edgepool-node-$(date +%s)-$$
	echo "$run_id" >"$RUN_ID_FILE"

	# cgroups: one child per hierarchy, below the one this script runs in; their paths are
	# recorded, since `down` may run in another cgroup.
	local h parent child
	: >"$NODE_DIR/cgroups"
	for h in $CGROUP_HIERARCHIES; do
		parent=/sys/fs/cgroup/$h$(own_cgroup "$h")
		[ -d "$parent" ] || die "no cgroup $parent"
		child=${parent%/}/$run_id
		mkdir "$child"
		echo "$child" >>"$NODE_DIR/cgroups"
		if [ "$h" = cpuset ]; then
			cat "$parent/cpuset.cpus" >"$child/cpuset.cpus"
			cat "$parent/cpuset.mems" >"$child/cpuset.mems"
		fi
	done

	# Disks: loop devices on sparse files; mounted inside the node by inside.sh.
	local spec name media mib dev disks_env="" labels="" m n
	for spec in $NODE_DISKS; do
		IFS=: read -r name media mib <<<"$spec"
		truncate -s "${mib}M" "$NODE_DIR/disks/$name.img"
		dev=$(losetup --find --show "$NODE_DIR/disks/$name.img")
		echo "$dev" >"$NODE_DIR/disks/$name.dev"
		mkfs.ext4 -q -F -L "$name" "$dev"
		if [ "$media" = HDD ]; then echo 1; else echo 0; fi >"/sys/block/$(basename "$dev")/queue/rotational"
		disks_env+="$name:$dev "
	done
	local nodefs_dev=""
	if [ -n "$NODEFS_MIB" ]; then
		truncate -s "${NODEFS_MIB}M" "$NODE_DIR/disks/nodefs.img"
		nodefs_dev=$(losetup --find --show "$NODE_DIR/disks/nodefs.img")
		echo "$nodefs_dev" >"$NODE_DIR/disks/nodefs.dev"
		mkfs.ext4 -q -F -L nodefs "$nodefs_dev"
	fi
	# The labels edgepool's placement reads: disks per media (disk.edgepool.io/hdd: "1").
	for m in NVMe SSD HDD; do
		n=$(tr ' ' '\n' <<<"$NODE_DISKS" | grep -c ":$m:" || true)
		[ "$n" = 0 ] || labels+="disk.edgepool.io/${m,,}=$n,"
	done
	labels+=$NODE_LABELS

	# The kubelet reaches the API server over the link; its certificate names localhost.
	local server port
	server=$(awk '$1 == "server:" { print $2; exit }' "$KUBECONFIG")
	port=${server##*:}
	sed -e "s#server: .*#server: https://$LINK_HOST:$port\n    tls-server-name: localhost#" \
		"$KUBECONFIG" >"$NODE_DIR/kubelet.kubeconfig"

	# Start the node's PID 1 inside the child cgroups and new namespaces.
	(
		while read -r child; do echo $BASHPID >"$child/cgroup.procs"; done <"$NODE_DIR/cgroups"
		exec unshare --cgroup --mount --pid --net --uts --ipc --fork --mount-proc --propagation private \
			env NODE_DIR="$NODE_DIR" NODE_NAME="$NODE_NAME" KUBELET="$KUBELET" KUBE_PROXY="$KUBE_PROXY" LINK_HOST="$LINK_HOST" \
			LINK_NODE="$LINK_NODE" LINK_IF="$LINK_IF" POD_CIDR="$POD_CIDR" PAUSE_IMAGE="$PAUSE_IMAGE" NODE_DISKS_DEV="$disks_env" NODEFS_DEV="$nodefs_dev" \
			NODE_LABELS="${labels%,}" NODE_TAINTS="$NODE_TAINTS" IMAGES="$IMAGES" \
			"$ROOT/hack/node/inside.sh"
	) >"$NODE_DIR/logs/node.log" 2>&1 &
	echo $! >"$NODE_DIR/unshare.pid"
	# The node's PID 1 is unshare's child in a new PID namespace (the subshell's own
	# short-lived children, before its exec, are not).
	local pid="" i c ns host_ns
	host_ns=$(readlink /proc/self/ns/pid)
	for i in $(seq 1 100); do
		for c in $(pgrep -P "$(cat "$NODE_DIR/unshare.pid")" || true); do
			ns=$(readlink "/proc/$c/ns/pid" 2>/dev/null) || continue
			[ "$ns" != "$host_ns" ] && pid=$c
		done
		[ -n "$pid" ] && break
		sleep 0.1
	done
	[ -n "$pid" ] || die "the node's namespace did not start; see $NODE_DIR/logs/node.log"
	echo "$pid" >"$NODE_DIR/init.pid"

	# The link: a veth pair, the node's end moved into its network namespace.
	ip link add "$LINK_IF-h" type veth peer name "$LINK_IF-n"
	ip link set "$LINK_IF-n" netns "$pid"
	ip addr add "$LINK_HOST/30" dev "$LINK_IF-h"
	ip link set "$LINK_IF-h" up
	ip route add "$POD_CIDR" via "$LINK_NODE" dev "$LINK_IF-h"
	touch "$NODE_DIR/link-ready" # inside.sh waits for it

	for i in $(seq 1 600); do
		[ -e "$NODE_DIR/ready" ] && break
		kill -0 "$pid" 2>/dev/null || die "the node stopped; see $NODE_DIR/logs/node.log"
		sleep 0.1
	done
	[ -e "$NODE_DIR/ready" ] || die "kubelet did not start in 60 s; see $NODE_DIR/logs"
	check_isolation
	log "up: $NODE_NAME at $LINK_NODE, pods in $POD_CIDR, cgroups under .../$run_id"
}

# join links this node to another one running on this machine: a veth pair made directly
# in the two nodes' network namespaces (nothing of it in this machine's), a /30 on it, and a
# route in each to the other's pods. It goes with either node's namespace.
join() {
	local pid peer
	pid=$(init_pid) || die "the node is not running"
	peer=$(cat "$PEER_NODE_DIR/init.pid" 2>/dev/null) || die "the node in $PEER_NODE_DIR is not running"
	ip link add "$PAIR_IF" netns "$pid" type veth peer name "$PEER_PAIR_IF" netns "$peer"
	nsenter -t "$pid" -n -- sh -euc "ip addr add $PAIR_ADDR/30 dev $PAIR_IF; ip link set $PAIR_IF up
		ip route add $PEER_POD_CIDR via $PEER_PAIR_ADDR dev $PAIR_IF"
	nsenter -t "$peer" -n -- sh -euc "ip addr add $PEER_PAIR_ADDR/30 dev $PEER_PAIR_IF; ip link set $PEER_PAIR_IF up
		ip route add $POD_CIDR via $PAIR_ADDR dev $PEER_PAIR_IF"
	log "joined: pods of $POD_CIDR and $PEER_POD_CIDR reach each other over $PAIR_IF"
}

# Every process of the node must sit in the run's cgroups, and nothing may have been made at
# the hierarchies' real roots. Checked from this machine's view, not the node's.
check_isolation() {
	local run_id h p cg bad=0
	run_id=$(cat "$RUN_ID_FILE")
	for h in $CGROUP_HIERARCHIES; do
		[ ! -e "/sys/fs/cgroup/$h/kubepods" ] || { echo "node: kubepods at the real root of $h" >&2; bad=1; }
	done
	for p in $(node_pids); do
		while IFS=: read -r _ ctrl cg; do
			# The v2 line (0::) has no controller name.
			case $ctrl in cpu | memory | pids | cpuset | devices | freezer | blkio | cpuacct | name=systemd | "") ;; *) continue ;; esac
			case $cg in */$run_id | */$run_id/*) ;; *)
				echo "node: process $p ($(cat /proc/"$p"/comm 2>/dev/null)) is in $ctrl:$cg, outside the node's cgroups" >&2
				bad=1
				;;
			esac
		done <"/proc/$p/cgroup" 2>/dev/null || true
	done
	# No copy of someone else's mount (see inside.sh) is held in the node's mount namespace.
	local held
	held=$(awk -v own="$NODE_DIR/" '{ split($0, halves, " - "); split(halves[2], f, " ")
		if (index($5 "/", own) == 1) next # the node own folder (its nodefs, say), wherever the checkout is
		if (f[1] ~ /^fuse/ || $5 ~ "^/(tmp|media)/") print $5 }' "/proc/$(init_pid)/mountinfo")
	[ -z "$held" ] || { echo "node: holds copies of mounts not its own: $held" >&2; bad=1; }
	# The kubelet's and kube-proxy's chains are the node's: none in this machine's tables.
	local chains
	chains=$( (iptables-save; ip6tables-save; iptables-legacy-save; ip6tables-legacy-save) 2>/dev/null | grep -o '^:KUBE-[A-Z0-9-]*' | sort -u | tr '\n' ' ' || true)
	[ -z "$chains" ] || { echo "node: Kubernetes chains in this machine's iptables: $chains" >&2; bad=1; }
	[ "$bad" = 0 ] || die "isolation does not hold; the node is stopped"
}

# The PIDs (this machine's view) of every process in the node's PID namespace.
node_pids() {
	local pid ns p
	pid=$(init_pid) || return 0
	ns=$(readlink "/proc/$pid/ns/pid")
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/ns/pid" 2>/dev/null)" = "$ns" ] && echo "${p#/proc/}"
	done
}

down_quiet() {
	local pid dir
	pid=$(init_pid || true)
	# Only the node's PID 1: in a PID namespace of its own, in the run's cgroups (a PID
	# recorded by a node that died since may belong to another process by now).
	if [ -n "$pid" ] && [ "$(readlink "/proc/$pid/ns/pid" 2>/dev/null || echo gone)" != "$(readlink /proc/self/ns/pid)" ] &&
		[ "$(readlink "/proc/$pid/ns/pid" 2>/dev/null || echo gone)" != gone ] &&
		grep -qF "/$(cat "$RUN_ID_FILE" 2>/dev/null || echo none)" "/proc/$pid/cgroup" 2>/dev/null; then
		# PID 1 of the node's PID namespace: when it dies, the kernel kills the rest.
		kill -KILL "$pid" 2>/dev/null || true
		for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	fi
	ip link del "$LINK_IF-h" 2>/dev/null || true # takes the pod route with it
	for f in "$NODE_DIR"/disks/*.dev; do
		[ -e "$f" ] || continue
		# The disks' mounts go with the node's mount namespace, which the kernel may take a
		# moment to release.
		for _ in $(seq 1 50); do losetup -d "$(cat "$f")" 2>/dev/null && break; sleep 0.1; done
		rm -f "$f"
	done
	if [ -e "$NODE_DIR/cgroups" ]; then
		while read -r dir; do
			[ -d "$dir" ] || continue
			for _ in $(seq 1 50); do
				# Children first: kubepods/burstable/pod.../container...
				find "$dir" -depth -type d -exec rmdir {} + 2>/dev/null || true
				[ -d "$dir" ] || break
				sleep 0.1
			done
			[ ! -d "$dir" ] || echo "node: could not remove $dir" >&2
		done <"$NODE_DIR/cgroups"
		rm -f "$NODE_DIR/cgroups" "$RUN_ID_FILE"
	fi
	rm -f "$NODE_DIR/init.pid" "$NODE_DIR/unshare.pid" "$NODE_DIR/ready" "$NODE_DIR/link-ready"
	# Whatever was mounted under these died with the node's mount namespace.
	rm -rf "$NODE_DIR/disks" "$NODE_DIR/kubelet" "$NODE_DIR/containerd"
	return 0
}

case "${1:-}" in
up) up ;;
down) down_quiet; log "down" ;;
exec) shift; in_node "$@" ;;
check) check_isolation; log "isolation holds" ;;
join) join ;;
*) die "usage: $0 up|down|exec CMD...|check|join" ;;
esac
