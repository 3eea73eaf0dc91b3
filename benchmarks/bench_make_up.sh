#!/usr/bin/env bash
# Times `make up` on this machine and prints the figures (target: a warm `make up` within 180 s).
#
#   cold   : when no simulated cluster is up: from nothing to the summary (sim-up, two engine updates, Kueue)
#   warm   : `make up` on the running cluster (the engine finds no changes)
#
# The tool cache must be built (make tools); without it the benchmark says so and measures nothing. It never
# tears a cluster down and leaves it up, as `make up` does (`make down` removes it).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BIN="$(tools/bin-dir.sh)"
for t in kwokctl kube-apiserver kueue pulumi pulumi-resource-kubernetes; do
  if [[ ! -x "$BIN/$t" ]]; then
    echo "bench_make_up: skipped: $t is not built in $BIN (make tools)"
    exit 0
  fi
done
LOG_DIR="$(mktemp -d)"

run() {
  local label="$1" t0=$SECONDS
  if ! make --no-print-directory up >"$LOG_DIR/$label.log" 2>&1; then
    tail -n 30 "$LOG_DIR/$label.log" >&2
    echo "bench_make_up: make up ($label) failed; log $LOG_DIR/$label.log" >&2
    exit 1
  fi
  echo "$((SECONDS - t0))"
}

if [[ ! -f .state/sim/kubeconfig ]]; then
  cold="$(run cold)"
  printf 'make up cold (from nothing):   %4ss\n' "$cold"
fi
warm="$(run warm)"
printf 'make up warm (running cluster): %4ss  (target <= 180s: %s)\n' "$warm" "$([[ $warm -le 180 ]] && echo met || echo MISSED)"
echo "engine result of the warm run:"
grep -E 'Resources:|unchanged|[0-9]+ (created|updated|deleted|changed)' "$LOG_DIR/warm.log" | sed 's/^/  /' | tail -n 6
rm -rf "$LOG_DIR"
