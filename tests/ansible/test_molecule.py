"""Molecule scenarios per role, run against an unmanaged local host whose tools are shims.

``default``: a healthy node; converge, idempotence (the role changes nothing on a second run),
check mode, and verify that the verdict is pass. ``failing``: a seeded fault; verify that the
verdict is fail and names the GPU/link/port/test.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible.harness import (
    FAULTS,
    ROLES_DIR,
    SHIMS,
    TOOLKIT_CONFIG,
    VENV_BIN,
    ansible_env,
    fault_checks,
    filter_plugin,
    seed_node,
)

# The simulated hosts' ib_write_bw servers listen on fixed ports of their addresses; each xdist worker's hosts have
# addresses of their own (harness.host_address), so the Ansible tests of two workers run side by side.
pytestmark = pytest.mark.molecule

PASS = {"status": "pass", "reasons": [], "details": {}}


def _role_vars(role: str, tmp: Path, knobs: dict[str, Any]) -> dict[str, Any]:
    node = seed_node(tmp / "node", "instance", knobs)
    extra: dict[str, Any] = {
        "gpu_burn_in": {},
        "gpu_thermal_acceptance": {},
        "nvlink_acceptance": {},
        "ib_acceptance": {
            "ib_acceptance_write_bw_enabled": True,
            "ib_acceptance_write_bw_duration_s": 1,
        },
        "storage_acceptance": {"storage_acceptance_writers": 64},
        "nvidia_container_toolkit": {},
        "node_admission": {
            "node_admission_artifacts_dir": str(tmp / "artifacts"),
            "node_admission_run_id": "molecule",
            "node_admission_kubeconfig": str(tmp / "kubeconfig"),
            "node_admission_kubectl_bin": str(SHIMS / "kubectl"),
            "node_admission_node_name": "gpu-sim-instance",
            "nvidia_container_toolkit_verdict": PASS,
            "gpu_burn_in_verdict": PASS,
            "gpu_thermal_acceptance_verdict": PASS,
            "nvlink_acceptance_verdict": PASS,
            "ib_acceptance_verdict": PASS,
            "ib_acceptance_pairs_verdict": PASS,
            "ib_acceptance_collective_verdict": PASS,
            "storage_acceptance_verdict": PASS,
        },
    }[role]
    (tmp / "kubeconfig").write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    node["acceptance_environment"]["KUBECTL_SHIM_LOG"] = str(tmp / "kubectl.log")
    return {**node, **extra, "acceptance_verdict_file": str(tmp / "verdict.json")}


def _molecule(role: str, scenario: str, tmp: Path, variables: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    vars_file = tmp / "node-vars.yml"
    vars_file.write_text(yaml.safe_dump(variables, sort_keys=True))
    env = ansible_env(tmp)
    env["ACCEPTANCE_NODE_VARS"] = str(vars_file)
    env["MOLECULE_NO_LOG"] = "false"
    # Each test gets its own molecule state directory.
    env["XDG_CACHE_HOME"] = str(tmp / "cache")
    return subprocess.run(
        [str(VENV_BIN / "molecule"), "test", "-s", scenario],
        cwd=ROLES_DIR / role,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _explain(res: subprocess.CompletedProcess[str]) -> str:
    return f"rc={res.returncode}\n--- stdout\n{res.stdout[-6000:]}\n--- stderr\n{res.stderr[-3000:]}"


ROLES = [
    "gpu_burn_in",
    "gpu_thermal_acceptance",
    "nvlink_acceptance",
    "ib_acceptance",
    "storage_acceptance",
    "nvidia_container_toolkit",
    "node_admission",
]


@pytest.mark.parametrize("role", ROLES)
def test_default_scenario_passes_is_idempotent_and_check_safe(role: str, tmp_path: Path) -> None:
    variables = _role_vars(role, tmp_path, {})
    variables.update({"acceptance_expect_status": "pass", "acceptance_expect_reasons": []})
    res = _molecule(role, "default", tmp_path, variables)
    assert res.returncode == 0, _explain(res)
    out = res.stdout + res.stderr
    assert "idempotence" in out.lower(), _explain(res)
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["status"] == "pass", verdict
    if role == "node_admission":
        calls = [json.loads(line) for line in (tmp_path / "kubectl.log").read_text().splitlines()]
        labels = [c for c in calls if c[1] == "label"]
        # converge and idempotence each label the node; check mode runs no kubectl.
        assert len(labels) == 2, calls
        assert labels[0][-2:] == ["gpucluster.io/accepted=true", "--overwrite"], labels
        assert all(c[0] == f"--kubeconfig={tmp_path / 'kubeconfig'}" for c in calls), calls
    if role == "nvidia_container_toolkit":
        _assert_locked_once(variables)


# (role, fault from harness.FAULTS, reasons the verdict must name)
FAILING = [
    ("gpu_burn_in", "diag_fail", ["dcgmi diag test 'memory' failed on GPU 2", "DBE detected"]),
    ("gpu_thermal_acceptance", "hot_gpu", ["GPU 3 (", "above thermal_limit_c 78"]),
    ("gpu_thermal_acceptance", "warm_gpu", ["GPU 5 (", "9 C above the node median"]),
    ("nvlink_acceptance", "nvlink_replay", ["GPU 6 link 3 Replay Errors grew from 0 to 4"]),
    ("ib_acceptance", "ib_down", ["mlx5_3 port 1: State Down", "Physical state Polling"]),
    ("storage_acceptance", "slow_fs", ["direct write", "below the per-node floor 0.521 GB/s"]),
    (
        "nvidia_container_toolkit",
        "gpu_visible",
        ["requests no GPU, with NVIDIA_VISIBLE_DEVICES=all, sees 8 GPU(s): /dev/nvidia0, /dev/nvidia1,"],
    ),
]


@pytest.mark.parametrize(("role", "fault", "reasons"), FAILING, ids=[f"{r}-{f}" for r, f, _ in FAILING])
def test_failing_scenario_names_the_fault(role: str, fault: str, reasons: list[str], tmp_path: Path) -> None:
    knobs, _ = FAULTS[fault]
    assert role in fault_checks(fault)
    variables = _role_vars(role, tmp_path, knobs)
    variables.update(
        {
            f"{role}_defer_failure": True,
            "acceptance_expect_status": "fail",
            "acceptance_expect_reasons": reasons,
        }
    )
    res = _molecule(role, "failing", tmp_path, variables)
    assert res.returncode == 0, _explain(res)
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["status"] == "fail"
    for reason in reasons:
        assert any(reason in r for r in verdict["reasons"]), (reason, verdict["reasons"])


def test_node_admission_failing_node_is_tainted_and_fails(tmp_path: Path) -> None:
    variables = _role_vars("node_admission", tmp_path, {})
    variables["gpu_thermal_acceptance_verdict"] = {
        "status": "fail",
        "reasons": ["GPU 3 (GPU-3) reached 79 C, above thermal_limit_c 78 C"],
        "details": {},
    }
    del variables["storage_acceptance_verdict"]  # a check that never ran fails the node too
    variables.update(
        {
            "acceptance_expect_status": "fail",
            "acceptance_expect_reasons": ["gpu_thermal_acceptance: GPU 3", "storage_acceptance did not run"],
        }
    )
    res = _molecule("node_admission", "failing", tmp_path, variables)
    assert res.returncode == 0, _explain(res)
    calls = [json.loads(line) for line in (tmp_path / "kubectl.log").read_text().splitlines()]
    taints = [c for c in calls if c[1] == "taint"]
    assert taints == [
        [
            f"--kubeconfig={tmp_path / 'kubeconfig'}",
            "taint",
            "node",
            "gpu-sim-instance",
            "gpucluster.io/acceptance-failed=thermal.storage:NoSchedule",
            "--overwrite",
        ]
    ], calls
    assert not [c for c in calls if "gpucluster.io/accepted=true" in c], calls
    summary = json.loads((tmp_path / "artifacts/acceptance/molecule/summary.json").read_text())
    assert list(summary["failed"]) == ["instance"]


def _seed_kubectl_state(variables: dict[str, Any], nodes: dict[str, Any]) -> Path:
    """The kubectl shim's cluster state before the run (its state file beside the knob file)."""
    state = Path(variables["acceptance_environment"]["GPUCLUSTER_SHIM_KNOBS"] + ".state.json")
    state.write_text(json.dumps({"kubectl": nodes}))
    return state


QUARANTINED_NODE = {
    "labels": {"gpucluster.io/accepted": "true", "gpucluster.io/quarantined": "true"},
    "taints": {"gpucluster.io/quarantine:NoExecute": "gpu-temperature", "nvidia.com/gpu:NoSchedule": ""},
    "annotations": {
        "gpucluster.io/quarantine-reason": "firing: GpuTemperatureHigh (gpu=3, UUID=GPU-3)",
        "gpucluster.io/quarantined-at": "2025-05-01T10:00:00Z",
        "other.example/keep": "yes",
    },
}


def test_node_admission_pass_releases_a_quarantined_node_once(tmp_path: Path) -> None:
    """The default scenario on a quarantined node: converge releases it (released-at first, label last),
    idempotence finds nothing left to release, check mode changes nothing."""
    variables = _role_vars("node_admission", tmp_path, {})
    variables.update({"acceptance_expect_status": "pass", "acceptance_expect_reasons": []})
    state = _seed_kubectl_state(variables, {"gpu-sim-instance": QUARANTINED_NODE})
    res = _molecule("node_admission", "default", tmp_path, variables)
    assert res.returncode == 0, _explain(res)
    node = json.loads(state.read_text())["kubectl"]["gpu-sim-instance"]
    assert node["taints"] == {"nvidia.com/gpu:NoSchedule": ""}
    assert node["labels"] == {"gpucluster.io/accepted": "true"}
    annotations = node["annotations"]
    assert set(annotations) == {"other.example/keep", "gpucluster.io/quarantine-released-at"}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", annotations["gpucluster.io/quarantine-released-at"])
    calls = [json.loads(line)[1:] for line in (tmp_path / "kubectl.log").read_text().splitlines()]
    admission = {"gpucluster.io/accepted=true", "gpucluster.io/acceptance-failed:NoSchedule-"}
    release = [c for c in calls if c[0] != "get" and not admission & set(c)]
    assert [c[0] for c in release] == ["annotate", "taint", "annotate", "label"], calls
    assert release[1][-1] == "gpucluster.io/quarantine:NoExecute-"
    assert release[2][-2:] == ["gpucluster.io/quarantine-reason-", "gpucluster.io/quarantined-at-"]
    assert release[3][-1] == "gpucluster.io/quarantined-"
    # converge, idempotence and check mode each read the node once; only converge released it
    assert len([c for c in calls if c[0] == "get"]) == 3, calls


def test_node_admission_failing_node_stays_quarantined(tmp_path: Path) -> None:
    variables = _role_vars("node_admission", tmp_path, {})
    variables["nvlink_acceptance_verdict"] = {"status": "fail", "reasons": ["GPU 6 link 3 down"], "details": {}}
    variables.update({"acceptance_expect_status": "fail", "acceptance_expect_reasons": ["nvlink_acceptance: GPU 6"]})
    state = _seed_kubectl_state(variables, {"gpu-sim-instance": QUARANTINED_NODE})
    res = _molecule("node_admission", "failing", tmp_path, variables)
    assert res.returncode == 0, _explain(res)
    node = json.loads(state.read_text())["kubectl"]["gpu-sim-instance"]
    assert node["taints"]["gpucluster.io/quarantine:NoExecute"] == "gpu-temperature"
    assert node["labels"]["gpucluster.io/quarantined"] == "true"
    assert "gpucluster.io/quarantine-released-at" not in node["annotations"]
    calls = [json.loads(line)[1] for line in (tmp_path / "kubectl.log").read_text().splitlines()]
    assert "annotate" not in calls
    assert "get" not in calls


# ----------------------------------------------------------------------------------- nvidia_container_toolkit
ENVVAR_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
MOUNTS_KEY = "accept-nvidia-visible-devices-as-volume-mounts"


def _shim_state(variables: dict[str, Any]) -> dict[str, Any]:
    state = Path(variables["acceptance_environment"]["GPUCLUSTER_SHIM_KNOBS"] + ".state.json")
    return json.loads(state.read_text()) if state.exists() else {}


def _assert_locked_once(variables: dict[str, Any]) -> None:
    """After the default scenario: the packaged config gained the two keys and kept every other line, containerd was
    restarted once (converge; not by idempotence, not by check mode), and every probe ran unprivileged."""
    config = Path(variables["nvidia_container_toolkit_config_path"])
    toolkit = filter_plugin("nvidia_container_toolkit")
    assert config.read_text() == toolkit.lock_config(TOOLKIT_CONFIG, {ENVVAR_KEY: False, MOUNTS_KEY: True})
    added = [line for line in config.read_text().splitlines() if line not in TOOLKIT_CONFIG.splitlines()]
    assert added == [f"{MOUNTS_KEY} = true", f"{ENVVAR_KEY} = false"]
    state = _shim_state(variables)
    assert state["systemctl"] == [["restart", "containerd"]], state.get("systemctl")
    runs = state["ctr_runs"]
    assert len(runs) == 4, runs  # two probes in converge and two in idempotence; check mode runs none
    assert not [r for r in runs if "--privileged" in r], runs
    assert state["ctr_images"] == {"gpucluster-acceptance": ["nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"]}


@pytest.mark.parametrize(
    ("envvar_line", "status", "reasons"),
    [
        (f"{ENVVAR_KEY} = false\n{MOUNTS_KEY} = true", "pass", []),
        (
            f"{ENVVAR_KEY} = true",
            "fail",
            [
                f"{ENVVAR_KEY} = true, must be false",
                f"{MOUNTS_KEY} unset (the toolkit's default, false), must be true",
                "requests no GPU, with NVIDIA_VISIBLE_DEVICES=all, sees 8 GPU(s): /dev/nvidia0, /dev/nvidia1,",
                "given every GPU by volume mounts: the probe container exited rc=1",
            ],
        ),
    ],
    ids=["locked", "envvar-true"],
)
def test_nvidia_container_toolkit_audit_passes_locked_and_fails_on_the_key(
    envvar_line: str, status: str, reasons: list[str], tmp_path: Path
) -> None:
    """Audit mode (configure false) reads the file and probes the node as it is: a node whose config has the two keys
    passes; one with the envvar key true fails, naming the key and the GPUs the unrequesting container sees."""
    text = TOOLKIT_CONFIG.replace(f"#{ENVVAR_KEY} = true", envvar_line)
    variables = _role_vars("nvidia_container_toolkit", tmp_path, {"toolkit_config_text": text})
    variables.update(
        {
            "nvidia_container_toolkit_configure": False,
            "nvidia_container_toolkit_defer_failure": True,
            "acceptance_expect_status": status,
            "acceptance_expect_reasons": reasons,
        }
    )
    res = _molecule("nvidia_container_toolkit", "failing", tmp_path, variables)
    assert res.returncode == 0, _explain(res)
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["status"] == status, verdict
    assert Path(variables["nvidia_container_toolkit_config_path"]).read_text() == text, "audit mode wrote the file"
    assert "systemctl" not in _shim_state(variables)
