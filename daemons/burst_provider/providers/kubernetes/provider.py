"""Another Kubernetes cluster as a burst provider: each burst pod becomes one pod there.

How a pod is translated is in `translate.py`, how a target pod's state and the target's free GPUs are read in
`state.py`, the calls to the target cluster in `api.py`. This module puts them together: placement settings,
creating a pod with its copies, idempotent re-creates, the sweep of copies no pod needs any more, listings across
the mapped namespaces, offers.

ConfigMaps and Secrets a pod references are read from the source cluster through the `AdapterContext`'s source
reader and copied under the same name; `delete_instance` deletes the pod, then every copy in that namespace that no
live (not terminating) pod of the same node references any more. Creating copies and sweeping them are serialised
within one provider object.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from daemons.burst_provider.providers.base import (
    AdapterContext,
    Instance,
    InstanceSpec,
    InstanceTags,
    Offer,
    Provider,
    ProviderError,
    ProviderSettingsLike,
    SourceReader,
)
from daemons.burst_provider.providers.kubernetes.api import (
    DEFAULT_REQUEST_TIMEOUT,
    KubeApi,
    KubernetesApiError,
    api_client_from_kubeconfig,
)
from daemons.burst_provider.providers.kubernetes.state import (
    free_gpus,
    instance_from_pod,
    parse_instance_id,
    pod_gpu_request,
    tags_of,
    terminal,
)
from daemons.burst_provider.providers.kubernetes.translate import (
    COPY_LABEL,
    NODE_LABEL,
    ObjectKind,
    ObjectRef,
    Translation,
    TranslationError,
    copy_object,
    label_value,
    referenced_objects,
    toleration_dict,
    translate_pod,
)

DEFAULT_GRACE_PERIOD_SECONDS = 30


@dataclass(frozen=True)
class ClusterPlacement:
    """Where and how burst pods land in the target cluster."""

    namespace_map: Mapping[str, str]
    node_selector: Mapping[str, str]
    tolerations: tuple[Mapping[str, Any], ...]
    service_account: str = "default"


class KubernetesClusterProvider(Provider):
    """Runs burst pods as pods of another Kubernetes cluster (see translate.py and state.py for the rules).

    The registry builds it with `from_settings` (the kubeconfig is the secret that
    ``settings.kubernetes.kubeconfigSecret`` names, the source reader the context's); the constructor takes plain
    values: `api` is a kubernetes ApiClient or a kubeconfig's text, `gpu_types` maps our GPU type to its price per
    GPU-hour.
    """

    def __init__(
        self,
        name: str,
        api: Any,
        gpu_types: Mapping[str, float],
        *,
        max_gpus: int,
        namespace_map: Mapping[str, str] | None = None,
        node_selector: Mapping[str, str] | None = None,
        tolerations: Sequence[object] = (),
        service_account: str = "default",
        source_reader: SourceReader | None = None,
        grace_period_seconds: int = DEFAULT_GRACE_PERIOD_SECONDS,
        request_timeout: tuple[float, float] = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        self.name = name
        api_client = api_client_from_kubeconfig(name, api) if isinstance(api, str) else api
        self._api = KubeApi(name, api_client, request_timeout)
        self._prices = dict(gpu_types)
        self._max_gpus = max_gpus
        self._placement = ClusterPlacement(
            namespace_map=dict(namespace_map or {}),
            node_selector=dict(node_selector or {}),
            tolerations=tuple(toleration_dict(t) for t in tolerations),
            service_account=service_account,
        )
        self._source = source_reader
        self._grace = grace_period_seconds
        # Copies are shared between pods: creating one pod's copies and sweeping unreferenced ones must not
        # interleave within this process.
        self._copies_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: ProviderSettingsLike, context: AdapterContext) -> KubernetesClusterProvider:
        k = settings.kubernetes
        if k is None:
            raise ProviderError(settings.name, "settings", "kind kubernetes needs a kubernetes: block")
        try:
            kubeconfig = context.secrets.get(k.kubeconfig_secret)
        except LookupError:
            raise ProviderError(
                settings.name, "settings", f"the kubeconfig secret {k.kubeconfig_secret!r} is not available"
            ) from None
        return cls(
            settings.name,
            kubeconfig,
            {gpu: t.price_per_gpu_hour for gpu, t in settings.gpu_types.items()},
            max_gpus=settings.max_gpus,
            namespace_map=k.namespace_map,
            node_selector=k.node_selector,
            tolerations=k.tolerations,
            source_reader=context.source,
        )

    def _error(self, call: str, detail: str) -> ProviderError:
        return ProviderError(self.name, call, detail)

    def translate(self, spec: InstanceSpec) -> Translation:
        """The target pod for `spec` under this provider's placement settings."""
        if not spec.pod:
            raise self._error("create_instance", f"{spec.tags.key()}: the source pod is missing from the request")
        try:
            return translate_pod(
                spec.pod,
                spec.tags,
                namespace_map=self._placement.namespace_map,
                node_selector=self._placement.node_selector,
                tolerations=self._placement.tolerations,
                service_account=self._placement.service_account,
                gpu_type=spec.gpu_type,
                gpu_count=spec.gpu_count,
            )
        except TranslationError as exc:
            raise self._error("create_instance", str(exc)) from None

    def create_instance(self, spec: InstanceSpec) -> Instance:
        call = "create_instance"
        t = self.translate(spec)
        if self._api.namespace_exists(call, t.namespace) is False:
            raise self._error(
                call, f"target namespace {t.namespace} (for source namespace {spec.tags.namespace}) does not exist"
            )
        with self._copies_lock:
            for ref in t.refs:
                self._copy(call, ref, spec.tags, t.namespace)
            try:
                created = self._api.create_pod(call, t.namespace, t.pod)
            except KubernetesApiError as exc:
                if exc.status != 409:
                    self._sweep_after_failure(call, t.namespace)
                    raise
                created = self._existing(call, t, spec.tags)
        inst = instance_from_pod(self.name, created)
        if inst is None:
            raise self._error(call, f"pod {t.namespace}/{t.name} came back without its tags")
        return inst

    def _sweep_after_failure(self, call: str, namespace: str) -> None:
        """Remove copies a refused pod would have used; the refusal, not a sweep problem, is what gets reported."""
        try:
            self._sweep_copies(call, namespace)
        except ProviderError:
            return

    def _existing(self, call: str, t: Translation, tags: InstanceTags) -> dict[str, Any]:
        """Creating again is idempotent: the pod of the same source uid is the instance."""
        pod = self._api.read_pod(call, t.namespace, t.name)
        found = tags_of(pod) if pod else None
        if pod is None or found is None or found.uid != tags.uid:
            raise self._error(call, f"pod {t.namespace}/{t.name} exists and belongs to something else")
        return pod

    def _read_source(self, call: str, ref: ObjectRef, namespace: str) -> Mapping[str, str] | None:
        if self._source is None:
            raise self._error(call, f"the pod references {ref.kind} {namespace}/{ref.name} but no source reader is set")
        try:
            if ref.kind == "ConfigMap":
                return self._source.config_map(namespace, ref.name)
            return self._source.secret(namespace, ref.name)
        except LookupError:
            return None
        except Exception as exc:  # the reader's client library raises its own types; name it, keep the message
            raise self._error(
                call, f"cannot read {ref.kind} {namespace}/{ref.name} from the source cluster: {type(exc).__name__}"
            ) from None

    def _copy(self, call: str, ref: ObjectRef, tags: InstanceTags, namespace: str) -> None:
        """Create or replace the target copy of one referenced object (never one this node did not copy)."""
        source = self._read_source(call, ref, tags.namespace)
        if source is None:
            if ref.optional:
                return
            raise self._error(call, f"{ref.kind} {tags.namespace}/{ref.name} referenced by the pod does not exist")
        try:
            body = copy_object(ref.kind, ref.name, source, namespace, tags)
        except TranslationError as exc:
            raise self._error(call, str(exc)) from None
        existing = self._api.read_object(call, ref.kind, namespace, ref.name)
        if existing is None:
            try:
                self._api.create_object(call, ref.kind, namespace, body)
                return
            except KubernetesApiError as exc:
                if exc.status != 409:
                    raise
            existing = self._api.read_object(call, ref.kind, namespace, ref.name) or {}
        labels = (existing.get("metadata") or {}).get("labels") or {}
        if labels.get(COPY_LABEL) != "true" or labels.get(NODE_LABEL) != label_value(tags.node):
            raise self._error(
                call,
                f"{ref.kind} {namespace}/{ref.name} exists in the target and is not this node's copy: not replaced",
            )
        if all(existing.get(k) == body.get(k) for k in ("data", "binaryData", "type")) and not body.get("stringData"):
            return
        body["metadata"]["resourceVersion"] = (existing.get("metadata") or {}).get("resourceVersion")
        self._api.replace_object(call, ref.kind, namespace, body)

    def get_instance(self, instance_id: str) -> Instance | None:
        namespace, name = self._parse("get_instance", instance_id)
        pod = self._api.read_pod("get_instance", namespace, name)
        return instance_from_pod(self.name, pod) if pod else None

    def delete_instance(self, instance_id: str) -> None:
        call = "delete_instance"
        namespace, name = self._parse(call, instance_id)
        self._api.delete_pod(call, namespace, name, self._grace)
        with self._copies_lock:
            self._sweep_copies(call, namespace)

    def _sweep_copies(self, call: str, namespace: str) -> None:
        """Delete this namespace's copies that no live pod of the node that copied them references any more."""
        live: set[tuple[str, str, str]] = set()
        for pod in self._api.list_pods(call, namespace, label_selector=NODE_LABEL):
            meta = pod.get("metadata") or {}
            if meta.get("deletionTimestamp") or terminal(pod):
                continue
            node = (meta.get("labels") or {}).get(NODE_LABEL, "")
            live.update((node, r.kind, r.name) for r in referenced_objects(pod.get("spec") or {}))
        kinds: tuple[ObjectKind, ...] = ("ConfigMap", "Secret")
        for kind in kinds:
            for obj in self._api.list_objects(call, kind, namespace, f"{COPY_LABEL}=true"):
                meta = obj.get("metadata") or {}
                node = (meta.get("labels") or {}).get(NODE_LABEL, "")
                if (node, kind, meta.get("name", "")) not in live:
                    self._api.delete_object(call, kind, namespace, str(meta.get("name")))

    def list_instances(self, node: str) -> list[Instance]:
        call = "list_instances"
        selector = f"{NODE_LABEL}={label_value(node)}"
        pods = self._in_target_namespaces(call, lambda ns: self._api.list_pods(call, ns, label_selector=selector))
        found = (instance_from_pod(self.name, p) for p in pods)
        return sorted(
            (i for i in found if i is not None and i.tags.node == label_value(node)), key=lambda i: i.instance_id
        )

    def _in_target_namespaces(
        self, call: str, list_in: Callable[[str | None], list[dict[str, Any]]]
    ) -> list[dict[str, Any]]:
        """List across all namespaces, or across the mapped ones when this identity may not list cluster-wide."""
        try:
            return list_in(None)
        except KubernetesApiError as exc:
            if exc.status != 403 or not self._placement.namespace_map:
                raise
        return [p for ns in sorted(set(self._placement.namespace_map.values())) for p in list_in(ns)]

    def offers(self) -> list[Offer]:
        call = "offers"
        nodes = self._api.list_nodes(call)
        pods = self._api.list_pods(call, field_selector="status.phase!=Succeeded,status.phase!=Failed")
        free = free_gpus(nodes, pods, self._placement.node_selector, self._placement.tolerations)
        ours = sum(pod_gpu_request(p) for p in pods if NODE_LABEL in ((p.get("metadata") or {}).get("labels") or {}))
        available = max(0, min(free, self._max_gpus - ours))
        return [
            Offer(gpu_type=g, price_per_gpu_hour=price, available_gpus=available) for g, price in self._prices.items()
        ]

    def logs(self, instance_id: str, container: str, tail: int | None) -> str:
        namespace, name = self._parse("logs", instance_id)
        return self._api.pod_log("logs", namespace, name, container, tail)

    def _parse(self, call: str, instance_id: str) -> tuple[str, str]:
        try:
            return parse_instance_id(instance_id)
        except ValueError as exc:
            raise self._error(call, str(exc)) from None
