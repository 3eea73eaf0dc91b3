#!/usr/bin/env bash
# The Kueue controller of the simulated cluster, run as a local process (kwok only pretends to run the chart's
# pods). Subcommands:
#
#   certs   create (once) the CA and the loopback serving certificate under .state/kueue/certs; the local
#           stack's kueue.localWebhooks.caBundleFile names the CA, so it must exist before `pulumi up`
#   start   read the Configuration Pulumi deployed back from Kueue's manager ConfigMap (sim/kueue_config.py:
#           only listeners and certificate directory change), start `kueue --config` in the background
#           (pid .state/kueue/kueue.pid, log .state/kueue/kueue.log) and wait until it is ready and serves its
#           webhooks; a running controller whose config is unchanged is left alone, a changed one restarted
#   stop    stop it (and remove the metrics certificate it was given, when we installed it)
#   status  say whether it runs
#
# Kueue v0.17 reads its metrics certificate from the fixed path /etc/kueue/metrics/certs once internal
# certificate management is off; `start` installs the loopback certificate there when that directory is absent
# (marked as ours, removed by `stop`). That is the one thing written outside the repository.
set -euo pipefail

# shellcheck source=sim/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CERTS="$KUEUE_STATE/certs"
PID_FILE="$KUEUE_STATE/kueue.pid"
LOG_FILE="$KUEUE_STATE/kueue.log"
CONFIG_FILE="$KUEUE_STATE/config.yaml"
HEALTH_ADDR="${GPUCLUSTER_KUEUE_HEALTH:-127.0.0.1:18081}"
METRICS_ADDR="${GPUCLUSTER_KUEUE_METRICS:-127.0.0.1:18443}"
METRICS_CERTS=/etc/kueue/metrics/certs
METRICS_MARK="$METRICS_CERTS/.installed-by-gpucluster"

cmd_certs() {
  command -v openssl >/dev/null || die "openssl not found (it creates the local webhook certificate): run make debian-deps"
  mkdir -p "$CERTS"
  # Reuse a certificate valid for at least another day: the CA is in the stack's webhook objects, so a new one
  # would be a change for Pulumi.
  if [[ -f "$CERTS/ca.crt" && -f "$CERTS/tls.crt" && -f "$CERTS/tls.key" ]] &&
    openssl x509 -checkend 86400 -noout -in "$CERTS/tls.crt" >/dev/null 2>&1; then
    return 0
  fi
  step "creating the local webhook CA and serving certificate (127.0.0.1, localhost) in $CERTS"
  (
    umask 077
    cd "$CERTS"
    openssl req -x509 -newkey rsa:2048 -nodes -days 365 -subj "/CN=gpucluster-local-kueue-ca" \
      -keyout ca.key -out ca.crt >/dev/null 2>&1
    openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout tls.key -out tls.csr >/dev/null 2>&1
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >tls.ext
    openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -extfile tls.ext \
      -out tls.crt >/dev/null 2>&1
    rm -f tls.csr tls.ext
  ) || die "openssl could not create the certificates in $CERTS"
  chmod 0644 "$CERTS/ca.crt" "$CERTS/tls.crt"
}

install_metrics_cert() {
  if [[ -d "$METRICS_CERTS" && ! -f "$METRICS_MARK" ]]; then
    [[ -f "$METRICS_CERTS/tls.crt" ]] || die "$METRICS_CERTS exists without tls.crt and is not ours"
    return 0 # someone else's certificate: use it as it is
  fi
  mkdir -p "$METRICS_CERTS" 2>/dev/null ||
    die "cannot create $METRICS_CERTS (Kueue reads its metrics certificate there; run as root or create it)"
  install -m 0600 "$CERTS/tls.key" "$METRICS_CERTS/tls.key"
  install -m 0644 "$CERTS/tls.crt" "$METRICS_CERTS/tls.crt"
  touch "$METRICS_MARK"
}

remove_metrics_cert() {
  if [[ -f "$METRICS_MARK" ]]; then
    rm -rf "$METRICS_CERTS"
    rmdir /etc/kueue/metrics /etc/kueue 2>/dev/null || true
  fi
}

# The deployed Configuration, made local, into $1.
write_config() {
  local ns cm py
  py="$(sim_python)"
  ns="$("$py" "$ROOT/sim/stack_value.py" "$STACK" kueue-namespace)" ||
    die "cannot read the Kueue namespace from $STACK (see above)"
  cm="$(kubectl get configmap -n "$ns" -l app.kubernetes.io/name=kueue -o name | grep -- '-manager-config$' | head -1)" || true
  [[ -n "$cm" ]] || die "no Kueue manager ConfigMap in namespace $ns: deploy the stack first (make up)"
  kubectl get -n "$ns" "$cm" -o json |
    "$py" "$ROOT/sim/kueue_config.py" --stack "$STACK" --cert-dir "$CERTS" --health "$HEALTH_ADDR" \
      --metrics "$METRICS_ADDR" --diff >"$1.tmp" || die "cannot build the local Kueue configuration from $cm"
  mv -f "$1.tmp" "$1"
}

kueue_ready() {
  local url
  curl -fsS --max-time 2 "http://$HEALTH_ADDR/readyz" >/dev/null 2>&1 || return 1
  url="$("$(sim_python)" "$ROOT/sim/kueue_config.py" --stack "$STACK" --cert-dir "$CERTS" --webhook-url)"
  # The webhook server answers (any HTTP status) over TLS verified with our CA.
  curl -sS --max-time 2 --cacert "$CERTS/ca.crt" -o /dev/null "$url/healthz" 2>/dev/null
}

cmd_start() {
  sim_require_tools kueue kubectl
  command -v curl >/dev/null || die "curl not found (it probes the controller's readiness): run make debian-deps"
  sim_answers || die "the simulated cluster does not answer (make sim-up)"
  export KUBECONFIG="$KUBECONFIG_FILE"
  cmd_certs
  mkdir -p "$KUEUE_STATE"
  write_config "$KUEUE_STATE/config.next.yaml"
  if pid_alive "$PID_FILE"; then
    if cmp -s "$CONFIG_FILE" "$KUEUE_STATE/config.next.yaml"; then
      rm -f "$KUEUE_STATE/config.next.yaml"
      step "Kueue controller already running (pid $(cat "$PID_FILE")), configuration unchanged"
      return 0
    fi
    step "the deployed Kueue configuration changed: restarting the controller"
    stop_pid "$PID_FILE" "Kueue controller"
  fi
  mv -f "$KUEUE_STATE/config.next.yaml" "$CONFIG_FILE"
  install_metrics_cert
  step "starting the Kueue controller (config $CONFIG_FILE, log $LOG_FILE)"
  # setsid: the controller outlives the make that started it; it is stopped by pid (kueue.sh stop).
  setsid kueue --config "$CONFIG_FILE" --zap-log-level=2 >>"$LOG_FILE" 2>&1 </dev/null &
  echo $! >"$PID_FILE"
  local t0=$SECONDS
  until kueue_ready; do
    if ! pid_alive "$PID_FILE"; then
      tail -n 25 "$LOG_FILE" >&2
      die "the Kueue controller exited during start-up (log: $LOG_FILE)"
    fi
    ((SECONDS - t0 < 120)) || die "the Kueue controller was not ready after 120s (log: $LOG_FILE)"
    sleep 1
  done
  step "Kueue controller ready in $((SECONDS - t0))s (pid $(cat "$PID_FILE"))"
}

cmd_stop() {
  stop_pid "$PID_FILE" "Kueue controller"
  remove_metrics_cert
}

cmd_status() {
  if pid_alive "$PID_FILE"; then
    echo "Kueue controller running (pid $(cat "$PID_FILE")); ready: $(kueue_ready && echo yes || echo no)"
  else
    echo "Kueue controller not running"
    return 1
  fi
}

case "${1:-}" in
  certs) cmd_certs ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) die "usage: sim/kueue.sh certs|start|stop|status" ;;
esac
