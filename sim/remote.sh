#!/usr/bin/env bash
# sim/remote.sh up|down|kubeconfig: a second, minimal simulated cluster that stands for "another Kubernetes
# cluster" a burst provider of kind kubernetes rents GPUs from.
#
#   up          create (or restart) cluster 'gpucluster-remote': kwokctl's binary runtime with every binary from
#               the pinned tool cache, the pod stages of sim/kwok-stages.yaml (pods on fake nodes become Running
#               and Ready with an IP), 2 fake GPU nodes of 8 nvidia.com/gpu each, namespace burst-inference.
#               Idempotent: a cluster that is up is reported and its nodes and namespace reconciled.
#   down        delete the cluster and .state/remote. Nothing to remove is not an error.
#   kubeconfig  print the path of the cluster's kubeconfig (.state/remote/kubeconfig).
#
# It never touches the main simulated cluster: its own name, its own kwokctl workdir (.state/remote/kwok) and
# ports that kwokctl picks free at creation. Nothing else runs in it (no Kueue, no Pulumi): memory is shared.
#
# Environment: GPUCLUSTER_REMOTE_NAME (cluster name, default gpucluster-remote), GPUCLUSTER_CACHE (tool cache
# root, see tools/bin-dir.sh).
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# lib.sh describes the main cluster; point its helpers (sim_exists, sim_answers, ...) at the remote one.
NAME="${GPUCLUSTER_REMOTE_NAME:-gpucluster-remote}"
SIM_STATE="$STATE/remote"
KUBECONFIG_FILE="$SIM_STATE/kubeconfig"
export KWOK_WORKDIR="$SIM_STATE/kwok"
CLUSTER_DIR="$KWOK_WORKDIR/clusters/$NAME"

REMOTE_NAMESPACE="burst-inference"
REMOTE_NODES=2
REMOTE_GPUS_PER_NODE=8
# Pod IPs of the remote nodes: a range the main cluster's nodes (10.64.0.0/10) never use.
REMOTE_POD_PREFIX="10.160"

usage() {
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

# remote_nodes_json: the fake GPU nodes as a kubectl List (capacity in the status, set again by remote_capacity).
remote_nodes_json() {
  python3 - "$REMOTE_NODES" "$REMOTE_GPUS_PER_NODE" "$REMOTE_POD_PREFIX" <<'EOF'
import json, sys
count, gpus, prefix = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
capacity = {"cpu": str(24 * gpus), "memory": f"{240 * gpus}Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
items = []
for i in range(count):
    name = f"remote-gpu-{i}"
    cidr = f"{prefix}.{i}.0/24"
    items.append({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "type": "kwok",
                "gpucluster.io/remote": "true",
            },
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        "status": {"capacity": capacity, "allocatable": capacity},
    })
print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
EOF
}

remote_up() {
  sim_require_tools kwokctl kwok etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
  mkdir -p "$SIM_STATE"
  local start=$SECONDS
  if sim_exists; then
    if sim_answers && sim_components_alive; then
      step "cluster '$NAME' is already up (kubeconfig $KUBECONFIG_FILE)"
    else
      step "cluster '$NAME' exists but is not healthy ($(sim_components_dead)): (re)starting its control plane"
      kwokctl stop cluster --name "$NAME" >/dev/null 2>&1 || true
      kwokctl start cluster --name "$NAME" --wait 3m || die "kwokctl could not start cluster '$NAME' (logs: $CLUSTER_DIR/logs)"
    fi
  else
    step "creating cluster '$NAME' (binary runtime, workdir $KWOK_WORKDIR)"
    # The scheduler binds pods to the fake nodes; the controller manager creates the default service
    # accounts and finishes namespace deletion. Both run without leader election, as in sim/up.sh.
    if ! kwokctl create cluster \
      --name "$NAME" \
      --runtime binary \
      --kubeconfig "$KUBECONFIG_FILE" \
      --config "$ROOT/sim/kwok-stages.yaml" \
      --etcd-binary "$BIN/etcd" \
      --kube-apiserver-binary "$BIN/kube-apiserver" \
      --kube-controller-manager-binary "$BIN/kube-controller-manager" \
      --kube-scheduler-binary "$BIN/kube-scheduler" \
      --kwok-controller-binary "$BIN/kwok" \
      --extra-args "kwok-controller=manage-all-nodes=false" \
      --extra-args "kwok-controller=manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake" \
      --extra-args "kube-controller-manager=leader-elect=false" \
      --extra-args "kube-scheduler=leader-elect=false" \
      --wait 3m; then
      die "kwokctl could not create cluster '$NAME'; logs: $CLUSTER_DIR/logs (sim/remote.sh down removes the remains)"
    fi
    step "control plane up in $((SECONDS - start))s"
  fi
  export KUBECONFIG="$KUBECONFIG_FILE"

  step "waiting for the API server to accept objects"
  for _ in $(seq 1 180); do
    kubectl get serviceaccount default >/dev/null 2>&1 && break
    sleep 1
  done
  kubectl get serviceaccount default >/dev/null || die "the API server is up but the default service account never appeared"

  local nodes_json
  nodes_json="$(remote_nodes_json)"
  step "applying $REMOTE_NODES GPU nodes x $REMOTE_GPUS_PER_NODE nvidia.com/gpu"
  kubectl apply -f - <<<"$nodes_json" >/dev/null || die "kubectl apply of the GPU nodes failed"
  # Capacity and allocatable live in the status subresource: set them there so they hold on a re-run too.
  while IFS=$'\t' read -r node patch; do
    kubectl patch node "$node" --subresource=status --type=merge -p "$patch" >/dev/null ||
      die "could not set the capacity of node $node"
  done < <(python3 -c 'import json, sys
for n in json.load(sys.stdin)["items"]:
    print(n["metadata"]["name"], json.dumps({"status": {k: n["status"][k] for k in ("capacity", "allocatable")}}), sep="\t")' <<<"$nodes_json")

  kubectl create namespace "$REMOTE_NAMESPACE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null ||
    die "could not create namespace $REMOTE_NAMESPACE"
  for _ in $(seq 1 60); do
    kubectl -n "$REMOTE_NAMESPACE" get serviceaccount default >/dev/null 2>&1 && break
    sleep 1
  done

  step "waiting for the nodes to be Ready"
  kubectl wait --for=condition=Ready node -l gpucluster.io/remote=true --timeout=120s >/dev/null ||
    die "nodes did not become Ready within 120s (is the kwok controller running? logs: $CLUSTER_DIR/logs)"
  step "remote cluster ready in $((SECONDS - start))s: kubeconfig $KUBECONFIG_FILE"
}

remote_down() {
  if sim_exists; then
    if [[ -x "$BIN/kwokctl" ]]; then
      step "deleting cluster '$NAME'"
      kwokctl delete cluster --name "$NAME" || warn "kwokctl delete cluster failed; removing what is left by hand"
    else
      warn "kwokctl is not built ($BIN): stopping the cluster's processes by their pid files"
    fi
  fi
  # Whatever kwokctl could not stop (or left behind after an interrupted create): its components' pid files.
  if [[ -d "$CLUSTER_DIR/pids" ]]; then
    for f in "$CLUSTER_DIR"/pids/*.pid; do
      [[ -e "$f" ]] || continue
      stop_pid "$f" "$(basename "$f" .pid)"
    done
  fi
  if [[ -d "$SIM_STATE" ]]; then
    step "removing $SIM_STATE"
    rm -rf "$SIM_STATE"
  fi
  step "remote cluster is down"
}

case "${1:-}" in
up) remote_up ;;
down) remote_down ;;
kubeconfig) echo "$KUBECONFIG_FILE" ;;
-h | --help | help) usage ;;
*)
  usage >&2
  die "expected up, down or kubeconfig, got '${1:-}'"
  ;;
esac
