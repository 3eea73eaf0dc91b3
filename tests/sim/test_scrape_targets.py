"""sim/scrape_targets.py: the simulated Prometheus discovers the real node's pods by the stack's scrape contract."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from components.scraping import scrape_annotations
from sim import scrape_targets
from sim.node import REAL_NODE_KEY

REAL = "100.127.0.1"


def pod(
    name: str,
    *,
    node: str = REAL,
    phase: str = "Running",
    ip: str | None = "100.127.0.7",
    listen: str = "$(POD_IP):10299",
    honor: bool = False,
    annotated: bool = True,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "gpucluster-system",
            "labels": {"app.kubernetes.io/name": "gpucluster-stall-detector"},
            "annotations": scrape_annotations(10299, honor_labels=honor) if annotated else {},
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "controller",
                    "command": ["python3", "-m", "daemons.stall_detector"],
                    "args": ["--listen", listen],
                    "ports": [{"name": "metrics", "containerPort": 10299}, {"name": "debug", "containerPort": 6060}],
                }
            ],
        },
        "status": {"phase": phase, **({"podIP": ip} if ip else {})},
    }


def test_the_real_nodes_are_the_labelled_ones() -> None:
    nodes = [
        {"metadata": {"name": REAL, "labels": {REAL_NODE_KEY: "true"}}},
        {"metadata": {"name": "h100-node-0", "labels": {"gpucluster.io/flavor": "h100"}}},
    ]
    assert scrape_targets.real_nodes(nodes) == {REAL}


def test_a_running_annotated_pod_is_one_target_per_metrics_port_under_its_job() -> None:
    groups = scrape_targets.pod_groups([pod("sd-1")], {REAL})
    assert groups[True] == []
    assert groups[False] == [
        {
            "targets": ["100.127.0.7:10299"],
            "labels": {
                "job": "gpucluster-stall-detector",
                "__metrics_path__": "/metrics",
                "namespace": "gpucluster-system",
                "pod": "sd-1",
                "container": "controller",
            },
        }
    ]


def test_honor_labels_pods_go_to_the_job_that_keeps_their_labels() -> None:
    groups = scrape_targets.pod_groups([pod("sd-1", honor=True)], {REAL})
    assert [g["labels"]["pod"] for g in groups[True]] == ["sd-1"]
    assert groups[False] == []


def test_pods_not_running_on_a_real_node_or_not_annotated_are_not_scraped() -> None:
    pods = [
        pod("on-kwok", node="h100-node-0"),
        pod("pending", phase="Pending", ip=None),
        pod("no-ip", ip=None),
        pod("quiet", annotated=False),
    ]
    assert scrape_targets.pod_groups(pods, {REAL}) == {False: [], True: []}


def test_a_loopback_listener_is_still_scraped_as_the_contract_says_and_found_down() -> None:
    """Discovery follows the manifest, not the program: Prometheus tries it, as a real one would, and gets up == 0."""
    groups = scrape_targets.pod_groups([pod("sd-1", listen="127.0.0.1:10299")], {REAL})
    assert [g["targets"] for g in groups[False]] == [["100.127.0.7:10299"]]


def test_a_file_is_replaced_only_when_its_content_changes(tmp_path: Path) -> None:
    groups = scrape_targets.pod_groups([pod("sd-1")], {REAL})
    assert sorted(scrape_targets.write(tmp_path, groups)) == ["pods-honor-labels.json", "pods.json"]
    assert scrape_targets.write(tmp_path, groups) == []
    assert json.loads((tmp_path / "pods.json").read_text())[0]["labels"]["pod"] == "sd-1"
    assert scrape_targets.write(tmp_path, {False: [], True: []}) == ["pods.json"]
    assert json.loads((tmp_path / "pods.json").read_text()) == []
