#!/usr/bin/env bash
# Run the pinned descheduler once, in dry-run mode, against the simulated cluster with the DeschedulerPolicy
# Pulumi deployed (read back from the chart's ConfigMap). It proves the descheduler accepts the policy the
# stack renders and shows what it would evict now; it evicts nothing.
#
# Usage: sim/descheduler.sh [POLICY_FILE]   (a file instead of the deployed policy, e.g. to check a draft)
# Output: the verdict on stdout; the full log in .state/descheduler/dry-run.log. Exit 1 when it is refused.
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

sim_require_tools descheduler kubectl
sim_answers || die "the simulated cluster does not answer (make sim-up)"
export KUBECONFIG="$KUBECONFIG_FILE"
OUT="$STATE/descheduler"
mkdir -p "$OUT"
LOG="$OUT/dry-run.log"

if [[ $# -ge 1 ]]; then
  POLICY="$1"
  [[ -f "$POLICY" ]] || die "policy file $POLICY not found"
else
  ns="$("$(sim_python)" "$ROOT/sim/stack_value.py" "$STACK" descheduler-namespace)" ||
    die "cannot read the descheduler namespace from $STACK (see above)"
  cm="$(kubectl get configmap -n "$ns" -l app.kubernetes.io/name=descheduler -o name | head -1)" || true
  [[ -n "$cm" ]] || die "no descheduler ConfigMap in namespace $ns: deploy the stack first (make up)"
  POLICY="$OUT/policy.yaml"
  kubectl get -n "$ns" "$cm" -o jsonpath='{.data.policy\.yaml}' >"$POLICY" || die "cannot read $cm"
  [[ -s "$POLICY" ]] || die "$cm has no policy.yaml"
fi

# No --descheduling-interval: one pass, then exit. No serving port, no leader election: a one-shot check.
if timeout 120 descheduler --kubeconfig "$KUBECONFIG" --policy-config-file "$POLICY" --dry-run \
  --secure-port=0 --disable-metrics --v=3 >"$LOG" 2>&1; then
  evicted="$(grep -c 'Evicted pod in dry run mode' "$LOG" || true)"
  echo "descheduler: policy $POLICY accepted; dry run would evict $evicted pod(s) now (log: $LOG)"
else
  rc=$?
  tail -n 15 "$LOG" >&2
  echo "descheduler: policy $POLICY refused or the run failed (exit $rc, log: $LOG)" >&2
  exit 1
fi
