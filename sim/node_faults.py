"""What happens to nodes of the simulated cluster, on purpose: the faults the capacity tests and benchmarks inject.

``python sim/node_faults.py ACTION NODE`` (or the functions, from tests and benchmarks):

* ``not-ready`` / ``ready``: kwok keeps a node it manages Ready (its ``node-initialize`` stage sets Ready again at
  once), so a node goes NotReady by leaving kwok's care first: the ``kwok.x-k8s.io/node`` annotation comes off and
  the Ready condition is set False with the time of the change; ``ready`` gives it back to kwok, which makes it
  Ready again;
* ``delete`` / ``recreate``: the Node goes; it comes back as ``sim/nodes.py`` built it (labels, taints,
  capacity), from the stack file;
* ``cordon`` / ``uncordon``;
* ``quarantine`` / ``release``: what the quarantine controller and ``node_admission`` do to a node: the
  quarantine taint (NoExecute) with its reason, label and annotations, and their removal;
* ``accept`` / ``unaccept``: the acceptance label.

:func:`quarantined` and :func:`quarantine_alert_firing` tell what the quarantine path has done so far;
:func:`forget_alerts` wipes the quarantine alerts' series so the next scenario starts from none.

Against the admin kubeconfig of ``make up`` (``sim/processes.py``'s ``kubectl``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from contract.constants import (  # noqa: E402 (run as a script: the repository first on the path)
    ACCEPTED_LABEL,
    ACCEPTED_VALUE,
    QUARANTINE_REASON_ANNOTATION,
    QUARANTINE_TAINT_EFFECT,
    QUARANTINE_TAINT_KEY,
    QUARANTINED_AT_ANNOTATION,
    QUARANTINED_LABEL,
)
from contract.quarantine_settings import SIGNAL_LABEL, SIGNAL_VALUE  # noqa: E402
from contract.registry import QUARANTINE  # noqa: E402
from sim.processes import DaemonError, kubectl, kubectl_json  # noqa: E402

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
DEFAULT_STACK = ROOT / "stacks" / "Pulumi.local.yaml"
MERGE = "--type=merge"


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def not_ready(node: str) -> None:
    kubectl("annotate", "node", node, f"{KWOK_ANNOTATION}-")
    current = kubectl_json("get", "node", node)
    conditions = [c for c in (current.get("status") or {}).get("conditions") or [] if c.get("type") != "Ready"]
    conditions.append(
        {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": "sim/node_faults.py: not ready on purpose",
            "lastHeartbeatTime": _now(),
            "lastTransitionTime": _now(),
        }
    )
    kubectl(
        "patch", "node", node, "--subresource=status", MERGE, "-p", json.dumps({"status": {"conditions": conditions}})
    )


def ready(node: str) -> None:
    kubectl("annotate", "node", node, f"{KWOK_ANNOTATION}=fake", "--overwrite")


def delete(node: str) -> None:
    kubectl("delete", "node", node, "--wait=true")


def recreate(node: str, stack_file: Path = DEFAULT_STACK) -> None:
    from sim import nodes as sim_nodes  # noqa: PLC0415 (one use)

    built = [n for n in sim_nodes.build_nodes(sim_nodes.load_flavors(stack_file)) if n["metadata"]["name"] == node]
    if not built:
        raise DaemonError(f"{stack_file} builds no node {node}")
    obj = built[0]
    status = {"status": obj.pop("status")}
    kubectl("apply", "-f", "-", input=json.dumps(obj))
    kubectl("patch", "node", node, "--subresource=status", MERGE, "-p", json.dumps(status))


def cordon(node: str) -> None:
    kubectl("cordon", node)


def uncordon(node: str) -> None:
    kubectl("uncordon", node)


def quarantine(node: str, reason: str = "gpu-temperature") -> None:
    kubectl("taint", "node", node, f"{QUARANTINE_TAINT_KEY}={reason}:{QUARANTINE_TAINT_EFFECT}", "--overwrite")
    kubectl("label", "node", node, f"{QUARANTINED_LABEL}=true", "--overwrite")
    kubectl(
        "annotate",
        "node",
        node,
        f"{QUARANTINE_REASON_ANNOTATION}=sim/node_faults.py: {reason}",
        f"{QUARANTINED_AT_ANNOTATION}={_now()}",
        "--overwrite",
    )


def release(node: str) -> None:
    kubectl("taint", "node", node, f"{QUARANTINE_TAINT_KEY}-", check=False)
    kubectl("label", "node", node, f"{QUARANTINED_LABEL}-")
    kubectl("annotate", "node", node, f"{QUARANTINE_REASON_ANNOTATION}-", f"{QUARANTINED_AT_ANNOTATION}-")


def accept(node: str) -> None:
    kubectl("label", "node", node, f"{ACCEPTED_LABEL}={ACCEPTED_VALUE}", "--overwrite")


def unaccept(node: str) -> None:
    kubectl("label", "node", node, f"{ACCEPTED_LABEL}-")


def quarantined(node: str) -> bool:
    """The node carries the quarantine taint."""
    taints = (kubectl_json("get", "node", node).get("spec") or {}).get("taints") or []
    return any(t.get("key") == QUARANTINE_TAINT_KEY for t in taints)


def quarantine_alert_firing(node: str, prometheus: str = "http://127.0.0.1:9090") -> bool:
    """The quarantine controller would see a signal for the node: the stack's ``quarantine.signalQuery`` answers
    with a sample for it in the sim's Prometheus."""
    import urllib.parse  # noqa: PLC0415 (queries only)
    import urllib.request  # noqa: PLC0415

    from sim.processes import stack_config  # noqa: PLC0415

    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode(
        {"query": stack_config().controller(QUARANTINE).signal_query}
    )
    with urllib.request.urlopen(url, timeout=5) as reply:
        result = json.loads(reply.read())["data"]["result"]
    return any(sample["metric"].get("node") == node for sample in result)


def forget_alerts(prometheus: str = "http://127.0.0.1:9090") -> None:
    """Delete the sim Prometheus' quarantine ``ALERTS`` series, so a scenario starts with no signal at all.

    A Prometheus stopped while an alert fired writes no stale marker, and an alert with a ``for`` shorter than the
    restore grace is not restored, so its last sample from before the stop stays a signal until it is older than the
    signal's maximum age (150 s). Live alerts are written again at the next evaluation (2 s in the sim). Uses the
    admin API, which only the sim's Prometheus enables."""
    import urllib.parse  # noqa: PLC0415 (queries only)
    import urllib.request  # noqa: PLC0415

    match = f'{{__name__=~"ALERTS|ALERTS_FOR_STATE",{SIGNAL_LABEL}="{SIGNAL_VALUE}"}}'
    url = f"{prometheus}/api/v1/admin/tsdb/delete_series?" + urllib.parse.urlencode({"match[]": match})
    with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=10) as reply:
        if reply.status != 204:
            raise RuntimeError(f"Prometheus refused to delete the ALERTS series: HTTP {reply.status}")


ACTIONS = {
    "not-ready": not_ready,
    "ready": ready,
    "delete": delete,
    "recreate": recreate,
    "cordon": cordon,
    "uncordon": uncordon,
    "quarantine": quarantine,
    "release": release,
    "accept": accept,
    "unaccept": unaccept,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim/node_faults.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=list(ACTIONS))
    parser.add_argument("node")
    args = parser.parse_args(argv)
    try:
        ACTIONS[args.action](args.node)
    except DaemonError as e:
        print(f"sim/node_faults.py: error: {e}", file=sys.stderr)
        return 1
    print(f"==> {args.node}: {args.action}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
