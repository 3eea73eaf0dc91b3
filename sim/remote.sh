#!/usr/bin/env bash
# sim/remote.sh up|down|kubeconfig: a second, minimal simulated cluster that stands for "another Kubernetes
# cluster" a burst provider of kind kubernetes rents GPUs from.
#
#   up          create (or restart) cluster 'gpucluster-remote' (sim/kwok-cluster.sh up: kwokctl's binary runtime
#               with every binary from the pinned tool cache, the pod stages of sim/kwok-stages.yaml, so pods on
#               fake nodes become Running and Ready with an IP), 2 fake GPU nodes of 8 nvidia.com/gpu each
#               (sim/nodes.py --remote), namespace burst-inference. Idempotent: a cluster that is up is reported
#               and its nodes and namespace reconciled.
#   down        delete the cluster and .state/remote. Nothing to remove is not an error.
#   kubeconfig  print the path of the cluster's kubeconfig (.state/remote/kubeconfig).
#
# It never touches the main simulated cluster: its own name, its own kwokctl workdir (.state/remote/kwok) and
# ports that kwokctl picks free at creation. Nothing else runs in it (no Kueue, no Pulumi): memory is shared.
# Environment: GPUCLUSTER_REMOTE_NAME (cluster name, default gpucluster-remote), GPUCLUSTER_CACHE (tool cache
# root, see tools/bin-dir.sh).
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REMOTE_NAME="${GPUCLUSTER_REMOTE_NAME:-gpucluster-remote}"
REMOTE_STATE="$STATE/remote"
REMOTE_KUBECONFIG="$REMOTE_STATE/kubeconfig"
REMOTE_NAMESPACE="burst-inference"

usage() {
  sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

remote_up() {
  local start=$SECONDS nodes
  nodes="$("$(sim_python)" "$ROOT/sim/nodes.py" --remote)" || die "cannot build the remote cluster's node list"
  "$ROOT/sim/kwok-cluster.sh" up --name "$REMOTE_NAME" --state "$REMOTE_STATE" \
    --node-selector gpucluster.io/remote=true --namespace "$REMOTE_NAMESPACE" --teardown "sim/remote.sh down" \
    <<<"$nodes"
  step "remote cluster ready in $((SECONDS - start))s: kubeconfig $REMOTE_KUBECONFIG"
}

remote_down() {
  "$ROOT/sim/kwok-cluster.sh" down --name "$REMOTE_NAME" --state "$REMOTE_STATE"
  step "remote cluster is down"
}

case "${1:-}" in
up) remote_up ;;
down) remote_down ;;
kubeconfig) echo "$REMOTE_KUBECONFIG" ;;
-h | --help | help) usage ;;
*)
  usage >&2
  die "expected up, down or kubeconfig, got '${1:-}'"
  ;;
esac
