"""Shared by the integration modules: a real etcd + kube-apiserver from the pinned tools, started once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.support.apiserver import ApiServer, free_port, running_apiserver, wait_for

NS = "gpucluster-burst"

__all__ = ["NS", "ApiServer", "apiserver", "free_port", "wait_for"]


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    with running_apiserver(tmp_path_factory.mktemp("apiserver")) as server:
        client.CoreV1Api(server.api_client).create_namespace(
            client.V1Namespace.model_validate({"metadata": {"name": NS}})
        )
        yield server
