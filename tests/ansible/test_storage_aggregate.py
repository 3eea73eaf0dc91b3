"""Every host writing to the shared file system at once (``playbooks/storage_aggregate.yml``): real fio 3.33 in its
client/server mode, a server on each simulated host's own address, the client on the first host, every host writing
its own file into one directory of this machine (the shared mount). The verdict must carry the aggregate, the slowest
host and the checkpoint's write time, pass against a target it meets, fail naming the figures against one it does
not, and name a host whose server never started; no server and no test file may be left behind."""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import load_stack_file
from components.training.manifest import parse_measured_write, write_time_of
from components.training.spec import JobSpec
from components.training.submit import KubeCluster
from contract.constants import STORAGE_MEASURED_CONFIGMAP, TRAINING_NAMESPACE
from tests.ansible.harness import MODULE_PYTHON, host_address, host_names, run_playbook, write_inventory
from tests.components.training.conftest import spec_doc
from tests.support.apiserver import running_apiserver
from tests.support.require import debian_tool
from tests.support.sim import tools_bin

ROOT = Path(__file__).resolve().parents[2]

# Real ansible-playbook runs against simulated hosts (addresses per xdist worker: harness.host_address).
pytestmark = [pytest.mark.molecule, pytest.mark.filterwarnings("ignore:Unverified HTTPS request")]

HOSTS = 3
#: A checkpoint target any disk meets (1 GB in 10 min), and one none does (1 PB in a second).
MET = {"storage_acceptance_checkpoint_bytes": 10**9, "storage_acceptance_checkpoint_target_s": 600}
UNMET = {"storage_acceptance_checkpoint_bytes": 10**15, "storage_acceptance_checkpoint_target_s": 1}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fleet(tmp: Path, **group: Any) -> tuple[Path, Path]:
    shared = tmp / "lustre"
    shared.mkdir(exist_ok=True)
    out = tmp / "verdicts"
    out.mkdir(exist_ok=True)
    hosts = {
        name: {
            "ansible_connection": "local",
            "ansible_python_interpreter": MODULE_PYTHON,
            "node_fabric_address": host_address(i),
            "storage_acceptance_aggregate_pidfile": str(tmp / f"{name}.pid"),
        }
        for i, name in enumerate(host_names(HOSTS))
    }
    group_vars = {
        "storage_acceptance_fio_bin": debian_tool("fio"),
        "storage_acceptance_test_dir": str(shared),
        "storage_acceptance_aggregate_size": "16M",
        "storage_acceptance_block_size": "1M",
        "storage_acceptance_iodepth": 4,
        "storage_acceptance_aggregate_port": free_port(),
        "storage_acceptance_timeout_s": 120,
        **group,
    }
    return write_inventory(tmp / "inventory.yml", hosts, group_vars), shared


def test_every_host_writes_at_once_and_the_aggregate_is_judged_against_the_checkpoint_target(tmp_path: Path) -> None:
    work = tmp_path / "apiserver"
    work.mkdir()
    with running_apiserver(work, namespaces=[TRAINING_NAMESPACE]) as server:
        inventory, shared = fleet(
            tmp_path,
            **MET,
            storage_acceptance_kubeconfig=str(server.kubeconfig),
            storage_acceptance_kubectl_bin=str(tools_bin() / "kubectl"),
        )
        passed = run_playbook("storage_aggregate.yml", inventory, tmp_path, "-v", timeout=300)
        assert passed.returncode == 0, passed.stdout[-3000:] + passed.stderr[-2000:]
        assert f"GB/s from {HOSTS} hosts" in passed.stdout
        assert "storage_acceptance aggregate pass" in passed.stdout
        assert list(shared.iterdir()) == []  # every test file deleted (unlink)
        assert not [p.name for p in tmp_path.glob("*.pid") if _alive(p)]  # every server stopped
        # what gpucluster submit reads, through the client it reads with: the write time of the stack's checkpoint
        data = KubeCluster(str(server.kubeconfig)).storage_measured(TRAINING_NAMESPACE)
        assert data is not None
        measured = parse_measured_write(data)
        assert measured.hosts == HOSTS
        assert measured.slowest_host in host_names(HOSTS)
        stack = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
        spec = JobSpec.model_validate(spec_doc())
        seconds, why = write_time_of(spec, stack, measured)
        assert seconds == stack.storage.checkpointing.size_tb * 1e12 / measured.bytes_per_second
        assert f"with {HOSTS} nodes writing at once" in why
    # The same hosts against a target no disk meets: the run fails, saying the rate, the time and the slowest host.
    inventory, _ = fleet(tmp_path, **UNMET)
    failed = run_playbook("storage_aggregate.yml", inventory, tmp_path, timeout=300)
    assert failed.returncode != 0
    said = re.search(r"storage_acceptance aggregate failed: (.*)", failed.stdout)
    assert said is not None, failed.stdout[-3000:]
    assert f"{HOSTS} hosts writing at once:" in said.group(1)
    assert "1000 TB would take" in said.group(1)
    assert "slowest: gpu-sim-" in said.group(1)


def test_a_host_whose_server_never_started_is_named(tmp_path: Path) -> None:
    # The last host's server never starts (its fio is no fio): the client finds nobody at that host's address.
    inventory, _ = fleet(tmp_path, **MET)
    doc = yaml.safe_load(inventory.read_text())
    doc["all"]["children"]["gpu_nodes"]["hosts"][host_names(HOSTS)[-1]]["storage_acceptance_fio_bin"] = "/bin/false"
    inventory.write_text(yaml.safe_dump(doc))
    failed = run_playbook("storage_aggregate.yml", inventory, tmp_path, timeout=300)
    assert failed.returncode != 0
    said = re.search(r"storage_acceptance aggregate failed: (.*)", failed.stdout)
    assert said is not None, failed.stdout[-3000:]
    # fio's client goes on with the servers it reached; the verdict names the host that wrote nothing
    assert said.group(1) == f"no write reported by {host_names(HOSTS)[-1]}"
    assert not [p.name for p in tmp_path.glob("*.pid") if _alive(p)]


def _alive(pidfile: Path) -> bool:
    """Whether the pid a server wrote still runs (a killed daemon whose parent is an init that never reaps stays a
    zombie in /proc: it is stopped all the same)."""
    try:
        pid = int(pidfile.read_text().strip())
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_role_publishes_where_submit_reads() -> None:
    """Ansible cannot import the contract: the role's defaults repeat the ConfigMap's name and namespace."""
    defaults = yaml.safe_load((ROOT / "ansible" / "roles" / "storage_acceptance" / "defaults" / "main.yml").read_text())
    assert defaults["storage_acceptance_measured_configmap"] == STORAGE_MEASURED_CONFIGMAP
    assert defaults["storage_acceptance_measured_namespace"] == TRAINING_NAMESPACE
