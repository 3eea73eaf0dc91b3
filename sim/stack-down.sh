#!/usr/bin/env bash
# make down: tear down what make up built: stop the local daemons, drop the local stack's state (the cluster it
# describes is deleted next, so nothing is destroyed object by object), delete the simulated cluster and the local
# state (.state/sim, .state/descheduler, .state/pulumi). The tool cache stays.
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ -d "$STATE/daemons" ]]; then
  # The daemons of the stack that was deployed: GPUCLUSTER_STACK / GPUCLUSTER_SIM_STACK as make up had them.
  GPUCLUSTER_SIM_STACK="$STACK" "$(sim_python)" "$ROOT/sim/processes.py" stop || warn "some local daemons did not stop cleanly"
fi
if [[ -d "$STATE/pulumi" ]]; then
  step "dropping the Pulumi state of the local stack ($STATE/pulumi)"
  rm -rf "$STATE/pulumi" "$STATE/pulumi-home"
fi
"$ROOT/sim/down.sh"
rm -rf "$STATE/descheduler" "$STATE/daemons"
rmdir "$STATE" 2>/dev/null || true
step "down"
