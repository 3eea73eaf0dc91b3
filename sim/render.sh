#!/usr/bin/env bash
# make render STACK=prod DIR=rendered/prod: the stack's Kubernetes manifests, written by the Kubernetes
# provider's render mode (renderYamlToDirectory) from the same program and engine as `pulumi up`. No cluster is
# contacted. The output directory is replaced: 0-crd/ holds CustomResourceDefinitions, 1-manifest/ the rest.
#
# The stack file is never modified: the engine runs in a scratch project under .state/render/<stack> whose
# config is a copy of stacks/Pulumi.<stack>.yaml plus kubernetes:renderYamlToDirectory, with a throwaway state
# backend, so the default Kubernetes provider renders instead of applying.
#
# Charts come from the stack's own sources (OCI registry / chart repository for prod). Where those are out of
# reach, CHARTS=gomodule reads the Kueue and descheduler charts from their Go modules at the stack's chart
# versions instead (GPUCLUSTER_OFFLINE_CHARTS; NVIDIA's dcgm-exporter chart, which no module carries, is left
# out); those copies are the projects' source trees, not the published packages (Kueue's points
# at its staging image, the descheduler module v0.36.0 carries chart 0.35.0), so that output is for review,
# not for GitOps.
#
# Usage: sim/render.sh STACK DIR      Environment: CHARTS=stack|gomodule (default stack)
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

[[ $# -eq 2 ]] || die "usage: sim/render.sh STACK DIR (e.g. make render STACK=prod DIR=rendered/prod)"
RSTACK="$1"
OUT_DIR="$2"
CHARTS="${CHARTS:-stack}"
SRC="$ROOT/stacks/Pulumi.$RSTACK.yaml"
[[ -f "$SRC" ]] || die "no stack file $SRC (stacks: $(cd "$ROOT/stacks" && ls Pulumi.*.yaml | sed 's/Pulumi\.\(.*\)\.yaml/\1/' | paste -sd' ' -))"
[[ "$CHARTS" == stack || "$CHARTS" == gomodule ]] || die "CHARTS must be stack or gomodule (got '$CHARTS')"
sim_require_tools pulumi pulumi-language-python pulumi-language-python-exec pulumi-resource-kubernetes
PY="$ROOT/.venv/bin/python"
[[ -x "$PY" ]] || die "the Python venv is missing (make venv)"

# Validate first: a broken stack file stops here with every problem and its key path.
"$PY" -m components.config check "$SRC" >/dev/null || {
  "$PY" -m components.config check "$SRC" >&2 || true
  die "stack $RSTACK is not valid; nothing was rendered"
}

mkdir -p "$(dirname "$OUT_DIR")"
OUT_ABS="$(cd "$(dirname "$OUT_DIR")" && pwd)/$(basename "$OUT_DIR")"
WORK="$STATE/render/$RSTACK"
rm -rf "$WORK" "$OUT_ABS"
mkdir -p "$WORK/state" "$WORK/stacks"

# The scratch project: the same program (main: the repository), the same venv, its own config directory.
"$PY" - "$ROOT" "$WORK" "$SRC" "$RSTACK" "$OUT_ABS" "$CHARTS" <<'PYEOF'
import sys
from pathlib import Path

import yaml

root, work, src, stack, out, charts = sys.argv[1:]
project = yaml.safe_load(Path(root, "Pulumi.yaml").read_text())
project["main"] = root
project["stackConfigDir"] = "stacks"
project["runtime"] = {"name": "python", "options": {"virtualenv": str(Path(root, ".venv"))}}
Path(work, "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
doc = yaml.safe_load(Path(src).read_text())
cfg = doc["config"]
cfg["kubernetes:renderYamlToDirectory"] = out
Path(work, "stacks", f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
PYEOF

if [[ "$CHARTS" == gomodule ]]; then
  # components/charts.py maps each registry chart to the Go module carrying it; a chart no module carries
  # (NVIDIA's dcgm-exporter) is left out with a warning.
  export GPUCLUSTER_OFFLINE_CHARTS=1
  warn "CHARTS=gomodule: Kueue and descheduler charts from their Go modules, not the published packages"
fi

export PULUMI_SKIP_UPDATE_CHECK=1 PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=1
export PULUMI_HOME="$WORK/pulumi-home" PULUMI_BACKEND_URL="file://$WORK/state"
# A throwaway state holds no secrets of the stack; the passphrase only seals this scratch state.
export PULUMI_CONFIG_PASSPHRASE="render-$RSTACK"
cd "$WORK"
pulumi login --non-interactive "$PULUMI_BACKEND_URL" >/dev/null
pulumi stack init --non-interactive "$RSTACK" >/dev/null
step "rendering stack $RSTACK into $OUT_DIR"
pulumi up --stack "$RSTACK" --yes --non-interactive --skip-preview --suppress-progress --diff=false ||
  die "rendering $RSTACK failed (the engine's message is above)"
count="$(find "$OUT_ABS" -name '*.yaml' | wc -l)"
step "rendered $count manifest(s) into $OUT_DIR ($(find "$OUT_ABS" -mindepth 1 -maxdepth 1 -type d -printf '%f ' | sed 's/ $//'))"
rm -rf "$WORK"
