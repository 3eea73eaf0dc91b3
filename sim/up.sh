#!/usr/bin/env bash
# make sim-up: the simulated GPU cluster (sim/kwok-cluster.sh up): a real etcd, kube-apiserver, kube-scheduler
# and kube-controller-manager as local processes, every binary from the pinned tool cache; kwok plays the kubelet
# of fake GPU nodes built from the stack's GPU inventory (sim/nodes.py) and moves their pods through the stages
# in sim/kwok-stages.yaml. kwok manages only nodes annotated kwok.x-k8s.io/node=fake, so a node run by something
# else (a virtual node, the real node of sim/node.py) can join the cluster and is left alone.
#
# Idempotent: a cluster that is up is reported and its nodes reconciled; one that exists but is stopped, or lost
# a component, is (re)started. State: .state/sim (kubeconfig, kwokctl workdir with logs under
# kwok/clusters/<name>/logs).
#
# Environment: GPUCLUSTER_SIM_NAME (cluster name, default gpucluster), GPUCLUSTER_SIM_STACK (stack file,
# default stacks/Pulumi.local.yaml), GPUCLUSTER_CACHE (tool cache root, see tools/bin-dir.sh).
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

sim_require_tools kwokctl kwok etcd kube-apiserver kube-controller-manager kube-scheduler kubectl
PY="$(sim_python)"
[[ -f "$STACK" ]] || step "stack file $STACK not found: using the default inventory (h100, 4 nodes x 8 GPUs)"
# Read the inventory before touching the cluster, so a broken stack file stops us with its own message.
NODES_JSON="$("$PY" "$ROOT/sim/nodes.py" "$STACK")" || die "cannot build the node list from $STACK (see above)"

start=$SECONDS
"$ROOT/sim/kwok-cluster.sh" up --name "$NAME" --state "$SIM_STATE" --node-selector gpucluster.io/flavor \
  --teardown "make sim-down" <<<"$NODES_JSON"

# The real node: containerd, a kubelet and kube-proxy running pods for real beside the kwok GPU nodes (sim/node.py;
# GPUCLUSTER_SIM_REAL_NODE=0 leaves it out).
if [[ "${GPUCLUSTER_SIM_REAL_NODE:-1}" != 0 ]]; then
  # Our images from this tree (make images; seconds when nothing changed): the node runs what the tree holds, and a
  # pod of an older build is replaced.
  step "our images, from this tree (python -m images build)"
  (cd "$ROOT" && "$PY" -m images build) || die "the images could not be built (the reason is above)"
  KUBECONFIG="$KUBECONFIG_FILE" "$PY" "$ROOT/sim/node.py" up ||
    die "the real node did not come up (the reason is above; make down puts the machine back)"
fi

export KUBECONFIG="$KUBECONFIG_FILE"
kubectl get nodes -l gpucluster.io/flavor -o custom-columns='NAME:.metadata.name,FLAVOR:.metadata.labels.gpucluster\.io/flavor,GPUS:.status.allocatable.nvidia\.com/gpu,READY:.status.conditions[?(@.type=="Ready")].status'
step "sim ready in $((SECONDS - start))s: export KUBECONFIG=$KUBECONFIG_FILE"
