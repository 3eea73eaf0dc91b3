#!/usr/bin/env bash
# The JobSet controller of the simulated cluster, run as a local process (kwok only pretends to run the chart's
# pods), the way sim/kueue.sh runs Kueue. Subcommands:
#
#   start   write the controller's Configuration (.state/jobset/config.yaml: webhooks on the loopback port of the
#           stack's jobset.localWebhooks.url with Kueue's local certificate, no internal certificate management,
#           no leader election), start `jobset --config` in the background (pid .state/jobset/jobset.pid, log
#           .state/jobset/jobset.log) and wait until it is ready and serves its webhooks; a running controller
#           whose Configuration is unchanged is left alone, a changed one restarted
#   stop    stop it
#   status  say whether it runs
#
# Ports: health 18083 (18082 is the fake RunPod API), metrics 18444, webhooks from the stack (19444).
# The certificate is the one sim/kueue.sh certs creates (127.0.0.1 and localhost); the stack's JobSet webhook
# objects trust the same CA (sim/local_webhooks.py).
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

JOBSET_STATE="$STATE/jobset"
CERTS="$KUEUE_STATE/certs"
PID_FILE="$JOBSET_STATE/jobset.pid"
LOG_FILE="$JOBSET_STATE/jobset.log"
CONFIG_FILE="$JOBSET_STATE/config.yaml"
HEALTH_ADDR="${GPUCLUSTER_JOBSET_HEALTH:-127.0.0.1:18083}"
METRICS_ADDR="${GPUCLUSTER_JOBSET_METRICS:-127.0.0.1:18444}"

webhook_port() {
  "$(sim_python)" "$ROOT/sim/stack_value.py" "$STACK" jobset-webhook-port ||
    die "cannot read jobset.localWebhooks from $STACK (see above)"
}

# The Configuration (config.jobset.x-k8s.io/v1alpha1) into $1.
write_config() {
  local port="$2"
  cat >"$1" <<YAML
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
clientConnection:
  qps: 500
  burst: 500
health:
  healthProbeBindAddress: $HEALTH_ADDR
metrics:
  bindAddress: $METRICS_ADDR
  certDir: $CERTS
webhook:
  host: 127.0.0.1
  port: $port
  certDir: $CERTS
internalCertManagement:
  enable: false
YAML
}

jobset_ready() {
  local port="$1"
  curl -fsS --max-time 2 "http://$HEALTH_ADDR/readyz" >/dev/null 2>&1 || return 1
  # The webhook server answers (any HTTP status) over TLS verified with our CA.
  curl -sS --max-time 2 --cacert "$CERTS/ca.crt" -o /dev/null "https://127.0.0.1:$port/healthz" 2>/dev/null
}

cmd_start() {
  sim_require_tools jobset kubectl
  command -v curl >/dev/null || die "curl not found (it probes the controller's readiness): run make debian-deps"
  sim_answers || die "the simulated cluster does not answer (make sim-up)"
  [[ -f "$CERTS/tls.crt" ]] || die "no local certificate in $CERTS: run sim/kueue.sh certs first (make up does)"
  local port
  port="$(webhook_port)"
  if [[ -z "$port" ]]; then
    step "the stack has no jobset.localWebhooks: no local JobSet controller"
    return 0
  fi
  export KUBECONFIG="$KUBECONFIG_FILE"
  kubectl get crd jobsets.jobset.x-k8s.io >/dev/null 2>&1 ||
    die "the JobSet CRD is not installed: deploy the stack first (make up)"
  mkdir -p "$JOBSET_STATE"
  write_config "$JOBSET_STATE/config.next.yaml" "$port"
  if pid_alive "$PID_FILE"; then
    if cmp -s "$CONFIG_FILE" "$JOBSET_STATE/config.next.yaml"; then
      rm -f "$JOBSET_STATE/config.next.yaml"
      step "JobSet controller already running (pid $(cat "$PID_FILE")), configuration unchanged"
      return 0
    fi
    step "the JobSet configuration changed: restarting the controller"
    stop_pid "$PID_FILE" "JobSet controller"
  fi
  mv -f "$JOBSET_STATE/config.next.yaml" "$CONFIG_FILE"
  step "starting the JobSet controller (config $CONFIG_FILE, log $LOG_FILE)"
  # setsid: the controller outlives the make that started it; it is stopped by pid (jobset.sh stop).
  setsid jobset --config "$CONFIG_FILE" --zap-log-level=2 >>"$LOG_FILE" 2>&1 </dev/null &
  echo $! >"$PID_FILE"
  local t0=$SECONDS
  until jobset_ready "$port"; do
    if ! pid_alive "$PID_FILE"; then
      tail -n 25 "$LOG_FILE" >&2
      die "the JobSet controller exited during start-up (log: $LOG_FILE)"
    fi
    ((SECONDS - t0 < 120)) || die "the JobSet controller was not ready after 120s (log: $LOG_FILE)"
    sleep 1
  done
  step "JobSet controller ready in $((SECONDS - t0))s (pid $(cat "$PID_FILE"))"
}

cmd_stop() {
  stop_pid "$PID_FILE" "JobSet controller"
}

cmd_status() {
  if pid_alive "$PID_FILE"; then
    echo "JobSet controller running (pid $(cat "$PID_FILE")); ready: $(jobset_ready "$(webhook_port)" && echo yes || echo no)"
  else
    echo "JobSet controller not running"
    return 1
  fi
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) die "usage: sim/jobset.sh start|stop|status" ;;
esac
