"""Traffic to external replicas: pod annotations and EndpointSlices for the Services that select them.

The endpoints controller cannot route to a pod on a virtual node (its IP, if any, is not reachable), so for every
Running external pod in an inference namespace the service writes the replica's address on the pod
(``burst.gpucluster.io/address``, ``.../provider``, ``.../instance-id``) and keeps, for every Service whose selector
matches the pod, one EndpointSlice per (Service, provider) listing the external addresses, each ``ready`` only while
the pod's own probes pass against it (a replica loading its model is listed not ready, as the endpoint slice
controller lists an unready pod). Level-based: each sync
computes the wanted slices from the current records and converges the cluster to them.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from contract.burst_settings import BurstSettings
from contract.constants import BURST_ENDPOINTS_MANAGER, BURST_POD_ANNOTATIONS, ENDPOINT_SLICE_MANAGED_BY_LABEL
from daemons.burst_provider.record import RUNNING, PodRecord
from daemons.burst_provider.source import JsonObject, SourceCluster

log = logging.getLogger("burst_provider.endpoints")

ANNOTATION_ADDRESS, ANNOTATION_PROVIDER, ANNOTATION_INSTANCE = BURST_POD_ANNOTATIONS
MANAGED_BY = BURST_ENDPOINTS_MANAGER
LABEL_SERVICE = "kubernetes.io/service-name"
LABEL_MANAGED_BY = ENDPOINT_SLICE_MANAGED_BY_LABEL
LABEL_NODE = "burst.gpucluster.io/node"
LABEL_PROVIDER = "burst.gpucluster.io/provider"


def address_type(address: str) -> str:
    """IPv4, IPv6, or FQDN for a hostname."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "FQDN"
    return "IPv4" if ip.version == 4 else "IPv6"


def selector_matches(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    """A Service selector matches when non-empty and every pair is among the pod's labels."""
    return bool(selector) and all(labels.get(k) == v for k, v in (selector or {}).items())


def _container_port(pod: Mapping[str, Any], target: object) -> tuple[int, str] | None:
    """The pod's container port a Service targetPort means: (number, protocol); None when a name matches none."""
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in c.get("ports") or []:
            if (isinstance(target, str) and p.get("name") == target) or (
                isinstance(target, int) and p.get("containerPort") == target
            ):
                return int(p["containerPort"]), str(p.get("protocol") or "TCP")
    if isinstance(target, int):
        return target, "TCP"
    return None


def slice_ports(service: Mapping[str, Any], pod: Mapping[str, Any], rec: PodRecord) -> tuple[tuple[str, int, str], ...]:
    """(name, port, protocol) per Service port, the port being where the replica listens.

    A provider that publishes a container port under another number (a port mapping) reports it in the instance's
    ports with the container port's name; such a mapping wins over the container port.
    """
    by_name = {p.name: p for p in rec.ports if p.name}
    out = []
    for sp in (service.get("spec") or {}).get("ports") or []:
        target = sp.get("targetPort", sp.get("port"))
        found = _container_port(pod, target)
        if found is None:
            continue
        number, protocol = found
        container_name = target if isinstance(target, str) else ""
        if container_name and container_name in by_name:
            number = by_name[container_name].port
        out.append((str(sp.get("name") or ""), number, str(sp.get("protocol") or protocol)))
    return tuple(out)


def slice_name(service: str, provider: str, kind: str, ports: Sequence[tuple[str, int, str]]) -> str:
    """``<service>-burst-<provider>-<hash>``, at most 63 characters; the hash covers address type and ports, so
    replicas reachable differently never share a slice."""
    digest = hashlib.sha256(repr((kind, tuple(ports))).encode()).hexdigest()[:6]
    base = f"{service}-burst-{provider}"
    return f"{base[: 63 - 7].rstrip('-')}-{digest}"


class EndpointManager:
    """Keeps annotations and EndpointSlices of external replicas in step with the service's records."""

    def __init__(self, source: SourceCluster, settings: BurstSettings) -> None:
        self.source = source
        self.node = settings.virtual_node.node_name
        self.namespaces = tuple(settings.virtual_node.inference_namespaces)
        self._annotated: dict[str, tuple[str, str, str]] = {}  # uid -> what we last wrote
        self.slices = 0

    def _annotate(self, running: Mapping[str, tuple[PodRecord, JsonObject]], live: Mapping[str, JsonObject]) -> None:
        """Each running replica's annotations, written when the pod as listed lacks them (or, not listed, when they
        were not written yet). The listed pod decides: the virtual kubelet writes a pod's status with the object
        it was given at creation, annotations included, which can take back ones written since; read from the
        pod, they are written again on the next pass."""
        for uid, (rec, _) in running.items():
            want = (rec.address, rec.provider, rec.instance_id)
            if uid in live:
                shown = (live[uid].get("metadata") or {}).get("annotations") or {}
                if (
                    shown.get(ANNOTATION_ADDRESS),
                    shown.get(ANNOTATION_PROVIDER),
                    shown.get(ANNOTATION_INSTANCE),
                ) == want:
                    self._annotated[uid] = want
                    continue
            elif self._annotated.get(uid) == want:
                continue
            self.source.annotate_pod(
                rec.namespace,
                rec.name,
                {
                    ANNOTATION_ADDRESS: rec.address,
                    ANNOTATION_PROVIDER: rec.provider,
                    ANNOTATION_INSTANCE: rec.instance_id,
                },
            )
            self._annotated[uid] = want
        stale = [uid for uid in self._annotated if uid not in running]
        for uid in stale:
            del self._annotated[uid]

    def clear_annotations(self, rec: PodRecord) -> None:
        self.source.annotate_pod(
            rec.namespace, rec.name, {ANNOTATION_ADDRESS: None, ANNOTATION_PROVIDER: None, ANNOTATION_INSTANCE: None}
        )

    def desired_slices(self, running: Mapping[str, tuple[PodRecord, JsonObject]]) -> dict[tuple[str, str], JsonObject]:
        """(namespace, name) -> EndpointSlice for every Service selecting a running external pod."""
        out: dict[tuple[str, str], JsonObject] = {}
        services: dict[str, list[JsonObject]] = {}
        for rec, pod in sorted(running.values(), key=lambda rp: rp[0].key):
            ns = rec.namespace
            if ns not in services:
                services[ns] = self.source.services(ns)
            labels = (pod.get("metadata") or {}).get("labels") or {}
            for svc in services[ns]:
                svc_name = str(svc["metadata"]["name"])
                if not selector_matches((svc.get("spec") or {}).get("selector"), labels):
                    continue
                ports = slice_ports(svc, pod, rec)
                kind = address_type(rec.address)
                name = slice_name(svc_name, rec.provider, kind, ports)
                es = out.setdefault(
                    (ns, name),
                    self._new_slice(ns, name, service=svc_name, provider=rec.provider, kind=kind, ports=ports),
                )
                es["endpoints"].append(
                    {
                        "addresses": [rec.address],
                        # Ready only once the pod's own probes pass against the instance (service.probe_once):
                        # a replica still loading its model is listed, and gets no traffic. A deleted replica
                        # draining through its preStop sleep is terminating: traffic goes to it only when no
                        # other endpoint is ready, as for any terminating pod.
                        "conditions": {
                            "ready": rec.ready and not rec.draining,
                            "serving": rec.ready,
                            "terminating": rec.draining,
                        },
                        "nodeName": self.node,
                        "targetRef": {"kind": "Pod", "namespace": ns, "name": rec.name, "uid": rec.uid},
                    }
                )
        return out

    def _new_slice(
        self, ns: str, name: str, *, service: str, provider: str, kind: str, ports: Sequence[tuple[str, int, str]]
    ) -> JsonObject:
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {
                    LABEL_SERVICE: service,
                    LABEL_MANAGED_BY: MANAGED_BY,
                    LABEL_NODE: self.node,
                    LABEL_PROVIDER: provider,
                },
            },
            "addressType": kind,
            "endpoints": [],
            "ports": [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports],
        }

    def sync(self, records: Sequence[PodRecord], live_pods: Sequence[JsonObject] | None) -> int:
        """Converge annotations and slices; returns the number of slices kept. `live_pods` (the node's pods from
        the source cluster) supplies labels for records rebuilt after a restart; None: use the records' copies."""
        pods_by_uid = {str((p.get("metadata") or {}).get("uid")): p for p in live_pods or []}
        running: dict[str, tuple[PodRecord, JsonObject]] = {}
        for rec in records:
            if rec.phase != RUNNING or not rec.address or rec.namespace not in self.namespaces:
                continue
            if rec.deleting and not rec.draining:
                continue
            pod = pods_by_uid.get(rec.uid) or rec.pod
            if live_pods is not None and rec.uid not in pods_by_uid and not rec.draining:
                continue  # the pod is gone or terminal in the source cluster: no traffic to it
            if not pod:
                # Rebuilt after a restart, its pod not read yet: which Services select it is unknown, and dropping
                # its addresses would cut serving replicas off. The slices stay as they are (fail-static).
                log.info("endpoint sync skipped: a rebuilt replica's pod is not known yet", extra={"pod": rec.key})
                return self.slices
            running[rec.uid] = (rec, pod)
        self._annotate(running, pods_by_uid)
        desired = self.desired_slices(running)
        total = len(desired)
        selector = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_NODE: self.node}
        for ns in self.namespaces:
            for existing in self.source.endpoint_slices(ns, selector):
                key = (ns, str(existing["metadata"]["name"]))
                want = desired.get(key)
                if want is None:
                    self.source.delete_endpoint_slice(*key)
                    log.info("endpoint slice deleted", extra={"slice": "/".join(key)})
                elif _same(existing, want):
                    del desired[key]  # already as wanted: nothing to write
        for key, es in desired.items():
            self.source.apply_endpoint_slice(es)
            log.info("endpoint slice applied", extra={"slice": "/".join(key), "endpoints": len(es["endpoints"])})
        self.slices = total
        return total


def _same(existing: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    def norm(es: Mapping[str, Any]) -> tuple[Any, ...]:
        labels = ((es.get("metadata") or {}).get("labels")) or {}
        eps = [
            (
                tuple(e.get("addresses") or []),
                bool((e.get("conditions") or {}).get("ready")),
                bool((e.get("conditions") or {}).get("serving")),
                bool((e.get("conditions") or {}).get("terminating")),
                ((e.get("targetRef") or {}).get("uid")),
            )
            for e in es.get("endpoints") or []
        ]
        ports = [(p.get("name") or "", p.get("port"), p.get("protocol") or "TCP") for p in es.get("ports") or []]
        return (es.get("addressType"), sorted(eps), sorted(ports), tuple(sorted(labels.items())))

    return norm(existing) == norm(want)
