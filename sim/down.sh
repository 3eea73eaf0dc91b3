#!/usr/bin/env bash
# make sim-down: remove the simulated cluster and everything under .state/sim. Processes started against it
# (the local Kueue controller) are stopped first. Idempotent: nothing to remove is not an error.
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$ROOT/sim/kueue.sh" stop

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
step "sim is down"
