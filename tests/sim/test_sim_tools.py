"""The simulated cluster's helpers that need no cluster: fake nodes from a stack, the values the scripts read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.constants import ACCEPTED_LABEL, ACCEPTED_VALUE, IB_BLOCK_LABEL, IB_LEAF_LABEL
from tests.support.sim import load_sim_module

ROOT = Path(__file__).resolve().parents[2]


nodes = load_sim_module("nodes")


# --- sim/nodes.py -------------------------------------------------------------------------------------------


def test_local_stack_gives_four_annotated_h100_nodes() -> None:
    flavors = nodes.load_flavors(ROOT / "stacks" / "Pulumi.local.yaml")
    built = nodes.build_nodes(flavors)
    assert [n["metadata"]["name"] for n in built] == [f"h100-node-{i}" for i in range(4)]
    for n in built:
        assert n["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
        assert n["metadata"]["labels"]["gpucluster.io/flavor"] == "h100"
        assert n["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert n["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert "taints" not in n["spec"]
    assert len({n["spec"]["podCIDR"] for n in built}) == 4


def test_every_fake_node_carries_the_acceptance_label_the_flavors_select() -> None:
    flavors = nodes.load_flavors(ROOT / "stacks" / "Pulumi.local.yaml")
    assert (nodes.ACCEPTED_LABEL, nodes.ACCEPTED_VALUE) == (ACCEPTED_LABEL, ACCEPTED_VALUE)
    for n in nodes.build_nodes(flavors):
        assert n["metadata"]["labels"][ACCEPTED_LABEL] == ACCEPTED_VALUE


def test_a_flavor_with_a_topology_gets_its_place_in_the_fabric_from_the_layout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flavors = nodes.load_flavors(ROOT / "stacks" / "Pulumi.local.yaml")
    assert flavors[0].topology_labels == (IB_BLOCK_LABEL, IB_LEAF_LABEL)
    monkeypatch.delenv(nodes.FABRIC_LAYOUT_ENV, raising=False)
    place = [
        (n["metadata"]["labels"][IB_BLOCK_LABEL], n["metadata"]["labels"][IB_LEAF_LABEL])
        for n in nodes.build_nodes(flavors)
    ]
    assert place == [("h100-ib-block-0", "h100-ib-leaf-0")] * 2 + [("h100-ib-block-0", "h100-ib-leaf-1")] * 2
    monkeypatch.setenv(nodes.FABRIC_LAYOUT_ENV, "8x4")
    big = nodes.Flavor("h100", {"a": "b"}, 8, 96, topology_labels=(IB_BLOCK_LABEL, IB_LEAF_LABEL))
    labels = [n["metadata"]["labels"] for n in nodes.build_nodes([big])]
    assert len({x[IB_LEAF_LABEL] for x in labels}) == 12
    assert len({x[IB_BLOCK_LABEL] for x in labels}) == 3
    assert labels[31][IB_BLOCK_LABEL] == "h100-ib-block-0"
    assert labels[32][IB_BLOCK_LABEL] == "h100-ib-block-1"
    # A flavor without a topology gets no fabric labels.
    assert not [
        k for k in nodes.build_nodes([_flavor(1)])[0]["metadata"]["labels"] if k.startswith("gpucluster.io/ib-")
    ]
    for bad in ("8", "0x4", "axb"):
        monkeypatch.setenv(nodes.FABRIC_LAYOUT_ENV, bad)
        with pytest.raises(nodes.InventoryError, match=nodes.FABRIC_LAYOUT_ENV):
            nodes.build_nodes([big])


def test_flavor_tolerations_become_taints() -> None:
    flavor = nodes.Flavor(
        name="l40s",
        node_labels={"x": "y"},
        gpus_per_node=4,
        node_count=1,
        taints=(nodes.Taint(key="gpucluster.io/serving", effect="NoSchedule", value="true"),),
    )
    (node,) = nodes.build_nodes([flavor])
    assert node["spec"]["taints"] == [{"key": "gpucluster.io/serving", "effect": "NoSchedule", "value": "true"}]


def _flavor(count: int, name: str = "h100") -> Any:
    return nodes.Flavor(name=name, node_labels={"a": name}, gpus_per_node=8, node_count=count)


def test_pod_network_holds_every_node_up_to_its_last_subnet() -> None:
    limit = 2 ** (24 - nodes.POD_NETWORK.prefixlen)
    assert len(nodes.build_nodes([_flavor(limit - 1), _flavor(1, "b200")])) == limit


def test_one_node_more_than_the_pod_network_holds_is_refused() -> None:
    limit = 2 ** (24 - nodes.POD_NETWORK.prefixlen)
    with pytest.raises(nodes.InventoryError, match="has no /24 left"):
        nodes.build_nodes([_flavor(limit), _flavor(1, "b200")])


def test_broken_stack_file_is_reported_with_its_key_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.local.yaml").read_text())
    doc["config"]["gpucluster:flavors"][0]["gpusPerNode"] = 0
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert nodes.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert "flavors[0].gpusPerNode" in err
    assert "Traceback" not in err


def test_status_patch_of_an_unknown_node_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert nodes.main([str(ROOT / "stacks" / "Pulumi.local.yaml"), "--status", "h100-node-9"]) == 2
    assert "no node 'h100-node-9'" in capsys.readouterr().err


def test_remote_nodes_are_the_second_clusters_inventory() -> None:
    built = nodes.remote_nodes()
    assert [n["metadata"]["name"] for n in built] == ["remote-gpu-0", "remote-gpu-1"]
    for i, n in enumerate(built):
        assert n["metadata"]["labels"]["gpucluster.io/remote"] == "true"
        assert "gpucluster.io/flavor" not in n["metadata"]["labels"]
        assert n["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
        assert n["status"]["capacity"]["nvidia.com/gpu"] == "8"
        assert n["spec"]["podCIDR"] == f"10.160.{i}.0/24"


# --- sim/node_list.py ---------------------------------------------------------------------------------------

node_list = load_sim_module("node_list")


def test_summary_counts_nodes_and_gpus_per_flavor() -> None:
    flavors = [_flavor(4), nodes.Flavor(name="l40s", node_labels={"a": "b"}, gpus_per_node=4, node_count=2)]
    assert node_list.summary(nodes.build_nodes(flavors)) == "h100: 4 nodes x 8 GPUs; l40s: 2 nodes x 4 GPUs"
    assert node_list.summary(nodes.remote_nodes()) == "2 nodes x 8 GPUs"


def test_status_patches_carry_capacity_and_allocatable() -> None:
    (name, patch), *_ = node_list.status_patches(nodes.build_nodes([_flavor(1)]))
    assert name == "h100-node-0"
    status = json.loads(patch)["status"]
    assert set(status) == {"capacity", "allocatable"}
    assert status["allocatable"]["nvidia.com/gpu"] == "8"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not JSON (line 1, column 1"),
        ('{"kind": "List"}', "not a Kubernetes List: no items[]"),
        ('{"items": [{"metadata": {}}]}', "items[0]: no metadata.name"),
        ('{"items": [{"metadata": {"name": "n"}, "status": {"capacity": {}}}]}', "items[0] (n): no status.allocatable"),
    ],
)
def test_a_node_list_that_is_not_one_is_refused(
    text: str, message: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(text))
    assert node_list.main(["summary"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sim/node_list.py: the node list on stdin: {message}")
    assert len(err.splitlines()) == 1


def test_a_gpu_count_that_is_not_a_number_is_refused() -> None:
    bad = nodes.build_nodes([_flavor(1)])
    bad[0]["status"]["capacity"]["nvidia.com/gpu"] = "eight"
    with pytest.raises(node_list.NodeListError, match="not a whole number"):
        node_list.summary(bad)


# --- sim/stack_value.py -------------------------------------------------------------------------------------

stack_value = load_sim_module("stack_value")


def test_stack_values_the_scripts_read(capsys: pytest.CaptureFixture[str]) -> None:
    local = str(ROOT / "stacks" / "Pulumi.local.yaml")
    assert stack_value.main([local, "descheduler-namespace"]) == 0
    assert capsys.readouterr().out == "kube-system\n"


def test_a_broken_stack_names_its_key_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.local.yaml").read_text())
    doc["config"]["gpucluster:flavors"][0]["gpusPerNode"] = 0
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    assert stack_value.main([str(bad), "descheduler-namespace"]) == 2
    err = capsys.readouterr().err
    assert "flavors[0].gpusPerNode" in err
    assert "Traceback" not in err
