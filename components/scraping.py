"""What Prometheus scrapes of what a stack deploys, and whether every series a rule reads is among it.

Read from the objects the stack renders, never from a list written beside them. The stack's scrape contract:

* **Annotations** (``prometheus.io/scrape: "true"`` on a pod template): every container port of the pod named
  ``metrics`` or ending in ``-metrics`` is one target, on the pod's address, at ``prometheus.io/path`` (default
  ``/metrics``); its ``job`` is the pod's ``app.kubernetes.io/name``. ``prometheus.io/port`` names the first of them,
  for Prometheus's stock ``kubernetes-pods`` job. ``gpucluster.io/scrape-honor-labels: "true"`` marks a pod whose
  series carry their own ``namespace`` and ``job`` (they win over the scrape's: Prometheus's ``honor_labels`` is a
  scrape job's setting, so those pods need a job of their own).
* **ServiceMonitor** (Prometheus operator): each endpoint's Service port, followed to the pods the Service selects;
  its ``job`` is the Service's name.

A target is *reached* only when the program behind it listens on the pod's address on that port: a container whose
arguments bind the port to loopback serves nothing Prometheus can scrape, however the pod is annotated.

Pure: no Pulumi, no daemon code; the objects are plain mappings (a rendered manifest, or the inputs a Pulumi
program registered).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SCRAPE_ANNOTATION = "prometheus.io/scrape"
PORT_ANNOTATION = "prometheus.io/port"
PATH_ANNOTATION = "prometheus.io/path"
#: The pod's series carry their own ``namespace`` and ``job`` labels, which must win over the scrape's.
HONOR_LABELS_ANNOTATION = "gpucluster.io/scrape-honor-labels"
#: A container port that is a scrape target of an annotated pod: ``metrics``, or ``<anything>-metrics``.
METRICS_PORT_NAME = r"metrics|[a-z0-9]([-a-z0-9]*[a-z0-9])?-metrics"
#: The label whose value is an annotated pod's ``job``.
JOB_LABEL = "app.kubernetes.io/name"

_WORKLOAD_KINDS = frozenset({"Deployment", "DaemonSet", "StatefulSet"})
#: Hosts that bind every address of the pod (``$(POD_IP)`` is the pod's own address, expanded by the kubelet).
_POD_WIDE = frozenset({"", "0.0.0.0", "::", "[::]", "$(POD_IP)"})


def scrape_annotations(port: int, *, honor_labels: bool = False) -> dict[str, str]:
    """A pod template's annotations that put it in the scrape contract, ``port`` being its first metrics port."""
    annotations = {SCRAPE_ANNOTATION: "true", PORT_ANNOTATION: str(port), PATH_ANNOTATION: "/metrics"}
    if honor_labels:
        annotations[HONOR_LABELS_ANNOTATION] = "true"
    return annotations


@dataclass(frozen=True)
class Target:
    """One scrape target of a workload's pods, and the program that answers it."""

    #: ``Deployment gpucluster-burst/gpucluster-virtual-node``.
    workload: str
    container: str
    #: The container's program: the module of ``python3 -m <module>``, else its command's first word, else its
    #: image.
    program: str
    port: int
    path: str
    job: str
    honor_labels: bool
    #: The host the program binds this port to, as its arguments say (``$(POD_IP)``, ``127.0.0.1``, ``""`` for
    #: every address); None when no argument names the port (the program's own default).
    listen_host: str | None

    @property
    def reached(self) -> bool:
        """Prometheus, from outside the pod, gets an answer here."""
        return self.listen_host is None or self.listen_host in _POD_WIDE

    def __str__(self) -> str:
        return f"{self.workload} container {self.container} port {self.port} (job {self.job})"


def listen_host(container: Mapping[str, Any], port: int) -> str | None:
    """The host ``container``'s arguments bind ``port`` to: an argument ``HOST:PORT`` (``--listen 127.0.0.1:10299``,
    ``--listen-metrics=:10298``), or ``--port=PORT`` beside ``--listen-address=HOST``; None when none names it."""
    words = [str(w) for w in [*container.get("command", []), *container.get("args", [])]]
    values = [w.split("=", 1)[1] if w.startswith("-") and "=" in w else w for w in words]
    for value in values:
        host, sep, tail = value.rpartition(":")
        if sep and tail == str(port) and not value.startswith(("http://", "https://")):
            return host
    if any(v == str(port) for v in values):
        for word, value in zip(words, values, strict=True):
            if word.startswith("--listen-address"):
                return value
        return ""
    return None


def _template(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec", {}).get("template", {}) or {}


def _workload(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"{obj.get('kind')} {meta.get('namespace', 'default')}/{meta.get('name')}"


def _program(container: Mapping[str, Any]) -> str:
    command = [str(w) for w in container.get("command") or []]
    if len(command) >= 3 and command[0].startswith("python") and command[1] == "-m":
        return command[2]
    return command[0] if command else str(container.get("image", ""))


def _ports(template: Mapping[str, Any]) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Each container of a pod template with each port it declares."""
    for container in template.get("spec", {}).get("containers", []):
        for port in container.get("ports", []) or []:
            yield container, port


def _target(
    workload: Mapping[str, Any],
    container: Mapping[str, Any],
    port: Mapping[str, Any],
    *,
    path: str,
    job: str,
    honor_labels: bool,
) -> Target:
    number = int(port["containerPort"])
    return Target(
        workload=_workload(workload),
        container=str(container.get("name")),
        program=_program(container),
        port=number,
        path=path,
        job=job,
        honor_labels=honor_labels,
        listen_host=listen_host(container, number),
    )


def annotated_targets(obj: Mapping[str, Any]) -> list[Target]:
    """The targets of one workload under the annotation contract; none when its pods are not annotated."""
    template = _template(obj)
    meta = template.get("metadata", {}) or {}
    annotations = meta.get("annotations", {}) or {}
    if annotations.get(SCRAPE_ANNOTATION) != "true":
        return []
    job = str((meta.get("labels", {}) or {}).get(JOB_LABEL, obj.get("metadata", {}).get("name", "")))
    honor = annotations.get(HONOR_LABELS_ANNOTATION) == "true"
    path = str(annotations.get(PATH_ANNOTATION, "/metrics"))
    return [
        _target(obj, container, port, path=path, job=job, honor_labels=honor)
        for container, port in _ports(template)
        if re.fullmatch(METRICS_PORT_NAME, str(port.get("name", "")))
    ]


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def service_monitor_targets(monitor: Mapping[str, Any], objects: Sequence[Mapping[str, Any]]) -> list[Target]:
    """The targets of one ServiceMonitor: its endpoints' Service ports, followed to the containers behind them."""
    spec = monitor.get("spec", {})
    namespace = monitor.get("metadata", {}).get("namespace", "default")
    match = spec.get("selector", {}).get("matchLabels", {}) or {}
    services = [
        o
        for o in objects
        if o.get("kind") == "Service"
        and o.get("metadata", {}).get("namespace", "default") == namespace
        and _selects(match, o.get("metadata", {}).get("labels", {}) or {})
    ]
    workloads = [o for o in objects if o.get("kind") in _WORKLOAD_KINDS]
    targets = []
    for service in services:
        selector = service.get("spec", {}).get("selector", {}) or {}
        for endpoint in spec.get("endpoints", []):
            ports = [p for p in service.get("spec", {}).get("ports", []) if p.get("name") == endpoint.get("port")]
            for service_port in ports:
                wanted = service_port.get("targetPort", service_port.get("port"))
                for workload in workloads:
                    template = _template(workload)
                    if not _selects(selector, (template.get("metadata", {}) or {}).get("labels", {}) or {}):
                        continue
                    targets += [
                        _target(
                            workload,
                            container,
                            port,
                            path=str(endpoint.get("path", "/metrics")),
                            job=str(service.get("metadata", {}).get("name")),
                            honor_labels=bool(endpoint.get("honorLabels", False)),
                        )
                        for container, port in _ports(template)
                        if wanted in (port.get("name"), port.get("containerPort"))
                    ]
    return targets


def scrape_targets(objects: Iterable[Mapping[str, Any]]) -> list[Target]:
    """Every target the stack's objects tell Prometheus to scrape, reached or not."""
    objs = list(objects)
    targets = [t for o in objs if o.get("kind") in _WORKLOAD_KINDS for t in annotated_targets(o)]
    for o in objs:
        if o.get("kind") == "ServiceMonitor":
            targets += service_monitor_targets(o, objs)
    return targets


# ------------------------------------------------------------------------------------------- what a rule reads

_KEYWORDS = frozenset(
    {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
    # aggregation operators, which may stand before their ``by (...)``
    | {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk"}
    | {"quantile", "limitk", "limit_ratio", "inf", "nan", "Inf", "NaN"}
)
_GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_TOKEN = re.compile(
    r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|\{[^}]*\}|\[[^\]]*\]|\$[A-Za-z_]+|[0-9][0-9A-Za-z_.]*|[A-Za-z_:][A-Za-z0-9_:]*|\(|\)|[^\sA-Za-z_:(){}\["\']+'
)
_JOB_MATCHER = re.compile(r'\bjob\s*=\s*"([^"]*)"')


@dataclass(frozen=True)
class Read:
    """One series a query reads: its metric name, and the ``job`` its selector asks for (None: any)."""

    metric: str
    job: str | None


def series_read(expr: str) -> set[Read]:
    """The metric names a PromQL expression reads, each with its selector's ``job`` matcher.

    Label names in ``by``/``on``/``without``/``ignoring``/``group_*`` lists, function names, keywords and a
    controller's ``$PLACEHOLDER`` s are not metrics; string arguments (``label_replace``'s) are skipped.
    """
    tokens = _TOKEN.findall(expr)
    found: set[Read] = set()
    in_label_list = False
    for i, token in enumerate(tokens):
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if in_label_list:
            in_label_list = token != ")"
            continue
        if token in _GROUPING and nxt == "(":
            in_label_list = True
            continue
        if not re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*", token) or token in _KEYWORDS or nxt == "(":
            continue
        job = None
        if nxt.startswith("{"):
            matched = _JOB_MATCHER.search(nxt)
            job = matched.group(1) if matched else None
        found.add(Read(token, job))
    return found


# ------------------------------------------------------------------------------------------- reachability


@dataclass(frozen=True)
class Producer:
    """Who exports a family of series: one of the stack's programs (matched by ``program``), or something outside
    the stack's manifests (``program`` None: a chart's exporter, the cluster's kube-state-metrics, Prometheus)."""

    prefix: str
    what: str
    program: str | None = None


def unreachable(reads: Mapping[str, set[Read]], producers: Sequence[Producer], targets: Sequence[Target]) -> list[str]:
    """Each series a rule, query or panel reads (``reads``: its name -> its series) that no reached target of the
    stack serves, one line naming the rule, the series and why; empty when every one can be collected."""
    problems = []
    for source, wanted in sorted(reads.items()):
        for read in sorted(wanted, key=lambda r: (r.metric, r.job or "")):
            producer = next((p for p in producers if read.metric.startswith(p.prefix)), None)
            if producer is None:
                problems.append(f"{source}: reads {read.metric}, which no program of the stack exports")
                continue
            if producer.program is None:
                continue
            serving = [t for t in targets if t.program == producer.program]
            if read.job is not None:
                serving = [t for t in serving if t.job == read.job]
            reached = [t for t in serving if t.reached]
            if reached:
                continue
            if not serving:
                job = f' under job "{read.job}"' if read.job else ""
                problems.append(
                    f"{source}: reads {read.metric} ({producer.what}), but no scrape target of the stack runs "
                    f"{producer.program}{job}"
                )
            else:
                shown = "; ".join(f"{t} listens on {t.listen_host or 'every address'}" for t in serving)
                problems.append(
                    f"{source}: reads {read.metric} ({producer.what}), but no target reaches it: {shown}, "
                    "which Prometheus cannot reach from outside the pod"
                )
    return problems
