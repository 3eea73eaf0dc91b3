#!/usr/bin/env bash
# make sim-down: remove the simulated cluster and everything under .state/sim (sim/kwok-cluster.sh down).
# Processes started against it (the local Kueue controller) are stopped first. Idempotent: nothing to remove is
# not an error.
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"$ROOT/sim/jobset.sh" stop
"$ROOT/sim/kueue.sh" stop
"$ROOT/sim/kwok-cluster.sh" down --name "$NAME" --state "$SIM_STATE"
step "sim is down"
