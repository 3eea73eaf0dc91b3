"""A fleet's background error counts against the quarantine rules, side by side with zero tolerance.

Runs the stack's real alert rules (``components/telemetry/alerts.py`` with the default settings) in promtool over
one hour of a 128-node fleet (8 GPUs, 4 NVLink links a GPU, 4 InfiniBand ports a node), scraped every minute, and
counts the nodes that any quarantine-signal alert fired for at some point of the hour: the nodes the quarantine
controller would take away from training (its breaker, which caps how many go at once, is not modelled: the
figure is what the rules hand it). Beside it, the same hour under zero tolerance, as the rules read before they
judged rates: any XID, any NVLink CRC, replay or recovery error, any InfiniBand symbol error, link-down or link
recovery within the error window pulls the node.

The background is what a healthy fleet shows (deterministic, seed 7):
- the program's XIDs (13, 31, 43, 45: contract/xids.py) on 5 % of the GPUs, at a random minute each;
- NVLink CRC flit errors trickling on 10 % of the links, one every ten minutes;
- InfiniBand symbol errors trickling on 10 % of the ports, one every ten minutes on a 25 GB/s (200 Gb/s) link: a
  bit-error ratio near 1e-14 over the 5-minute window, under the 1e-12 a link is specified to beat.
Four cards are faulty and must still be quarantined: a hardware XID (79, fallen off the bus), an NVLink CRC burst
(600 in five minutes on one link), an InfiniBand port at a bit-error ratio of 1e-10, and a port whose link went
down once.

What it does not model: error counts taken from a real fleet's history (none is public at this grain; the rates
above are stated, not measured), and the controller's own breaker and repeat memory. Needs promtool
(``make debian-deps``). Usage: ``python benchmarks/bench_quarantine_fleet.py``.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from components.telemetry.alerts import (  # noqa: E402
    FABRIC,
    QUARANTINE_SIGNAL_LABEL,
    QUARANTINE_SIGNAL_VALUE,
    rule_groups,
)
from components.telemetry.settings import TelemetrySettings  # noqa: E402
from contract.xids import PROGRAM_XIDS, new_xid_filter  # noqa: E402

NODES = 128
GPUS = 8
LINKS = 4
PORTS = 4
MINUTES = 60
#: Nodes per promtool run.
BATCH = 8
#: A busy 200 Gb/s port, in bytes a second (the fabric exporter's rate gauge).
PORT_RATE = 25e9
DCGM_JOB = "dcgm-exporter"
FABRIC_JOB = "gpucluster-fabric-exporter"
APP_XID_SHARE = 0.05
TRICKLE_SHARE = 0.10
TRICKLE_EVERY_MINUTES = 10
#: node -> what is wrong with it; every one must be quarantined.
FAULTY = {
    "gpu-node-007": "hardware XID 79",
    "gpu-node-031": "NVLink CRC burst, 600 in 5 min",
    "gpu-node-064": "InfiniBand bit-error ratio 1e-10",
    "gpu-node-100": "InfiniBand link down once",
}


@dataclass
class Fleet:
    #: node -> its input series (promtool's notation); the rules never join across nodes, so nodes are evaluated
    #: in batches (promtool refuses a query that loads more than 10,000 samples).
    series: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    background: dict[str, int] = field(default_factory=dict)

    def add(self, node: str, selector: str, values: str) -> None:
        self.series.setdefault(node, []).append({"series": selector, "values": values})


def _counter(at: list[int], step: int = 1) -> str:
    """Expanding notation of a counter over MINUTES+1 samples that rises by ``step`` at each minute in ``at``."""
    out, total = [], 0
    for minute in range(MINUTES + 1):
        total += step * at.count(minute)
        out.append(str(total))
    return " ".join(out)


def _trickle(rng: random.Random) -> str | None:
    """A counter rising by one every TRICKLE_EVERY_MINUTES from a random minute, for TRICKLE_SHARE of the calls;
    None for the others (no errors)."""
    if rng.random() >= TRICKLE_SHARE:
        return None
    start = rng.randrange(TRICKLE_EVERY_MINUTES)
    return _counter(list(range(start, MINUTES + 1, TRICKLE_EVERY_MINUTES)))


def build_fleet(seed: int = 7) -> Fleet:
    rng = random.Random(seed)
    fleet = Fleet()
    app_xids = trickle_links = trickle_ports = 0
    program = sorted({13, 31, 43, 45} & set(PROGRAM_XIDS))
    for n in range(NODES):
        node = f"gpu-node-{n:03d}"
        for g in range(GPUS):
            sel = f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{node}",gpu="{g}",UUID="GPU-{n}-{g}",job="{DCGM_JOB}"}}'
            code, at = 0, None
            if node == "gpu-node-007" and g == 3:
                code, at = 79, 25
            elif rng.random() < APP_XID_SHARE:
                code, at = rng.choice(program), rng.randrange(1, MINUTES)
                app_xids += 1
            fleet.add(node, sel, f"0x{MINUTES}" if at is None else f"0x{at - 1} {code}x{MINUTES - at}")
            for link in range(LINKS):
                sel = (
                    f'{FABRIC}_nvlink_errors_total{{node="{node}",gpu="{g}",uuid="GPU-{n}-{g}",link="{link}",'
                    f'type="crc_flit",job="{FABRIC_JOB}"}}'
                )
                if node == "gpu-node-031" and g == 0 and link == 0:
                    fleet.add(node, sel, _counter(list(range(30, 35)), 120))
                else:
                    values = _trickle(rng)
                    fleet.add(node, sel, values or f"0x{MINUTES}")
                    trickle_links += values is not None
        for p in range(PORTS):
            base = f'node="{node}",device="mlx5_{p}",port="1",job="{FABRIC_JOB}"'
            fleet.add(node, f"{FABRIC}_infiniband_port_rate_bytes_per_second{{{base}}}", f"{PORT_RATE:g}x{MINUTES}")
            symbol = f'{FABRIC}_infiniband_port_errors_total{{{base},type="symbol_error"}}'
            downed = f'{FABRIC}_infiniband_port_errors_total{{{base},type="link_downed"}}'
            if node == "gpu-node-064" and p == 2:
                # 1e-10 of the bits of a 25 GB/s port: 200 errors a minute.
                fleet.add(node, symbol, _counter(list(range(20, MINUTES + 1)), round(PORT_RATE * 8 * 60 * 1e-10)))
            else:
                values = _trickle(rng)
                fleet.add(node, symbol, values or f"0x{MINUTES}")
                trickle_ports += values is not None
            fleet.add(node, downed, _counter([40]) if node == "gpu-node-100" and p == 1 else f"0x{MINUTES}")
    fleet.background = {"app_xids": app_xids, "trickle_links": trickle_links, "trickle_ports": trickle_ports}
    return fleet


ZERO_TOLERANCE = "ZeroTolerance"


def _zero_tolerance_rule(window: str) -> dict[str, object]:
    """The rules before rates: any XID, NVLink error or InfiniBand link error in the window pulls the node."""
    xid = f'DCGM_FI_DEV_XID_ERRORS{{job="{DCGM_JOB}"}}'
    new_xid = new_xid_filter(xid, window)
    nvlink = f'increase({FABRIC}_nvlink_errors_total{{job="{FABRIC_JOB}"}}[{window}]) > 0'
    ib = (
        f'increase({FABRIC}_infiniband_port_errors_total{{job="{FABRIC_JOB}",'
        f'type=~"symbol_error|link_downed|link_error_recovery"}}[{window}]) > 0'
    )
    expr = (
        f'count by (node) (label_replace({new_xid}, "node", "$1", "Hostname", "(.+)"))'
        f" or count by (node) ({nvlink}) or count by (node) ({ib})"
    )
    return {"name": "zero-tolerance", "rules": [{"alert": ZERO_TOLERANCE, "expr": expr}]}


def _fired(selector: str) -> str:
    """The nodes an alert matching ``selector`` fired for at any evaluation of the hour."""
    return f'count by (node) (count_over_time(ALERTS{{alertstate="firing",{selector}}}[{MINUTES}m]))'


TODAY = _fired(f'{QUARANTINE_SIGNAL_LABEL}="{QUARANTINE_SIGNAL_VALUE}"')
BEFORE = _fired(f'alertname="{ZERO_TOLERANCE}"')
_NODE = re.compile(r'\{node="([^"]+)"\}')


def nodes_flagged(promtool: str, series: list[dict[str, str]], work: Path) -> tuple[set[str], set[str]]:
    """(nodes the stack's rules flag, nodes zero tolerance flags) over the hour, read from promtool's report of
    what each expression returned (it is told to expect a value no count can have, so it always reports)."""
    settings = TelemetrySettings()
    groups = rule_groups(settings)
    for g in groups["groups"]:
        for r in g["rules"]:
            r.pop("annotations", None)
    groups["groups"].append(_zero_tolerance_rule(f"{settings.alerts.error_window_minutes}m"))
    (work / "rules.yaml").write_text(yaml.safe_dump(groups, sort_keys=False))
    impossible = [{"labels": '{node="none"}', "value": -1}]
    test = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [
            {"expr": expr, "eval_time": f"{MINUTES}m", "exp_samples": impossible} for expr in (TODAY, BEFORE)
        ],
    }
    (work / "test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [test]}, sort_keys=False)
    )
    proc = subprocess.run(
        [promtool, "test", "rules", "test.yaml"], cwd=work, capture_output=True, text=True, check=False, timeout=600
    )
    out = proc.stdout + proc.stderr
    found: dict[str, set[str]] = {}
    for block in out.split("expr: ")[1:]:
        if "got:" not in block:
            break
        which = BEFORE if ZERO_TOLERANCE in block.split("\n", 1)[0] else TODAY
        found[which] = set(_NODE.findall(block.split("got:", 1)[1]))
    if set(found) != {TODAY, BEFORE}:
        raise SystemExit(f"promtool did not evaluate the fleet:\n{out[-3000:]}")
    return found[TODAY], found[BEFORE]


def main() -> int:
    promtool = shutil.which("promtool")
    if promtool is None:
        print("promtool is not installed: run make debian-deps", file=sys.stderr)
        return 1
    t0 = time.monotonic()
    fleet = build_fleet()
    today: set[str] = set()
    before: set[str] = set()
    nodes = sorted(fleet.series)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(0, len(nodes), BATCH):
            batch = [s for node in nodes[i : i + BATCH] for s in fleet.series[node]]
            flagged_today, flagged_before = nodes_flagged(promtool, batch, Path(tmp))
            today |= flagged_today
            before |= flagged_before
    healthy_today = sorted(today - set(FAULTY))
    healthy_before = sorted(before - set(FAULTY))
    caught_today = [n for n in FAULTY if n in today]
    caught_before = [n for n in FAULTY if n in before]
    b = fleet.background
    print(
        f"{NODES} nodes x {GPUS} GPUs, one hour scraped every minute; background: the program's XIDs on "
        f"{b['app_xids']} GPUs, NVLink CRC trickle on {b['trickle_links']} links, InfiniBand symbol trickle on "
        f"{b['trickle_ports']} ports; {len(FAULTY)} faulty cards"
    )
    rows = [
        ("", "rules today (rates, hardware XIDs)", "zero tolerance (before)"),
        (
            "healthy nodes quarantined",
            f"{len(healthy_today)} of {NODES - len(FAULTY)}",
            f"{len(healthy_before)} of {NODES - len(FAULTY)}",
        ),
        ("faulty cards quarantined", f"{len(caught_today)} of {len(FAULTY)}", f"{len(caught_before)} of {len(FAULTY)}"),
    ]
    for name, why in FAULTY.items():
        rows.append((f"  {name}: {why}", "yes" if name in today else "NO", "yes" if name in before else "NO"))
    for r in rows:
        print(f"{r[0]:<50}{r[1]:<38}{r[2]}")
    print(f"(promtool, {time.monotonic() - t0:.0f} s)")
    return 0 if not healthy_today and len(caught_today) == len(FAULTY) else 1


if __name__ == "__main__":
    sys.exit(main())
