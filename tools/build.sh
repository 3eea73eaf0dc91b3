#!/usr/bin/env bash
# Build the pinned Go tools into the cache directory printed by tools/bin-dir.sh:
#   ${GPUCLUSTER_CACHE:-$HOME/.cache/gpucluster}/tools/bin
#
# Each directory under tools/ is a small Go module pinning one group of tools whose dependency versions must
# not mix (Kubernetes 1.36 control plane, the real node's kubelet and kube-proxy, kwok, Kueue, descheduler, etcd, kube-state-metrics, vegeta, Pulumi CLI,
# Pulumi Kubernetes provider); virtualnode/ is our own virtual-kubelet node. A binary whose recorded group hash (.<name>.pin
# beside it) matches its group's sources is skipped, so the script is idempotent, a re-run after a failure resumes
# where it stopped, and changing one group rebuilds only that group. Quick builds run first; the Kubernetes and Pulumi builds
# take tens of minutes on a cold cache with two cores.
#
# Usage: tools/build.sh [name ...]      (no names: every tool)
# Environment: GPUCLUSTER_CACHE (cache root), GO_BUILD_P (go build -p, default 2), GOPROXY as configured.
set -euo pipefail

# shellcheck source=tools/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROOT="$(gpucluster_tools_root)"
# Scratch copies of groups that need generated files (see pre_build) live here, never in the repository.
SRC="$ROOT/src"
BIN="$ROOT/bin"
LOGS="$ROOT/logs"
TIMES="$ROOT/build-times.tsv"
P="${GO_BUILD_P:-2}"

die() {
  echo "tools/build.sh: error: $*" >&2
  exit 1
}

command -v go >/dev/null 2>&1 || die "go is not on PATH (Go >= 1.26 is needed to build the tools)"
mkdir -p "$BIN" "$LOGS" || die "cannot create the cache directory $ROOT (set GPUCLUSTER_CACHE to a writable path)"
touch "$TIMES"

# One build at a time per cache: a second `make tools` waits for the first instead of linking the same
# multi-GiB binaries next to it.
exec 9>"$ROOT/.build.lock"
if ! flock -n 9; then
  echo "tools: another tools/build.sh is building into $ROOT; waiting for it to finish"
  flock 9
fi

# Read-only against each group's go.mod and go.sum: a build never rewrites them, and a module whose checksum is not
# in go.sum stops the build instead of being trusted on first use.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=readonly"
export CGO_ENABLED=0
# The pins are exact; never let the go command switch toolchains behind our back.
export GOTOOLCHAIN=local

# version <group> <module>: the version of <module> selected by the group's go.mod.
version() {
  (cd "$REPO_DIR/$1" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$2") ||
    die "cannot resolve the version of $2 in $1/go.mod (see the go error above)"
}

# moddir <group> <module>: the module's directory in the module cache (downloads it if needed).
moddir() {
  (cd "$REPO_DIR/$1" && go mod download -json "$2" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p') ||
    die "cannot download $2 for $1"
}

# ldflags <name>: the -X flags that stamp the upstream version into a binary, as upstream's release build does.
ldflags() {
  local v
  case "$1" in
    kwok | kwokctl)
      v="$(version tools/kwok sigs.k8s.io/kwok)"
      local kv
      kv="$(version tools/kubernetes k8s.io/kubernetes)"
      echo "-X sigs.k8s.io/kwok/pkg/consts.Version=${v#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${kv#v}"
      ;;
    etcd) ;; # etcd's version is a constant in go.etcd.io/etcd/api/v3/version
    kueue)
      v="$(version tools/kueue sigs.k8s.io/kueue)"
      echo "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$v"
      ;;
    jobset)
      v="$(version tools/jobset sigs.k8s.io/jobset)"
      echo "-X sigs.k8s.io/jobset/pkg/version.GitVersion=$v"
      ;;
    descheduler)
      v="$(version tools/descheduler sigs.k8s.io/descheduler)"
      echo "-X sigs.k8s.io/descheduler/pkg/version.version=$v"
      ;;
    kube-state-metrics)
      v="$(version tools/kube-state-metrics k8s.io/kube-state-metrics/v2)"
      echo "-X github.com/prometheus/common/version.Version=${v#v} -X github.com/prometheus/common/version.Branch=release"
      ;;
    kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kubelet | kube-proxy)
      local group=tools/kubernetes
      [[ "$1" == kubelet || "$1" == kube-proxy ]] && group=tools/kubelet
      v="$(version "$group" k8s.io/kubernetes)"
      local major minor
      major="$(echo "${v#v}" | cut -d. -f1)"
      minor="$(echo "${v#v}" | cut -d. -f2)"
      local f=""
      for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        f+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
        f+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
      done
      echo "$f"
      ;;
    pulumi | pulumi-language-python)
      v="$(version tools/pulumi github.com/pulumi/pulumi/pkg/v3)"
      echo "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$v"
      ;;
    pulumi-resource-kubernetes)
      # The provider module is only served as a pseudo-version; stamp that, not a release it is not.
      v="$(version tools/pulumi-kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4)"
      echo "-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=${v#v}"
      ;;
  esac
}

# The build order: quick ones first. Fields: name, group (module directory relative to the repository root),
# package, module whose version is reported.
STEPS=(
  "kwokctl tools/kwok sigs.k8s.io/kwok/cmd/kwokctl sigs.k8s.io/kwok"
  "kwok tools/kwok sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok"
  "etcd tools/etcd go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3"
  "kueue tools/kueue sigs.k8s.io/kueue/cmd/kueue sigs.k8s.io/kueue"
  "jobset tools/jobset sigs.k8s.io/jobset sigs.k8s.io/jobset"
  "descheduler tools/descheduler sigs.k8s.io/descheduler/cmd/descheduler sigs.k8s.io/descheduler"
  "vegeta tools/vegeta github.com/tsenart/vegeta/v12 github.com/tsenart/vegeta/v12"
  "gpucluster-virtual-node virtualnode gpucluster.local/virtualnode/cmd/gpucluster-virtual-node github.com/virtual-kubelet/virtual-kubelet"
  "gpucluster-metrics-adapter virtualnode gpucluster.local/virtualnode/cmd/gpucluster-metrics-adapter sigs.k8s.io/custom-metrics-apiserver"
  "kube-state-metrics tools/kube-state-metrics k8s.io/kube-state-metrics/v2 k8s.io/kube-state-metrics/v2"
  "kube-scheduler tools/kubernetes k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes"
  "kube-controller-manager tools/kubernetes k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes"
  "kube-apiserver tools/kubernetes k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes"
  "kubectl tools/kubernetes k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes"
  "kubelet tools/kubelet k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes"
  "kube-proxy tools/kubelet k8s.io/kubernetes/cmd/kube-proxy k8s.io/kubernetes"
  "pulumi-language-python tools/pulumi gpucluster.local/tools/pulumi/cmd/pulumi-language-python github.com/pulumi/pulumi/pkg/v3"
  "pulumi tools/pulumi github.com/pulumi/pulumi/pkg/v3/cmd/pulumi github.com/pulumi/pulumi/pkg/v3"
  "pulumi-resource-kubernetes tools/pulumi-kubernetes gpucluster.local/tools/pulumi-kubernetes/cmd/pulumi-resource-kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4"
)

# Steps that need more than `go build` afterwards / before.
pre_build() {
  case "$1" in
    pulumi-resource-kubernetes)
      # The provider embeds its schema files, which upstream's `go generate` writes next to its main. Our
      # main embeds the provider module's schema.json and terraform-mapping.json, copied beside it in a
      # scratch copy of the group inside the cache (the repository is never written to).
      local dir f
      dir="$(moddir tools/pulumi-kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4)"
      [[ -n "$dir" ]] || die "the provider module could not be downloaded"
      BUILD_DIR="$SRC/pulumi-kubernetes"
      rm -rf "$BUILD_DIR"
      mkdir -p "$SRC"
      cp -r "$REPO_DIR/tools/pulumi-kubernetes" "$BUILD_DIR"
      for f in schema.json terraform-mapping.json; do
        [[ -f "$dir/cmd/pulumi-resource-kubernetes/$f" ]] || die "$f not found in $dir/cmd/pulumi-resource-kubernetes"
        install -m 0644 "$dir/cmd/pulumi-resource-kubernetes/$f" "$BUILD_DIR/cmd/pulumi-resource-kubernetes/$f"
      done
      ;;
  esac
}

post_build() {
  case "$1" in
    pulumi-language-python)
      # The language host runs this script from its own directory to execute the Python program.
      local dir
      dir="$(moddir tools/pulumi github.com/pulumi/pulumi/sdk/v3)"
      install -m 0755 "$dir/python/cmd/pulumi-language-python-exec" "$BIN/pulumi-language-python-exec" ||
        die "cannot copy pulumi-language-python-exec from $dir/python/cmd"
      ;;
  esac
}

fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

wanted() {
  [[ $# -eq 0 ]] && return 0
  local n="$1"
  shift
  for w in "${SELECTED[@]}"; do [[ "$w" == "$n" ]] && return 0; done
  return 1
}

SELECTED=("$@")
for s in "${SELECTED[@]}"; do
  found=0
  for step in "${STEPS[@]}"; do [[ "${step%% *}" == "$s" ]] && found=1; done
  [[ $found == 1 ]] || die "unknown tool '$s' (known: $(for step in "${STEPS[@]}"; do printf '%s ' "${step%% *}"; done))"
done

echo "tools: installing into $BIN (go build -p $P)"
total=${#STEPS[@]}
i=0
built_secs=0
built=0
start_all=$SECONDS
for step in "${STEPS[@]}"; do
  read -r name group pkg vmod <<<"$step"
  i=$((i + 1))
  if [[ ${#SELECTED[@]} -gt 0 ]] && ! wanted "$name" "${SELECTED[@]}"; then
    continue
  fi
  [[ -f "$REPO_DIR/$group/go.mod" ]] || die "$group/go.mod is missing (needed for $name)"
  ver="$(version "$group" "$vmod")"
  pin="$(gpucluster_group_hash "$group")"
  if [[ -x "$BIN/$name" && "$(cat "$BIN/.$name.pin" 2>/dev/null)" == "$pin" ]]; then
    cold="$(awk -F'\t' -v n="$name" '$1 == n {print $3}' "$TIMES" | tail -1)"
    echo "[$i/$total] $name $ver already built${cold:+ (cold build took ${cold}s)}"
    continue
  fi
  printf '[%d/%d] building %s %s ... ' "$i" "$total" "$name" "$ver"
  t0=$SECONDS
  log="$LOGS/$name.log"
  BUILD_DIR="$REPO_DIR/$group"
  pre_build "$name" >"$log" 2>&1 || {
    echo "FAILED"
    tail -n 20 "$log" >&2
    die "preparing $name failed; full log: $log"
  }
  flags="$(ldflags "$name")"
  if ! (cd "$BUILD_DIR" && go build -p "$P" -trimpath -ldflags "-s -w $flags" -o "$BIN/.$name.tmp" "$pkg") \
    >>"$log" 2>&1; then
    echo "FAILED after $((SECONDS - t0))s"
    tail -n 30 "$log" >&2
    rm -f "$BIN/.$name.tmp"
    die "building $name ($pkg in $group) failed; full log: $log"
  fi
  mv -f "$BIN/.$name.tmp" "$BIN/$name"
  post_build "$name" >>"$log" 2>&1 || {
    echo "FAILED"
    tail -n 20 "$log" >&2
    rm -f "$BIN/$name"
    die "finishing $name failed; full log: $log"
  }
  echo "$pin" >"$BIN/.$name.pin"
  dt=$((SECONDS - t0))
  built_secs=$((built_secs + dt))
  built=$((built + 1))
  printf '%s\t%s\t%s\n' "$name" "$ver" "$dt" >>"$TIMES"
  echo "done in ${dt}s"
done

cold_total="$(awk -F'\t' '{s += $3} END {print s + 0}' "$TIMES")"
echo "tools: built $built this run in $(fmt_secs $((SECONDS - start_all))); cold build of all recorded:" \
  "$(fmt_secs "$cold_total") (per tool: $TIMES); bin: $BIN"
