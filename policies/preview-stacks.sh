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

failed=()
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
      warn "$stack: skipped — the simulated cluster is not up (make up), so there is nothing to preview against"
      continue
    fi
    step "policy preview: $stack against the simulated cluster"
    (
      pulumi_env
      cd "$ROOT"
      pulumi login --non-interactive "$PULUMI_BACKEND_URL" >/dev/null
      pulumi preview --stack "$stack" --non-interactive --suppress-progress --diff=false --policy-pack "$PACK"
    ) || failed+=("$stack")
    continue
  fi
  step "policy preview: $stack offline (rendered, charts from Go modules)"
  work="$STATE/policy/$stack"
  rm -rf "$work"
  mkdir -p "$work/stacks" "$work/state" "$work/rendered"
  "$PY" - "$ROOT" "$work" "$src" "$stack" "$work/rendered" <<'PYEOF'
import sys
from pathlib import Path

import yaml

root, work, src, stack, rendered = sys.argv[1:]
project = yaml.safe_load(Path(root, "Pulumi.yaml").read_text())
project["main"] = root
project["runtime"] = {"name": "python", "options": {"virtualenv": str(Path(root, ".venv"))}}
Path(work, "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
doc = yaml.safe_load(Path(src).read_text())
doc["config"]["kubernetes:renderYamlToDirectory"] = rendered
Path(work, "stacks", f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
PYEOF
  (
    export PULUMI_SKIP_UPDATE_CHECK=1 PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=1
    export PULUMI_HOME="$work/pulumi-home" PULUMI_BACKEND_URL="file://$work/state"
    # A throwaway state of a preview holds no secret; the passphrase only seals it.
    export PULUMI_CONFIG_PASSPHRASE="policy-$stack"
    export GPUCLUSTER_OFFLINE_CHARTS=1
    cd "$work"
    pulumi login --non-interactive "$PULUMI_BACKEND_URL" >/dev/null
    pulumi stack init --non-interactive "$stack" >/dev/null
    pulumi preview --stack "$stack" --non-interactive --suppress-progress --diff=false --policy-pack "$PACK"
  ) || failed+=("$stack")
done

if [[ ${#failed[@]} -gt 0 ]]; then
  die "policy preview failed for: ${failed[*]}"
fi
step "policy preview passed: ${stacks[*]}"
