#!/usr/bin/env bash
# make debian-deps: the Debian packages `make up` and the tests need: prometheus (the Prometheus the simulated
# cluster's taint controllers query, promtool for the rule tests, the real Prometheus the exporter tests scrape),
# prometheus-node-exporter (benchmark baseline), openssl (the keys of the tests' own API servers), curl (what
# the docs' checks use) and fio (storage acceptance's aggregate run, for real, in its client/server mode), and
# what `make images` builds and checks images with: mmdebstrap (the Debian base), umoci
# (unpacks an image into a runtime bundle), runc (runs it: Debian's crun 1.8 refuses a hybrid cgroup hierarchy),
# skopeo (inspects and pushes OCI archives); and the simulated cluster's real node (sim/node.py): containerd (with
# runc), containernetworking-plugins (the pod bridge), iptables (kube-proxy), gcc and libc6-dev (the sandbox's static
# pause binary).
# Idempotent and quick: installs only what is missing; does nothing when everything is present. Needs root (or
# sudo) only when something is missing. On a system without dpkg the programs must already be on PATH.
set -euo pipefail

wanted=(prometheus prometheus-node-exporter openssl curl fio mmdebstrap umoci runc skopeo containerd containernetworking-plugins
  iptables gcc libc6-dev)
# The programs those packages give, for a system that is not Debian.
programs=(prometheus promtool prometheus-node-exporter openssl curl fio mmdebstrap umoci runc skopeo containerd ctr iptables cc)

if ! command -v dpkg-query >/dev/null 2>&1; then
  absent=()
  for p in "${programs[@]}"; do command -v "$p" >/dev/null 2>&1 || absent+=("$p"); done
  if [ "${#absent[@]}" -eq 0 ]; then
    echo "debian deps present: ${programs[*]} on PATH (no dpkg here)"
    exit 0
  fi
  echo "install-debian-deps: no dpkg here to install packages; install these programs yourself: ${absent[*]}" >&2
  exit 1
fi

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
# --no-install-recommends keeps the install small.
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The packages start system services where an init system runs; the tests start their own instances.
for svc in prometheus prometheus-node-exporter; do
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
    "${sudo_cmd[@]}" systemctl stop "$svc" || true
  fi
done
