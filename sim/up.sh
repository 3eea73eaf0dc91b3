#!/usr/bin/env bash
# make sim-up: the simulated GPU cluster. A real etcd, kube-apiserver, kube-scheduler and kube-controller-manager
# run as local processes (kwokctl's binary runtime, every binary from the pinned tool cache: nothing is
# downloaded); kwok plays the kubelet of fake GPU nodes built from the stack's GPU inventory (sim/nodes.py) and
# moves their pods through the stages in sim/kwok-stages.yaml.
#
# kwok manages only nodes annotated kwok.x-k8s.io/node=fake, so a node run by something else (a virtual node)
# can join the cluster and is left alone.
#
# Idempotent: a cluster that is up is reported and its nodes reconciled; one that exists but is stopped, or lost
# a component, is (re)started. The controller manager and scheduler run without leader election: there is one
# of each, and on a starved machine a missed lease renewal would otherwise make them exit. State: .state/sim (kubeconfig, kwokctl workdir with logs under kwok/clusters/<name>/logs).
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
SUMMARY="$(python3 -c 'import json, sys
counts = {}
for n in json.load(sys.stdin)["items"]:
    f = n["metadata"]["labels"]["gpucluster.io/flavor"]
    gpus = sum(int(v) for k, v in n["status"]["capacity"].items() if k.endswith("/gpu"))
    c = counts.setdefault(f, [0, gpus])
    c[0] += 1
print("; ".join(f"{f}: {c[0]} nodes x {c[1]} GPUs" for f, c in counts.items()))' <<<"$NODES_JSON")"

mkdir -p "$SIM_STATE"
start=$SECONDS
if sim_exists; then
  if sim_answers && sim_components_alive; then
    step "cluster '$NAME' is already up (kubeconfig $KUBECONFIG_FILE)"
  elif sim_answers; then
    step "cluster '$NAME' lost component(s): $(sim_components_dead); restarting its control plane"
    kwokctl stop cluster --name "$NAME" >/dev/null 2>&1 || true
    kwokctl start cluster --name "$NAME" --wait 3m || die "kwokctl could not start cluster '$NAME' (logs: $CLUSTER_DIR/logs)"
  else
    step "cluster '$NAME' exists but its API server does not answer: (re)starting its control plane"
    kwokctl stop cluster --name "$NAME" >/dev/null 2>&1 || true
    kwokctl start cluster --name "$NAME" --wait 3m || die "kwokctl could not start cluster '$NAME' (logs: $CLUSTER_DIR/logs)"
  fi
else
  step "creating cluster '$NAME' (kwokctl $(kwokctl --version | awk '{print $3}'), binary runtime, $(kube-apiserver --version))"
  # Every component binary comes from the tool cache; kwok gets the stages and manages only annotated nodes.
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
    die "kwokctl could not create cluster '$NAME'; logs: $CLUSTER_DIR/logs (make sim-down removes the remains)"
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

step "applying GPU nodes: $SUMMARY"
kubectl apply -f - <<<"$NODES_JSON" >/dev/null || die "kubectl apply of the GPU nodes failed"
# Capacity and allocatable live in the status subresource: set them there so they hold on a re-run too.
while IFS=$'\t' read -r node patch; do
  kubectl patch node "$node" --subresource=status --type=merge -p "$patch" >/dev/null ||
    die "could not set the capacity of node $node"
done < <(python3 -c 'import json, sys
for n in json.load(sys.stdin)["items"]:
    print(n["metadata"]["name"], json.dumps({"status": {k: n["status"][k] for k in ("capacity", "allocatable")}}), sep="\t")' <<<"$NODES_JSON")

step "waiting for the nodes to be Ready"
kubectl wait --for=condition=Ready node -l gpucluster.io/flavor --timeout=120s >/dev/null ||
  die "nodes did not become Ready within 120s (is the kwok controller running? logs: $CLUSTER_DIR/logs)"

kubectl get nodes -l gpucluster.io/flavor -o custom-columns='NAME:.metadata.name,FLAVOR:.metadata.labels.gpucluster\.io/flavor,GPUS:.status.allocatable.nvidia\.com/gpu,READY:.status.conditions[?(@.type=="Ready")].status'
step "sim ready in $((SECONDS - start))s: export KUBECONFIG=$KUBECONFIG_FILE"
