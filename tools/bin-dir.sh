#!/usr/bin/env bash
# Print the directory holding the pinned tool binaries (it may not exist yet: run tools/build.sh).
#   export PATH="$(tools/bin-dir.sh):$PATH"
set -euo pipefail
# shellcheck source=tools/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
echo "$(gpucluster_tools_root)/bin"
