"""A real etcd + kube-apiserver from the pinned tools (no scheduler, no controllers: nothing else touches the
objects), for integration tests; skipped, saying why, when the tools are not built."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from daemons.toolkit.kube import load_kube_config
from tests.support.require import missing
from tests.support.sim import tools_bin


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


@contextmanager
def running_apiserver(
    work: Path, *, authorization_mode: str = "AlwaysAllow", allow_privileged: bool = False
) -> Iterator[ApiServer]:
    """Start etcd and kube-apiserver in ``work``; the token ``test-token`` is in system:masters. ``allow_privileged``:
    as a production API server (``--allow-privileged``), so admission, not the API server's flag, refuses a
    privileged container."""
    bin_dir = tools_bin()
    absent = [t for t in ("etcd", "kube-apiserver") if not (bin_dir / t).exists()]
    if absent:
        missing(f"pinned tools not built in {bin_dir} (missing: {', '.join(absent)}); run make tools")
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
        yield ApiServer(kubeconfig, api_client)
    finally:
        for proc in (api, etcd):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        etcd_log.close()
        api_log.close()
