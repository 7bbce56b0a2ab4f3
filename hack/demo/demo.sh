#!/usr/bin/env bash
# make demo: a real Kubernetes control plane on this machine (kwok, binary runtime) with
# fake nodes that carry disk labels, the operator, the demo CacheNodes, and one real cache
# node (edgepool-agent supervising nginx) that the operator's status loop reads.
#
#   hack/demo/demo.sh         run the demo and clean up (KEEP=1 leaves it running)
#   hack/demo/demo.sh down    stop everything a demo left running
#
# Everything lives in tmp/demo (and the cache's "disks" in /tmp/edgepool-demo); nothing is
# downloaded. `make demo` builds the binaries first.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$ROOT/bin
K8S=$BIN/k8s-v${K8S_VERSION:-1.36.3}
KWOKCTL=$BIN/kwok-${KWOK_VERSION:-v0.8.0}/kwokctl
KWOK=$BIN/kwok-${KWOK_VERSION:-v0.8.0}/kwok
DEMO=$ROOT/tmp/demo
DISKS=/tmp/edgepool-demo # must match the hdd-edge CacheNode's disk paths
CLUSTER=edgepool-demo
export KWOK_WORKDIR=$DEMO/kwok
export KUBECONFIG=$DEMO/kubeconfig

kubectl() { "$K8S/kubectl" --cache-dir "$DEMO/kube-cache" "$@"; }
# kwokctl keeps a discovery cache under $HOME/.kube: give it a home in the demo's folder.
kwokctl() { HOME="$DEMO/home" "$KWOKCTL" "$@"; }
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

down() {
	for pidfile in "$DEMO"/pids/*; do
		[ -e "$pidfile" ] || continue
		kill "$(cat "$pidfile")" 2>/dev/null || true
		rm -f "$pidfile"
	done
	sleep 1
	kwokctl delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
	rm -rf "$DISKS" "$DEMO/kwok" "$DEMO/home"
}

if [ "${1:-}" = down ]; then
	down
	echo "demo stopped"
	exit 0
fi

on_exit() {
	local rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "demo failed (exit $rc); logs in $DEMO/*.log" >&2
	fi
	if [ "${KEEP:-0}" = 1 ] && [ "$rc" -eq 0 ]; then
		return
	fi
	down
}
trap on_exit EXIT

down # whatever an interrupted run left behind
mkdir -p "$DEMO/pids" "$DEMO/home" "$DEMO/cache/config" "$DEMO/cache/run"
start=$(date +%s)

step "Starting a local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok"
kwokctl create cluster --name "$CLUSTER" --runtime binary --config "$ROOT/hack/kwok.yaml" \
	--kube-apiserver-binary "$K8S/kube-apiserver" \
	--kube-controller-manager-binary "$K8S/kube-controller-manager" \
	--kube-scheduler-binary "$K8S/kube-scheduler" \
	--kwok-controller-binary "$KWOK" --etcd-binary "$(command -v etcd)" \
	--kubeconfig "$KUBECONFIG" --timeout 2m >"$DEMO/kwokctl.log" 2>&1
until kubectl get --raw /readyz >/dev/null 2>&1; do sleep 0.5; done
kubectl version 2>/dev/null | sed 's/^/    /'

step "Creating fake nodes with disk labels"
kubectl apply -f "$ROOT/hack/demo/nodes.yaml" >/dev/null
kubectl wait --for=condition=Ready node --all --timeout=60s >/dev/null
kubectl get nodes -L disk.edgepool.io/nvme,disk.edgepool.io/hdd

step "Installing the CRD and starting the operator (log: tmp/demo/operator.log)"
kubectl apply --server-side -f "$ROOT/config/crd/bases" >/dev/null
kubectl wait --for=condition=Established crd/cachenodes.cache.edgepool.io --timeout=60s >/dev/null
"$BIN/manager" --metrics-bind-address=0 --health-probe-bind-address=0 --agent-poll-interval=2s \
	>"$DEMO/operator.log" 2>&1 &
echo $! >"$DEMO/pids/operator"

step "Applying the sample CacheNode and the demo's (config/samples, hack/demo/cachenodes.yaml)"
kubectl apply -f "$ROOT/config/samples/cache_v1alpha1_cachenode.yaml" -f "$ROOT/hack/demo/cachenodes.yaml"
kubectl wait --for=jsonpath='{.status.readyNodes}'=2 cachenode/hdd-edge --timeout=120s >/dev/null
kubectl wait --for=jsonpath='{.status.readyNodes}'=2 cachenode/nvme-edge --timeout=120s >/dev/null

step "Which nodes got cache pods"
kubectl get pods -l app.kubernetes.io/name=edgepool-cache -o wide
step "Why the others did not (NodesEligible)"
kubectl get cachenodes -o go-template='{{range .items}}{{.metadata.name}}: {{range .status.conditions}}{{if eq .type "NodesEligible"}}{{.message}}{{end}}{{end}}{{"\n"}}{{end}}'

step "Running one real cache node: the agent and nginx for hdd-edge's pod on edge-hdd-1"
pod=$(kubectl get pods -l app.kubernetes.io/instance=hdd-edge --field-selector spec.nodeName=edge-hdd-1 -o jsonpath='{.items[0].metadata.name}')
ip=$(kubectl get pod "$pod" -o jsonpath='{.status.podIP}')
port=$(kubectl get cachenode hdd-edge -o jsonpath='{.spec.listener.port}')
agent_port=$(kubectl get cachenode hdd-edge -o jsonpath='{.spec.listener.agentPort}')
kubectl get configmap hdd-edge-nginx -o jsonpath='{.data.nginx\.conf}' >"$DEMO/cache/config/nginx.conf"
# The disk flags exactly as the operator put them in the DaemonSet.
mapfile -t disk_args < <(kubectl get daemonset hdd-edge -o go-template='{{range (index .spec.template.spec.containers 0).args}}{{.}}{{"\n"}}{{end}}' | grep '^--disk=')
for d in hdd0 hdd1 hdd2 hdd3; do mkdir -p "$DISKS/$d"; done
chmod -R 0777 "$DISKS"
"$BIN/demotool" origin -listen 127.0.0.1:9000 >"$DEMO/origin.log" 2>&1 &
echo $! >"$DEMO/pids/origin"
"$BIN/edgepool-agent" --nginx "$(command -v nginx)" --config "$DEMO/cache/config/nginx.conf" \
	--run-dir "$DEMO/cache/run" --listen "$ip:$agent_port" --overflow-window 1m \
	--allow-unmounted "${disk_args[@]}" >"$DEMO/agent.log" 2>&1 &
echo $! >"$DEMO/pids/agent"
echo "    pod $pod has IP $ip: agent on $ip:$agent_port, nginx on $ip:$port"
echo "    (--allow-unmounted: the demo's disks are plain directories; a real node refuses them)"
for _ in $(seq 1 100); do
	curl -fsS "http://$ip:$agent_port/readyz" >/dev/null 2>&1 && break
	sleep 0.2
done
curl -fsS "http://$ip:$agent_port/readyz" | sed 's/^/    readyz: /'

step "The rendered configuration's thread pools and caches"
grep -E '^thread_pool|proxy_cache_path|split_clients|^        [0-9.]+% |^        \* |aio threads' "$DEMO/cache/config/nginx.conf" | sed 's/^ *//; s/^/    /'

step "Load: 3000 requests for 400 objects of 256 KiB, 4 clients (failures come from hdd3's deliberately tiny pool)"
"$BIN/demotool" load -url "http://$ip:$port" -c 4 -n 3000 -objects 400 | sed 's/^/    /'

step "Burst: 96 clients reading 4 MiB objects, enough to overflow hdd3's 1-thread pool"
"$BIN/demotool" load -url "http://$ip:$port" -c 16 -n 200 -objects 48 -size 4194304 >/dev/null
"$BIN/demotool" load -url "http://$ip:$port" -c 96 -n 1500 -objects 48 -size 4194304 | sed 's/^/    /'

step "Cached objects per disk"
for d in "$DISKS"/*; do
	printf '    %s: %4d objects, %s\n' "$(basename "$d")" "$(find "$d" -type f | wc -l)" "$(du -sh "$d" | cut -f1)"
done
echo "    overflows counted by the agent:"
curl -fsS "http://$ip:$agent_port/metrics" | grep '^edgepool_thread_pool_queue_overflows_total' | sed 's/^/      /'

step "The CacheNodes (the operator asks the agents every 2s)"
kubectl wait --for=jsonpath='{.status.conditions[?(@.type=="QueueOverflow")].status}'=True cachenode/hdd-edge --timeout=30s >/dev/null
kubectl get cachenodes
echo
kubectl get cachenode hdd-edge -o go-template='{{range .status.conditions}}{{printf "    %-15s %-7s %-18s %s\n" .type .status .reason .message}}{{end}}'

echo
echo "demo finished in $(($(date +%s) - start))s"
if [ "${KEEP:-0}" = 1 ]; then
	echo "The cluster, the operator and the cache node keep running. Explore with:"
	echo "    export KUBECONFIG=$KUBECONFIG"
	echo "    $K8S/kubectl get cachenodes"
	echo "Stop everything with: make demo-down"
else
	echo "Cleaning up. Run KEEP=1 make demo to keep the cluster running and explore it with kubectl."
fi
