"""The target cluster's API: the few CoreV1 calls the provider makes, as API JSON, every failure a ProviderError.

Errors from the API (status, reason, the server's message) and connection failures become `KubernetesApiError`s
naming the provider and the call; the kubeconfig's contents never appear in them. Every answer is read up to a
size limit and must be a JSON object; the pods and nodes in it are checked for the shape the provider reads
(`check_pod`, `check_node`), so a malformed answer is refused with the field it got wrong.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import urllib3
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from daemons.burst_provider import replies
from daemons.burst_provider.providers.base import ProviderError
from daemons.burst_provider.providers.kubernetes.state import check_node, check_object, check_pod
from daemons.burst_provider.providers.kubernetes.translate import ObjectKind
from daemons.burst_provider.replies import ReplyError, read_capped

#: (connect, read) seconds for every API call, so a dead cluster cannot hang the service's threads.
DEFAULT_REQUEST_TIMEOUT = (5.0, 30.0)
#: Most bytes of one answer read (a cluster-wide pod listing of a large cluster fits; more is refused).
REPLY_LIMIT = 64 * 1024 * 1024
_ERROR_BODY_LIMIT = 64 * 1024


class KubernetesApiError(ProviderError):
    """A call to the target cluster's API failed; `status` is the HTTP status (None: not reached)."""

    def __init__(self, provider: str, call: str, detail: str, status: int | None) -> None:
        super().__init__(provider, call, detail)
        self.status = status


def api_client_from_kubeconfig(provider: str, text: str) -> Any:
    """An ApiClient for a kubeconfig's current context. Errors name what is wrong, never the contents."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise ProviderError(provider, "kubeconfig", f"not valid YAML{where}") from None
    if not isinstance(data, dict):
        raise ProviderError(provider, "kubeconfig", "not a kubeconfig (expected a YAML mapping)")
    configuration = k8s_client.Configuration()
    try:
        load: Callable[..., None] = k8s_config.load_kube_config_from_dict
        load(data, client_configuration=configuration)
    except (k8s_config.ConfigException, KeyError, TypeError, ValueError) as exc:
        raise ProviderError(provider, "kubeconfig", f"cannot be used: {type(exc).__name__}") from None
    return k8s_client.ApiClient(configuration)


class KubeApi:
    """The few CoreV1 calls the provider makes, returning API JSON; every failure is a `KubernetesApiError`."""

    def __init__(self, provider: str, api_client: Any, timeout: tuple[float, float]) -> None:
        self._provider = provider
        self._core = k8s_client.CoreV1Api(api_client)
        self._timeout = timeout
        self._host = str(getattr(getattr(api_client, "configuration", None), "host", "?"))

    def _raw(
        self, call: str, method: str, *args: Any, missing_ok: bool = False, truncate: bool = False, **kwargs: Any
    ) -> bytes | None:
        """The answer's body, at most `REPLY_LIMIT` bytes (more is refused, or cut off with ``truncate``)."""
        try:
            resp = getattr(self._core, method)(*args, _preload_content=False, _request_timeout=self._timeout, **kwargs)
        except ApiException as exc:
            if missing_ok and exc.status == 404:
                return None
            raise KubernetesApiError(self._provider, call, _api_detail(exc), exc.status) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            detail = f"cannot reach the API server at {self._host}: {type(exc).__name__}: {str(exc)[:300]}"
            raise KubernetesApiError(self._provider, call, detail, None) from None
        try:
            if truncate:
                return bytes(resp.read(REPLY_LIMIT))
            return read_capped(resp, REPLY_LIMIT)
        except ReplyError as exc:
            raise KubernetesApiError(self._provider, call, f"the API server's answer: {exc}", None) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            detail = f"the answer from {self._host} was cut off: {type(exc).__name__}"
            raise KubernetesApiError(self._provider, call, detail, None) from None
        finally:
            release = getattr(resp, "release_conn", None)
            if callable(release):
                release()

    def _json(self, call: str, method: str, *args: Any, missing_ok: bool = False, **kwargs: Any) -> dict[str, Any]:
        raw = self._raw(call, method, *args, missing_ok=missing_ok, **kwargs)
        if raw is None:
            return {}
        try:
            return replies.obj(replies.decode_json(raw, "the API server's answer"), "the API server's answer")
        except ReplyError as exc:
            raise KubernetesApiError(self._provider, call, str(exc), None) from None

    def _checked(self, call: str, check: Callable[[object, str], dict[str, Any]], value: object) -> dict[str, Any]:
        try:
            return check(value, "reply")
        except ReplyError as exc:
            raise KubernetesApiError(self._provider, call, str(exc), None) from None

    def _items(
        self, call: str, data: Mapping[str, Any], check: Callable[[object, str], dict[str, Any]]
    ) -> list[dict[str, Any]]:
        try:
            found = replies.opt_items(data.get("items"), "reply.items")
            return [check(item, f"reply.items[{i}]") for i, item in enumerate(found)]
        except ReplyError as exc:
            raise KubernetesApiError(self._provider, call, str(exc), None) from None

    def read_pod(self, call: str, namespace: str, name: str) -> dict[str, Any] | None:
        pod = self._json(call, "read_namespaced_pod", name, namespace, missing_ok=True)
        return self._checked(call, check_pod, pod) if pod else None

    def create_pod(self, call: str, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._checked(call, check_pod, self._json(call, "create_namespaced_pod", namespace, dict(body)))

    def delete_pod(self, call: str, namespace: str, name: str, grace_seconds: int) -> None:
        self._raw(call, "delete_namespaced_pod", name, namespace, grace_period_seconds=grace_seconds, missing_ok=True)

    def list_pods(
        self, call: str, namespace: str | None = None, label_selector: str = "", field_selector: str = ""
    ) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = {"label_selector": label_selector, "field_selector": field_selector}
        if namespace is None:
            data = self._json(call, "list_pod_for_all_namespaces", **kwargs)
        else:
            data = self._json(call, "list_namespaced_pod", namespace, **kwargs)
        return self._items(call, data, check_pod)

    def list_nodes(self, call: str) -> list[dict[str, Any]]:
        return self._items(call, self._json(call, "list_node"), check_node)

    def namespace_exists(self, call: str, name: str) -> bool | None:
        """True or False; None when this identity may not read namespaces (the create then tells)."""
        try:
            return self._raw(call, "read_namespace", name, missing_ok=True) is not None
        except KubernetesApiError as exc:
            if exc.status == 403:
                return None
            raise

    def read_object(self, call: str, kind: ObjectKind, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self._json(call, f"read_namespaced_{_method_suffix(kind)}", name, namespace, missing_ok=True)
        return self._checked(call, check_object, obj) if obj else None

    def create_object(self, call: str, kind: ObjectKind, namespace: str, body: Mapping[str, Any]) -> None:
        self._raw(call, f"create_namespaced_{_method_suffix(kind)}", namespace, dict(body))

    def replace_object(self, call: str, kind: ObjectKind, namespace: str, body: Mapping[str, Any]) -> None:
        name = body["metadata"]["name"]
        self._raw(call, f"replace_namespaced_{_method_suffix(kind)}", name, namespace, dict(body))

    def delete_object(self, call: str, kind: ObjectKind, namespace: str, name: str) -> None:
        self._raw(call, f"delete_namespaced_{_method_suffix(kind)}", name, namespace, missing_ok=True)

    def list_objects(self, call: str, kind: ObjectKind, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        data = self._json(call, f"list_namespaced_{_method_suffix(kind)}", namespace, label_selector=label_selector)
        return self._items(call, data, check_object)

    def pod_log(self, call: str, namespace: str, name: str, container: str, tail: int | None) -> str:
        kwargs: dict[str, Any] = {}
        if container:
            kwargs["container"] = container
        if tail is not None:
            kwargs["tail_lines"] = tail
        raw = self._raw(call, "read_namespaced_pod_log", name, namespace, truncate=True, **kwargs)
        return (raw or b"").decode("utf-8", errors="replace")


def _method_suffix(kind: ObjectKind) -> str:
    return "config_map" if kind == "ConfigMap" else "secret"


def _api_detail(exc: ApiException) -> str:
    """Status, reason and the server's own message (a Status object's `message`), never request contents."""
    message = ""
    try:
        body = json.loads(exc.body[:_ERROR_BODY_LIMIT]) if exc.body else {}
        if isinstance(body, dict):
            message = str(body.get("message", ""))
    except (TypeError, ValueError, RecursionError):
        message = ""
    return f"HTTP {exc.status} {exc.reason}" + (f": {message[:500]}" if message else "")
