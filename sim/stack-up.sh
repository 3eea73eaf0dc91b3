#!/usr/bin/env bash
# make up: the local stack deployed by the real engine onto the simulated GPU cluster. The Makefile has built the
# tools and the venv before this runs. Steps:
#
#   1. sim/up.sh                      the simulated cluster with its real node (idempotent)
#   2. sim/claims.py --register-driver the stack's CSIDriver object (the prerequisites check looks for it)
#   3. sim/processes.py start --outside the fake providers (the world outside the cluster), then
#      pulumi up --stack local        Pulumi CLI + Python host + Kubernetes provider from the tool cache,
#                                     state in .state/pulumi (file backend). Kueue's and JobSet's charts run their
#                                     controllers as pods on the real node; the engine waits for them to be Ready
#                                     (serving their webhooks) before it creates the Kueue objects, which depend on
#                                     the chart, so a fresh cluster converges in this one update
#   4. sim/claims.py                  a volume for each training claim (no CSI driver runs here)
#   5. the descheduler dry run
#   6. sim/processes.py start          what stands around the stack as local processes (kube-state-metrics, the
#                                     fake dcgm-exporter, the Services' stand-in, Prometheus), never anything the
#                                     stack deploys as a pod; then the pods the stack runs on the real node
#                                     (sim/node.py: the controllers, the metrics adapter, the virtual node, the
#                                     descheduler, Kueue, JobSet) until Ready, and the virtual node's Node
#   7. wait for every ClusterQueue to be Active (the make-before-break check is Active once its controller runs)
#   8. a summary
#
# Environment: GPUCLUSTER_UP_SKIP_PREVIEW=1 skips the engine's preview pass (faster; the default keeps it);
# GPUCLUSTER_UP_SKIP_DAEMONS=1 leaves the local daemons alone. GPUCLUSTER_STACK (default local) names the stack,
# GPUCLUSTER_SIM_STACK its file (default stacks/Pulumi.<stack>.yaml); a file elsewhere, such as a scale stack of
# benchmarks/stacks/, is deployed with `pulumi up --config-file FILE` and its stack created without writing into
# stacks/ (sim/lib.sh stack_init_from_file):
#   GPUCLUSTER_STACK=scale96 GPUCLUSTER_SIM_STACK=benchmarks/stacks/Pulumi.scale96.yaml make up
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

t_start=$SECONDS
sim_require_tools pulumi pulumi-language-python pulumi-language-python-exec pulumi-resource-kubernetes kubectl
[[ -x "$ROOT/.venv/bin/python" ]] || die "the Python venv is missing (make venv)"
[[ -f "$STACK" ]] || die "stack file $STACK not found (GPUCLUSTER_STACK=$STACK_NAME, GPUCLUSTER_SIM_STACK)"
mapfile -t config_file < <(stack_file_args)
# sim/processes.py (the daemons, their config) reads the same file.
export GPUCLUSTER_SIM_STACK="$STACK"

# Every pod the stack deploys (our controllers, the metrics adapter, the virtual node, the charts' controllers) runs
# only on the real node, the charts' from the images built here: a stack that puts one elsewhere, or names another
# release, is refused before anything is deployed.
"$(sim_python)" "$ROOT/sim/placement.py" check ||
  die "the stack's pods could not run on the simulated cluster (the reason is above)"
"$ROOT/sim/up.sh"
# The stack's storage driver as a real cluster has it registered: the prerequisites check of every preview and up
# looks for it (no node plugin runs on the simulated nodes; sim/claims.py binds the claims below).
KUBECONFIG="$KUBECONFIG_FILE" "$(sim_python)" "$ROOT/sim/claims.py" --register-driver ||
  die "the stack's CSIDriver could not be registered (the reason is above)"

pulumi_env
cd "$ROOT"
step "Pulumi $(pulumi version) with $(pulumi-resource-kubernetes --version 2>/dev/null || echo 'the pinned Kubernetes provider'), backend $PULUMI_BACKEND_URL"
pulumi login --non-interactive "$PULUMI_BACKEND_URL" >/dev/null || die "pulumi login $PULUMI_BACKEND_URL failed"
if [[ ${#config_file[@]} -eq 0 ]]; then
  pulumi stack select --create --non-interactive "$STACK_NAME" || die "cannot select or create stack $STACK_NAME"
else
  step "stack $STACK_NAME from $STACK (pulumi up ${config_file[*]})"
  pulumi stack select --non-interactive "$STACK_NAME" >/dev/null 2>&1 || stack_init_from_file "$STACK_NAME" "$STACK"
  pulumi stack select --non-interactive "$STACK_NAME" || die "cannot select stack $STACK_NAME"
fi

# What stands for the world outside the cluster (the fake GPU cloud, RunPod's fake) is up before the stack is
# deployed, as real providers are: the virtual node's pod, which pulumi up waits for, lists their instances as it
# starts. RunPod's fake takes its key from the stack's config until the provider Secret exists.
if [[ "${GPUCLUSTER_UP_SKIP_DAEMONS:-0}" != 1 ]]; then
  step "the fake providers (sim/processes.py start --outside)"
  "$(sim_python)" "$ROOT/sim/processes.py" start --outside || die "the fake providers did not start (the reason is above)"
fi

up_args=(--stack "$STACK_NAME" "${config_file[@]}" --yes --non-interactive --suppress-progress --diff=false)
[[ "${GPUCLUSTER_UP_SKIP_PREVIEW:-0}" == 1 ]] && up_args+=(--skip-preview)

# pulumi_up ARGS...: one update, retried once: on a starved machine the API server can time out a request
# (e.g. the OpenAPI schema fetch) that succeeds a moment later; a second failure is reported.
pulumi_up() {
  pulumi up "${up_args[@]}" "$@" && return 0
  warn "pulumi up failed; retrying once in 10s (a real problem fails again and stops here)"
  sleep 10
  pulumi up "${up_args[@]}" "$@"
}

step "pulumi up --stack $STACK_NAME"
pulumi_up || die "pulumi up failed twice (the engine's message is above)"
# No CSI driver runs here: give each training claim a volume, or no pod mounting one is ever scheduled.
"$(sim_python)" "$ROOT/sim/claims.py" || die "the training claims could not be bound (the reason is above)"

export KUBECONFIG="$KUBECONFIG_FILE"
"$ROOT/sim/descheduler.sh"

if [[ "${GPUCLUSTER_UP_SKIP_DAEMONS:-0}" != 1 ]]; then
  placed=$("$(sim_python)" "$ROOT/sim/deployed.py" placed) || die "the stack could not be read (the reason is above)"
  if [[ "${GPUCLUSTER_SIM_REAL_NODE:-1}" == 0 ]]; then
    [[ -z "$placed" ]] || die "GPUCLUSTER_SIM_REAL_NODE=0, but the stack places these on the real node, where they \
alone run: $placed (leave the real node on, or use a stack that does not place them there)"
  fi
  step "what stands around the stack, as local processes (sim/processes.py; logs in .state/daemons/logs)"
  "$(sim_python)" "$ROOT/sim/processes.py" start || die "the local processes did not all start (the reason is above)"
  if [[ "${GPUCLUSTER_SIM_REAL_NODE:-1}" != 0 ]]; then
    # A scenario that stopped a controller or ran it with other settings, and was cut short, left it so.
    "$(sim_python)" "$ROOT/sim/deployed.py" restore || die "the stack's controllers could not be put back as deployed"
    step "waiting for the stack's pods on the real node to be Ready"
    "$(sim_python)" "$ROOT/sim/node.py" wait --timeout 180 || die "the stack's pods on the real node are not Ready"
    # The virtual node's pod registers its Node once the provider service behind it answers.
    if [[ " $placed " == *" virtual-node "* ]]; then
      "$(sim_python)" "$ROOT/sim/deployed.py" wait-virtual-node --timeout 180 ||
        die "the virtual node did not become Ready (the reason is above)"
    fi
    # The metrics adapter's custom.metrics.k8s.io answers once the API server reaches its pods.
    adapter=(apiservices.apiregistration.k8s.io -l app.kubernetes.io/name=gpucluster-metrics-adapter)
    if [[ -n "$(kubectl get "${adapter[@]}" -o name)" ]]; then
      step "waiting for the metrics adapter's APIService to be Available"
      kubectl wait --for=condition=Available "${adapter[@]}" --timeout=120s >/dev/null ||
        die "the metrics adapter's APIService is not Available after 120s: $(kubectl get "${adapter[@]}" 2>&1)"
    fi
  fi
  # After the daemons: a ClusterQueue that lists the make-before-break check is Active only once its controller
  # has marked the AdmissionCheck Active.
  step "waiting for every ClusterQueue to be Active"
  kubectl wait --for=condition=Active clusterqueues.kueue.x-k8s.io --all --timeout=120s >/dev/null ||
    die "ClusterQueues not Active after 120s: $(kubectl get clusterqueues.kueue.x-k8s.io -o wide 2>&1 | tail -n +2)"
else
  step "daemons skipped: ClusterQueues that list the make-before-break check stay inactive until its controller runs"
fi

step "summary"
"$ROOT/.venv/bin/python" "$ROOT/sim/summary.py" || die "the summary could not be built"
step "up in $((SECONDS - t_start))s; source sim/env.sh for KUBECONFIG and the engine's environment"
