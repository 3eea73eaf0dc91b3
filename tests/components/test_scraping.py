"""Every series an alert, a recording rule or a dashboard panel of a stack reads is served by a target that the
stack's own scrape contract reaches (``components/scraping.py``), for every stack, read from what the stack renders.

The producers are read from the daemons' own metrics modules (their prefixes); what is outside the stack's
manifests (dcgm-exporter's chart, the cluster's kube-state-metrics, Prometheus itself) is named as such.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components.config import load_stack_file
from components.scraping import (
    HONOR_LABELS_ANNOTATION,
    Producer,
    Read,
    Target,
    annotated_targets,
    listen_host,
    scrape_annotations,
    scrape_targets,
    series_read,
    unreachable,
)
from components.virtual_node import APP as VIRTUAL_NODE_APP
from contract.burst_settings import PROVIDER_METRICS_PORT
from contract.registry import STALL_DETECTOR
from tests.support.stack_reads import all_reads, rendered

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


@pytest.fixture(scope="module", params=STACKS)
def stack(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, rendered(request.param, load_stack_file(ROOT / "stacks" / f"Pulumi.{request.param}.yaml"))


def test_every_series_a_rule_or_panel_reads_is_scraped_where_it_is_served(
    stack: tuple[str, list[dict[str, Any]]],
) -> None:
    name, objs = stack
    reads, producers = all_reads(objs)
    assert any(r.startswith("rule ") for r in reads), f"stack {name}: no rule found in what it renders"
    assert any(STALL_DETECTOR.name in q for q in reads), f"stack {name}: no stall detector query found"
    problems = unreachable(reads, producers, scrape_targets(objs))
    assert not problems, f"stack {name}:\n" + "\n".join(problems)


def test_the_burst_providers_metrics_are_a_reached_target_of_the_local_stack() -> None:
    objs = rendered("local", load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml"))
    targets = [t for t in scrape_targets(objs) if t.program == "gpucluster-burst-provider"]
    assert [(t.port, t.job, t.listen_host, t.reached) for t in targets] == [
        (PROVIDER_METRICS_PORT, VIRTUAL_NODE_APP, "$(POD_IP)", True)
    ]


def test_a_controllers_program_is_its_module_run_by_python_and_each_is_a_reached_target() -> None:
    objs = rendered("local", load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml"))
    programs = {t.program for t in scrape_targets(objs) if t.reached}
    assert STALL_DETECTOR.module in programs
    assert "python3" not in programs, "python3 -m <module> counts as the module, not the interpreter"


@pytest.mark.parametrize(
    ("command", "program"),
    [
        (["python3", "-m", "daemons.quarantine"], "daemons.quarantine"),
        (["python3", "serve.py"], "python3"),
        (["gpucluster-burst-provider"], "gpucluster-burst-provider"),
        ([], "registry.example/img:1"),
    ],
)
def test_the_program_of_a_container(command: list[str], program: str) -> None:
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "n", "labels": {"app.kubernetes.io/name": "d"}},
        "spec": {
            "template": {
                "metadata": {"annotations": scrape_annotations(9100)},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.example/img:1",
                            "command": command,
                            "ports": [{"name": "metrics", "containerPort": 9100}],
                        }
                    ]
                },
            }
        },
    }
    assert [t.program for t in annotated_targets(deployment)] == [program]


# ------------------------------------------------------------------------------ the contract, both ways


def _pod(container: dict[str, Any], **annotations: str) -> dict[str, Any]:
    return {
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "app"}, "annotations": annotations},
                "spec": {"containers": [container]},
            }
        },
    }


LOOPBACK_PROVIDER = {
    "name": "provider",
    "command": ["gpucluster-burst-provider"],
    "args": ["--listen", "127.0.0.1:10299", "--listen-metrics=127.0.0.1:10297"],
    "ports": [{"name": "burst-metrics", "containerPort": 10297}],
}
SPEND = {"rule BurstSpendCeilingReached": {Read("gpucluster_burst_spend_refusals_total", None)}}
BURST = [Producer("gpucluster_burst_", "the burst provider service", "gpucluster-burst-provider")]


def test_a_loopback_listener_is_not_reached_and_the_rule_reading_it_is_named() -> None:
    targets = scrape_targets([_pod(LOOPBACK_PROVIDER, **{"prometheus.io/scrape": "true"})])
    assert [(t.port, t.listen_host, t.reached) for t in targets] == [(10297, "127.0.0.1", False)]
    (problem,) = unreachable(SPEND, BURST, targets)
    assert "rule BurstSpendCeilingReached" in problem
    assert "gpucluster_burst_spend_refusals_total" in problem
    assert "listens on 127.0.0.1" in problem


def test_the_pods_address_is_reached() -> None:
    provider = {**LOOPBACK_PROVIDER, "args": ["--listen", "127.0.0.1:10299", "--listen-metrics", "$(POD_IP):10297"]}
    targets = scrape_targets([_pod(provider, **{"prometheus.io/scrape": "true"})])
    assert [t.reached for t in targets] == [True]
    assert unreachable(SPEND, BURST, targets) == []


def test_an_unannotated_pod_or_an_unnamed_port_is_no_target_and_the_rule_says_none_runs_it() -> None:
    unnamed = {**LOOPBACK_PROVIDER, "ports": [{"name": "api", "containerPort": 10297}]}
    assert scrape_targets([_pod(LOOPBACK_PROVIDER)]) == []
    assert scrape_targets([_pod(unnamed, **{"prometheus.io/scrape": "true"})]) == []
    (problem,) = unreachable(SPEND, BURST, [])
    assert "no scrape target of the stack runs gpucluster-burst-provider" in problem


def test_a_job_matcher_needs_a_target_of_that_job() -> None:
    fabric = [Producer("gpucluster_fabric_", "the fabric exporter", "x")]
    target = Target("DaemonSet ns/x", "c", "x", 9, "/metrics", "x", False, "")
    wanted = {"rule R": series_read('rate(gpucluster_fabric_ib_port_xmit_data_bytes_total{job="other"}[5m])')}
    assert 'under job "other"' in unreachable(wanted, fabric, [target])[0]
    assert unreachable({"rule R": {Read("gpucluster_fabric_x", "x")}}, fabric, [target]) == []


def test_an_unknown_series_is_named() -> None:
    (problem,) = unreachable({"panel P": {Read("nobody_exports_this", None)}}, BURST, [])
    assert problem == "panel P: reads nobody_exports_this, which no program of the stack exports"


def test_honor_labels_follow_the_annotation() -> None:
    provider = {**LOOPBACK_PROVIDER, "args": []}
    annotated = {"prometheus.io/scrape": "true", HONOR_LABELS_ANNOTATION: "true"}
    (target,) = annotated_targets(_pod(provider, **annotated))
    assert target.honor_labels
    assert target.listen_host is None
    assert target.reached


@pytest.mark.parametrize(
    ("args", "port", "host"),
    [
        (["--listen", "127.0.0.1:10299"], 10299, "127.0.0.1"),
        (["--listen-metrics=:10298"], 10298, ""),
        (["--port=9500", "--listen-address=$(POD_IP)"], 9500, "$(POD_IP)"),
        (["--provider-url=http://127.0.0.1:10299"], 10299, None),
        (["--listen", "127.0.0.1:10299"], 10297, None),
    ],
)
def test_listen_host_reads_the_arguments(args: list[str], port: int, host: str | None) -> None:
    assert listen_host({"args": args}, port) == host


@pytest.mark.parametrize(
    ("expr", "metrics"),
    [
        (
            "max by (provider) (gpucluster_burst_provider_failure_rate) > 0.5",
            {"gpucluster_burst_provider_failure_rate"},
        ),
        ('sum(increase(x_total[10m])) > 0 or absent(y{job="j"})', {"x_total", "y"}),
        (
            'label_replace(DCGM_FI_DEV_GPU_TEMP{job="d"}, "node", "$1", "Hostname", "(.+)") '
            "* on (node) group_left (gpu_type) kube_node_labels offset 5m",
            {"DCGM_FI_DEV_GPU_TEMP", "kube_node_labels"},
        ),
        ('count(kube_node_info > $FRESH_SECONDS) unless on(node) x{node="$NODE"}', {"kube_node_info", "x"}),
    ],
)
def test_series_read_finds_metrics_not_labels_functions_or_strings(expr: str, metrics: set[str]) -> None:
    assert {r.metric for r in series_read(expr)} == metrics


def test_a_service_monitor_reaches_the_pods_its_service_selects_and_no_others() -> None:
    exporter = {
        "name": "exporter",
        "command": ["gpucluster-fabric-exporter"],
        "args": ["--port=9402", "--listen-address=$(POD_IP)"],
        "ports": [{"name": "metrics", "containerPort": 9402}],
    }
    daemon_set = {**_pod(exporter), "kind": "DaemonSet"}
    service = {
        "kind": "Service",
        "metadata": {"name": "fabric", "namespace": "ns", "labels": {"app.kubernetes.io/name": "app"}},
        "spec": {
            "selector": {"app.kubernetes.io/name": "app"},
            "ports": [{"name": "metrics", "targetPort": "metrics"}],
        },
    }

    def monitor(port: str) -> dict[str, Any]:
        return {
            "kind": "ServiceMonitor",
            "metadata": {"name": "fabric", "namespace": "ns"},
            "spec": {
                "selector": {"matchLabels": {"app.kubernetes.io/name": "app"}},
                "endpoints": [{"port": port, "honorLabels": True}],
            },
        }

    (target,) = scrape_targets([daemon_set, service, monitor("metrics")])
    assert (target.job, target.port, target.honor_labels, target.reached) == ("fabric", 9402, True, True)
    assert scrape_targets([daemon_set, service, monitor("web")]) == []
