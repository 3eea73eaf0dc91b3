# Shared by the sim/*.sh scripts: where things live and small helpers. Source it; it sets no shell options.
# shellcheck shell=bash
# Its settings (STACK, SIM_STATE, ...) are read by the scripts that source it, not here:
# shellcheck disable=SC2034

ROOT="${ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
# shellcheck source=tools/lib.sh
source "$ROOT/tools/lib.sh"

NAME="${GPUCLUSTER_SIM_NAME:-gpucluster}"
STACK_NAME="${GPUCLUSTER_STACK:-local}"
# The stack file: stacks/Pulumi.<stack>.yaml (Pulumi's stackConfigDir), or GPUCLUSTER_SIM_STACK, e.g. a scale stack
# of benchmarks/stacks/, deployed with `pulumi up --config-file` (stack_file_args). Made absolute; the scripts that
# run the stack's Python (sim/processes.py reads GPUCLUSTER_SIM_STACK) export it for them.
STACK_DEFAULT_FILE="$ROOT/stacks/Pulumi.$STACK_NAME.yaml"
STACK="${GPUCLUSTER_SIM_STACK:-$STACK_DEFAULT_FILE}"
[[ "$STACK" == /* ]] || STACK="$PWD/$STACK"
STATE="$ROOT/.state"
SIM_STATE="$STATE/sim"
KUBECONFIG_FILE="$SIM_STATE/kubeconfig"
# kwokctl keeps each cluster (pki, configs, logs, pids) under its workdir; ours lives in the repository's state.
export KWOK_WORKDIR="$SIM_STATE/kwok"
CLUSTER_DIR="$KWOK_WORKDIR/clusters/$NAME"
BIN="$(gpucluster_tools_root)/bin"
export PATH="$BIN:$PATH"

step() { printf '==> %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() {
  printf '%s: error: %s\n' "$(basename "${0:-sim}")" "$*" >&2
  exit 1
}

# under_ci: CI=true (or 1, yes), where nothing may skip silently (as tests/support/require.py decides).
under_ci() {
  local ci="${CI:-}"
  [[ "${ci,,}" == 1 || "${ci,,}" == true || "${ci,,}" == yes ]]
}

# sim_require_tools NAME...: every tool must be in the pinned cache (nothing is downloaded).
sim_require_tools() {
  local missing=()
  for t in "$@"; do [[ -x "$BIN/$t" ]] || missing+=("$t"); done
  if [[ ${#missing[@]} -gt 0 ]]; then
    die "not built: ${missing[*]} (expected in $BIN); run make tools"
  fi
}

# sim_python: the project's interpreter (the venv's when it exists).
sim_python() {
  if [[ -x "$ROOT/.venv/bin/python" ]]; then
    echo "$ROOT/.venv/bin/python"
  else
    command -v python3 || die "no Python: neither $ROOT/.venv (make venv) nor python3 on PATH"
  fi
}

sim_exists() { [[ -f "$CLUSTER_DIR/kwok.yaml" ]]; }

# sim_answers: the API server of the cluster answers /readyz with the cluster's kubeconfig.
sim_answers() {
  [[ -f "$KUBECONFIG_FILE" ]] &&
    kubectl --kubeconfig "$KUBECONFIG_FILE" --request-timeout=5s get --raw /readyz >/dev/null 2>&1
}

# sim_components_dead: the names of the cluster's components whose process is gone (empty when all run).
sim_components_dead() {
  local f dead=()
  for f in "$CLUSTER_DIR"/pids/*.pid; do
    [[ -e "$f" ]] || continue
    pid_alive "$f" || dead+=("$(basename "$f" .pid)")
  done
  echo "${dead[*]}"
}

sim_components_alive() { [[ -d "$CLUSTER_DIR/pids" && -z "$(sim_components_dead)" ]]; }

# pid_alive FILE: the process whose id FILE holds is running.
pid_alive() {
  local pid
  [[ -f "$1" ]] || return 1
  pid="$(cat "$1" 2>/dev/null)"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null
}

# stop_pid FILE WHAT: stop the process whose id FILE holds (TERM, then KILL after 15s), remove FILE.
stop_pid() {
  local file="$1" what="$2" pid
  if ! pid_alive "$file"; then
    rm -f "$file"
    return 0
  fi
  pid="$(cat "$file")"
  step "stopping $what (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 30); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  if kill -0 "$pid" 2>/dev/null; then
    warn "$what (pid $pid) did not stop after 15s: killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
}

# The engine's environment for the local stack (see sim/env.sh).
pulumi_env() {
  export PULUMI_SKIP_UPDATE_CHECK=1
  # The local stack's secrets passphrase: it protects nothing but the simulated cluster (see README).
  export PULUMI_CONFIG_PASSPHRASE="${PULUMI_CONFIG_PASSPHRASE:-gpucluster-local}"
  export PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=1
  # Keep the engine's own files (plugins, credentials, logs) beside the state, not in ~/.pulumi.
  export PULUMI_HOME="$STATE/pulumi-home"
  export PULUMI_BACKEND_URL="file://$STATE/pulumi"
  export KUBECONFIG="$KUBECONFIG_FILE"
  mkdir -p "$STATE/pulumi" "$PULUMI_HOME"
}

# stack_file_args: the engine's arguments naming the stack file: none for stacks/Pulumi.<stack>.yaml, which Pulumi
# finds itself, else `--config-file FILE` (pulumi up and preview read a stack's config from stackConfigDir unless
# given one).
stack_file_args() {
  [[ "$STACK" -ef "$STACK_DEFAULT_FILE" ]] || printf '%s\n' --config-file "$STACK"
}

# stack_init_from_file STACK FILE: create STACK in the current backend for a stack file outside stackConfigDir,
# leaving stacks/ alone. `pulumi stack init` takes no --config-file and saves the secrets provider's settings to
# stacks/Pulumi.STACK.yaml, so it runs in a scratch copy of the project (Pulumi.yaml, and FILE as its
# stacks/Pulumi.STACK.yaml). FILE must carry its encryptionsalt (for PULUMI_CONFIG_PASSPHRASE): the new stack
# takes it as it is, and `pulumi up --config-file FILE` then has nothing to write back into FILE.
stack_init_from_file() {
  local stack="$1" file="$2" work="$STATE/stack-init/$1"
  grep -q '^encryptionsalt:' "$file" ||
    die "$file has no encryptionsalt: pulumi up --config-file would create one and rewrite the file (copy the one of a scale stack in benchmarks/stacks, made for the passphrase gpucluster-local)"
  rm -rf "$work"
  mkdir -p "$work/stacks"
  cp "$ROOT/Pulumi.yaml" "$work/Pulumi.yaml"
  cp "$file" "$work/stacks/Pulumi.$stack.yaml"
  pulumi stack init --non-interactive --no-select --cwd "$work" "$stack" >/dev/null ||
    die "cannot create stack $stack for $file (the engine's message is above)"
  if cmp -s "$file" "$work/stacks/Pulumi.$stack.yaml"; then
    rm -rf "$work"
    rmdir "$STATE/stack-init" 2>/dev/null || true
  else
    warn "pulumi stack init changed its copy of $file: compare $work/stacks/Pulumi.$stack.yaml"
  fi
}

# scratch_project WORK STACK_FILE STACK RENDER_DIR: a scratch Pulumi project in WORK (replaced) that runs the
# repository's program for STACK with a copy of STACK_FILE whose Kubernetes provider renders into RENDER_DIR
# (sim/scratch_project.py). `make policy` previews it, `make render` updates it; the stack file is never touched.
scratch_project() {
  local work="$1" src="$2" stack="$3" render="$4"
  rm -rf "$work"
  mkdir -p "$work/stacks" "$work/state"
  "$ROOT/.venv/bin/python" "$ROOT/sim/scratch_project.py" --work "$work" --stack-file "$src" --stack "$stack" \
    --render-dir "$render" || die "cannot build the scratch project of stack $stack in $work (see above)"
}

# scratch_engine WORK STACK PASSPHRASE: the engine's environment for a scratch project (its own throwaway file
# backend and PULUMI_HOME in WORK; PASSPHRASE only seals that state, which holds no secret of the stack), then
# cd WORK, log in and create the stack.
scratch_engine() {
  local work="$1" stack="$2"
  export PULUMI_SKIP_UPDATE_CHECK=1 PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION=1
  export PULUMI_HOME="$work/pulumi-home" PULUMI_BACKEND_URL="file://$work/state"
  export PULUMI_CONFIG_PASSPHRASE="$3"
  cd "$work" || return 1
  pulumi login --non-interactive "$PULUMI_BACKEND_URL" >/dev/null
  pulumi stack init --non-interactive "$stack" >/dev/null
}
