"""What every Kubernetes call of the daemons shares: the errors it raises and the client it is made on.

:class:`KubeError` and :class:`ConflictError` are what every call raises, whatever client made it;
:func:`api_error` maps the official client's ``ApiException`` onto them (a failed JSON-patch ``test`` is a
conflict, a validation error is not). :func:`load_kube_config` gives the ``ApiClient`` from a kubeconfig or the
pod's service account. Leader election (``lease``) and the raw JSON calls (``kube_api``) both build on this.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes import config as _untyped_config

#: The config loaders carry no annotations; one Any keeps strict mypy quiet at the call sites.
_kube_config: Any = _untyped_config


class KubeError(Exception):
    """An API call failed (unreachable, forbidden, server error)."""


class ConflictError(KubeError):
    """Optimistic concurrency lost: the object changed (409, or a failed JSON-patch test)."""


def _has_causes(body: object) -> bool:
    """Whether a Status body names the fields that failed validation."""
    try:
        status = json.loads(body) if isinstance(body, str | bytes) else {}
    except ValueError:
        return True
    details = status.get("details") if isinstance(status, dict) else None
    return bool(isinstance(details, dict) and details.get("causes"))


def api_error(exc: Exception, what: str) -> KubeError:
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or str(exc)
    if status == 409:
        return ConflictError(f"{what}: conflict ({reason})")
    if status == 422 and not _has_causes(getattr(exc, "body", None)):
        # A JSON patch that cannot be applied (a failed test op) is 422 Invalid without field causes;
        # a real validation error lists its causes and stays a KubeError.
        return ConflictError(f"{what}: the object changed since it was read")
    return KubeError(f"{what}: HTTP {status}: {reason}" if status else f"{what}: {reason}")


def load_kube_config(kubeconfig: str | None) -> Any:
    """An ApiClient from ``kubeconfig``, else the in-cluster service account, else ~/.kube/config."""
    if kubeconfig:
        return _kube_config.new_client_from_config(config_file=kubeconfig)
    try:
        _kube_config.load_incluster_config()
        return client.ApiClient()
    except _kube_config.ConfigException:
        return _kube_config.new_client_from_config()
