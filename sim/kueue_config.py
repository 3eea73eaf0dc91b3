"""The Configuration the local Kueue controller runs with: the one Pulumi deployed, read back from the cluster.

``kubectl get configmap <kueue>-manager-config -o json | python sim/kueue_config.py --stack FILE --cert-dir DIR``
prints the Configuration (YAML) from the ConfigMap's ``controller_manager_config.yaml``, with only the settings
that say where this process listens and finds its certificate changed, because the process runs on this machine
rather than in a pod:

* ``webhook.host``/``webhook.port``: the host and port of the stack's ``kueue.localWebhooks.url`` (what the
  webhook configurations call), ``webhook.certDir``: the directory with ``tls.crt``/``tls.key`` for it;
* ``health.healthProbeBindAddress`` and ``metrics.bindAddress``: loopback ports (``--health``, ``--metrics``),
  so nothing else on the machine is reached and nothing is exposed;
* ``featureGates.VisibilityOnDemand: false``: the visibility API server needs its certificate at the fixed
  path /visibility and would be reached through an APIService whose Service has no backend here;
* ``leaderElection.leaderElect: false``: there is one local process, and on a starved machine a missed lease
  renewal would make it exit (in a pod, Kubernetes would restart it; nothing restarts this one).

Every other setting (queueing, waitForPodsReady, integrations, resources, leader election, internal
certificate management ...) is the deployed one; ``--diff`` prints the changed keys on stderr. A ConfigMap
without the key, a config that is not YAML, or a stack without ``kueue.localWebhooks`` is reported with what
and where, exit status 2.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parent.parent
CONFIG_KEY = "controller_manager_config.yaml"
#: The only settings the local process may differ in from the deployed Configuration.
LOCAL_KEYS = (
    "webhook.host",
    "webhook.port",
    "webhook.certDir",
    "health.healthProbeBindAddress",
    "metrics.bindAddress",
    "leaderElection.leaderElect",
    "featureGates.VisibilityOnDemand",
)


class LocalConfigError(ValueError):
    """The deployed configuration cannot be turned into the local one; the message says what and where."""


def deployed_config(configmap: dict[str, Any]) -> dict[str, Any]:
    """The Configuration stored in Kueue's manager ConfigMap."""
    name = (configmap.get("metadata") or {}).get("name", "<unnamed>")
    raw = (configmap.get("data") or {}).get(CONFIG_KEY)
    if raw is None:
        raise LocalConfigError(f"ConfigMap {name}: no data key {CONFIG_KEY!r} (is this Kueue's manager config?)")
    try:
        config = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise LocalConfigError(f"ConfigMap {name}, key {CONFIG_KEY}: not YAML ({exc})") from None
    if not isinstance(config, dict) or config.get("kind") != "Configuration":
        raise LocalConfigError(f"ConfigMap {name}, key {CONFIG_KEY}: not a Kueue Configuration")
    return config


def webhook_listener(url: str) -> tuple[str, int]:
    """Host and port of a local webhook URL such as https://127.0.0.1:19443."""
    parts = urlsplit(url)
    if parts.scheme != "https" or not parts.hostname or parts.port is None:
        raise LocalConfigError(f"gpucluster:kueue.localWebhooks.url: {url!r} is not https://<loopback>:<port>")
    return parts.hostname, parts.port


def local_config(
    deployed: dict[str, Any], *, webhook_url: str, cert_dir: Path, health: str, metrics: str
) -> dict[str, Any]:
    """The deployed Configuration with only the process's listeners and certificate directory replaced."""
    host, port = webhook_listener(webhook_url)
    config = copy.deepcopy(deployed)
    webhook = dict(config.get("webhook") or {})
    webhook.update({"host": host, "port": port, "certDir": str(cert_dir)})
    config["webhook"] = webhook
    config["health"] = {**(config.get("health") or {}), "healthProbeBindAddress": health}
    config["metrics"] = {**(config.get("metrics") or {}), "bindAddress": metrics}
    config["featureGates"] = {**(config.get("featureGates") or {}), "VisibilityOnDemand": False}
    if isinstance(config.get("leaderElection"), dict):
        # One local process: no lease to hold, and on a starved machine a missed renewal would stop it.
        config["leaderElection"] = {**config["leaderElection"], "leaderElect": False}
    return config


def changed_keys(before: Any, after: Any, prefix: str = "") -> list[str]:
    """Dotted paths whose values differ between two configurations."""
    if isinstance(before, dict) or isinstance(after, dict):
        # A section present on one side only differs in each of its keys.
        before = before if isinstance(before, dict) else {}
        after = after if isinstance(after, dict) else {}
        out: list[str] = []
        for key in sorted(set(before) | set(after)):
            out += changed_keys(before.get(key), after.get(key), f"{prefix}{key}.")
        return out
    return [] if before == after else [prefix.rstrip(".")]


def stack_webhook_url(stack_file: Path) -> str:
    try:
        from components.config import StackConfigError, load_stack_file  # noqa: PLC0415 (needs the project on sys.path)
    except ImportError as exc:
        raise LocalConfigError(f"{sys.executable} cannot import {exc.name}: run make venv") from None
    try:
        cfg = load_stack_file(stack_file)
    except StackConfigError as exc:
        raise LocalConfigError(str(exc)) from None
    if cfg.kueue.local_webhooks is None:
        raise LocalConfigError(
            f"{stack_file}: gpucluster:kueue.localWebhooks is not set; the local Kueue controller serves its "
            "webhooks at that URL"
        )
    return cfg.kueue.local_webhooks.url


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--stack", type=Path, required=True, help="stack file with kueue.localWebhooks")
    parser.add_argument("--cert-dir", type=Path, required=True, help="directory holding tls.crt and tls.key")
    parser.add_argument("--health", default="127.0.0.1:18081", help="health probe address (%(default)s)")
    parser.add_argument("--metrics", default="127.0.0.1:18443", help="metrics address (%(default)s)")
    parser.add_argument("--diff", action="store_true", help="list the changed keys on stderr")
    parser.add_argument("--webhook-url", action="store_true", help="print only the stack's webhook URL")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    try:
        url = stack_webhook_url(args.stack)
        if args.webhook_url:
            print(url)
            return 0
        try:
            configmap = json.load(sys.stdin)
        except json.JSONDecodeError as exc:
            raise LocalConfigError(f"stdin: not the ConfigMap as JSON ({exc})") from None
        deployed = deployed_config(configmap)
        config = local_config(
            deployed, webhook_url=url, cert_dir=args.cert_dir.resolve(), health=args.health, metrics=args.metrics
        )
    except LocalConfigError as exc:
        print(f"sim/kueue_config.py: {exc}", file=sys.stderr)
        return 2
    if args.diff:
        print("changed for the local process: " + ", ".join(changed_keys(deployed, config)), file=sys.stderr)
    print(yaml.safe_dump(config, sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
