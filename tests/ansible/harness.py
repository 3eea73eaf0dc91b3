"""Build simulated GPU nodes (knob files, sysfs trees, mount tables) and run the acceptance playbooks.

Every simulated node is a local-connection host whose PATH starts with the tool shims in
tests/fixtures/ansible/shims (the container runtime's, ctr and systemctl, among them); its condition
is the knob file named by GPUCLUSTER_SHIM_KNOBS.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
ROLES_DIR = ANSIBLE_DIR / "roles"
SHIMS = REPO / "tests" / "fixtures" / "ansible" / "shims"
#: containerd's ctr (running the NVIDIA container toolkit's runtime) and systemctl, on the same knobs and state.
VENV_BIN = Path(sys.executable).parent
MODULE_PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable

RUN_ID = "test-run"

IB_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors")
HCAS = [f"mlx5_{i}" for i in range(8)]

# Seeded faults: knob sets the shims turn into the matching tool output, and the check(s) that must catch each.
FAULTS: dict[str, tuple[dict[str, Any], str | tuple[str, ...]]] = {
    "hot_gpu": ({"hot_gpu": {"index": 3, "temp_c": 79}}, "gpu_thermal_acceptance"),
    "warm_gpu": ({"warm_gpu": {"index": 5, "delta_c": 9}}, "gpu_thermal_acceptance"),
    "thermal_slowdown": ({"clock_events": {"4": "0x0000000000000040"}}, "gpu_thermal_acceptance"),
    "nvlink_replay": (
        {"nvlink_growth": {"gpu": 6, "link": 3, "counter": "Replay Errors", "step": 4}},
        "nvlink_acceptance",
    ),
    "nvlink_down": ({"nvlink_inactive": [[1, 4]]}, "nvlink_acceptance"),
    # A dead or slow HCA fails the node's own port check, every pair it is in and its group's all-reduce.
    "ib_down": ({"ib_down": ["mlx5_3"]}, ("ib_acceptance", "ib_acceptance_pairs", "ib_acceptance_collective")),
    "ib_half_rate": (
        {"ib_half_rate": ["mlx5_1"]},
        ("ib_acceptance", "ib_acceptance_pairs", "ib_acceptance_collective"),
    ),
    "ib_symbol_errors": (
        {"ib_counter_growth": {"hca": "mlx5_2", "counter": "symbol_error", "step": 3}},
        "ib_acceptance",
    ),
    "slow_fs": ({"fs_write_gbs": 0.2}, "storage_acceptance"),
    "wrong_fstype": ({"mount_fstype": "nfs4"}, "storage_acceptance"),
    "diag_fail": (
        {"diag_fail": [{"test": "memory", "gpu": 2, "info": "DBE detected on GPU 2"}]},
        "gpu_burn_in",
    ),
    "burn_faulty": ({"burn_faulty": [6]}, "gpu_burn_in"),
    # The toolkit's runtime honours NVIDIA_VISIBLE_DEVICES in unprivileged containers whatever its config says.
    "gpu_visible": ({"gpu_visibility_leak": True}, "nvidia_container_toolkit"),
}

#: The NVIDIA container toolkit's config as its package (nvidia-container-toolkit-base, 1.17) ships it on Ubuntu:
#: the two GPU visibility keys commented out at their defaults, which honour the variable.
TOOLKIT_CONFIG = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
#accept-nvidia-visible-devices-envvar-when-unprivileged = true
disable-require = false
supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"
#swarm-resource = "DOCKER_RESOURCE_GPU"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
#ldcache = "/etc/ld.so.cache"
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true
#no-cgroups = false
#path = "/usr/bin/nvidia-container-cli"
#root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
#debug = "/var/log/nvidia-container-runtime.log"
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"
"""


#: Hosts per leaf switch in a simulated fleet (its inventory's node_ib_leaf).
HOSTS_PER_LEAF = 4


def filter_plugin(role: str) -> ModuleType:
    """A role's filter plugin module, loaded as Ansible loads it (by path, not as a package)."""
    path = ROLES_DIR / role / "filter_plugins" / f"{role}.py"
    spec = importlib.util.spec_from_file_location(f"acceptance_{role}", path)
    assert spec
    assert spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def fault_checks(fault: str) -> tuple[str, ...]:
    """The checks that must catch a FAULTS key."""
    check = FAULTS[fault][1]
    return (check,) if isinstance(check, str) else check


def _worker() -> int:
    """This pytest-xdist worker's number (0 outside xdist)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def host_address(index: int) -> str:
    """The address of a fleet's index-th host: each simulated host has its own loopback address, and each xdist
    worker its own range of them, so Ansible runs on two workers never bind one address and port (the ib_write_bw
    and fio servers listen on fixed ports of their host's address)."""
    return f"127.{1 + 8 * _worker() + index // 250}.{index % 250 + 1}.1"


def single_host_address() -> str:
    """The address of a lone simulated host (a molecule scenario's instance): one per xdist worker."""
    return f"127.{250 - _worker()}.0.1"


def host_leaf(index: int) -> str:
    return f"leaf-{index // HOSTS_PER_LEAF}"


def host_names(size: int) -> list[str]:
    """The names build_fleet gives a fleet of ``size`` nodes, in inventory order."""
    return [f"gpu-sim-{i:03d}" for i in range(size)]


def spread_faults(size: int) -> dict[str, str]:
    """Every FAULTS key on its own node, spread evenly over a fleet of ``size`` nodes with healthy ones between.

    Returns {host: FAULTS key}, for build_fleet.
    """
    names = sorted(FAULTS)
    if size < len(names):
        raise ValueError(f"a fleet of {size} nodes cannot hold {len(names)} seeded faults")
    hosts = host_names(size)
    return {hosts[(2 * i + 1) * size // (2 * len(names))]: fault for i, fault in enumerate(names)}


def seed_node(
    root: Path, name: str, knobs: dict[str, Any] | None = None, address: str | None = None, leaf: str = "leaf-0"
) -> dict[str, Any]:
    """Create one simulated node's fixtures under root/name and return its inventory variables.

    ``address`` is where its ib_write_bw servers listen and partners reach it (default: this worker's lone-host
    address); ``leaf`` its leaf switch.
    """
    address = address or single_host_address()
    knobs = dict(knobs or {})
    node = root / name
    node.mkdir(parents=True, exist_ok=True)
    sysfs = node / "sys"
    for hca in knobs.get("ib_hcas", HCAS):
        counters = sysfs / "class" / "infiniband" / hca / "ports" / "1" / "counters"
        counters.mkdir(parents=True, exist_ok=True)
        for counter in IB_COUNTERS:
            (counters / counter).write_text("0\n")
    mount = node / "lustre"
    mount.mkdir(exist_ok=True)
    fstype = knobs.pop("mount_fstype", "lustre")
    lines = [
        "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0",
        "/dev/nvme0n1p2 / ext4 rw,relatime 0 0",
    ]
    if not knobs.pop("mount_missing", False):
        lines.append(f"10.40.1.5@o2ib:/scratch {mount} {fstype} rw,flock,lazystatfs,user_xattr 0 0")
    (node / "mounts").write_text("\n".join(lines) + "\n")
    burn_dir = node / "gpu-burn"
    burn_dir.mkdir(exist_ok=True)
    (burn_dir / "compare.ptx").write_text("// compare kernel\n")
    # The toolkit's config as packaged, or the knob's text; None: no file (the toolkit then runs on its defaults).
    toolkit_config = node / "nvidia-container-runtime" / "config.toml"
    toolkit_text = knobs.pop("toolkit_config_text", TOOLKIT_CONFIG)
    if toolkit_config.exists():
        toolkit_config.unlink()
    if toolkit_text is not None:
        toolkit_config.parent.mkdir(exist_ok=True)
        toolkit_config.write_text(toolkit_text)
    knobs["toolkit_config"] = str(toolkit_config)
    knobs["sysfs_root"] = str(sysfs)
    knob_file = node / "knobs.json"
    knob_file.write_text(json.dumps(knobs, indent=2))
    # What ssh reaches from mpirun: every host of the fleet under its address.
    fabric = root / ".fabric"
    fabric.mkdir(exist_ok=True)
    (fabric / f"{address}.json").write_text(json.dumps({"host": name, "knob_file": str(knob_file)}))
    state = Path(str(knob_file) + ".state.json")
    if state.exists():
        state.unlink()
    return {
        "ansible_connection": "local",
        # Modules need only the standard library; the system interpreter starts faster than the venv's.
        "ansible_python_interpreter": MODULE_PYTHON,
        "acceptance_environment": {
            "PATH": f"{SHIMS}:{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "GPUCLUSTER_SHIM_KNOBS": str(knob_file),
            "GPUCLUSTER_SHIM_ADDRESS": address,
            "GPUCLUSTER_SHIM_HOST": name,
            "GPUCLUSTER_SHIM_FABRIC": str(fabric),
        },
        "ib_acceptance_collective_bin": "all_reduce_perf",
        # Sizes the all-reduce shim runs through in about three seconds (the default 1G-8G takes it 7 s to minutes).
        "ib_acceptance_collective_args": ["-b", "64M", "-e", "256M", "-f", "2", "-g", "1"],
        "node_fabric_address": address,
        "node_ib_leaf": leaf,
        "ib_acceptance_pairs_duration_s": 1,
        "ib_acceptance_sysfs_root": str(sysfs),
        "storage_acceptance_mounts_file": str(node / "mounts"),
        "storage_acceptance_mountpoint": str(mount),
        "storage_acceptance_required_options": ["rw", "flock"],
        "storage_acceptance_test_size": "64M",
        "gpu_burn_in_gpu_burn_dir": str(burn_dir),
        "gpu_burn_in_load_duration_s": 1,
        "gpu_burn_in_load_poll_s": 1,
        "gpu_thermal_acceptance_samples": 2,
        "gpu_thermal_acceptance_interval_s": 0,
        "gpu_thermal_acceptance_settle_s": 0,
        "nvidia_container_toolkit_config_path": str(toolkit_config),
    }


def write_inventory(path: Path, hosts: dict[str, dict[str, Any]], group_vars: dict[str, Any]) -> Path:
    doc = {"all": {"children": {"gpu_nodes": {"hosts": hosts, "vars": group_vars}}}}
    path.write_text(yaml.safe_dump(doc, sort_keys=True))
    return path


def ansible_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
            "ANSIBLE_ROLES_PATH": str(ROLES_DIR),
            "ANSIBLE_HOME": str(tmp / "ansible-home"),
            "ANSIBLE_LOCAL_TEMP": str(tmp / "ansible-tmp"),
            "ANSIBLE_REMOTE_TMP": str(tmp / "ansible-tmp"),
            "ANSIBLE_ASYNC_DIR": str(tmp / "ansible-async"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            "PATH": f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}",
        }
    )
    return env


def run_playbook(
    playbook: str, inventory: Path, tmp: Path, *extra: str, timeout: int = 900
) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(VENV_BIN / "ansible-playbook"),
        "-i",
        str(inventory),
        str(ANSIBLE_DIR / "playbooks" / playbook),
        *extra,
    ]
    return subprocess.run(
        cmd, env=ansible_env(tmp), capture_output=True, text=True, timeout=timeout, check=False, cwd=ANSIBLE_DIR
    )


#: Faults of different checks seeded on one node (the pipeline runs every check on a failing node, so each is found):
#: the fleet test covers every fault on fewer hosts. ``hot_gpu`` stays alone, so its node's taint names one check.
PAIRED_FAULTS: tuple[tuple[str, ...], ...] = (
    ("hot_gpu",),
    ("warm_gpu", "ib_half_rate"),
    ("thermal_slowdown", "slow_fs"),
    ("nvlink_replay", "ib_symbol_errors"),
    ("nvlink_down", "diag_fail"),
    ("wrong_fstype", "burn_faulty"),
    ("ib_down", "gpu_visible"),
)


def spread_paired_faults(size: int) -> dict[str, tuple[str, ...]]:
    """:data:`PAIRED_FAULTS`, one group per node, spread over ``size`` nodes with healthy ones between."""
    if size < len(PAIRED_FAULTS):
        raise ValueError(f"a fleet of {size} nodes cannot hold {len(PAIRED_FAULTS)} seeded groups")
    hosts = host_names(size)
    n = len(PAIRED_FAULTS)
    return {hosts[(2 * i + 1) * size // (2 * n)]: group for i, group in enumerate(PAIRED_FAULTS)}


def build_fleet(
    tmp: Path,
    size: int,
    faults: Mapping[str, str | tuple[str, ...]],
    kubeconfig: Path | None = None,
    bad_paths: Mapping[tuple[str, str], float] | None = None,
) -> tuple[Path, dict[str, tuple[str, ...]]]:
    """Inventory of ``size`` simulated nodes; ``faults`` maps host name to a FAULTS key (or several, of different
    checks); ``bad_paths`` maps a pair of hosts to the Gb/s the path between them runs at (both hosts expected to
    fail ib_acceptance_pairs and ib_acceptance_collective, so they must be partners in the run's plan and in one
    collective group).

    Returns the inventory path and {host: checks expected to fail, in pipeline order}.
    """
    hosts: dict[str, dict[str, Any]] = {}
    expected: dict[str, tuple[str, ...]] = {}
    order = required_checks()
    paths: dict[str, dict[str, float]] = {}
    for (a, b), gbps in (bad_paths or {}).items():
        paths.setdefault(a, {})[b] = gbps
        paths.setdefault(b, {})[a] = gbps
    for index, name in enumerate(host_names(size)):
        seeded = faults.get(name) or ()
        group = (seeded,) if isinstance(seeded, str) else seeded
        knobs: dict[str, Any] = {}
        checks: set[str] = set()
        for fault in group:
            more, _ = FAULTS[fault]
            if clash := checks & set(fault_checks(fault)):
                raise ValueError(f"{name}: two seeded faults of {sorted(clash)}; one per check and node")
            knobs.update(more)
            checks.update(fault_checks(fault))
        if name in paths:
            knobs["ib_pair_gbps"] = paths[name]
            checks.update(("ib_acceptance_pairs", "ib_acceptance_collective"))
        if checks:
            expected[name] = tuple(c for c in order if c in checks)
        hosts[name] = seed_node(tmp / "nodes", name, knobs, host_address(index), host_leaf(index))
    group_vars: dict[str, Any] = {
        "node_admission_artifacts_dir": str(tmp / "artifacts"),
        "node_admission_run_id": RUN_ID,
        # The simulated fleet stands for a 64-node pool writing one checkpoint together.
        "node_checkpoint_writers": 64,
    }
    if kubeconfig is not None:
        group_vars["node_admission_kubeconfig"] = str(kubeconfig)
        group_vars["node_admission_kubectl_bin"] = str(SHIMS / "kubectl")
    return write_inventory(tmp / "inventory.yml", hosts, group_vars), expected


def run_dir(tmp: Path) -> Path:
    """Where an acceptance run over ``build_fleet(tmp, ...)`` writes each node's report and the summary."""
    return tmp / "artifacts" / "acceptance" / RUN_ID


def required_checks() -> list[str]:
    """The checks every node's report must hold: node_admission's default required_checks."""
    defaults = yaml.safe_load((ROLES_DIR / "node_admission" / "defaults" / "main.yml").read_text())
    return list(defaults["node_admission_required_checks"])


def fleet_problems(tmp: Path, size: int, expected: dict[str, tuple[str, ...]]) -> list[str]:
    """How a finished acceptance run over ``build_fleet(tmp, size, ...)`` differs from what was seeded.

    ``expected`` is build_fleet's {host: checks expected to fail}. The summary must count every host, list
    exactly the expected hosts as failed, each with reasons from its checks alone (and its report failing those
    checks alone), and pass the rest; every host's report must hold a pass or a fail from every required check,
    so no failing node was stopped mid-pipeline. Returns one line per difference, empty when there is none.
    """
    out = run_dir(tmp)
    summary_file = out / "summary.json"
    if not summary_file.exists():
        return [f"the run wrote no summary at {summary_file}"]
    summary = json.loads(summary_file.read_text())
    hosts = host_names(size)
    problems: list[str] = []
    if summary.get("hosts_total") != size:
        problems.append(f"summary counts {summary.get('hosts_total')} hosts, not {size}")
    failed: dict[str, list[str]] = summary.get("failed", {})
    problems += [f"{h} failed but was seeded healthy: {failed[h]}" for h in sorted(set(failed) - set(expected))]
    for host, seeded in sorted(expected.items()):
        check = ", ".join(seeded)
        if host not in failed:
            problems.append(f"{host} was seeded to fail {check} but the summary does not list it as failed")
        elif not failed[host]:
            problems.append(f"{host} is listed as failed with no reasons (seeded to fail {check})")
        elif wrong := [r for r in failed[host] if not r.startswith(tuple(f"{c}: " for c in seeded))]:
            problems.append(f"{host} was seeded to fail {check} but has other reasons: {wrong}")
        elif missing := [c for c in seeded if not any(r.startswith(f"{c}: ") for r in failed[host])]:
            problems.append(f"{host} was seeded to fail {check} but has no reason from {missing}")
    passed = set(summary.get("passed", []))
    healthy = set(hosts) - set(expected)
    if missing := sorted(healthy - passed):
        problems.append(f"healthy hosts not listed as passed: {missing}")
    if extra := sorted(passed - healthy):
        problems.append(f"hosts listed as passed that are not healthy hosts of this fleet: {extra}")
    checks = required_checks()
    for host in hosts:
        report_file = out / f"{host}.json"
        if not report_file.exists():
            problems.append(f"{host} has no report")
            continue
        report = json.loads(report_file.read_text())
        want = list(expected.get(host, ()))
        if report.get("failed_checks") != want:
            problems.append(f"{host} report fails {report.get('failed_checks')}, expected {want}")
        statuses = {name: verdict.get("status") for name, verdict in report.get("checks", {}).items()}
        if sorted(statuses) != sorted(checks):
            problems.append(f"{host} report has checks {sorted(statuses)}, expected {sorted(checks)}")
        if unfinished := {name: st for name, st in statuses.items() if st not in {"pass", "fail"}}:
            problems.append(f"{host} report has checks with neither pass nor fail: {unfinished}")
    return problems
