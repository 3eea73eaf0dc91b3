"""``gpucluster-burst-provider``: runs the virtual node's pods on external GPU providers.

Serves the provider API of docs/burst-provider-api.md on loopback for the virtual node container, plus
``/metrics`` and ``/healthz``. Logs are JSON, one object per line, on stderr. SIGTERM and SIGINT stop the background
loops and the server, exit status 0. Bad settings: one error message listing every problem, exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from collections.abc import Sequence

from contract.burst_settings import PROVIDER_METRICS_PORT, BurstSettings, SettingsError, load_settings
from daemons.burst_provider.api import serve, serve_metrics
from daemons.burst_provider.endpoints import EndpointManager
from daemons.burst_provider.events import pod_event_sink
from daemons.burst_provider.kube import KubeSourceCluster
from daemons.burst_provider.providers.base import AdapterContext
from daemons.burst_provider.reconcile import Reconciler
from daemons.burst_provider.registry import ProviderBuildError, build_providers
from daemons.burst_provider.secrets import SecretStore
from daemons.burst_provider.service import BurstService
from daemons.burst_provider.source import SourceCluster
from daemons.toolkit.cli import add_log_level, daemon_parser
from daemons.toolkit.listen import parse_listen
from daemons.toolkit.logs import setup_logging
from daemons.toolkit.shutdown import StopSignal, drain

log = logging.getLogger("burst_provider")

DEFAULT_SECRETS_DIR = "/var/run/secrets/gpucluster/providers"
EXIT_BAD_CONFIG = 2
#: SIGTERM may take this long: requests in flight, then the reconcile loop's current round.
DRAIN_SECONDS = 15.0
#: How often the service looks for probes that are due (probe periods are whole seconds, at least 1).
PROBE_TICK_SECONDS = 0.25


def build_parser() -> argparse.ArgumentParser:
    p = daemon_parser(
        "gpucluster-burst-provider",
        "Provider service of the burst virtual node: chooses an external GPU provider for each pod the node is "
        "given, creates and watches the instance, reports pod status, deletes orphaned instances and keeps "
        "EndpointSlices for external replicas. API: docs/burst-provider-api.md.",
    )
    p.add_argument(
        "--settings",
        required=True,
        metavar="FILE",
        help="settings file (JSON or YAML): the gpucluster:burst section, see daemons/burst_provider/README.md",
    )
    p.add_argument("--node-name", default=None, help="virtual node name; overrides virtualNode.nodeName")
    p.add_argument(
        "--listen",
        default=None,
        metavar="HOST:PORT",
        help="address of the API (default 127.0.0.1:<virtualNode.port>, 10299 unless set); port 0 picks a free one",
    )
    p.add_argument(
        "--listen-metrics",
        default=None,
        metavar="HOST:PORT",
        help=(
            "also serve /metrics and /healthz (nothing of the API) here, for Prometheus and the kubelet's probes: "
            f"the pod's address ($(POD_IP):{PROVIDER_METRICS_PORT} in the stack's Deployment); default: not served"
        ),
    )
    p.add_argument(
        "--kubeconfig",
        default=None,
        help="kubeconfig of the source cluster (default: the in-cluster service account)",
    )
    p.add_argument(
        "--no-source-cluster",
        action="store_true",
        help="run without the source cluster: no env references, no orphan deletion, no EndpointSlices (tests)",
    )
    p.add_argument(
        "--secrets-dir",
        default=DEFAULT_SECRETS_DIR,
        help="directory with one file per provider secret, named as the settings reference it",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        default=2.0,
        help="seconds between status polls of in-flight instances (reconciliation runs every reconcileInterval)",
    )
    p.add_argument(
        "--startup-grace",
        type=float,
        default=120.0,
        help="seconds after which /healthz answers ok even if a provider could not list its instances yet",
    )
    return add_log_level(p)


def _listen(value: str | None, settings: BurstSettings) -> tuple[str, int]:
    if not value:
        return "127.0.0.1", settings.virtual_node.port
    return parse_listen(value, "--listen", default_host="127.0.0.1")


class _NoSource:
    """The source cluster stand-in of --no-source-cluster: references resolve to nothing."""

    def config_map(self, namespace: str, name: str) -> dict[str, str] | None:
        return None

    def secret(self, namespace: str, name: str) -> dict[str, str] | None:
        return None


def _settings(args: argparse.Namespace) -> BurstSettings:
    settings = load_settings(args.settings)
    if args.node_name:
        vn = settings.virtual_node.model_copy(update={"node_name": args.node_name})
        settings = settings.model_copy(update={"virtual_node": vn})
    return settings


def _probe_forever(service: BurstService, stop: threading.Event) -> None:
    """Run the rented replicas' probes as they fall due (each on its own worker, so a slow one delays none)."""
    while not stop.wait(PROBE_TICK_SECONDS):
        try:
            service.probe_once()
        except Exception:
            log.exception("probe loop error")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    try:
        settings = _settings(args)
        host, port = _listen(args.listen, settings)
        metrics_address = (
            parse_listen(args.listen_metrics, "--listen-metrics", default_host="0.0.0.0")
            if args.listen_metrics
            else None
        )
    except (SettingsError, ValueError) as exc:
        print(f"gpucluster-burst-provider: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG

    source: SourceCluster | None = None
    if not args.no_source_cluster:
        try:
            source = KubeSourceCluster(args.kubeconfig)
        except Exception as exc:
            print(f"gpucluster-burst-provider: cannot reach the source cluster: {exc}", file=sys.stderr)
            return EXIT_BAD_CONFIG
    try:
        providers = build_providers(settings, AdapterContext(SecretStore(args.secrets_dir), source))
    except ProviderBuildError as exc:
        print(f"gpucluster-burst-provider: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG

    service = BurstService(settings, providers, source if source is not None else _NoSource())
    if source is not None:
        service.on_event = pod_event_sink(source, service.node)
    endpoints = EndpointManager(source, settings) if source is not None else None
    reconciler = Reconciler(service, source, endpoints, startup_grace=args.startup_grace)
    stop = StopSignal(log, "stopping").install()

    try:
        server = serve(service, settings, host, port, reconciler.ready.is_set)
    except OSError as exc:
        print(f"gpucluster-burst-provider: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    servers = [("http", server.stop)]
    if metrics_address is not None:
        try:
            metrics_server = serve_metrics(service, *metrics_address, reconciler.ready.is_set)
        except OSError as exc:
            server.stop()
            where = f"{metrics_address[0]}:{metrics_address[1]}"
            print(f"gpucluster-burst-provider: cannot listen on {where}: {exc.strerror}", file=sys.stderr)
            return EXIT_BAD_CONFIG
        servers.append(("metrics", metrics_server.stop))
        log.info("serving metrics", extra={"address": f"{metrics_server.host}:{metrics_server.port}"})
    log.info(
        "serving",
        extra={"address": f"{server.host}:{server.port}", "node": service.node, "providers": list(providers)},
    )
    reconciler.startup()
    loop = threading.Thread(
        target=reconciler.run_forever, args=(stop.stop, args.poll_interval), name="reconcile", daemon=True
    )
    loop.start()
    prober = threading.Thread(target=_probe_forever, args=(service, stop.stop), name="probes", daemon=True)
    prober.start()
    stop.wait()
    drain([*servers, ("reconcile", loop.join), ("probes", prober.join)], timeout_s=DRAIN_SECONDS, log=log)
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
