"""Figures of the virtual node on the simulated cluster: what it adds to a rented GPU's boot, and how fast it recovers.

Runs ``make up`` (idempotent), then:

1. **create -> Running**: ``--pods`` pods that tolerate the virtual node are created one after another; for each,
   the time from the create call to the pod being Ready, and that time minus the fake cloud's boot time, which is
   the node's and the provider service's own overhead (scheduling, the node's create call, the service's
   selection and create, the status polls on both sides).
2. **reconciliation after a kill**: with those pods running, the provider service is killed with SIGKILL (its
   container in the virtual node's pod, which the kubelet restarts; a local process where the stack runs it so),
   half of the pods are deleted as it goes down (their instances become orphans no one deletes), and it is waited
   for. Printed: restart -> ready (state rebuilt from the provider's listing), restart -> every orphan deleted.
3. **the node after a kill**: the virtual node is killed with SIGKILL, one running instance dies meanwhile, and the
   node is waited for; printed: restart -> the dead instance's pod reported Failed (the node has caught
   up with the provider), and whether the other pods kept running untouched.

Nothing is asserted: these are measurements. The probe Deployment is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.sim_cluster import make_up  # noqa: E402 (run as a script: the repository first on the path)
from sim import controllers, outside, processes  # noqa: E402 (run as a script: the repository first on the path)
from sim.stats import percentile  # noqa: E402

NAME = "bench-burst"


def kget(*args: str) -> dict[str, Any]:
    data = json.loads(processes.kubectl("get", *args, "-o", "json"))
    assert isinstance(data, dict)
    return data


def http(method: str, url: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        out = json.loads(r.read() or b"{}")
    return out if isinstance(out, dict) else {}


def pod(name: str, ns: str, key: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": NAME}},
        "spec": {
            "nodeSelector": {"type": "virtual-kubelet"},
            "tolerations": [
                {
                    "key": "virtual-kubelet.io/provider",
                    "operator": "Equal",
                    "value": "gpucluster",
                    "effect": "NoSchedule",
                },
                {"key": key, "operator": "Exists", "effect": "NoSchedule"},
            ],
            "containers": [
                {
                    "name": "server",
                    "image": "registry.invalid/bench:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def is_ready(p: dict[str, Any]) -> bool:
    return p.get("status", {}).get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in p["status"].get("conditions") or []
    )


def wait(what: str, check: Any, timeout: float = 180, interval: float = 0.1) -> float:
    t0 = time.monotonic()
    processes.wait_for(what, check, timeout, interval)
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, default=6, help="pods to create (one after another)")
    a = ap.parse_args()
    bin_dir = Path(
        subprocess.run([str(ROOT / "tools" / "bin-dir.sh")], capture_output=True, text=True, check=True).stdout.strip()
    )
    if not (bin_dir / "gpucluster-virtual-node").exists() or not (bin_dir / "kube-apiserver").exists():
        print("bench_burst_node: skipped: tools not built (make tools)")
        return 0
    if not make_up("bench_burst_node"):
        return 1
    cfg = processes.stack_config()
    burst = cfg.burst.settings
    ns, owner = burst.virtual_node.inference_namespaces[0], outside.instance_owner(cfg)
    cloud = next(p.fake.url for p in burst.providers if p.fake is not None)
    boot = float(http("GET", f"{cloud}/admin/knobs")["bootSeconds"])
    provider, node = controllers.burst_part("provider"), controllers.burst_part("virtual-node")
    names = [f"{NAME}-{i}" for i in range(a.pods)]
    processes.kubectl("delete", "pods", "-n", ns, "-l", f"app={NAME}", "--ignore-not-found", "--wait=true")
    try:
        totals = []
        for n in names:
            processes.kubectl("apply", "-f", "-", input=json.dumps(pod(n, ns, cfg.burst_taint_key)))
            totals.append(wait(f"{n} Ready", lambda n=n: is_ready(kget("pod", n, "-n", ns))))
        overhead = [t - boot for t in totals]

        def live_instances() -> list[dict[str, Any]]:
            listed = http("GET", f"{cloud}/instances?node={owner}")["instances"]
            return [i for i in listed if i["state"] in ("creating", "running") and i["tags"]["pod"].startswith(NAME)]

        provider.kill()
        gone = names[: a.pods // 2]
        processes.kubectl("delete", "pod", *gone, "-n", ns, "--wait=false")
        time.sleep(2)
        orphans_before = len(live_instances())
        t0 = time.monotonic()
        provider.start()
        healthy = time.monotonic() - t0
        wait("the orphans deleted", lambda: len(live_instances()) == a.pods - len(gone), timeout=120)
        reconciled = time.monotonic() - t0

        rest = names[len(gone) :]
        victim, others = rest[0], rest[1:]
        victim_uid = kget("pod", victim, "-n", ns)["metadata"]["uid"]
        (inst,) = [i for i in live_instances() if i["tags"]["uid"] == victim_uid]
        node.kill()
        http("POST", f"{cloud}/admin/instances/{inst['id']}/kill", {"exitCode": 137})
        time.sleep(2)
        t0 = time.monotonic()
        node.start()
        node_up = time.monotonic() - t0
        wait(f"{victim} reported Failed", lambda: kget("pod", victim, "-n", ns)["status"].get("phase") == "Failed")
        caught_up = time.monotonic() - t0
        untouched = all(is_ready(kget("pod", n, "-n", ns)) for n in others)
    except processes.DaemonError as e:
        print(f"bench_burst_node: {e}", file=sys.stderr)
        return 1
    finally:
        processes.kubectl("delete", "pods", "-n", ns, "-l", f"app={NAME}", "--ignore-not-found", "--wait=false")

    def stats(values: list[float]) -> str:
        return (
            f"median {statistics.median(values):.2f} s, p90 {percentile(values, 0.9):.2f} s, "
            f"max {max(values):.2f} s (n={len(values)})"
        )

    print(f"virtual node on the simulated cluster (fake cloud boot {boot:.1f} s)")
    print(f"  create -> Running, total                     {stats(totals)}")
    print(f"  create -> Running, minus the provider's boot {stats(overhead)}")
    print(f"  provider service SIGKILL: restart -> ready (rebuilt from listings) {healthy:.2f} s")
    orphans = orphans_before - (a.pods - len(gone))
    print(f"  provider service SIGKILL: restart -> {orphans} orphan(s) deleted    {reconciled:.2f} s")
    print(f"  virtual node SIGKILL: restart -> serving                        {node_up:.2f} s")
    print(f"  virtual node SIGKILL: restart -> death while down reported Failed {caught_up:.2f} s")
    print(f"  virtual node SIGKILL: the other pods kept running untouched        {untouched}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
