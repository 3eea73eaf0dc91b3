"""What a stack's alerts, recording rules, dashboard panels and controller queries read, and who exports each
series: read from the objects the stack renders. The offline reachability test (tests/components/test_scraping.py)
and the live one on the simulated cluster's Prometheus (tests/sim/test_real_node.py) both hold a stack to it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import StackConfig
from components.scraping import Producer, Read, series_read
from components.telemetry.dashboard import panel_queries
from contract.burst_settings import METRICS_PREFIX as BURST_PREFIX
from contract.controllers.interruptions import SPEC as INTERRUPTIONS
from contract.controllers.interruptions import TRAINING as TRAINING_PREFIX
from contract.fabric_settings import METRICS_PREFIX as FABRIC_PREFIX
from contract.registry import CONTROLLERS, STALL_DETECTOR
from contract.stall_detector_settings import StallDetectorSettings
from daemons.stall_detector.queries import cycle_queries
from tests.support.pulumi_harness import Graph, deploy, secrets_of


def producers(records: set[str]) -> list[Producer]:
    """Who exports what: our programs by their metrics modules' prefixes, then what lies outside the manifests."""
    ours = [Producer(f"{spec.metrics_prefix}_", spec.name, spec.module) for spec in CONTROLLERS]
    ours += [
        Producer(f"{BURST_PREFIX}_", "the burst provider service", "gpucluster-burst-provider"),
        Producer(f"{FABRIC_PREFIX}_", "the fabric exporter", "gpucluster-fabric-exporter"),
        # the interruption accounting's figures per training job
        Producer(f"{TRAINING_PREFIX}_", INTERRUPTIONS.name, INTERRUPTIONS.module),
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


def rendered(name: str, cfg: StackConfig) -> list[dict[str, Any]]:
    """The Kubernetes objects the stack ``name`` renders (under Pulumi's mocks)."""
    return objects(deploy(lambda: GpuCluster(name, GpuClusterArgs(config=cfg, secrets=secrets_of(cfg)))))


def all_reads(objs: list[dict[str, Any]]) -> tuple[dict[str, set[Read]], list[Producer]]:
    """Every read of the stack's rules, panels and controller queries, and the producers they may come from."""
    reads, records = reads_of(objs)
    reads.update(controller_reads(objs))
    return reads, producers(records)
