# Source this to talk to the simulated cluster and drive the local stack by hand:
#   source sim/env.sh && kubectl get clusterqueues && pulumi preview --stack local
# It puts the pinned tools first on PATH and sets KUBECONFIG and the engine's environment (file backend in
# .state/pulumi, the local stack's passphrase, no update checks, no plugin downloads).
# shellcheck shell=bash
_gpucluster_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROOT="$_gpucluster_root"
# shellcheck source=sim/lib.sh
source "$_gpucluster_root/sim/lib.sh"
pulumi_env
unset _gpucluster_root
