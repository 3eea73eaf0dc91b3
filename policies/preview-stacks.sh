#!/usr/bin/env bash
# make policy: the real engine previews every stack with this policy pack; a mandatory violation fails.
#
#   local   against the simulated cluster and its state (run `make up` first; skipped, and said so, when the
#           cluster is not up)
#   others  offline: the Kubernetes provider renders instead of contacting a cluster
#           (kubernetes:renderYamlToDirectory) and registry charts are read from the Go modules that carry them (GPUCLUSTER_OFFLINE_CHARTS), in a
#           scratch project under .state/policy/<stack>, so the stack file is never touched
#
# Usage: policies/preview-stacks.sh [STACK | FILE ...]   (no names: every stacks/Pulumi.*.yaml; a FILE is a
#        stack file elsewhere, e.g. a draft, previewed offline under the stack name its file name gives)
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../sim/lib.sh"

sim_require_tools pulumi pulumi-language-python pulumi-language-python-exec pulumi-resource-kubernetes
PY="$ROOT/.venv/bin/python"
[[ -x "$PY" ]] || die "the Python venv is missing (make venv)"
PACK="$ROOT/policies"

if [[ $# -gt 0 ]]; then
  stacks=("$@")
else
  mapfile -t stacks < <(cd "$ROOT/stacks" && ls Pulumi.*.yaml | sed 's/^Pulumi\.\(.*\)\.yaml$/\1/')
fi

passed=()
failed=()
skipped=()
for stack in "${stacks[@]}"; do
  if [[ -f "$stack" ]]; then
    src="$(cd "$(dirname "$stack")" && pwd)/$(basename "$stack")"
    stack="$(basename "$src" .yaml)"
    stack="${stack#Pulumi.}"
  else
    src="$ROOT/stacks/Pulumi.$stack.yaml"
  fi
  [[ -f "$src" ]] || die "no stack file $src"
  "$PY" -m components.config check "$src" || {
    failed+=("$stack (invalid config)")
    continue
  }
  if [[ "$stack" == "$STACK_NAME" && "$src" == "$ROOT/stacks/Pulumi.$stack.yaml" ]]; then
    if ! sim_answers; then
      # Under CI=true nothing may skip silently: a stack that cannot be previewed fails the run.
      if under_ci; then
        failed+=("$stack (CI=true and the simulated cluster is not up: run make up first)")
      else
        warn "$stack: skipped — the simulated cluster is not up (make up), so there is nothing to preview against"
        skipped+=("$stack (the simulated cluster is not up)")
      fi
      continue
    fi
    step "policy preview: $stack against the simulated cluster"
    (
      pulumi_env
      cd "$ROOT"
      pulumi login --non-interactive "$PULUMI_BACKEND_URL" >/dev/null
      pulumi preview --stack "$stack" --non-interactive --suppress-progress --diff=false --policy-pack "$PACK"
    ) && passed+=("$stack") || failed+=("$stack")
    continue
  fi
  step "policy preview: $stack offline (rendered, charts from Go modules)"
  work="$STATE/policy/$stack"
  scratch_project "$work" "$src" "$stack" "$work/rendered"
  mkdir -p "$work/rendered"
  (
    # A throwaway state of a preview holds no secret; the passphrase only seals it.
    scratch_engine "$work" "$stack" "policy-$stack"
    export GPUCLUSTER_OFFLINE_CHARTS=1
    pulumi preview --stack "$stack" --non-interactive --suppress-progress --diff=false --policy-pack "$PACK"
  ) && passed+=("$stack") || failed+=("$stack")
done

if [[ ${#failed[@]} -gt 0 ]]; then
  die "policy preview failed for: ${failed[*]}"
fi
if [[ ${#skipped[@]} -gt 0 ]]; then
  step "policy preview passed: ${passed[*]:-none}; skipped: ${skipped[*]}"
else
  step "policy preview passed: ${passed[*]}"
fi
