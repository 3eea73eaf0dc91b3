"""A stand-in for ``kubectl`` that answers the reads ``sim/processes.py`` makes, from canned objects.

The sim's unit tests put it in a scratch tool cache (``GPUCLUSTER_CACHE``) behind a small shell wrapper, so the
stack's daemons can be prepared (kubeconfigs, settings files, command lines) without a cluster. It knows only
the requests below; anything else exits 1 with the arguments on stderr, as a refused request would.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Sequence
from pathlib import Path

#: What the canned cluster holds: the virtual node's settings ConfigMap, the adapter's file, the provider Secret and
#: the alert rules.
SETTINGS = {("gpucluster-burst", "gpucluster-virtual-node-settings"): '{"providers": "as deployed"}'}
#: The metrics adapter's file (components/metrics_adapter.py: its own key, not settings.json).
METRICS_ADAPTER = ("gpucluster-metrics", "gpucluster-metrics-adapter", "config.json", '{"metrics": "as deployed"}')
#: The provider Secret holds the local stack's one provider secret, the key the RunPod fake accepts.
SECRET_DATA = {"runpodFakeApiKey": base64.b64encode(b"not-a-real-key").decode()}
#: The alert rules the telemetry component deployed (a ConfigMap: no Prometheus operator).
RULES = "groups: []\n"


def _opt(args: Sequence[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def answer(args: Sequence[str]) -> str | None:
    """The canned reply to one command line (without ``--kubeconfig FILE``), or None when unknown."""
    ns = _opt(args, "-n")
    if args[:2] == ["create", "token"]:
        return f"token-of-{ns}-{args[2]}\n"
    if args[:2] == ["config", "view"]:
        cluster = {"server": "https://127.0.0.1:6443", "certificate-authority-data": "Y2E="}
        return json.dumps({"clusters": [{"name": "sim", "cluster": cluster}]})
    if args[:2] == ["get", "configmap"]:
        name = args[2]
        if (ns, name) in SETTINGS:
            return json.dumps({"metadata": {"name": name}, "data": {"settings.json": SETTINGS[(ns or "", name)]}})
        if (ns, name) == METRICS_ADAPTER[:2]:
            return json.dumps({"metadata": {"name": name}, "data": {METRICS_ADAPTER[2]: METRICS_ADAPTER[3]}})
        if (ns, name) == ("gpu-telemetry", "gpucluster-gpu-fabric"):
            return json.dumps({"metadata": {"name": name}, "data": {"gpucluster-telemetry.rules.yaml": RULES}})
    if args[:2] == ["get", "secret"] and args[2] == "gpucluster-virtual-node-provider-secrets":
        return json.dumps({"data": SECRET_DATA})
    return None


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args[:1] == ["--kubeconfig"]:
        args = args[2:]
    reply = answer(args)
    if reply is None:
        print(f"fake kubectl: no canned answer for {args}", file=sys.stderr)
        return 1
    sys.stdout.write(reply)
    return 0


def install(bin_dir: Path) -> Path:
    """Put this stand-in at ``bin_dir/kubectl`` (a shell wrapper running it with this interpreter)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "kubectl"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
