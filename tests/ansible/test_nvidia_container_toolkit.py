"""The nvidia_container_toolkit role's facts, config edit and verdict, and the ctr shim its scenarios run on.

The lockdown has one home, ``contract.prerequisites_settings.GPU_VISIBILITY_LOCKDOWN``: the stack gives it to the GPU
Operator as env of its toolkit container (``ACCEPT_NVIDIA_VISIBLE_DEVICES_...``, which the container writes into the
toolkit's config.toml as ``accept-nvidia-visible-devices-...``) and of its device plugin. Ansible cannot import it, so
the role repeats it in ``vars/main.yml``; the first test holds the two equal. The molecule scenarios (converge,
idempotence, check mode, audit mode both ways, a runtime that ignores its config) are in test_molecule.py.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.prerequisites_settings import GPU_VISIBILITY_LOCKDOWN
from tests.ansible.harness import ROLES_DIR, SHIMS, TOOLKIT_CONFIG, filter_plugin

toolkit = filter_plugin("nvidia_container_toolkit")
ROLE = ROLES_DIR / "nvidia_container_toolkit"
ENVVAR_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
MOUNTS_KEY = "accept-nvidia-visible-devices-as-volume-mounts"
LOCK = {ENVVAR_KEY: False, MOUNTS_KEY: True}
PATH = "/etc/nvidia-container-runtime/config.toml"


def _config_key(env_name: str) -> str:
    """The toolkit container's mapping of its env to config.toml: ``ACCEPT_NVIDIA_...`` -> ``accept-nvidia-...``."""
    return env_name.lower().replace("_", "-")


def test_role_lockdown_is_the_contract_one() -> None:
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    want = {
        _config_key(name): {"true": True, "false": False}[value]
        for name, value in GPU_VISIBILITY_LOCKDOWN["toolkit"].items()
    }
    assert role_vars["nvidia_container_toolkit_lockdown"] == want
    assert set(GPU_VISIBILITY_LOCKDOWN) == {"toolkit", "devicePlugin"}
    assert GPU_VISIBILITY_LOCKDOWN["devicePlugin"] == {
        "DEVICE_LIST_STRATEGY": role_vars["nvidia_container_toolkit_device_list_strategy"]
    }
    # The filter's wording of the toolkit's own defaults names the same keys.
    assert set(toolkit.TOOLKIT_DEFAULTS) == set(want)


# ----------------------------------------------------------------------------------------------- config edit
def _slurped(text: str | None) -> dict[str, Any]:
    if text is None:
        return {"failed": True, "msg": f"file not found: {PATH}"}
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64"}


def test_packaged_config_gets_the_keys_under_their_commented_defaults_and_keeps_every_line() -> None:
    out = toolkit.lock_config(TOOLKIT_CONFIG, LOCK)
    lines = out.splitlines()
    assert [line for line in lines if line not in TOOLKIT_CONFIG.splitlines()] == [
        f"{MOUNTS_KEY} = true",
        f"{ENVVAR_KEY} = false",
    ]
    assert [line for line in lines if not line.startswith("accept-")] == TOOLKIT_CONFIG.splitlines()
    assert lines.index(f"{MOUNTS_KEY} = true") == lines.index(f"#{MOUNTS_KEY} = false") + 1
    assert tomllib.loads(out) == {**tomllib.loads(TOOLKIT_CONFIG), **LOCK}
    assert toolkit.lock_config(out, LOCK) == out  # a second run changes nothing


def test_values_are_replaced_in_place_whatever_the_quoting_and_comments() -> None:
    text = f'"{ENVVAR_KEY}" = true  # set by hand\n  {MOUNTS_KEY}=false\n\n[nvidia-container-cli]\nload-kmods = true\n'
    assert toolkit.lock_config(text, LOCK) == (
        f'"{ENVVAR_KEY}" = false  # set by hand\n  {MOUNTS_KEY}=true\n\n[nvidia-container-cli]\nload-kmods = true\n'
    )


def test_keys_go_before_the_first_table_not_into_it() -> None:
    # The key written into a table is another key (the toolkit reads only the top-level one): it stays as it is.
    text = f"[nvidia-container-cli]\n{ENVVAR_KEY} = true\nload-kmods = true\n"
    out = toolkit.lock_config(text, LOCK)
    doc = tomllib.loads(out)
    assert doc[ENVVAR_KEY] is False
    assert doc[MOUNTS_KEY] is True
    assert doc["nvidia-container-cli"] == {ENVVAR_KEY: True, "load-kmods": True}
    assert out.endswith(text)


def test_a_line_starting_with_a_bracket_inside_a_top_level_array_is_no_table() -> None:
    text = 'matrix = [\n  [1, 2],\n  [3, 4],\n]\nname = "x"\n\n[t]\nk = 1\n'
    out = toolkit.lock_config(text, LOCK)
    assert tomllib.loads(out) == {**tomllib.loads(text), **LOCK}
    assert out.index(ENVVAR_KEY) < out.index("[t]")


def test_missing_or_empty_file_is_written_with_the_keys_only() -> None:
    state = toolkit.toolkit_config_locked(_slurped(None), LOCK, PATH)
    assert state["error"] is None
    assert not state["exists"]
    assert state["changed"]
    assert tomllib.loads(state["content"]) == LOCK
    assert state["before"] == {ENVVAR_KEY: None, MOUNTS_KEY: None}
    assert tomllib.loads(toolkit.lock_config("", LOCK)) == LOCK


def test_a_locked_file_is_left_as_it_is() -> None:
    locked = toolkit.lock_config(TOOLKIT_CONFIG, LOCK)
    state = toolkit.toolkit_config_locked(_slurped(locked), LOCK, PATH)
    assert (state["changed"], state["content"], state["before"]) == (False, locked, LOCK)


def test_invalid_or_unreadable_config_is_refused_and_nothing_written() -> None:
    state = toolkit.toolkit_config_locked(_slurped("disable-require = \n[x\n"), LOCK, PATH)
    assert state["content"] is None
    assert not state["changed"]
    assert state["error"].startswith(f"{PATH}: not valid TOML")
    state = toolkit.toolkit_config_locked({"failed": True, "msg": "Permission denied"}, LOCK, PATH)
    assert state["error"] == f"cannot read {PATH}: Permission denied"
    with pytest.raises(ValueError, match="must be set to a boolean"):
        toolkit.lock_config("", {ENVVAR_KEY: "false"})


# ----------------------------------------------------------------------------------------------- verdict
def _ls(*gpus: int) -> dict[str, Any]:
    names = ["core", "null", "pts", "zero"] + (["nvidiactl", "nvidia-uvm"] if gpus else [])
    return {"rc": 0, "stdout": "\n".join(sorted(names + [f"nvidia{g}" for g in gpus])), "stderr": ""}


SKIPPED: dict[str, Any] = {"skipped": True}
WRITTEN: dict[str, Any] = {"changed": False}


def _verdict(
    unrequested: dict[str, Any],
    allocated: dict[str, Any],
    *,
    config_text: str | None = TOOLKIT_CONFIG,
    configure: bool = True,
    write: dict[str, Any] = WRITTEN,
    pull: dict[str, Any] = SKIPPED,
) -> dict[str, Any]:
    config = toolkit.toolkit_config_locked(_slurped(config_text), LOCK, PATH)
    result: dict[str, Any] = toolkit.gpu_visibility_verdict(
        config, write, pull, unrequested, allocated, LOCK, 8, configure
    )
    return result


def test_a_locked_node_passes() -> None:
    verdict = _verdict(_ls(), _ls(*range(8)))
    assert verdict["status"] == "pass", verdict
    assert verdict["details"] == {
        "config_path": PATH,
        "config": LOCK,
        "unrequested_devices": [],
        "allocated_devices": [f"/dev/nvidia{g}" for g in range(8)],
    }


def test_gpus_seen_without_a_request_fail_and_are_named() -> None:
    verdict = _verdict(_ls(*range(8)), _ls(*range(8)))
    assert verdict["status"] == "fail"
    assert verdict["reasons"] == [
        "an unprivileged container that requests no GPU, with NVIDIA_VISIBLE_DEVICES=all, sees 8 GPU(s): "
        + ", ".join(f"/dev/nvidia{g}" for g in range(8))
        + f" (the toolkit honours the variable; {PATH} must set {ENVVAR_KEY} = false)"
    ]
    # nvidiactl and nvidia-uvm are not GPUs; nvidia10 sorts after nvidia9
    assert toolkit.gpu_devices("nvidiactl\nnvidia-uvm\nnvidia10\nnvidia9\n") == ["/dev/nvidia9", "/dev/nvidia10"]


def test_allocated_container_must_see_every_gpu() -> None:
    verdict = _verdict(_ls(), _ls(0, 1))
    assert verdict["status"] == "fail"
    assert "sees 2 GPU(s), not 8: /dev/nvidia0, /dev/nvidia1" in verdict["reasons"][0]
    assert f"must set {MOUNTS_KEY} = true" in verdict["reasons"][0]


def test_a_probe_that_did_not_run_or_printed_no_listing_fails() -> None:
    failed = {"rc": 1, "stdout": "", "stderr": 'ctr: image "x": not found'}
    verdict = _verdict(failed, {"rc": 0, "stdout": "== CUDA ==\n", "stderr": ""})
    assert verdict["reasons"] == [
        'container requesting no GPU: the probe container exited rc=1: ctr: image "x": not found',
        "container given every GPU by volume mounts: the probe printed no /dev listing: '== CUDA =='",
    ]
    pull = {"rc": 1, "stdout": "", "stderr": "ctr: failed to resolve reference"}
    assert _verdict(_ls(), _ls(*range(8)), pull=pull)["reasons"] == [
        "pulling the probe image failed (rc=1): ctr: failed to resolve reference"
    ]


def test_check_mode_skips_unless_the_audit_already_fails() -> None:
    assert _verdict(SKIPPED, SKIPPED)["status"] == "skipped"
    verdict = _verdict(SKIPPED, SKIPPED, configure=False)
    assert verdict["status"] == "fail"
    assert verdict["reasons"] == [
        f"{PATH}: {ENVVAR_KEY} unset (the toolkit's default, true), must be false",
        f"{PATH}: {MOUNTS_KEY} unset (the toolkit's default, false), must be true",
    ]


def test_a_failed_write_or_a_config_error_fails_the_node() -> None:
    write = {"failed": True, "msg": "Permission denied"}
    verdict = _verdict(_ls(), _ls(*range(8)), write=write)
    assert verdict["reasons"] == [f"writing {PATH} failed: Permission denied"]
    assert verdict["details"]["config"] == {ENVVAR_KEY: None, MOUNTS_KEY: None}
    verdict = _verdict(_ls(), _ls(*range(8)), config_text="[x\n")
    assert verdict["status"] == "fail"
    assert "not valid TOML" in verdict["reasons"][0]


# ----------------------------------------------------------------------------------------------- ctr shim
def _ctr(tmp: Path, knobs: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp / "knobs.json"
    path.write_text(json.dumps(knobs))
    env = {**os.environ, "GPUCLUSTER_SHIM_KNOBS": str(path)}
    return subprocess.run([str(SHIMS / "ctr"), *args], capture_output=True, text=True, env=env, check=False)


IMAGE = "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04"
RUN = [
    "-n",
    "ns",
    "run",
    "--rm",
    "--runc-binary",
    "/usr/bin/nvidia-container-runtime",
    "--env",
    "NVIDIA_VISIBLE_DEVICES=all",
]


def test_ctr_shim_follows_the_toolkit_rule_and_rejects_what_ctr_rejects(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(toolkit.lock_config(TOOLKIT_CONFIG, LOCK))
    knobs = {"toolkit_config": str(config), "gpus": 2}
    assert 'image "nvcr.io' in _ctr(tmp_path, knobs, *RUN, IMAGE, "p1", "ls", "-1", "/dev").stderr
    assert _ctr(tmp_path, knobs, "-n", "ns", "images", "pull", "cuda:12").returncode == 1  # not fully qualified
    assert _ctr(tmp_path, knobs, "-n", "ns", "images", "pull", IMAGE).returncode == 0
    assert _ctr(tmp_path, knobs, "-n", "ns", "images", "ls", "-q").stdout.split() == [IMAGE]
    locked = _ctr(tmp_path, knobs, *RUN, IMAGE, "p1", "ls", "-1", "/dev")
    assert locked.returncode == 0
    assert "null" in locked.stdout.split()
    assert "nvidia0" not in locked.stdout
    # A privileged container is given what the variable asks for; runc without the toolkit gives nothing.
    privileged = _ctr(tmp_path, knobs, *RUN[:4], "--privileged", *RUN[4:], IMAGE, "p2", "ls", "-1", "/dev")
    assert {"nvidia0", "nvidia1"} <= set(privileged.stdout.split())
    runc = _ctr(
        tmp_path,
        {**knobs, "gpu_visibility_leak": True},
        "-n",
        "ns",
        "run",
        "--rm",
        "--env",
        "NVIDIA_VISIBLE_DEVICES=all",
        IMAGE,
        "p3",
        "ls",
        "-1",
        "/dev",
    )
    assert "nvidia0" not in runc.stdout
    assert "flag provided but not defined: --gpus" in _ctr(tmp_path, knobs, "-n", "ns", "run", "--gpus", "0").stderr
    assert "only `ls -1 /dev`" in _ctr(tmp_path, knobs, *RUN, IMAGE, "p4", "nvidia-smi").stderr
    assert "invalid argument" in _ctr(tmp_path, knobs, *RUN, IMAGE, "bad id", "ls", "-1", "/dev").stderr
