# Shared by build.sh and bin-dir.sh: where the pinned tools live.
# Every tool is built into one bin directory, ${GPUCLUSTER_CACHE:-$HOME/.cache/gpucluster}/tools/bin. Beside each
# binary, .<name>.pin records the hash of the source group it was built from (go.mod, go.sum and every .go file of
# that group), so changing one group rebuilds only that group's tools and an unchanged one is reused.
# shellcheck shell=bash

TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$TOOLS_DIR")"

# gpucluster_group_hash <dir relative to the repository root>: the hash of one source group.
gpucluster_group_hash() {
  (
    cd "$REPO_DIR/$1" || exit 1
    # Sorted, NUL-separated so the hash does not depend on directory order or odd names.
    find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) -print0 | LC_ALL=C sort -z |
      xargs -0 sha256sum | sha256sum | cut -c1-16
  )
}

gpucluster_tools_root() {
  echo "${GPUCLUSTER_CACHE:-$HOME/.cache/gpucluster}/tools"
}
