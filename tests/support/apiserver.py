"""A real etcd + kube-apiserver from the pinned tools (no scheduler, no controllers: nothing else touches the
objects), for integration tests; skipped, saying why, when the tools are not built.

Beside it, what the tests of our controllers on it share: the CRDs of the pinned Kueue and JobSet (from the Go module
cache), objects as the test plays the rest of the cluster (a Ready GPU node), a client as a controller's
least-privilege ServiceAccount, and the controller as its own process (``python -m daemons.<name>``).
"""

from __future__ import annotations

import functools
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from contract.constants import GPU_RESOURCE
from contract.jobset_settings import JOBSET_CHART_VERSION
from contract.queues_settings import KUEUE_CHART_VERSION
from contract.rbac import Grant
from daemons.toolkit.events import format_time
from daemons.toolkit.kube import load_kube_config
from daemons.toolkit.kube_api import MERGE_PATCH, KubeApi
from tests.support.require import missing
from tests.support.sim import ROOT, tools_bin

#: Where ``make tools`` leaves the Go modules of the versions the stack pins, their CRDs among them.
GO_MODULES = Path.home() / "go/pkg/mod/sigs.k8s.io"
KUEUE_CRDS = GO_MODULES / f"kueue@v{KUEUE_CHART_VERSION}/config/components/crd/bases"
JOBSET_CRDS = GO_MODULES / f"jobset@v{JOBSET_CHART_VERSION}/config/components/crd/bases"


def kueue_crds(*kinds: str) -> list[Path]:
    """The pinned Kueue's CRDs of ``kinds`` (plural: ``workloads``, ``clusterqueues``, ...)."""
    return [KUEUE_CRDS / f"kueue.x-k8s.io_{kind}.yaml" for kind in kinds]


def jobset_crds() -> list[Path]:
    """The pinned JobSet's CRD."""
    return [JOBSET_CRDS / "jobset.x-k8s.io_jobsets.yaml"]


def stamp(seconds_ago: float = 0.0) -> str:
    """A time as the API server writes it (RFC 3339, UTC, whole seconds), ``seconds_ago``."""
    return format_time(time.time() - seconds_ago)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(what: str, check: Callable[[], bool], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # not up yet
            pass
        time.sleep(0.5)
    pytest.fail(f"{what}: not reached within {timeout:.0f}s")


@dataclass
class ApiServer:
    kubeconfig: Path
    api_client: Any


def stop_processes(*procs: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM each, in order; one still running ``timeout`` seconds later is killed."""
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def running_apiserver(
    work: Path,
    *,
    authorization_mode: str = "AlwaysAllow",
    allow_privileged: bool = False,
    crds: Iterable[Path] = (),
    namespaces: Iterable[str] = (),
) -> Iterator[ApiServer]:
    """Start etcd and kube-apiserver in ``work``; the token ``test-token`` is in system:masters. ``allow_privileged``:
    as a production API server (``--allow-privileged``), so admission, not the API server's flag, refuses a
    privileged container. ``crds`` (files of the Go module cache; skipped, naming them, when one is absent) are
    served and ``namespaces`` created before it is handed over."""
    bin_dir = tools_bin()
    absent = [t for t in ("etcd", "kube-apiserver") if not (bin_dir / t).exists()]
    if absent:
        missing(f"pinned tools not built in {bin_dir} (missing: {', '.join(absent)}); run make tools")
    crds = list(crds)
    not_cached = [str(path) for path in crds if not path.exists()]
    if not_cached:
        missing(f"CRDs not in the Go module cache (missing: {', '.join(not_cached)}); run make tools")
    subprocess.run(["openssl", "genrsa", "-out", str(work / "sa.key"), "2048"], check=True, capture_output=True)
    (work / "tokens.csv").write_text("test-token,admin,admin,system:masters\n")
    client_port, peer_port, secure_port = free_port(), free_port(), free_port()
    etcd_log = (work / "etcd.log").open("w")
    api_log = (work / "apiserver.log").open("w")
    etcd = subprocess.Popen(
        [
            str(bin_dir / "etcd"),
            f"--data-dir={work / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{client_port}",
            f"--advertise-client-urls=http://127.0.0.1:{client_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
        ],
        stdout=etcd_log,
        stderr=subprocess.STDOUT,
    )
    api = subprocess.Popen(
        [
            str(bin_dir / "kube-apiserver"),
            f"--etcd-servers=http://127.0.0.1:{client_port}",
            f"--secure-port={secure_port}",
            "--bind-address=127.0.0.1",
            f"--cert-dir={work / 'certs'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={work / 'sa.key'}",
            f"--service-account-signing-key-file={work / 'sa.key'}",
            f"--token-auth-file={work / 'tokens.csv'}",
            f"--authorization-mode={authorization_mode}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--enable-priority-and-fairness=false",
            "--disable-admission-plugins=ServiceAccount",  # no controller manager creates default accounts
            *(["--allow-privileged=true"] if allow_privileged else []),
        ],
        stdout=api_log,
        stderr=subprocess.STDOUT,
    )
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "t",
                        "cluster": {"server": f"https://127.0.0.1:{secure_port}", "insecure-skip-tls-verify": True},
                    }
                ],
                "users": [{"name": "t", "user": {"token": "test-token"}}],
                "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}],
                "current-context": "t",
            }
        )
    )
    try:
        api_client = load_kube_config(str(kubeconfig))
        version = client.VersionApi(api_client)
        wait_for("kube-apiserver ready", lambda: bool(version.get_code(_request_timeout=2)), timeout=180)
        core = client.CoreV1Api(api_client)
        wait_for(
            "namespace default",
            lambda: bool(core.read_namespace("default", _request_timeout=2)),
        )
        server = ApiServer(kubeconfig, api_client)
        install_crds(server, crds)
        create_namespaces(server, *namespaces)
        yield server
    finally:
        stop_processes(api, etcd, timeout=30)
        etcd_log.close()
        api_log.close()


def admin_request(
    server: ApiServer, method: str, path: str, body: Any = None, content_type: str | None = None, **query: str
) -> Any:
    """One call as the cluster's admin (the test plays the kubelet, Kueue, JobSet and Pulumi)."""
    api = KubeApi(server.api_client, 10.0, "test-admin")
    return api.request(
        method, path, f"{method} {path}", query=list(query.items()), body=body, content_type=content_type
    )


def install_crds(server: ApiServer, documents: Iterable[Path]) -> None:
    """Create each CRD (a file from the Go module cache) and wait until the API server serves it (Established)."""
    ext = client.ApiextensionsV1Api(server.api_client)
    names = []
    for path in documents:
        doc = yaml.safe_load(path.read_text())
        ext.create_custom_resource_definition(doc)
        names.append(str(doc["metadata"]["name"]))

    def established(name: str) -> bool:
        status = ext.read_custom_resource_definition(name).status
        conditions = (status.conditions if status else None) or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    for name in names:
        wait_for(f"CRD {name} established", functools.partial(established, name))


def create_namespaces(server: ApiServer, *names: str) -> None:
    core = client.CoreV1Api(server.api_client)
    for name in names:
        core.create_namespace(client.V1Namespace.model_validate({"metadata": {"name": name}}))


def service_account_kubeconfig(
    server: ApiServer, namespace: str, name: str, grants: Iterable[Grant], tmp: Path
) -> Path:
    """A kubeconfig authenticated as a new ServiceAccount ``namespace/name``, bound to exactly ``grants`` (a
    controller's rules from its contract module): each a Role in its namespace, or a ClusterRole."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    admin_request(server, "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
    subject = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
    for grant in grants:
        base = f"{rbac}/namespaces/{grant.namespace}" if grant.namespace else rbac
        kind = "Role" if grant.namespace else "ClusterRole"
        admin_request(
            server, "POST", f"{base}/{kind.lower()}s", {"metadata": {"name": grant.name}, "rules": grant.k8s_rules()}
        )
        binding = {
            "metadata": {"name": grant.name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": grant.name},
            "subjects": [subject],
        }
        admin_request(server, "POST", f"{base}/{kind.lower()}bindings", binding)
    token = admin_request(
        server,
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )["status"]["token"]
    config = json.loads(server.kubeconfig.read_text())
    config["users"] = [{"name": "t", "user": {"token": token}}]
    path = tmp / f"{name}-kubeconfig"
    path.write_text(json.dumps(config))
    return path


def service_account_client(server: ApiServer, namespace: str, name: str, grants: Iterable[Grant], tmp: Path) -> Any:
    """A client authenticated as a new ServiceAccount ``namespace/name`` bound to exactly ``grants``
    (:func:`service_account_kubeconfig`)."""
    return load_kube_config(str(service_account_kubeconfig(server, namespace, name, grants, tmp)))


def ready_node(server: ApiServer, name: str, gpus: int, labels: Mapping[str, str]) -> None:
    """A Node as its kubelet reports it: Ready now, ``gpus`` GPUs allocatable."""
    admin_request(server, "POST", "/api/v1/nodes", {"metadata": {"name": name, "labels": dict(labels)}})
    resources = {GPU_RESOURCE: str(gpus), "cpu": "96", "pods": "110"}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
    status = {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [{**ready, "lastHeartbeatTime": stamp(), "lastTransitionTime": stamp()}],
    }
    admin_request(server, "PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, MERGE_PATCH)


def _controller_command(module: str, settings: Path, kubeconfig: Path, *flags: str) -> list[str]:
    """The controller ``daemons.<name>`` as its Deployment runs it (``python -m``), on this API server."""
    return [sys.executable, "-m", module, "--settings", str(settings), "--kubeconfig", str(kubeconfig), *flags]


def _process_env() -> dict[str, str]:
    """The controller's process's environment: this one's, from the repository, Python's own warnings (urllib3's on
    the test server's certificate) left out of its log."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}


def start_controller(
    module: str, settings: Path, kubeconfig: Path, *flags: str, stdout: Any = subprocess.DEVNULL, stderr: Any
) -> subprocess.Popen[str]:
    """The controller ``daemons.<name>`` running with ``flags`` (``--listen``, ``--identity``, ...) until stopped;
    its log goes to ``stderr`` (a file, or ``subprocess.PIPE``)."""
    return subprocess.Popen(
        _controller_command(module, settings, kubeconfig, *flags),
        cwd=ROOT,
        env=_process_env(),
        stdout=stdout,
        stderr=stderr,
        text=True,
    )


def run_once(module: str, settings: Path, kubeconfig: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """``--once`` (and ``flags``) of the controller ``daemons.<name>``: its summary on stdout, its log on stderr."""
    return subprocess.run(
        _controller_command(module, settings, kubeconfig, "--once", *flags),
        cwd=ROOT,
        env=_process_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def scrape(port: int) -> str:
    """The ``/metrics`` text a controller serves on ``127.0.0.1:port``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return str(r.read().decode())
