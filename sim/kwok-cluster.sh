#!/usr/bin/env bash
# sim/kwok-cluster.sh up|down: create (or restart) and delete one kwok cluster, for the main simulated cluster
# (sim/up.sh, sim/down.sh) and the second one of sim/remote.sh.
#
#   up    --name NAME --state DIR --node-selector SELECTOR [--namespace NS] [--teardown COMMAND] < NODES_JSON
#         A real etcd, kube-apiserver, kube-scheduler and kube-controller-manager run as local processes
#         (kwokctl's binary runtime, every binary from the pinned tool cache: nothing is downloaded); kwok plays
#         the kubelet of the fake nodes given on stdin (a Kubernetes List, sim/nodes.py) and moves their pods
#         through the stages in sim/kwok-stages.yaml. kwok manages only nodes annotated kwok.x-k8s.io/node=fake,
#         so a node run by something else (a virtual node) can join the cluster and is left alone. The controller
#         manager and scheduler run without leader election: there is one of each, and on a starved machine a
#         missed lease renewal would otherwise make them exit.
#         Idempotent: a cluster that is up is reported and its nodes (and NS) reconciled; one that exists but is
#         stopped, or lost a component, is (re)started. Waits until the nodes matching SELECTOR are Ready.
#         COMMAND is what the user runs to remove a failed creation's remains (named in the error).
#   down  --name NAME --state DIR
#         Delete the cluster and DIR. Nothing to remove is not an error.
#
# DIR (under .state) holds the cluster's kubeconfig (DIR/kubeconfig) and kwokctl's workdir (DIR/kwok: pki,
# configs, pid files, logs under kwok/clusters/NAME/logs). Ports are the ones kwokctl picks free at creation.
# Environment: GPUCLUSTER_CACHE (tool cache root, see tools/bin-dir.sh); GPUCLUSTER_SIM_READY_TIMEOUT (seconds the
# nodes get to be Ready, default 120; the scale bench's hundreds of nodes take longer on a small machine).
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() {
  sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

ACTION="${1:-}"
[[ $# -gt 0 ]] && shift
if [[ "$ACTION" == -h || "$ACTION" == --help || "$ACTION" == help ]]; then
  usage
  exit 0
fi
SELECTOR=""
NAMESPACE=""
TEARDOWN="sim/kwok-cluster.sh down"
DIR=""
CLUSTER=""
while [[ $# -gt 0 ]]; do
  case "$1" in
  --name | --state | --node-selector | --namespace | --teardown)
    [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value"
    case "$1" in
    --name) CLUSTER="$2" ;;
    --state) DIR="$2" ;;
    --node-selector) SELECTOR="$2" ;;
    --namespace) NAMESPACE="$2" ;;
    --teardown) TEARDOWN="$2" ;;
    esac
    shift 2
    ;;
  -h | --help)
    usage
    exit 0
    ;;
  *) die "unknown argument '$1' (sim/kwok-cluster.sh --help)" ;;
  esac
done
[[ "$ACTION" == up || "$ACTION" == down ]] || die "expected up or down, got '$ACTION' (sim/kwok-cluster.sh --help)"
[[ -n "$CLUSTER" ]] || die "--name is required"
[[ "$CLUSTER" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] || die "--name '$CLUSTER' is not a DNS label"
[[ -n "$DIR" ]] || die "--state is required"
# DIR is removed on down: it must be a directory of the repository's state, never anything else.
DIR="$(realpath -m -- "$DIR")"
[[ "$DIR" == "$(realpath -m -- "$STATE")"/* ]] || die "--state must be a directory under $STATE (got $DIR)"

# lib.sh describes the main cluster; point its helpers (sim_exists, sim_answers, ...) at this one.
NAME="$CLUSTER"
SIM_STATE="$DIR"
KUBECONFIG_FILE="$SIM_STATE/kubeconfig"
export KWOK_WORKDIR="$SIM_STATE/kwok"
CLUSTER_DIR="$KWOK_WORKDIR/clusters/$NAME"

# restart: the control plane of an existing cluster started again (kwokctl keeps its configuration).
restart() {
  kwokctl stop cluster --name "$NAME" >/dev/null 2>&1 || true
  kwokctl start cluster --name "$NAME" --wait 3m || die "kwokctl could not start cluster '$NAME' (logs: $CLUSTER_DIR/logs)"
}

create() {
  step "creating cluster '$NAME' (kwokctl $(kwokctl --version | awk '{print $3}'), binary runtime, $(kube-apiserver --version), workdir $KWOK_WORKDIR)"
  # Every component binary comes from the tool cache; kwok gets the stages and manages only annotated nodes.
  # The scheduler binds pods to the fake nodes; the controller manager creates the default service accounts,
  # finishes namespace deletion and runs the HPAs (every 15 s, its default: kwokctl v0.8.0's --extra-args indexes
  # a component's patches by the flag's position, so a second flag of the controller manager after the kwok
  # controller's two would land on another component or panic).
  if ! kwokctl create cluster \
    --name "$NAME" \
    --runtime binary \
    --kubeconfig "$KUBECONFIG_FILE" \
    --config "$ROOT/sim/kwok-stages.yaml" \
    --config "$ROOT/sim/kwokctl.yaml" \
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
    die "kwokctl could not create cluster '$NAME'; logs: $CLUSTER_DIR/logs ($TEARDOWN removes the remains)"
  fi
}

cluster_up() {
  [[ -n "$SELECTOR" ]] || die "--node-selector is required for up"
  sim_require_tools kwokctl kwok etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
  local py nodes_json summary patches start=$SECONDS
  py="$(sim_python)"
  nodes_json="$(cat)"
  # Read the node list before touching the cluster, so a broken one stops us with its own message.
  summary="$("$py" "$ROOT/sim/node_list.py" summary <<<"$nodes_json")" || die "the node list on stdin is not usable (see above)"
  patches="$("$py" "$ROOT/sim/node_list.py" status-patches <<<"$nodes_json")" || die "the node list on stdin is not usable (see above)"

  mkdir -p "$SIM_STATE"
  if sim_exists; then
    if sim_answers && sim_components_alive; then
      step "cluster '$NAME' is already up (kubeconfig $KUBECONFIG_FILE)"
    elif sim_answers; then
      step "cluster '$NAME' lost component(s): $(sim_components_dead); restarting its control plane"
      restart
    else
      step "cluster '$NAME' exists but its API server does not answer: (re)starting its control plane"
      restart
    fi
  else
    create
    step "control plane up in $((SECONDS - start))s"
  fi
  export KUBECONFIG="$KUBECONFIG_FILE"

  step "waiting for the API server to accept objects"
  for _ in $(seq 1 180); do
    kubectl get serviceaccount default >/dev/null 2>&1 && break
    sleep 1
  done
  kubectl get serviceaccount default >/dev/null || die "the API server is up but the default service account never appeared"

  step "applying GPU nodes: $summary"
  kubectl apply -f - <<<"$nodes_json" >/dev/null || die "kubectl apply of the GPU nodes failed"
  # Capacity and allocatable live in the status subresource: set them there so they hold on a re-run too.
  while IFS=$'\t' read -r node patch; do
    kubectl patch node "$node" --subresource=status --type=merge -p "$patch" >/dev/null ||
      die "could not set the capacity of node $node"
  done <<<"$patches"

  if [[ -n "$NAMESPACE" ]]; then
    kubectl create namespace "$NAMESPACE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null ||
      die "could not create namespace $NAMESPACE"
    for _ in $(seq 1 60); do
      kubectl -n "$NAMESPACE" get serviceaccount default >/dev/null 2>&1 && break
      sleep 1
    done
  fi

  step "waiting for the nodes to be Ready"
  local ready_timeout="${GPUCLUSTER_SIM_READY_TIMEOUT:-120}"
  kubectl wait --for=condition=Ready node -l "$SELECTOR" --timeout="${ready_timeout}s" >/dev/null ||
    die "nodes did not become Ready within ${ready_timeout}s (is the kwok controller running? logs: $CLUSTER_DIR/logs)"
}

cluster_down() {
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
}

case "$ACTION" in
up) cluster_up ;;
down) cluster_down ;;
esac
