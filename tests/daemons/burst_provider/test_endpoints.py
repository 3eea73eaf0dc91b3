"""EndpointSlices and pod annotations for Running external replicas."""

from __future__ import annotations

from typing import Any

from daemons.burst_provider.endpoints import EndpointManager, address_type, slice_name
from daemons.burst_provider.providers.base import InstanceState
from daemons.burst_provider.service import BurstService
from tests.daemons.burst_provider.support import FakeSource, MemoryProvider, make_pod, rig


def service(name: str, selector: dict[str, str], target: Any = "http", ns: str = "inference") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"selector": selector, "ports": [{"name": "web", "port": 80, "targetPort": target, "protocol": "TCP"}]},
    }


#: What the test resolver answers for a host name a provider reports (no DNS is asked).
RESOLVED = {"abc-8080.proxy.example.net": ["203.0.113.9"]}


def running(
    source: FakeSource, *pods: dict[str, Any], address: str = ""
) -> tuple[BurstService, EndpointManager, MemoryProvider]:
    r = rig(source=source, address_resolver=lambda host: RESOLVED[host])
    for pod in pods:
        source.pods.append(pod)
        r.svc.create_pod(pod)
    r.spawn.run_all()
    for iid in r.provider.created:
        r.provider.set_state(iid, InstanceState.RUNNING, address=address)
    r.svc.poll_once()
    return r.svc, EndpointManager(source, r.svc.settings), r.provider


def test_slice_for_a_matching_service() -> None:
    source = FakeSource()
    source.svcs["inference"] = [service("web", {"app": "web"}), service("other", {"app": "db"})]
    svc, em, _ = running(source, make_pod("web-1"), make_pod("web-2"))
    assert em.sync(svc.records(), source.pods) == 1
    ((key, es),) = source.slices.items()
    assert key[0] == "inference"
    assert es["apiVersion"] == "discovery.k8s.io/v1"
    assert es["addressType"] == "IPv4"
    assert es["metadata"]["labels"]["kubernetes.io/service-name"] == "web"
    assert es["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "burst.gpucluster.io"
    assert es["ports"] == [{"name": "web", "port": 8080, "protocol": "TCP"}]
    assert [e["addresses"] for e in es["endpoints"]] == [["203.0.113.1"], ["203.0.113.2"]]
    first = es["endpoints"][0]
    assert first["conditions"]["ready"] is True
    assert first["targetRef"] == {"kind": "Pod", "namespace": "inference", "name": "web-1", "uid": "uid-web-1"}
    assert source.annotations[("inference", "web-1")] == {
        "burst.gpucluster.io/address": "203.0.113.1",
        "burst.gpucluster.io/provider": "fake-a",
        "burst.gpucluster.io/instance-id": "fake-a-i1",
    }


def test_second_sync_writes_nothing() -> None:
    source = FakeSource()
    source.svcs["inference"] = [service("web", {"app": "web"})]
    svc, em, _ = running(source, make_pod())
    em.sync(svc.records(), source.pods)
    em.sync(svc.records(), source.pods)
    assert source.applied == 1


def test_annotations_taken_back_are_written_again_and_ones_in_place_are_not() -> None:
    """The virtual kubelet writes a pod's status with the object it was given at creation: that write can take back
    the annotations written since. The pod as listed decides, so the next sync writes them again."""
    source = FakeSource()
    source.svcs["inference"] = [service("web", {"app": "web"})]
    svc, em, _ = running(source, make_pod("web-1"))
    em.sync(svc.records(), source.pods)
    assert source.annotate_calls == 1
    em.sync(svc.records(), source.pods)
    assert source.annotate_calls == 1  # in place: nothing written
    source.pods[0]["metadata"]["annotations"] = {}  # the status write with the creation-time object
    em.sync(svc.records(), source.pods)
    assert source.annotate_calls == 2
    assert source.pods[0]["metadata"]["annotations"]["burst.gpucluster.io/address"] == "203.0.113.1"
    # without the listing (it failed), what was written is trusted: nothing is written blind every pass
    em.sync(svc.records(), None)
    assert source.annotate_calls == 2


def test_endpoint_removed_when_the_pod_stops_running() -> None:
    source = FakeSource()
    source.svcs["inference"] = [service("web", {"app": "web"})]
    svc, em, p = running(source, make_pod())
    em.sync(svc.records(), source.pods)
    assert len(source.slices) == 1
    p.set_state(p.created[0], InstanceState.FAILED, exit_code=1)
    svc.poll_once()
    assert em.sync(svc.records(), source.pods) == 0
    assert source.slices == {}


def test_a_host_name_is_resolved_and_its_checked_address_is_the_endpoint() -> None:
    """kube-proxy routes no FQDN EndpointSlice, and a name could be rebound after the check: the slice holds the
    address the name resolved to, the one that was judged."""
    source = FakeSource()
    source.svcs["inference"] = [service("web", {"app": "web"}, target=8080)]
    svc, em, _ = running(source, make_pod(), address="abc-8080.proxy.example.net")
    em.sync(svc.records(), source.pods)
    (es,) = source.slices.values()
    assert es["addressType"] == "IPv4"
    assert es["endpoints"][0]["addresses"] == ["203.0.113.9"]
    assert es["ports"][0]["port"] == 8080


def test_no_slice_outside_inference_namespaces_or_without_a_match() -> None:
    source = FakeSource()
    source.svcs["inference"] = [service("web", {"app": "other"}), service("all", {})]
    svc, em, _ = running(source, make_pod())
    assert em.sync(svc.records(), source.pods) == 0
    assert source.slices == {}


def test_pod_gone_from_the_source_gets_no_endpoint() -> None:
    source = FakeSource()
    source.svcs["inference"] = [service("web", {"app": "web"})]
    svc, em, _ = running(source, make_pod())
    source.pods.clear()
    assert em.sync(svc.records(), source.pods) == 0


def test_helpers() -> None:
    assert address_type("10.0.0.1") == "IPv4"
    assert address_type("2001:db8::1") == "IPv6"
    assert address_type("host.example.com") == "FQDN"
    name = slice_name("a" * 60, "provider-with-long-name", "IPv4", [("web", 80, "TCP")])
    assert len(name) <= 63
    assert name != slice_name("a" * 60, "provider-with-long-name", "FQDN", [("web", 80, "TCP")])
