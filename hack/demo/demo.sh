#!/usr/bin/env bash
# make demo: a real Kubernetes control plane on this machine (kwok, binary runtime) with
# fake nodes that carry disk labels, one real node (containerd + kubelet, hack/node) with four
# loop-device HDDs, the operator installed with Helm as a pod on that node, and the demo's
# CacheNodes: a real cache pod serves from real disks while kwok places the others.
#
#   hack/demo/demo.sh         run the demo and clean up (KEEP=1 leaves it running, also on failure)
#   hack/demo/demo.sh down    stop everything a demo left running
#
# Everything lives in tmp/demo; nothing is downloaded. `make demo` builds the binaries and
# the images first.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$ROOT/bin
K8S=${KUBE_BIN:-$BIN/k8s-v1.36.3} # the Kubernetes binaries, kwok and helm (make cluster-tools)
KWOKCTL=$K8S/kwokctl
KWOK=$K8S/kwok
HELM=$K8S/helm
DEMO=$ROOT/tmp/demo
CLUSTER=edgepool-demo
export KWOK_WORKDIR=$DEMO/kwok
export KUBECONFIG=$DEMO/kubeconfig
mkdir -p "$DEMO"
# The demo's slot (internal/test/testkit/clusterslot): kwokctl's ports, kwok's addresses and the
# real node's name, link and pod network, none shared with the e2e suite's or a
# benchmark's cluster, so a kept demo and `make test` run side by side. Sets NODE_NAME,
# LINK_IF, LINK_HOST, LINK_NODE and POD_CIDR.
eval "$("$BIN/demotool" cluster -name "$CLUSTER" -kwok-config "$DEMO/kwok.yaml")"
export NODE_DIR=$DEMO/node KUBELET=$K8S/kubelet IMAGES=${IMAGES_DIR:-$BIN/images}
# hdd-edge claims hdd0-hdd3; hdd4 is left free for "try it yourself" (KEEP=1).
export NODE_DISKS=${NODE_DISKS:-"hdd0:HDD:512 hdd1:HDD:512 hdd2:HDD:512 hdd3:HDD:512 hdd4:HDD:512"}
ORIGIN=$LINK_HOST:9000 # the demo's origin, on this machine's end of the node's link

kubectl() { "$K8S/kubectl" --cache-dir "$DEMO/kube-cache" "$@"; }
# kwokctl and helm keep caches under $HOME: give them a home in the demo's folder.
kwokctl() { HOME="$DEMO/home" "$KWOKCTL" "$@"; }
helm() { HOME="$DEMO/home" "$HELM" "$@"; }
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
# wait_for SECONDS WHAT CMD...: run CMD until it succeeds, or fail the demo after SECONDS.
wait_for() {
	local deadline=$(($(date +%s) + $1)) what=$2
	shift 2
	until "$@" >/dev/null 2>&1; do
		[ "$(date +%s)" -lt "$deadline" ] || { echo "timed out waiting for $what" >&2; return 1; }
		sleep 0.2
	done
}
seconds_since() { awk -v t0="$1" -v t1="$(date +%s%N)" 'BEGIN { printf "%.1fs", (t1 - t0) / 1e9 }'; }

down() {
	for pidfile in "$DEMO"/pids/*; do
		[ -e "$pidfile" ] || continue
		kill "$(cat "$pidfile")" 2>/dev/null || true
		rm -f "$pidfile"
	done
	"$ROOT/hack/node/node.sh" down >/dev/null 2>&1 || true
	kwokctl delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
	rm -rf "$DEMO/kwok" "$DEMO/home" "$DEMO/node"
}

if [ "${1:-}" = down ]; then
	down
	echo "demo stopped"
	exit 0
fi

on_exit() {
	local rc=$?
	if [ "$rc" -ne 0 ]; then
		echo "demo failed (exit $rc); logs in $DEMO/*.log and $NODE_DIR/logs" >&2
	fi
	if [ "${KEEP:-0}" = 1 ]; then
		return # also after a failure, to look at what failed
	fi
	down
}
trap on_exit EXIT

down # whatever an interrupted run left behind
"$BIN/demotool" cluster -name "$CLUSTER" -check-ports >/dev/null
mkdir -p "$DEMO/pids" "$DEMO/home"
start=$(date +%s)

step "Starting a local control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok"
kwokctl create cluster --name "$CLUSTER" --runtime binary --config "$DEMO/kwok.yaml" \
	--kube-apiserver-binary "$K8S/kube-apiserver" \
	--kube-controller-manager-binary "$K8S/kube-controller-manager" \
	--kube-scheduler-binary "$K8S/kube-scheduler" \
	--kwok-controller-binary "$KWOK" --etcd-binary "$K8S/etcd" \
	--extra-args "kube-controller-manager=flex-volume-plugin-dir=$DEMO/flexvolume" \
	--kubeconfig "$KUBECONFIG" --timeout 2m >"$DEMO/kwokctl.log" 2>&1
wait_for 60 "the API server" kubectl get --raw /readyz
kubectl version 2>/dev/null | sed 's/^/    /'

step "Creating fake nodes with disk labels (kwok plays their kubelets)"
kubectl apply -f "$ROOT/hack/demo/nodes.yaml" >/dev/null
kubectl wait --for=condition=Ready node --all --timeout=60s >/dev/null

step "Starting a real node: containerd, runc and a kubelet, four ext4 loop disks (log: tmp/demo/node/logs)"
node_start=$(date +%s%N)
"$ROOT/hack/node/node.sh" up
wait_for 60 "$NODE_NAME to register" kubectl get "node/$NODE_NAME"
kubectl wait --for=condition=Ready "node/$NODE_NAME" --timeout=60s >/dev/null
echo "    $NODE_NAME Ready $(seconds_since "$node_start") after node.sh up; images:" \
	"$("$ROOT/hack/node/node.sh" exec ctr -n k8s.io images ls -q | grep -v sha256 | tr '\n' ' ')"
kubectl get nodes -L disk.edgepool.io/nvme,disk.edgepool.io/hdd

step "Installing edgepool with Helm: the CRD, RBAC, and the operator as a pod on $NODE_NAME"
port=$(awk '$1 == "server:" { n = split($2, a, ":"); print a[n]; exit }' "$KUBECONFIG")
# No kube-proxy on the demo's node: the operator is told where the API server is.
helm install edgepool "$ROOT/charts/edgepool" --namespace edgepool-system --create-namespace \
	--set image.tag=0.1.0 --set image.pullPolicy=Never \
	--set apiServer.host="$LINK_HOST" --set apiServer.port="$port" \
	--set-string nodeSelector."kubernetes\.io/hostname"="$NODE_NAME" \
	--set operator.agentPollInterval=2s --wait --timeout 3m >"$DEMO/helm.log"
kubectl -n edgepool-system get pods -o wide

step "Applying the sample CacheNode and the demo's (config/samples, hack/demo/cachenodes.yaml)"
"$BIN/demotool" origin -listen "$ORIGIN" >"$DEMO/origin.log" 2>&1 &
echo $! >"$DEMO/pids/origin"
kubectl apply -f "$ROOT/config/samples/cache_v1alpha1_cachenode.yaml" -f "$ROOT/hack/demo/cachenodes.yaml"
kubectl wait --for=jsonpath='{.status.readyNodes}'=2 cachenode/nvme-edge --timeout=120s >/dev/null
kubectl wait --for=condition=Ready "pod" -l app.kubernetes.io/instance=hdd-edge \
	--field-selector spec.nodeName="$NODE_NAME" --timeout=120s >/dev/null

step "Which nodes got cache pods"
kubectl get pods -l app.kubernetes.io/name=edgepool-cache -o wide
step "Why the others did not (NodesEligible)"
kubectl get cachenodes -o go-template='{{range .items}}{{.metadata.name}}: {{range .status.conditions}}{{if eq .type "NodesEligible"}}{{.message}}{{end}}{{end}}{{"\n"}}{{end}}'

pod=$(kubectl get pods -l app.kubernetes.io/instance=hdd-edge --field-selector spec.nodeName="$NODE_NAME" -o jsonpath='{.items[0].metadata.name}')
ip=$(kubectl get pod "$pod" -o jsonpath='{.status.podIP}')
http_port=$(kubectl get cachenode hdd-edge -o jsonpath='{.spec.listener.port}')
agent_port=$(kubectl get cachenode hdd-edge -o jsonpath='{.spec.listener.agentPort}')
step "The real cache pod $pod on $NODE_NAME, at $ip (the others are kwok's fakes)"
echo "    the init step handed the fresh disks to the cache user:"
kubectl logs "$pod" -c adopt-disks | sed 's/.*"disk":"\([^"]*\)".*"reason":"\([^"]*\)".*/      \1: \2/'
echo "    readyz: $(curl -fsS "http://$ip:$agent_port/readyz")"
echo "    QoS class $(kubectl get pod "$pod" -o jsonpath='{.status.qosClass}'), requests $(kubectl get pod "$pod" -o jsonpath='{.spec.containers[0].resources.requests}')"

step "The rendered configuration's thread pools and caches"
kubectl get configmap hdd-edge-nginx -o jsonpath='{.data.nginx\.conf}' |
	grep -E '^thread_pool|proxy_cache_path|split_clients|^        [0-9.]+% |^        \* |aio threads' | sed 's/^ *//; s/^/    /'

step "Load: 3000 requests for 400 objects of 256 KiB, 4 clients, through the pod's IP"
"$BIN/demotool" load -url "http://$ip:$http_port" -c 4 -n 3000 -objects 400 | sed 's/^/    /'

step "Burst: 96 clients reading 4 MiB objects, enough to overflow hdd3's 1-thread pool"
"$BIN/demotool" load -url "http://$ip:$http_port" -c 16 -n 200 -objects 48 -size 4194304 >/dev/null
"$BIN/demotool" load -url "http://$ip:$http_port" -c 96 -n 1500 -objects 48 -size 4194304 | sed 's/^/    /'

step "Cached objects per disk (ext4 on loop devices, inside the node)"
for d in hdd0 hdd1 hdd2 hdd3; do
	printf '    %s: %4d objects, %s\n' "$d" \
		"$("$ROOT/hack/node/node.sh" exec find "/mnt/edgepool/$d" -type f -user 101 | wc -l)" \
		"$("$ROOT/hack/node/node.sh" exec du -sh "/mnt/edgepool/$d" | cut -f1)"
done
echo "    overflows counted by the agent:"
curl -fsS "http://$ip:$agent_port/metrics" | { grep -E '^edgepool_thread_pool_queue_overflows_total.* [1-9]' || echo none; } | sed 's/^/      /'

step "Hit ratio per disk, from the agent's metrics (nginx sends it a line per request)"
"$BIN/demotool" hitratio -metrics "http://$ip:$agent_port/metrics" | sed 's/^/    /'

step "The CacheNodes (the operator, a pod on $NODE_NAME, asks the agents every 2s)"
kubectl wait --for=jsonpath='{.status.conditions[?(@.type=="QueueOverflow")].status}'=True cachenode/hdd-edge --timeout=60s >/dev/null
kubectl get cachenodes
echo
kubectl get cachenode hdd-edge -o go-template='{{range .status.conditions}}{{printf "    %-15s %-7s %-18s %s\n" .type .status .reason .message}}{{end}}'

step "A configuration change reaches nginx through the kubelet, without restarting the pod"
old=$(kubectl get cachenode hdd-edge -o jsonpath='{.status.configHash}')
changed=$(date +%s%N)
kubectl patch cachenode hdd-edge --type merge -p '{"spec":{"cache":{"valid":[{"codes":["200"],"duration":"2h"}]}}}' >/dev/null
config_changed() { new=$(kubectl get cachenode hdd-edge -o jsonpath='{.status.configHash}') && [ "$new" != "$old" ]; }
wait_for 60 "the new configuration to be rendered" config_changed
config_changed
agent_runs() { curl -fsS "http://$ip:$agent_port/status" | grep -q "\"configHash\":\"$new\""; }
wait_for 120 "the new configuration to reach nginx" agent_runs
echo "    configuration ${new:0:12} serving on $NODE_NAME $(seconds_since "$changed") after the change" \
	"(the operator announced it on the pod; the kubelet alone swaps ConfigMaps in at its sync, 1 min+)"
echo "    restarts of the cache container: $(kubectl get pod "$pod" -o jsonpath='{.status.containerStatuses[0].restartCount}')"

echo
echo "demo finished in $(($(date +%s) - start))s"
if [ "${KEEP:-0}" = 1 ]; then
	echo "The cluster, the real node and the operator keep running. Explore with:"
	echo "    export KUBECONFIG=$KUBECONFIG"
	echo "    $K8S/kubectl get cachenodes"
	echo "    hack/node/node.sh exec ...   # run a command on the real node"
	cat <<EOF

Try it yourself:
  - A second CacheNode on the free disk, hdd4, of the real node:
      $K8S/kubectl apply -f - <<'YAML'
      apiVersion: cache.edgepool.io/v1alpha1
      kind: CacheNode
      metadata: {name: mine}
      spec:
        nodeSelector: {kubernetes.io/hostname: $NODE_NAME}
        disks:
          - {name: hdd4, path: /mnt/edgepool/hdd4, media: HDD, size: 400Mi}
        origin: {servers: ["$ORIGIN"]}
      YAML
      $K8S/kubectl get cachenode mine -o wide
  - Hand hdd3 over from hdd-edge to it: remove hdd3 from hdd-edge
    ($K8S/kubectl edit cachenode hdd-edge), then add it to mine with takeOverFrom:
      - {name: hdd3, path: /mnt/edgepool/hdd3, media: HDD, size: 400Mi, takeOverFrom: hdd-edge}
    Without takeOverFrom, DisksReady says the disk is claimed by hdd-edge and keeps its cache.
  - A mistake, to see what the status says: a disk path the node does not have
    (/mnt/edgepool/hdd9) names the node and the path on Ready within ~20 s.
EOF
	echo "Stop everything with: make demo-down"
else
	echo "Cleaning up. Run KEEP=1 make demo to keep the cluster running and explore it with kubectl."
fi
