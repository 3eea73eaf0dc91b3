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
    HCAS,
    PAIRED_FAULTS,
    build_fleet,
    filter_plugin,
    fleet_problems,
    host_address,
    host_leaf,
    host_names,
    run_playbook,
    spread_paired_faults,
)

# Real ansible-playbook runs against simulated hosts. Their ib_write_bw servers listen on fixed ports of their
# addresses, and each xdist worker's hosts have addresses of their own (harness.host_address): Ansible tests on two
# workers run side by side.
pytestmark = pytest.mark.molecule

# Room for one node per group of seeded faults and two healthy ones; every fault is seeded.
FLEET_SIZE = len(PAIRED_FAULTS) + 2
SEEDED = spread_paired_faults(FLEET_SIZE)
assert sorted(f for group in PAIRED_FAULTS for f in group) == sorted(FAULTS)
# The HCAs the run tests: the first four of each node's eight, every seeded IB fault among them. Clients connect one
# HCA after another, so the pair rounds take half as long as over all eight; the 64-host bench tests all eight.
FLEET_HCAS = HCAS[:4]
FAULTED_HCAS = set(re.findall(r"mlx5_\d+", json.dumps([knobs for knobs, _ in FAULTS.values()])))
assert FAULTED_HCAS
assert set(FLEET_HCAS) >= FAULTED_HCAS, FAULTED_HCAS


def test_fleet_summary_lists_exactly_the_seeded_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    inventory, expected = build_fleet(tmp_path, FLEET_SIZE, SEEDED, kubeconfig=kubeconfig)
    assert len(expected) == len(PAIRED_FAULTS) < FLEET_SIZE
    log = tmp_path / "kubectl.log"
    # Every host's kubectl calls go to one log (the controller runs kubectl).
    monkeypatch.setenv("KUBECTL_SHIM_LOG", str(log))
    hcas = json.dumps({"ib_acceptance_hcas": FLEET_HCAS})
    res = run_playbook("acceptance.yml", inventory, tmp_path, "--forks", "16", "-e", hcas, timeout=1500)
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


def test_fabric_pairs_and_all_reduce_put_a_slow_hca_on_its_host_and_a_bad_path_on_both_ends(tmp_path: Path) -> None:
    size, slow = 8, "gpu-sim-001"
    names = host_names(size)
    plan = filter_plugin("ib_acceptance").ib_pair_plan(
        [{"name": n, "leaf": host_leaf(i), "address": host_address(i)} for i, n in enumerate(names)]
    )["hosts"]
    # A degraded path between two healthy hosts that the run pairs, neither a partner of the slow host.
    near_slow = {slow} | {s["partner"] for s in plan[slow]}
    a = next(n for n in names if n not in near_slow and not {s["partner"] for s in plan[n]} & near_slow)
    b = plan[a][0]["partner"]
    inventory, _ = build_fleet(tmp_path, size, {slow: "ib_half_rate"}, bad_paths={(a, b): 100.0})
    hcas = '{"ib_acceptance_hcas": ["mlx5_0", "mlx5_1"]}'
    res = run_playbook("fabric.yml", inventory, tmp_path, "--forks", "8", "-e", hcas, timeout=600)
    assert res.returncode != 0, res.stdout[-3000:]
    recap = dict(re.findall(r"^(gpu-sim-\d+)\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=(\d)", res.stdout, re.M))
    assert sorted(h for h, failed in recap.items() if failed == "1") == sorted([slow, a, b]), res.stdout[-3000:]
    assert len(recap) == size
    out = " ".join(res.stdout.split())
    assert f"{slow}: fails ib_write_bw with every partner" in out, out[-3000:]
    assert "mlx5_1: 24.38 GB/s, below floor 40 GB/s" in out
    # One group of 8 runs all_reduce_perf; its bus bandwidth falls below the floor and is put on the three above.
    assert out.count("all_reduce_perf over 8 hosts") >= 3
    assert "below 80 GB/s; this host failed its pairs too" in out
    for me, partner in ((a, b), (b, a)):
        assert f"{me}: fails ib_write_bw only with partner {partner} (leaf {host_leaf(names.index(me))} -> leaf" in out
        assert "mlx5_1: 12.50 GB/s, below floor 40 GB/s; passes with" in out


def test_burn_in_playbook_fails_only_the_hot_node_and_names_the_gpu(tmp_path: Path) -> None:
    inventory, _ = build_fleet(tmp_path, 2, {"gpu-sim-001": "hot_gpu"})
    res = run_playbook("burn_in.yml", inventory, tmp_path)
    assert res.returncode != 0
    out = res.stdout
    assert "GPU 3 (GPU-00000003" in out, out[-3000:]
    assert "above thermal_limit_c 78" in out, out[-3000:]
    assert re.search(r"gpu-sim-000\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", out), out[-1500:]
    assert re.search(r"gpu-sim-001\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=1", out), out[-1500:]


def test_container_toolkit_playbook_locks_every_node_and_fails_only_the_leaking_one(tmp_path: Path) -> None:
    inventory, _ = build_fleet(tmp_path, 2, {"gpu-sim-001": "gpu_visible"})
    res = run_playbook("container_toolkit.yml", inventory, tmp_path)
    assert res.returncode != 0
    out = " ".join(res.stdout.split())
    assert "failed on gpu-sim-001: an unprivileged container that requests no GPU, with NVIDIA_VISIBLE_DEVICES" in out
    assert re.search(r"gpu-sim-000\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", res.stdout), out[-1500:]
    assert re.search(r"gpu-sim-001\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=1", res.stdout), out[-1500:]
    for host in ("gpu-sim-000", "gpu-sim-001"):
        config = (tmp_path / "nodes" / host / "nvidia-container-runtime" / "config.toml").read_text()
        assert "\naccept-nvidia-visible-devices-envvar-when-unprivileged = false\n" in config, host
        state = json.loads((tmp_path / "nodes" / host / "knobs.json.state.json").read_text())
        assert state["systemctl"] == [["restart", "containerd"]], host


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
