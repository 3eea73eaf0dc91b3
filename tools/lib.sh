# Shared by build.sh and bin-dir.sh: where the pinned tools live.
# The cache directory is keyed by a hash of the pin files (every go.mod and .go file under tools/), so a
# changed pin builds into a fresh directory and an unchanged one is reused.
# shellcheck shell=bash

TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

gpucluster_pin_hash() {
  (
    cd "$TOOLS_DIR" || exit 1
    # Sorted, NUL-separated so the hash does not depend on directory order or odd names.
    find . -type f \( -name go.mod -o -name '*.go' \) -print0 | LC_ALL=C sort -z |
      xargs -0 sha256sum | sha256sum | cut -c1-16
  )
}

gpucluster_tools_root() {
  echo "${GPUCLUSTER_CACHE:-$HOME/.cache/gpucluster}/tools/$(gpucluster_pin_hash)"
}
