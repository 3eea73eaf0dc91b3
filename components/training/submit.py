"""``gpucluster submit job.yaml`` (console script ``gpucluster``): a researcher's job spec onto the cluster.

The spec is validated on its own, then against the stack (``--stack``, default ``stacks/Pulumi.local.yaml``); the
checkpoint interval is Young/Daly on the cluster's measured reliability when the cluster has measured enough,
else on the stack's prior. ``--dry-run`` prints the JobSet and the interval and touches no cluster. Otherwise
the JobSet is created once: a JobSet of the same name is refused, naming it, and nothing is changed.

Exit codes: 0 submitted (or printed), 1 the spec, the stack or the cluster refused it, 2 a usage error.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client, config

from components.config.loader import PROJECT_ROOT, load_stack_file
from components.config.stack import StackConfig, StackConfigError
from components.training.checks import check_spec
from components.training.manifest import (
    JOBSET_API_VERSION,
    Interval,
    MeasuredWrite,
    Reliability,
    ReliabilityError,
    checkpoint_interval,
    job_context,
    jobset_manifest,
    parse_measured_write,
    parse_reliability,
)
from components.training.spec import JobSpec, load_spec
from contract.constants import RELIABILITY_CONFIGMAP, STORAGE_MEASURED_CONFIGMAP
from contract.issues import REDACTED, SettingsError, is_credential_key, looks_like_credential

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
DEFAULT_STACK = "stacks/Pulumi.local.yaml"
JOBSET_GROUP, JOBSET_VERSION = JOBSET_API_VERSION.split("/")
JOBSET_PLURAL = "jobsets"


class ClusterError(RuntimeError):
    """The cluster could not be reached or refused a call; the message says which and why."""


class Cluster(Protocol):
    """What submit needs of a cluster."""

    def reliability(self, namespace: str) -> Mapping[str, str] | None:
        """The reliability ConfigMap's data, None when there is none."""

    def storage_measured(self, namespace: str) -> Mapping[str, str] | None:
        """The measured write rate's ConfigMap's data, None when there is none."""

    def jobset_exists(self, namespace: str, name: str) -> bool: ...

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create it; raise :class:`JobSetExistsError` when a JobSet of that name is there."""


class JobSetExistsError(ClusterError):
    pass


def _api_client(kubeconfig: str | None) -> Any:
    """As kubectl looks: ``kubeconfig``, else $KUBECONFIG or ~/.kube/config; inside a pod with neither, its service
    account."""
    loaders: Any = config
    try:
        return loaders.new_client_from_config(config_file=kubeconfig)
    except loaders.ConfigException:
        if kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            raise
    loaders.load_incluster_config()
    return client.ApiClient()


class KubeCluster:
    """The cluster behind a kubeconfig (else in-cluster), through the kubernetes client."""

    def __init__(self, kubeconfig: str | None, timeout_s: float = 10.0) -> None:
        try:
            api = _api_client(kubeconfig)
        except (config.ConfigException, OSError) as exc:
            raise ClusterError(f"cannot load a kubeconfig ({kubeconfig or 'default'}): {exc}") from None
        self._core = client.CoreV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._timeout = timeout_s
        self._api_exception = client.ApiException

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except self._api_exception:
            raise
        except Exception as exc:  # connection refused, TLS, DNS: the cluster is not reachable
            raise ClusterError(f"{what}: the cluster is not reachable ({type(exc).__name__})") from None

    def _config_map(self, namespace: str, name: str) -> Mapping[str, str] | None:
        try:
            cm = self._call(
                f"reading ConfigMap {namespace}/{name}",
                lambda: self._core.read_namespaced_config_map(name, namespace, _request_timeout=self._timeout),
            )
        except self._api_exception as exc:
            if exc.status in (403, 404):
                return None
            raise ClusterError(f"reading {namespace}/{name}: HTTP {exc.status} {exc.reason}") from None
        return dict(cm.data or {})

    def reliability(self, namespace: str) -> Mapping[str, str] | None:
        return self._config_map(namespace, RELIABILITY_CONFIGMAP)

    def storage_measured(self, namespace: str) -> Mapping[str, str] | None:
        return self._config_map(namespace, STORAGE_MEASURED_CONFIGMAP)

    def jobset_exists(self, namespace: str, name: str) -> bool:
        try:
            self._call(
                "reading the JobSet",
                lambda: self._custom.get_namespaced_custom_object(
                    JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name, _request_timeout=self._timeout
                ),
            )
        except self._api_exception as exc:
            if exc.status == 404:
                return False
            raise ClusterError(f"reading JobSet {namespace}/{name}: HTTP {exc.status} {exc.reason}") from None
        return True

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        try:
            self._call(
                "creating the JobSet",
                lambda: self._custom.create_namespaced_custom_object(
                    JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, dict(body), _request_timeout=self._timeout
                ),
            )
        except self._api_exception as exc:
            if exc.status == 409:
                raise JobSetExistsError(f"JobSet {namespace}/{name} already exists") from None
            raise ClusterError(f"creating JobSet {namespace}/{name}: HTTP {exc.status} {exc.reason}") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpucluster", description="Submit training jobs to the GPU cluster.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    s = sub.add_parser(
        "submit",
        help="validate a job spec and create its JobSet",
        description=(
            "Validate a job spec (job.yaml) against the stack and create its JobSet in the team's namespace, queued "
            "on the team's LocalQueue. Exit 0 when submitted (or printed with --dry-run), 1 when the spec, the stack "
            "or the cluster refused it, 2 on a usage error."
        ),
    )
    s.add_argument("spec", metavar="job.yaml", help="the job spec (see components/training/README.md)")
    s.add_argument(
        "--stack",
        default=DEFAULT_STACK,
        metavar="stacks/Pulumi.<env>.yaml",
        help="the stack file the cluster was built from: teams, priorities, flavors, storage "
        f"(default {DEFAULT_STACK})",
    )
    s.add_argument(
        "--dry-run",
        action="store_true",
        help="print the JobSet YAML and the checkpoint interval with its source; touch no cluster "
        "(the interval then comes from the stack's prior)",
    )
    s.add_argument(
        "--kubeconfig",
        metavar="PATH",
        default=None,
        help="kubeconfig of the cluster (default: in-cluster credentials, else $KUBECONFIG or ~/.kube/config)",
    )
    return p


def _stack_path(text: str) -> Path:
    path = Path(text)
    return path if path.is_absolute() or path.exists() else PROJECT_ROOT / path


def _reliability(cluster: Cluster, namespace: str, err: Callable[[str], None]) -> Reliability | None:
    data = cluster.reliability(namespace)
    if data is None:
        return None
    try:
        return parse_reliability(data)
    except ReliabilityError as exc:
        err(f"warning: {namespace}/{RELIABILITY_CONFIGMAP} is unreadable ({exc}); using the stack's prior")
        return None


def _measured(cluster: Cluster, namespace: str, err: Callable[[str], None]) -> MeasuredWrite | None:
    data = cluster.storage_measured(namespace)
    if data is None:
        return None
    try:
        return parse_measured_write(data)
    except ReliabilityError as exc:
        err(f"warning: {namespace}/{STORAGE_MEASURED_CONFIGMAP} is unreadable ({exc}); using the stack's write time")
        return None


def _interval_line(interval: Interval) -> str:
    return (
        f"checkpoint interval: {interval.seconds} s ({interval.seconds / 60:.1f} min), source {interval.source}: "
        f"{interval.reason}; write time {interval.write_seconds:g} s, {interval.write_reason}"
    )


def printable(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest as the dry run prints it: an env value that is, or is named like, a credential shows as
    ``<redacted>`` (the spec's literal values go to the cluster as written; they never go to a terminal or a log)."""
    out = copy.deepcopy(dict(manifest))
    for rj in out.get("spec", {}).get("replicatedJobs", []):
        pod = rj.get("template", {}).get("spec", {}).get("template", {}).get("spec", {})
        for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            for entry in container.get("env", []):
                if "value" in entry and (is_credential_key(entry["name"]) or looks_like_credential(entry["value"])):
                    entry["value"] = REDACTED
    return out


def submit(
    spec_path: str,
    stack_path: str,
    *,
    dry_run: bool,
    cluster_factory: Callable[[], Cluster],
    out: Callable[[str], None],
    err: Callable[[str], None],
) -> int:
    """The whole command, its cluster passed in (tests pass a fake)."""
    try:
        stack: StackConfig = load_stack_file(_stack_path(stack_path))
        spec: JobSpec = load_spec(spec_path)
        check_spec(spec, stack, spec_path)
    except (SettingsError, StackConfigError) as exc:
        err(str(exc))
        return EXIT_REFUSED
    reliability: Reliability | None = None
    measured: MeasuredWrite | None = None
    cluster: Cluster | None = None
    try:
        if not dry_run:
            cluster = cluster_factory()
            reliability = _reliability(cluster, stack.training.reliability_namespace, err)
            measured = _measured(cluster, stack.training.reliability_namespace, err)
        interval = checkpoint_interval(spec, stack, reliability, measured)
        ctx = job_context(spec, stack, interval)
        manifest = jobset_manifest(spec, ctx)
        if cluster is None:
            out(yaml.safe_dump(printable(manifest), sort_keys=False).rstrip())
            out(f"# {_interval_line(interval)}")
            out(
                "# dry run: no cluster was read (its measured reliability and write rate neither) and nothing was "
                "created"
            )
            return EXIT_OK
        if cluster.jobset_exists(ctx.namespace, spec.name):
            err(f"refused: JobSet {ctx.namespace}/{spec.name} already exists; nothing was changed")
            return EXIT_REFUSED
        cluster.create_jobset(ctx.namespace, manifest)
    except JobSetExistsError as exc:
        err(f"refused: {exc}; nothing was changed")
        return EXIT_REFUSED
    except ClusterError as exc:
        err(f"error: {exc}")
        return EXIT_REFUSED
    out(f"submitted JobSet {ctx.namespace}/{spec.name} to LocalQueue {ctx.local_queue}")
    out(_interval_line(interval))
    out("watch it:")
    out(f"  kubectl get jobset -n {ctx.namespace} {spec.name}")
    out(f"  kubectl get workloads -n {ctx.namespace}")
    out(f"  kubectl get pods -n {ctx.namespace} -l gpucluster.io/training-job={spec.name}")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help exits 0, a usage error 2
        return int(exc.code or 0)
    return submit(
        args.spec,
        args.stack,
        dry_run=args.dry_run,
        cluster_factory=lambda: KubeCluster(args.kubeconfig),
        out=print,
        err=lambda line: print(line, file=sys.stderr),
    )
