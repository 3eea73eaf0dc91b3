#!/usr/bin/env bash
# Debian packages the telemetry tests and benchmarks need: promtool/prometheus (rule tests, the real
# Prometheus the exporter tests scrape with) and prometheus-node-exporter (benchmark baseline).
# Idempotent: installs only what is missing; does nothing when everything is present.
set -euo pipefail

wanted=(prometheus prometheus-node-exporter)
missing=()
for pkg in "${wanted[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "debian deps present: ${wanted[*]}"
  exit 0
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); else
    echo "install-debian-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
# --no-install-recommends keeps the install small; policy-rc.d stops the packages starting their services.
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The packages start system services where an init system runs; the tests start their own instances.
for svc in prometheus prometheus-node-exporter; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
    "${sudo_cmd[@]}" systemctl stop "$svc" || true
  fi
done
