"""The cluster prerequisites check that ``pulumi preview`` and ``pulumi up`` run before any resource.

Reads the cluster the Kubernetes provider will change (``kubernetes:kubeconfig`` or ``KUBECONFIG``, and
``kubernetes:context``): its Nodes' allocatable resources and its CSIDriver objects, then
:func:`components.prerequisites.missing`. A cluster that cannot be read is said so and left to the provider, which
reports its own connection errors; a render (``kubernetes:renderYamlToDirectory``) contacts no cluster and checks
nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from components.config import StackConfig
from components.prerequisites import ClusterFacts, facts_from, missing, requirements

#: How long one list may take: the check must not hang a preview.
READ_TIMEOUT_SECONDS = 15


class ClusterUnreadableError(Exception):
    """The cluster did not answer the check's reads; the message says why, never a credential."""


def api_client(kubeconfig: str | None, context: str | None) -> Any:
    """A Kubernetes API client as the provider would connect: ``kubeconfig`` is a file's path or a document's
    text (``kubernetes:kubeconfig`` takes either); None: ``KUBECONFIG`` or ``~/.kube/config``."""
    from kubernetes import config as untyped  # noqa: PLC0415 (only a preview or an up needs it)

    config: Any = untyped  # its loaders carry no annotations

    try:
        if kubeconfig and not Path(kubeconfig).is_file():
            document = yaml.safe_load(kubeconfig)
            if not isinstance(document, dict):
                raise ClusterUnreadableError("kubernetes:kubeconfig is neither a file nor a kubeconfig document")
            return config.new_client_from_config_dict(document, context=context)
        path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
        return config.new_client_from_config(config_file=path, context=context)
    except ClusterUnreadableError:
        raise
    except Exception as exc:  # the client's errors name files and contexts, never credentials
        raise ClusterUnreadableError(f"cannot load the kubeconfig: {type(exc).__name__}: {str(exc)[:200]}") from None


def read_cluster(client: Any) -> ClusterFacts:
    """Every Node's allocatable resources and every CSIDriver's name."""
    from kubernetes import client as k8s  # noqa: PLC0415 (only a preview or an up needs it)

    try:
        nodes = k8s.CoreV1Api(client).list_node(_request_timeout=READ_TIMEOUT_SECONDS)
        drivers = k8s.StorageV1Api(client).list_csi_driver(_request_timeout=READ_TIMEOUT_SECONDS)
    except Exception as exc:  # unreachable, refused, forbidden: the message names the reason
        reason = getattr(exc, "reason", None) or type(exc).__name__
        status = getattr(exc, "status", None)
        raise ClusterUnreadableError(f"cannot list nodes and CSI drivers: {status or ''} {reason}".strip()) from None
    return facts_from(client.sanitize_for_serialization(nodes), client.sanitize_for_serialization(drivers))


def check(cfg: StackConfig, client: Any) -> list[str]:
    """What the cluster behind ``client`` lacks of what ``cfg`` needs (empty: nothing); ClusterUnreadableError when it
    cannot be read."""
    return missing(requirements(cfg), read_cluster(client))
