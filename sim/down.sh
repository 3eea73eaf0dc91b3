#!/usr/bin/env bash
# make sim-down: remove the simulated cluster and everything under .state/sim (sim/kwok-cluster.sh down), and the
# second cluster sim/remote.sh started, if any. The real node started against it is stopped first. Idempotent:
# nothing to remove is not an error.
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The real node first: its pods are deleted through the API server while it still answers, then the machine is
# put back as it was (sim/node.py down; a node that never started has nothing to put back).
if [[ -d "$STATE/node" ]]; then
  KUBECONFIG="$KUBECONFIG_FILE" "$(sim_python)" "$ROOT/sim/node.py" down || warn "the real node did not come down cleanly (see above)"
fi
"$ROOT/sim/kwok-cluster.sh" down --name "$NAME" --state "$SIM_STATE"
# The second cluster a test started for the kubernetes provider (sim/remote.sh): its certificate is made when it
# is created, so it goes with the first.
if [[ -d "$STATE/remote" ]]; then
  "$ROOT/sim/remote.sh" down || warn "the second simulated cluster did not come down cleanly (see above)"
fi
step "sim is down"
