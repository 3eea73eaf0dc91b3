"""Every series an alert, a recording rule or a dashboard panel of a stack reads is served by a target that the
stack's own scrape contract reaches (``components/scraping.py``), for every stack, read from what the stack renders.

The producers are read from the daemons' own metrics modules (their prefixes); what is outside the stack's
manifests (dcgm-exporter's chart, the cluster's kube-state-metrics, Prometheus itself) is named as such.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.burst_settings import PROVIDER_METRICS_PORT
from components.cluster import GpuCluster, GpuClusterArgs
from components.config import load_stack_file
from components.scraping import (
    HONOR_LABELS_ANNOTATION,
    Producer,
    Read,
    Target,
    annotated_targets,
    listen_host,
    scrape_targets,
    series_read,
    unreachable,
)
from components.stall_detector_settings import StallDetectorSettings
from components.telemetry.dashboard import panel_queries
from components.virtual_node import APP as VIRTUAL_NODE_APP
from daemons.burst_provider.metrics import PREFIX as BURST_PREFIX
from daemons.fabric_exporter import METRIC_PREFIX as FABRIC_PREFIX
from daemons.interruptions.metrics import TRAINING as TRAINING_PREFIX
from daemons.interruptions.spec import SPEC as INTERRUPTIONS
from daemons.registry import CONTROLLERS, STALL_DETECTOR
from daemons.stall_detector.queries import cycle_queries
from tests.support.pulumi_harness import Graph, deploy, secrets_of

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


def producers(records: set[str]) -> list[Producer]:
    """Who exports what: our programs by their metrics modules' prefixes, then what lies outside the manifests."""
    ours = [
        Producer(f"{importlib.import_module(f'{spec.module}.metrics').PREFIX}_", spec.name, spec.app)
        for spec in CONTROLLERS
    ]
    ours += [
        Producer(f"{BURST_PREFIX}_", "the burst provider service", "gpucluster-burst-provider"),
        Producer(f"{FABRIC_PREFIX}_", "the fabric exporter", "gpucluster-fabric-exporter"),
        # the interruption accounting's figures per training job
        Producer(f"{TRAINING_PREFIX}_", INTERRUPTIONS.name, INTERRUPTIONS.app),
    ]
    outside = [
        Producer("DCGM_FI_", "dcgm-exporter, from its chart"),
        Producer("kube_", "the cluster's kube-state-metrics"),
        Producer("ALERTS", "Prometheus"),
        Producer("up", "Prometheus"),
        # a Service's request rate, counted where traffic enters: a gateway's counter in a real cluster, the
        # simulated cluster's Services (sim/serving.py) in the local stack's requestRateQuery
        Producer("gpucluster_sim_", "the simulated cluster's Services"),
    ]
    return [*ours, *outside, *(Producer(r, "a recording rule") for r in sorted(records))]


def objects(graph: Graph) -> list[dict[str, Any]]:
    return [r.inputs for r in graph.resources if r.type.startswith("kubernetes:") and "kind" in r.inputs]


def rule_documents(objs: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The rule groups the stack deploys: a PrometheusRule's spec, or the rule file of a ConfigMap."""
    for o in objs:
        if o["kind"] == "PrometheusRule":
            yield o["spec"]
        elif o["kind"] == "ConfigMap":
            for key, text in (o.get("data") or {}).items():
                if key.endswith(".rules.yaml"):
                    yield yaml.safe_load(text)


def reads_of(objs: list[dict[str, Any]]) -> tuple[dict[str, set[Read]], set[str]]:
    """What each alert, recording rule and dashboard panel the stack deploys reads; and the recorded names."""
    reads: dict[str, set[Read]] = {}
    records: set[str] = set()
    for doc in rule_documents(objs):
        for group in doc["groups"]:
            for rule in group["rules"]:
                name = rule.get("alert") or rule["record"]
                if "record" in rule:
                    records.add(rule["record"])
                reads[f"rule {name}"] = series_read(rule["expr"])
    for o in objs:
        if o["kind"] != "ConfigMap":
            continue
        for key, text in (o.get("data") or {}).items():
            if key.endswith(".json") and '"panels"' in text:
                for title, expr in panel_queries(json.loads(text)):
                    reads.setdefault(f"panel {title}", set()).update(series_read(expr))
    return reads, records


def _query_fields(doc: Any, path: str) -> Iterator[tuple[str, str]]:
    """Every ``...Query`` string of a settings document, with its key path."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            where = f"{path}.{key}"
            if key.endswith("Query") and isinstance(value, str):
                yield where, value
            else:
                yield from _query_fields(value, where)
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _query_fields(value, f"{path}[{i}]")


def controller_reads(objs: list[dict[str, Any]]) -> dict[str, set[Read]]:
    """What the controllers the stack deploys query Prometheus for: every ``...Query`` of their deployed settings
    (the taint controller's, the quarantine signal, the metrics adapter's request rate), and the stall detector's
    cycle built from its deployed settings as the controller builds it."""
    reads: dict[str, set[Read]] = {}
    for o in objs:
        if o["kind"] != "ConfigMap":
            continue
        name = o["metadata"]["name"]
        for key, text in (o.get("data") or {}).items():
            if not key.endswith(".json") or '"panels"' in text:
                continue
            doc = json.loads(text)
            for where, promql in _query_fields(doc, name):
                reads[f"query {where}"] = series_read(promql)
            if name == f"{STALL_DETECTOR.app}-settings":
                s = StallDetectorSettings.model_validate(doc)
                cycle = cycle_queries(s.dcgm_scrape_job, s.fabric_scrape_job, s.workload_namespaces, 60.0)
                reads.update({f"query {STALL_DETECTOR.name} {q}": series_read(p) for q, p in cycle.items()})
    return reads


@pytest.fixture(scope="module", params=STACKS)
def stack(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    cfg = load_stack_file(ROOT / "stacks" / f"Pulumi.{request.param}.yaml")
    graph = deploy(lambda: GpuCluster(request.param, GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    return request.param, objects(graph)


def test_every_series_a_rule_or_panel_reads_is_scraped_where_it_is_served(
    stack: tuple[str, list[dict[str, Any]]],
) -> None:
    name, objs = stack
    reads, records = reads_of(objs)
    assert reads, f"stack {name}: no rule or panel found in what it renders"
    queries = controller_reads(objs)
    assert any(STALL_DETECTOR.name in q for q in queries), f"stack {name}: no stall detector query found"
    reads.update(queries)
    problems = unreachable(reads, producers(records), scrape_targets(objs))
    assert not problems, f"stack {name}:\n" + "\n".join(problems)


def test_the_burst_providers_metrics_are_a_reached_target_of_the_local_stack() -> None:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    objs = objects(deploy(lambda: GpuCluster("local", GpuClusterArgs(config=cfg, secrets=secrets_of(cfg)))))
    targets = [t for t in scrape_targets(objs) if t.program == "gpucluster-burst-provider"]
    assert [(t.port, t.job, t.listen_host, t.reached) for t in targets] == [
        (PROVIDER_METRICS_PORT, VIRTUAL_NODE_APP, "$(POD_IP)", True)
    ]


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
