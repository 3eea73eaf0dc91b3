"""The whole acceptance pipeline over a small simulated fleet, and the burn-in playbook.

Every seeded fault, at most two of different checks per node, spread among a couple of healthy nodes; the run must
keep going across hosts, end non-zero, and its summary must list exactly the seeded nodes, each with the checks
that caught it. The same run over 64 hosts, with the same verification (harness.fleet_problems), is
`make bench` (benchmarks/bench_ansible_fleet.py): it takes minutes, too long for the test suite.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.ansible.harness import (
    FAULTS,
    PAIRED_FAULTS,
    build_fleet,
    fleet_problems,
    host_names,
    run_playbook,
    spread_paired_faults,
)

# Real ansible-playbook runs against simulated hosts: grouped with the molecule scenarios.
pytestmark = pytest.mark.molecule

# Room for one node per group of seeded faults and two healthy ones; every fault is seeded.
FLEET_SIZE = len(PAIRED_FAULTS) + 2
SEEDED = spread_paired_faults(FLEET_SIZE)
assert sorted(f for group in PAIRED_FAULTS for f in group) == sorted(FAULTS)


def test_fleet_summary_lists_exactly_the_seeded_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    inventory, expected = build_fleet(tmp_path, FLEET_SIZE, SEEDED, kubeconfig=kubeconfig)
    assert len(expected) == len(PAIRED_FAULTS) < FLEET_SIZE
    log = tmp_path / "kubectl.log"
    # Every host's kubectl calls go to one log (the controller runs kubectl).
    monkeypatch.setenv("KUBECTL_SHIM_LOG", str(log))
    res = run_playbook("acceptance.yml", inventory, tmp_path, "--forks", "16", timeout=1500)
    assert res.returncode != 0, "a fleet with failing nodes must end the play non-zero"
    # Exactly the seeded nodes failed, each with its check, and every node got a verdict from every check.
    problems = fleet_problems(tmp_path, FLEET_SIZE, expected)
    assert not problems, "\n".join(["the run differs from the seeded fleet:", *problems, res.stdout[-4000:]])
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    tainted = {c[3] for c in calls if c[1] == "taint" and not c[4].endswith("-")}
    labeled = {c[3] for c in calls if c[1] == "label" and c[4].endswith("=true")}
    assert tainted == set(expected)
    assert labeled == set(host_names(FLEET_SIZE)) - set(expected)
    thermal_host = next(h for h, f in SEEDED.items() if f == ("hot_gpu",))
    assert [c[4] for c in calls if c[1] == "taint" and c[3] == thermal_host] == [
        "gpucluster.io/acceptance-failed=thermal:NoSchedule"
    ]


def test_burn_in_playbook_fails_only_the_hot_node_and_names_the_gpu(tmp_path: Path) -> None:
    inventory, _ = build_fleet(tmp_path, 2, {"gpu-sim-001": "hot_gpu"})
    res = run_playbook("burn_in.yml", inventory, tmp_path)
    assert res.returncode != 0
    out = res.stdout
    assert "GPU 3 (GPU-00000003" in out, out[-3000:]
    assert "above thermal_limit_c 78" in out, out[-3000:]
    assert re.search(r"gpu-sim-000\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", out), out[-1500:]
    assert re.search(r"gpu-sim-001\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=1", out), out[-1500:]


def test_check_mode_changes_nothing_and_runs_no_load(tmp_path: Path) -> None:
    inventory, _ = build_fleet(tmp_path, 1, {})
    log = tmp_path / "nodes/gpu-sim-000/knobs.json.state.json"
    res = run_playbook("acceptance.yml", inventory, tmp_path, "--check")
    assert res.returncode == 0, res.stdout[-3000:]
    assert not (tmp_path / "artifacts").exists(), "check mode must not write reports"
    assert not list((tmp_path / "nodes/gpu-sim-000/lustre").iterdir()), "check mode must not write test files"
    # Read-only queries still ran (NVLink counters were read twice), the load did not.
    assert json.loads(log.read_text())["nvlink_e_calls"] == 2
    assert "Start gpu_burn" in res.stdout
    assert "skipping: [gpu-sim-000]" in res.stdout


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("gpu_thermal_acceptance_thermal_limit_c=79", "thermal_limit_c=79 (must be at most 78)"),
        ("gpu_burn_in_diag_level=7", "value of gpu_burn_in_diag_level must be one of: 1, 2, 3, 4, got: 7"),
        ("gpu_thermal_acceptance_samples=many", "gpu_thermal_acceptance_samples"),
    ],
)
def test_bad_settings_are_refused_with_their_name(extra: str, message: str, tmp_path: Path) -> None:
    inventory, _ = build_fleet(tmp_path, 1, {})
    res = run_playbook("burn_in.yml", inventory, tmp_path, "-e", extra)
    assert res.returncode != 0
    assert message in res.stdout, res.stdout[-3000:]
    assert "Traceback" not in res.stdout + res.stderr
