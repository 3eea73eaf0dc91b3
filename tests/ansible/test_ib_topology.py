"""ib_topology: each host's InfiniBand leaf domain and block from ``ibnetdiscover``, and the labels the role sets.

The parser is held to real output first: NVIDIA topograph's NDR DGX fabric (rail-optimised, 2 tiers, SHARP
aggregation nodes, HCAs left with their vendor description), its isolated-HCA capture, and the Voltaire example of
rdma-core's manual (tests/fixtures/ansible/outputs/SOURCES.md). A 3-tier fabric of ours (two pods, one miscabled
host) covers blocks, and small fabrics written here the corner cases. The role runs through molecule against the
ibnetdiscover and kubectl shims, and its playbook over several simulated hosts.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.constants import IB_BLOCK_LABEL, IB_LEAF_LABEL
from tests.ansible.harness import (
    ROLES_DIR,
    SHIMS,
    VENV_BIN,
    ansible_env,
    filter_plugin,
    run_playbook,
    seed_node,
    write_inventory,
)

# The simulated hosts' ib_write_bw servers listen on fixed ports of their addresses; each xdist worker's hosts have
# addresses of their own (harness.host_address), so the Ansible tests of two workers run side by side.

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "ansible" / "outputs"
NDR = "ibnetdiscover_topograph_ndr_example.out"
ISOLATED = "ibnetdiscover_topograph_isolated_hca.out"
VOLTAIRE = "ibnetdiscover_rdma_core_man_voltaire.out"
OURS_3TIER = "ibnetdiscover_ours_3tier_2pods.out"

topo = filter_plugin("ib_topology")
LEAF, BLOCK = IB_LEAF_LABEL, IB_BLOCK_LABEL
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")


def test_the_role_sets_the_labels_the_stacks_topologies_name() -> None:
    defaults = yaml.safe_load((ROLES_DIR / "ib_topology" / "defaults" / "main.yml").read_text())
    assert (defaults["ib_topology_leaf_label"], defaults["ib_topology_block_label"]) == (LEAF, BLOCK)


def _text(name: str) -> str:
    return (SAMPLES / name).read_text()


def _ndr_hcas() -> dict[str, set[str]]:
    """The real NDR sample read independently of the plugin: {host: {leaf switch name}} from the CA blocks."""
    out: dict[str, set[str]] = defaultdict(set)
    host = None
    for line in _text(NDR).splitlines():
        m = re.match(r'^Ca\t\d+ "H-[0-9a-f]+"\t\t# "(\S+) (\S+)"$', line)
        if line.startswith("Ca\t"):
            host = m.group(1) if m else None
        elif line.startswith("[") and host and (m := re.search(r'lid \d+ lmc \d+ "MF0;([^:]+):', line)):
            out[host].add(m.group(1))
    return out


# ----------------------------------------------------------------------------------------- the real NDR fabric
def test_real_ndr_fabric_parses_every_node_and_link() -> None:
    fabric = topo.ibnetdiscover_fabric(_text(NDR))
    names = sorted(s["name"] for s in fabric["switches"].values())
    assert len(names) == 40
    assert sum("-IBLEAF-" in n for n in names) == 31
    assert sum("-IBSPINE-" in n for n in names) == 9
    assert fabric["switches"]["2c5eab0300b87b40"] == {
        "name": "A09-P1-IBLEAF-04-04",
        "description": "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1",
        "ports": 65,
        "line": 10,
    }
    cas = fabric["cas"]
    assert len(cas) == 582
    descriptions = [c["description"] for c in cas.values()]
    assert descriptions.count("Mellanox Technologies Aggregation Node") == 40
    assert descriptions.count("MT4129 ConnectX7   Mellanox Technologies") == 69
    assert sum(c["host"] is not None for c in cas.values()) == 473
    assert cas["e09d7303007a4bd8"]["host"] == "a08-p1-dgx-04-c01"
    assert cas["e09d7303007a4bd8"]["device"] == "mlx5_5"
    # Its first port line: leaf A09-P1-IBLEAF-04-04 port 1 to that HCA's port 1, seen from both ends once.
    assert {"a": "2c5eab0300b87b40", "a_port": 1, "b": "e09d7303007a4bd8", "b_port": 1} in fabric["links"]
    ends = [(link["a"], link["a_port"]) for link in fabric["links"]] + [
        (link["b"], link["b_port"]) for link in fabric["links"]
    ]
    assert len(ends) == len(set(ends)), "a port with two links"


def test_real_ndr_fabric_every_host_gets_a_leaf_domain_and_the_one_block() -> None:
    result = topo.ibnetdiscover_topology(_text(NDR))
    hosts = result["hosts"]
    truth = _ndr_hcas()
    assert len(truth) == 122
    assert sorted(hosts) == sorted(truth)
    assert {h["block"] for h in hosts.values()} == {"A10-P1-IBSPINE-01"}
    assert result["counts"] == {
        "switches": 40,
        "cas": 582,
        "hosts": 122,
        "leaf_switches": 31,
        "tier1_switches": 9,
        "leaf_domains": 8,
        "blocks": 1,
    }
    # One leaf domain per scalable unit: the rail leaves <rack>-P1-IBLEAF-<rail>-<su>; SU 1 has no rail 3 leaf.
    domains = result["leaf_domains"]
    assert {value: d["hosts"] for value, d in domains.items()} == {
        "A09-P1-IBLEAF-01-01": 11,
        "A09-P1-IBLEAF-01-02": 11,
        "A09-P1-IBLEAF-01-03": 18,
        "A09-P1-IBLEAF-01-04": 17,
        "B09-P1-IBLEAF-01-05": 18,
        "B09-P1-IBLEAF-01-06": 15,
        "B09-P1-IBLEAF-01-07": 16,
        "B09-P1-IBLEAF-01-08": 16,
    }
    for value, domain in domains.items():
        su = value[-2:]
        assert all(name.endswith(f"-{su}") and "-IBLEAF-" in name for name in domain["switches"]), domain
    assert domains["A09-P1-IBLEAF-01-01"]["switches"] == [
        "A09-P1-IBLEAF-01-01",
        "A09-P1-IBLEAF-02-01",
        "A09-P1-IBLEAF-04-01",
    ]
    assert result["blocks"]["A10-P1-IBSPINE-01"]["tier1"] == [f"A10-P1-IBSPINE-0{i}" for i in range(1, 5)] + [
        f"B10-P1-IBSPINE-0{i}" for i in range(5, 10)
    ]
    # Hosts of one SU share the domain of their rail leaves; hosts of different SUs do not.
    assert hosts["a05-p1-dgx-01-c01"] == {"leaf": "A09-P1-IBLEAF-01-01", "block": "A10-P1-IBSPINE-01"}
    assert hosts["a05-p1-dgx-01-c03"]["leaf"] == hosts["a05-p1-dgx-01-c01"]["leaf"]
    assert hosts["a06-p1-dgx-02-c01"]["leaf"] == "A09-P1-IBLEAF-01-02"
    assert hosts["a08-p1-dgx-04-c01"]["leaf"] == "A09-P1-IBLEAF-01-04"
    assert hosts["b05-p1-dgx-05-c01"]["leaf"] == "B09-P1-IBLEAF-01-05"
    assert len({hosts[f"a0{su + 4}-p1-dgx-0{su}-c01"]["leaf"] for su in range(1, 5)}) == 4
    # Checked against the CA blocks read without the plugin: every HCA hangs off a switch of its host's domain.
    for host, leaves in truth.items():
        assert leaves <= set(domains[hosts[host]["leaf"]]["switches"]), (host, leaves)
    assert result["left_out"] == {}
    assert result["host_hcas"]["a05-p1-dgx-01-c01"][0].startswith("HCA-1 (")
    assert result["host_hcas"]["a05-p1-dgx-01-c01"][0].endswith(" -> A09-P1-IBLEAF-01-01 port 1")


def test_real_ndr_aggregation_nodes_and_default_descriptions_are_no_hosts() -> None:
    result = topo.ibnetdiscover_topology(_text(NDR))
    assert not [h for h in result["hosts"] if h in {"Mellanox", "MT4129"} or not re.match(r"^[A-Za-z0-9-]+$", h)]
    # Two warnings: the 69 HCAs still on the vendor's description (the aggregation nodes are expected to be so),
    # and a DGX (3 HCAs on the SU 1 rails) whose HCAs say "localhost".
    unnamed, placeholder = result["warnings"]
    assert unnamed.startswith("69 CAs have no '<host> <device>' node description")
    assert "'MT4129 ConnectX7   Mellanox Technologies'" in unnamed
    assert "Aggregation" not in unnamed
    assert placeholder.startswith("localhost: 3 HCAs name this host 'localhost'")
    assert result["hosts"]["localhost"]["leaf"] == "A09-P1-IBLEAF-01-01"


def test_real_ndr_su8_rails_that_also_serve_a_management_server_stay_one_domain() -> None:
    """In SU 8, rails 3 and 4 also carry the UFM server and a host named ``ubuntu``: the rail leaves do not serve
    identical host sets, yet they are one scalable unit, and its DGX hosts are not miscabled."""
    fabric = topo.ibnetdiscover_fabric(_text(NDR))
    by_name = {s["name"]: guid for guid, s in fabric["switches"].items()}
    served: dict[str, set[str]] = defaultdict(set)
    for link in fabric["links"]:
        for sw, ca in ((link["a"], link["b"]), (link["b"], link["a"])):
            if sw in fabric["switches"] and ca in fabric["cas"] and fabric["cas"][ca]["host"]:
                served[sw].add(fabric["cas"][ca]["host"])
    rail1, rail3 = served[by_name["B09-P1-IBLEAF-01-08"]], served[by_name["B09-P1-IBLEAF-03-08"]]
    assert rail3 - rail1 == {"B11-P1-CUFM-02", "ubuntu"}
    assert rail1 < rail3
    for min_shared in (0.5, 1.0):
        result = topo.ibnetdiscover_topology(_text(NDR), min_shared=min_shared)
        assert result["counts"]["leaf_domains"] == 8
        assert not [w for w in result["warnings"] if "miscabled" in w]
        for host in ("b08-p1-dgx-08-c01", "B11-P1-CUFM-02", "ubuntu"):
            assert result["hosts"][host]["leaf"] == "B09-P1-IBLEAF-01-08"


def test_host_pattern_keeps_only_matching_hosts() -> None:
    result = topo.ibnetdiscover_topology(_text(NDR), host_pattern=r"-dgx-")
    assert len(result["hosts"]) == 119
    assert not {"ubuntu", "localhost", "B11-P1-CUFM-02"} & set(result["hosts"])
    assert result["counts"]["leaf_domains"] == 8
    with pytest.raises(ValueError, match=r"host_pattern '\[' is not a regular expression"):
        topo.ibnetdiscover_topology(_text(NDR), host_pattern="[")


def test_real_isolated_hca_leaves_its_host_out_with_a_warning() -> None:
    result = topo.ibnetdiscover_topology(_text(ISOLATED))
    assert result["hosts"] == {}
    reason = result["left_out"]["dgx-gb200-n01-c1"]
    assert "HCA-1 (b8e92403009ca838)" in reason
    assert result["warnings"] == [f"dgx-gb200-n01-c1 left out: {reason}"]
    assert "dgx-gb200-n01-c1" in topo.missing_reason(result, "dgx-gb200-n01-c1")


def test_real_voltaire_example_of_the_manual() -> None:
    """The 2-tier example of rdma-core's manual: -g's "Non-Chassis Nodes", base port 0, CAs with two ports."""
    fabric = topo.ibnetdiscover_fabric(_text(VOLTAIRE))
    assert sorted(s["name"] for s in fabric["switches"].values()) == ["ISR9024 Voltaire", "SW-6IB4 Voltaire"]
    assert len(fabric["cas"]) == 4
    assert all(c["host"] is None and c["ports"] == 2 for c in fabric["cas"].values())
    assert len(fabric["links"]) == 7
    uplinks = [link for link in fabric["links"] if link["a"] in fabric["switches"] and link["b"] in fabric["switches"]]
    # Two cables between the switches, each read from both ends (the manual's ends disagree on one's width).
    assert sorted((link["a_port"], link["b_port"]) for link in uplinks) == [(1, 10), (3, 6)]
    result = topo.ibnetdiscover_topology(_text(VOLTAIRE))
    assert result["hosts"] == {}
    assert result["warnings"][-1] == "no host in the fabric: none of its 4 CAs has a '<host> <device>' node description"


# ------------------------------------------------------------------------------------ our 3-tier fabric, blocks
def test_three_tier_fabric_has_one_block_per_pod() -> None:
    result = topo.ibnetdiscover_topology(_text(OURS_3TIER))
    assert result["counts"]["hosts"] == 16
    assert result["blocks"] == {
        "P1-IBSPINE-1": {
            "leaf_domains": ["P1-SU1-IBLEAF-R0", "P1-SU2-IBLEAF-R0"],
            "tier1": ["P1-IBSPINE-1", "P1-IBSPINE-2"],
        },
        "P2-IBSPINE-1": {
            "leaf_domains": ["P2-SU1-IBLEAF-R0", "P2-SU2-IBLEAF-R0"],
            "tier1": ["P2-IBSPINE-1", "P2-IBSPINE-2"],
        },
    }
    for host, labels in result["hosts"].items():
        pod, su = host[1], host[5]
        assert labels == {"leaf": f"P{pod}-SU{su}-IBLEAF-R0", "block": f"P{pod}-IBSPINE-1"}, host
    # The host whose fourth HCA carries the vendor description is labelled from its three others.
    assert "p2-su2-dgx-04" in result["hosts"]
    assert len(result["host_hcas"]["p2-su2-dgx-04"]) == 3


def test_miscabled_host_gets_the_domain_of_most_of_its_hcas_and_a_warning() -> None:
    result = topo.ibnetdiscover_topology(_text(OURS_3TIER))
    assert result["hosts"]["p1-su1-dgx-04"] == {"leaf": "P1-SU1-IBLEAF-R0", "block": "P1-IBSPINE-1"}
    miscabled = [w for w in result["warnings"] if "miscabled" in w]
    assert miscabled == [
        "p1-su1-dgx-04 looks miscabled: its HCAs hang off 2 leaf domains; labelled with leaf domain "
        "P1-SU1-IBLEAF-R0, which holds 3 of its 4 HCA links; elsewhere: mlx5_2 (58a2e10300b100f0) on "
        "P1-SU2-IBLEAF-R2 port 9 in leaf domain P1-SU2-IBLEAF-R0"
    ]
    # The stray cable does not merge the two scalable units.
    assert result["leaf_domains"]["P1-SU2-IBLEAF-R0"]["hosts"] == 4


# ------------------------------------------------------------------------------------ small fabrics written here
def _fabric(
    cables: list[tuple[str, str, str]], uplinks: list[tuple[str, str]], descs: dict[str, str] | None = None
) -> str:
    """ibnetdiscover's default output for switches named in ``cables`` ((host, device, switch)) and ``uplinks``
    ((switch, switch)); a switch's description is ``MF0;<name>:MQM9700/U1`` unless ``descs`` gives one."""
    names = sorted({c[2] for c in cables} | {s for pair in uplinks for s in pair})
    sw_guid = {name: 0xB8599F0300E00000 + 0x100 * i for i, name in enumerate(names, start=1)}
    desc = {name: (descs or {}).get(name, f"MF0;{name}:MQM9700/U1") for name in names}
    ports: dict[str, list[str]] = defaultdict(list)
    next_port = dict.fromkeys(names, 1)
    ca_blocks = []
    for i, (host, device, switch) in enumerate(cables, start=1):
        guid, port = 0x946DAE0300A00000 + i, next_port[switch]
        next_port[switch] += 1
        ports[switch].append(f'[{port}]\t"H-{guid:016x}"[1]({guid:x}) \t\t# "{host} {device}" lid {100 + i} 4xNDR')
        ca_blocks.append(
            f"\nvendid=0x2c9\ndevid=0x1021\nsysimgguid=0x{guid:x}\ncaguid=0x{guid:x}\n"
            f'Ca\t1 "H-{guid:016x}"\t\t# "{host} {device}"\n'
            f'[1]({guid:x}) \t"S-{sw_guid[switch]:016x}"[{port}]\t\t# lid {100 + i} lmc 0 "{desc[switch]}" lid '
            f"{names.index(switch) + 1} 4xNDR"
        )
    for a, b in uplinks:
        pa, pb = next_port[a], next_port[b]
        next_port[a], next_port[b] = pa + 1, pb + 1
        ports[a].append(f'[{pa}]\t"S-{sw_guid[b]:016x}"[{pb}]\t\t# "{desc[b]}" lid {names.index(b) + 1} 4xNDR')
        ports[b].append(f'[{pb}]\t"S-{sw_guid[a]:016x}"[{pa}]\t\t# "{desc[a]}" lid {names.index(a) + 1} 4xNDR')
    out = ["#", "# Topology file: written by tests/ansible/test_ib_topology.py", "#"]
    for i, name in enumerate(names, start=1):
        g = sw_guid[name]
        out.append(
            f"\nvendid=0x2c9\ndevid=0xd2f2\nsysimgguid=0x{g:x}\nswitchguid=0x{g:x}({g:x})\n"
            f'Switch\t65 "S-{g:016x}"\t\t# "{desc[name]}" enhanced port 0 lid {i} lmc 0'
        )
        out.extend(ports[name])
    return "\n".join(out + ca_blocks) + "\n"


def _su(leaves: list[str], hosts: list[str]) -> list[tuple[str, str, str]]:
    """Rail-optimised cabling: HCA i of every host on leaves[i]."""
    return [(h, f"mlx5_{i}", leaf) for h in hosts for i, leaf in enumerate(leaves)]


def test_a_tie_between_leaf_domains_takes_the_lowest_and_warns() -> None:
    cables = _su(["su1-r0", "su1-r1"], ["n1", "n2", "n3"]) + _su(["su2-r0", "su2-r1"], ["n4", "n5", "n6"])
    cables += [("odd", "mlx5_0", "su2-r0"), ("odd", "mlx5_1", "su1-r1")]
    result = topo.ibnetdiscover_topology(
        _fabric(cables, [(leaf, "spine") for leaf in ["su1-r0", "su1-r1", "su2-r0", "su2-r1"]])
    )
    assert result["hosts"]["odd"] == {"leaf": "su1-r0", "block": "spine"}
    assert result["hosts"]["n5"] == {"leaf": "su2-r0", "block": "spine"}
    assert [w for w in result["warnings"] if w.startswith("odd looks miscabled")], result["warnings"]


def test_a_single_tier_fabric_is_one_block_named_after_its_lowest_leaf() -> None:
    result = topo.ibnetdiscover_topology(_fabric(_su(["leaf-b", "leaf-a"], ["n1", "n2"]), []))
    assert result["hosts"]["n1"] == {"leaf": "leaf-a", "block": "leaf-a"}
    # Leaves of one domain are one block even without a switch between them.
    assert result["blocks"] == {"leaf-a": {"leaf_domains": ["leaf-a"], "tier1": []}}


def test_label_values_are_valid_and_shared_or_long_names_are_told_apart() -> None:
    long_a = "Leaf switch in hall 4, row 12, rack 7, unit 40 (spare, left of the door): Quantum-2 NDR"
    long_b = "Leaf switch in hall 4, row 12, rack 7, unit 40 (spare, left of the door): Quantum-2 NDR, second"
    descs = {"x1": "Quantum Mellanox Technologies", "x2": "Quantum Mellanox Technologies", "y": long_a, "z": long_b}
    cables = [("n1", "mlx5_0", "x1"), ("n2", "mlx5_0", "x2"), ("n3", "mlx5_0", "y"), ("n4", "mlx5_0", "z")]
    text = _fabric(cables, [("x1", "spine"), ("x2", "spine"), ("y", "spine"), ("z", "spine")], descs)
    result = topo.ibnetdiscover_topology(text)
    leaves = {h: v["leaf"] for h, v in result["hosts"].items()}
    assert len(set(leaves.values())) == 4, leaves
    assert leaves["n1"].startswith("Quantum-Mellanox-Technologies-b8599f0300e")
    assert len(leaves["n3"]) <= 63
    # Pinned: a value must not change between runs, hosts or Python versions, or every node would be relabelled.
    assert leaves["n3"] == "Leaf-switch-in-hall-4-row-12-rack-7-unit-40-spare-le-46e926e9e6"
    for value in [*leaves.values(), *(v["block"] for v in result["hosts"].values())]:
        assert LABEL_VALUE.match(value), value
        assert len(value) <= 63, value
        assert topo.is_label_value(value)
    assert topo.ibnetdiscover_topology(text) == result
    assert re.fullmatch(r"ib-[0-9a-f]{10}", topo.label_value("..--.."))
    assert topo.label_value("ISR9024 Voltaire") == "ISR9024-Voltaire"
    assert not topo.is_label_value("-leaf")
    assert topo.label_value("A09-P1-IBLEAF-01-01") == "A09-P1-IBLEAF-01-01"


@pytest.mark.parametrize("sample", [NDR, OURS_3TIER])
def test_labels_do_not_depend_on_the_order_of_the_blocks(sample: str) -> None:
    header, *blocks = _text(sample).split("\n\n")
    expected = topo.ibnetdiscover_topology(_text(sample))
    for values in (v for h in expected["hosts"].values() for v in h.values()):
        assert LABEL_VALUE.match(values)
    for seed in (1, 2):
        shuffled = list(blocks)
        random.Random(seed).shuffle(shuffled)
        text = "\n\n".join([header, *(b.rstrip("\n") for b in shuffled)]) + "\n"
        result = topo.ibnetdiscover_topology(text)
        assert result["hosts"] == expected["hosts"]
        assert result["leaf_domains"] == expected["leaf_domains"]
        assert result["blocks"] == expected["blocks"]


# ------------------------------------------------------------------------------------------------- bad input
REAL = _text(NDR)
REAL_LINES = REAL.splitlines()
# A line of `ibnetdiscover -p` (its ports report), whose layout the role does not read.
PORTS_REPORT = "CA   193  1 0x2c5eab0300b87b50 4x NDR - SW    73 65 0x2c5eab0300b87b40 ( 'a' - 'b' )\n"
# The first switch block is lines 6-53 (vendid to the aggregation node's port line).
BAD = [
    ("", "ibnetdiscover output is empty"),
    ("   \n\n", "ibnetdiscover output is empty"),
    ("#\n# Topology file: generated on Wed Aug  6 16:11:23 2025\n#\n", "has no node blocks, only comments"),
    ("hello world\n", "line 1: expected 'vendid=0x<id>' starting a node block, got 'hello world'"),
    (
        PORTS_REPORT,
        "line 1: expected 'vendid=0x<id>' starting a node block, got \"CA   193  1 0x2c5eab0300b87b50 4x NDR - SW"
        "    73 65 0x2c5eab0300b87b40 ( 'a' - 'b' )\" (this looks like the ports report of 'ibnetdiscover -p'); "
        "the role reads ibnetdiscover's default topology output",
    ),
    ("\n".join(REAL_LINES[:8]) + "\n", "line 8: the output ends inside the node block that starts at line 6"),
    ("\n".join([*REAL_LINES[:8], "", *REAL_LINES[8:]]), "line 9: the node block that starts at line 6 ends early"),
    (
        "\n".join([*REAL_LINES[:11], REAL_LINES[11][:30]]) + "\n",
        'line 12: expected a port line \'[<port>] "<S|H|R>-<guid>"[<port>] # "<description>" lid <lid> '
        "<width><speed>' in the Switch block that starts at line 6, got '[2]\\t\"H-e09d730300859298\"[1](e0'",
    ),
    ("\n".join(REAL_LINES[:54]) + "\n", 'line 11: links to "H-e09d7303007a4bd8", which has no node block'),
    (
        "\n".join(
            [*REAL_LINES[:9], REAL_LINES[9].replace("2c5eab0300b87b40", "2c5eab0300b87b41", 1), *REAL_LINES[10:]]
        ),
        "line 10: the node GUID 2c5eab0300b87b41 differs from the switchguid=0x2c5eab0300b87b40 of its block (line 6)",
    ),
    (
        "\n".join([*REAL_LINES[:9], REAL_LINES[9].replace("Switch", "Ca", 1), *REAL_LINES[10:]]),
        "line 10: expected the 'Switch' line of the node in the node block that starts at line 6",
    ),
    (
        REAL + "\n" + "\n".join(REAL_LINES[4:54]) + "\n",
        "node 2c5eab0300b87b40 has a second block (the first is at line 10)",
    ),
    ("\nvendid=0x2c9\nsysimgguid=0x1\n", "line 3: expected 'devid=0x<id>' in the node block that starts at line 2"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_input_is_refused_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(topo.IbnetdiscoverError) as info:
        topo.ibnetdiscover_topology(text)
    assert message in str(info.value)
    assert isinstance(info.value, ValueError)


def test_not_text_is_refused() -> None:
    with pytest.raises(topo.IbnetdiscoverError, match="must be text, got NoneType"):
        topo.ibnetdiscover_fabric(None)
    with pytest.raises(topo.IbnetdiscoverError, match="min_shared must be in"):
        topo.ibnetdiscover_topology(REAL, min_shared=0)


def test_damaged_output_raises_only_the_named_error() -> None:
    """Cut anywhere, lines dropped or mangled: either a topology or an IbnetdiscoverError, never another error."""
    rng = random.Random(20261130)
    refused: list[str] = []
    for _ in range(60):
        lines = list(REAL_LINES)
        choice = rng.randrange(3)
        if choice == 0:
            del lines[rng.randrange(len(lines)) :]
        elif choice == 1:
            del lines[rng.randrange(len(lines))]
        else:
            i = rng.randrange(len(lines))
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)] + rng.choice(["", '"', "[", "\t#", "x"])
        try:
            result = topo.ibnetdiscover_topology("\n".join(lines))
        except topo.IbnetdiscoverError as exc:
            refused.append(str(exc))
            continue
        assert all(LABEL_VALUE.match(v) for h in result["hosts"].values() for v in h.values())
    assert refused
    assert [m for m in refused if not re.search(r"line \d+|empty|only comments", m)] == []


# ----------------------------------------------------------------------------------------- shim and report
def _shim(*args: str, knobs: dict[str, Any], tmp: Path) -> subprocess.CompletedProcess[str]:
    (tmp / "knobs.json").write_text(json.dumps(knobs))
    env = {"PATH": "/usr/bin:/bin", "GPUCLUSTER_SHIM_KNOBS": str(tmp / "knobs.json")}
    return subprocess.run([str(SHIMS / "ibnetdiscover"), *args], capture_output=True, text=True, env=env, check=False)


def test_ibnetdiscover_shim_prints_the_chosen_fixture_and_refuses_what_it_does_not_model(tmp_path: Path) -> None:
    assert _shim(knobs={}, tmp=tmp_path).stdout == REAL
    ours = _shim("-C", "mlx5_0", "-P", "1", knobs={"ibnetdiscover_output": OURS_3TIER}, tmp=tmp_path)
    assert ours.returncode == 0
    assert ours.stdout == _text(OURS_3TIER)
    assert _shim("-p", knobs={}, tmp=tmp_path).returncode == 2
    assert _shim("topology.out", knobs={}, tmp=tmp_path).returncode == 2
    failed = _shim(knobs={"ibnetdiscover_fail": True}, tmp=tmp_path)
    assert (failed.returncode, failed.stdout) == (255, "ibnetdiscover: iberror: failed: discover failed\n")


def test_report_lists_every_play_host_and_why_one_has_no_labels() -> None:
    result = topo.ibnetdiscover_topology(_text(OURS_3TIER))
    play = [
        {"host": "gpu-b", "fabric_host": "p1-su1-dgx-01", "node": "gpu-b"},
        {"host": "gpu-a", "fabric_host": "p9-su9-dgx-99", "node": "gpu-a"},
    ]
    report = topo.ib_topology_report(result, "r1", play)
    assert list(report["hosts"]) == ["gpu-a", "gpu-b"]
    assert report["hosts"]["gpu-b"]["leaf"] == "P1-SU1-IBLEAF-R0"
    assert report["missing"] == ["gpu-a"]
    assert (
        "no HCA in the ibnetdiscover output describes itself as 'p9-su9-dgx-99 <device>'"
        in (report["hosts"]["gpu-a"]["reason"])
    )
    assert len(report["fabric_hosts_not_in_play"]) == 15
    json.dumps(report)


# ----------------------------------------------------------------------------------------- the role, run for real
def _calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.molecule
def test_molecule_default_labels_the_node_once_and_is_idempotent(tmp_path: Path) -> None:
    node = seed_node(tmp_path / "node", "instance", {"ibnetdiscover_output": NDR})
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    log = tmp_path / "kubectl.log"
    node["acceptance_environment"]["KUBECTL_SHIM_LOG"] = str(log)
    expected = {BLOCK: "A10-P1-IBSPINE-01", LEAF: "A09-P1-IBLEAF-01-01"}
    variables = {
        **node,
        "acceptance_verdict_file": str(tmp_path / "labels.json"),
        "acceptance_expect_labels": expected,
        "ib_topology_fabric_host": "a05-p1-dgx-01-c01",
        "ib_topology_node_name": "gpu-sim-instance",
        "ib_topology_kubeconfig": str(kubeconfig),
        "ib_topology_kubectl_bin": str(SHIMS / "kubectl"),
        "ib_topology_artifacts_dir": str(tmp_path / "artifacts"),
        "ib_topology_run_id": "molecule",
    }
    vars_file = tmp_path / "node-vars.yml"
    vars_file.write_text(yaml.safe_dump(variables, sort_keys=True))
    env = ansible_env(tmp_path)
    env.update({"ACCEPTANCE_NODE_VARS": str(vars_file), "MOLECULE_NO_LOG": "false", "XDG_CACHE_HOME": str(tmp_path)})
    res = subprocess.run(
        [str(VENV_BIN / "molecule"), "test", "-s", "default"],
        cwd=ROLES_DIR / "ib_topology",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, f"rc={res.returncode}\n{res.stdout[-6000:]}\n{res.stderr[-3000:]}"
    assert "idempotence" in (res.stdout + res.stderr).lower()
    assert json.loads((tmp_path / "labels.json").read_text()) == expected
    # converge labels (block, then leaf); idempotence labels again and kubectl says "not labeled"; check mode none.
    prefix = [f"--kubeconfig={kubeconfig}", "label", "node", "gpu-sim-instance"]
    once = [
        [*prefix, f"{BLOCK}=A10-P1-IBSPINE-01", "--overwrite"],
        [*prefix, f"{LEAF}=A09-P1-IBLEAF-01-01", "--overwrite"],
    ]
    assert _calls(log) == once + once
    state = json.loads(Path(node["acceptance_environment"]["GPUCLUSTER_SHIM_KNOBS"] + ".state.json").read_text())
    assert state["kubectl"]["gpu-sim-instance"]["labels"] == expected
    run_dir = tmp_path / "artifacts" / "ib-topology" / "molecule"
    # Ansible strips the output's trailing newlines; the role ends the file with one.
    assert (run_dir / "ibnetdiscover.out").read_text() == REAL.rstrip("\n") + "\n"
    report = json.loads((run_dir / "topology.json").read_text())
    assert report["counts"]["hosts"] == 122
    assert len(report["fabric_hosts_not_in_play"]) == 121


def _fleet(tmp: Path, fabric_hosts: list[str], knobs: dict[str, Any]) -> tuple[Path, Path]:
    """Inventory of simulated hosts gpu-sim-000.. whose HCAs carry ``fabric_hosts``; the first runs ibnetdiscover."""
    kubeconfig = tmp / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    hosts = {}
    for i, fabric_host in enumerate(fabric_hosts):
        node = seed_node(tmp / "nodes", f"gpu-sim-{i:03d}", knobs)
        hosts[f"gpu-sim-{i:03d}"] = {**node, "ib_topology_fabric_host": fabric_host}
    group_vars = {
        "ib_topology_kubeconfig": str(kubeconfig),
        "ib_topology_kubectl_bin": str(SHIMS / "kubectl"),
        "ib_topology_artifacts_dir": str(tmp / "artifacts"),
        "ib_topology_run_id": "fleet",
    }
    return write_inventory(tmp / "inventory.yml", hosts, group_vars), kubeconfig


@pytest.mark.molecule
def test_playbook_labels_every_host_the_fabric_shows_and_fails_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fabric_hosts = ["p1-su1-dgx-01", "p1-su1-dgx-04", "p2-su2-dgx-02", "p2-su2-dgx-09"]
    inventory, kubeconfig = _fleet(tmp_path, fabric_hosts, {"ibnetdiscover_output": OURS_3TIER})
    log = tmp_path / "kubectl.log"
    monkeypatch.setenv("KUBECTL_SHIM_LOG", str(log))
    res = run_playbook("topology.yml", inventory, tmp_path, timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-4000:]
    assert (
        "gpu-sim-003 has no InfiniBand leaf: no HCA in the ibnetdiscover output describes itself as "
        "'p2-su2-dgx-09 <device>'" in out
    ), out[-4000:]
    assert re.search(r"gpu-sim-003\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", out), out[-3000:]
    for host in ("gpu-sim-000", "gpu-sim-001", "gpu-sim-002"):
        assert re.search(rf"{host}\s+: ok=\d+\s+changed=\d+\s+unreachable=0\s+failed=0", out), out[-3000:]
    # ibnetdiscover ran once, on the first host.
    discover = out.split("TASK [ib_topology : Discover the fabric from the first host]")[1].split("TASK [")[0]
    assert re.findall(r"^ok: \[([^\]]+)\]", discover, re.MULTILINE) == ["gpu-sim-000"], discover
    prefix = [f"--kubeconfig={kubeconfig}", "label", "node"]
    assert sorted(_calls(log)) == sorted(
        [
            [*prefix, "gpu-sim-000", f"{BLOCK}=P1-IBSPINE-1", "--overwrite"],
            [*prefix, "gpu-sim-000", f"{LEAF}=P1-SU1-IBLEAF-R0", "--overwrite"],
            [*prefix, "gpu-sim-001", f"{BLOCK}=P1-IBSPINE-1", "--overwrite"],
            [*prefix, "gpu-sim-001", f"{LEAF}=P1-SU1-IBLEAF-R0", "--overwrite"],
            [*prefix, "gpu-sim-002", f"{BLOCK}=P2-IBSPINE-1", "--overwrite"],
            [*prefix, "gpu-sim-002", f"{LEAF}=P2-SU2-IBLEAF-R0", "--overwrite"],
        ]
    )
    report = json.loads((tmp_path / "artifacts" / "ib-topology" / "fleet" / "topology.json").read_text())
    assert report["missing"] == ["gpu-sim-003"]
    assert report["hosts"]["gpu-sim-001"]["leaf"] == "P1-SU1-IBLEAF-R0"
    assert [w for w in report["warnings"] if w.startswith("p1-su1-dgx-04 looks miscabled")]
    assert "p1-su1-dgx-04 looks miscabled" in out


@pytest.mark.molecule
@pytest.mark.parametrize(
    ("knobs", "message", "parsed"),
    [
        ({"ibnetdiscover_fail": True}, "ibnetdiscover: iberror: failed: discover failed", False),
        (
            {"ibnetdiscover_output": "ports.out"},
            "The filter plugin 'ibnetdiscover_topology' failed: ibnetdiscover output line 1: expected 'vendid=0x<id>'",
            True,
        ),
    ],
    ids=["discover-failed", "ports-report"],
)
def test_playbook_stops_every_host_when_discovery_fails(
    knobs: dict[str, Any], message: str, parsed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ports.out").write_text(PORTS_REPORT)
    if "ibnetdiscover_output" in knobs:
        knobs = {"ibnetdiscover_output": str(tmp_path / knobs["ibnetdiscover_output"])}
    inventory, _ = _fleet(tmp_path, ["p1-su1-dgx-01", "p1-su1-dgx-02"], knobs)
    log = tmp_path / "kubectl.log"
    monkeypatch.setenv("KUBECTL_SHIM_LOG", str(log))
    res = run_playbook("topology.yml", inventory, tmp_path, timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode != 0
    assert message in out, out[-3000:]
    assert ("TASK [ib_topology : Derive every host's leaf domain" in out) == parsed, out[-3000:]
    assert "TASK [ib_topology : Pick this host's labels]" not in out, out[-3000:]
    assert _calls(log) == []
    assert not (tmp_path / "artifacts" / "ib-topology" / "fleet" / "topology.json").exists()
