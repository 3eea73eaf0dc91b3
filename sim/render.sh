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
rm -rf "$OUT_ABS"
# The scratch project: the same program (main: the repository), the same venv, its own config directory.
scratch_project "$WORK" "$SRC" "$RSTACK" "$OUT_ABS"

if [[ "$CHARTS" == gomodule ]]; then
  # components/charts.py maps each registry chart to the Go module carrying it; a chart no module carries
  # (NVIDIA's dcgm-exporter) is left out with a warning.
  export GPUCLUSTER_OFFLINE_CHARTS=1
  warn "CHARTS=gomodule: Kueue and descheduler charts from their Go modules, not the published packages"
fi

# A throwaway state holds no secrets of the stack; the passphrase only seals this scratch state. A stack file that
# carries an encryptionsalt keeps it, and its sealed secrets, in the copy: then the engine needs the stack's own
# passphrase (the local stack's is gpucluster-local, as for make up).
passphrase="render-$RSTACK"
if grep -q '^encryptionsalt:' "$SRC"; then
  [[ "$SRC" -ef "$ROOT/stacks/Pulumi.local.yaml" ]] && : "${PULUMI_CONFIG_PASSPHRASE:=gpucluster-local}"
  [[ -n "${PULUMI_CONFIG_PASSPHRASE:-}" ]] ||
    die "$SRC seals its secrets with a passphrase: set PULUMI_CONFIG_PASSPHRASE to the stack's own"
  passphrase="$PULUMI_CONFIG_PASSPHRASE"
fi
scratch_engine "$WORK" "$RSTACK" "$passphrase"
step "rendering stack $RSTACK into $OUT_DIR"
pulumi up --stack "$RSTACK" --yes --non-interactive --skip-preview --suppress-progress --diff=false ||
  die "rendering $RSTACK failed (the engine's message is above)"
count="$(find "$OUT_ABS" -name '*.yaml' | wc -l)"
step "rendered $count manifest(s) into $OUT_DIR ($(find "$OUT_ABS" -mindepth 1 -maxdepth 1 -type d -printf '%f ' | sed 's/ $//'))"
rm -rf "$WORK"
