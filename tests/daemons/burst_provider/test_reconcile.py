"""Reconciliation: orphans deleted, records rebuilt after a restart, vanished instances fail their pods."""

from __future__ import annotations

from daemons.burst_provider.providers.base import Instance, InstanceState, InstanceTags
from daemons.burst_provider.reconcile import Reconciler
from tests.daemons.burst_provider.support import (
    FakeSource,
    MemoryProvider,
    Rig,
    make_pod,
    make_settings,
    provider_entry,
    rig,
)


def reconciled(provider: MemoryProvider, source: FakeSource) -> tuple[Rig, Reconciler]:
    r = rig(provider, source=source)
    return r, Reconciler(r.svc, source, timer=r.clock)


def tagged(uid: str, state: InstanceState, node: str = "gpu-burst", iid: str = "") -> Instance:
    return Instance(
        provider="fake-a",
        instance_id=iid or f"old-{uid}",
        tags=InstanceTags(node=node, namespace="inference", pod=f"pod-{uid}", uid=uid),
        state=state,
        gpu_type="H100",
        gpu_count=1,
        address="198.51.100.9" if state is InstanceState.RUNNING else "",
    )


def test_orphan_instance_is_deleted_and_live_ones_are_kept() -> None:
    p = MemoryProvider("fake-a")
    source = FakeSource()
    p.add(tagged("live", InstanceState.RUNNING))
    p.add(tagged("gone", InstanceState.RUNNING))
    p.add(tagged("other-node", InstanceState.RUNNING, node="another"))
    source.pods.append(make_pod("pod-live", uid="live"))
    r, rec = reconciled(p, source)
    report = rec.run_once()
    assert report.orphans_deleted == ["fake-a/old-gone"]
    assert p.deleted == ["old-gone"]
    assert "old-other-node" in p.instances  # another node's instance is none of our business
    metric = r.svc.metrics.registry.get_sample_value("gpucluster_burst_orphans_deleted_total", {"provider": "fake-a"})
    assert metric == 1.0


def test_nothing_is_deleted_when_the_pods_cannot_be_listed() -> None:
    p = MemoryProvider("fake-a")
    source = FakeSource()
    source.list_error = "apiserver down"
    p.add(tagged("gone", InstanceState.RUNNING))
    _, rec = reconciled(p, source)
    report = rec.run_once()
    assert report.live_pods is None
    assert p.deleted == []


def test_restart_rebuilds_records_from_listings_before_ready() -> None:
    p = MemoryProvider("fake-a")
    p.add(tagged("u1", InstanceState.RUNNING))
    p.add(tagged("u2", InstanceState.CREATING))
    p.add(tagged("u3", InstanceState.FAILED))
    p.add(tagged("u4", InstanceState.TERMINATED))
    r, rec = reconciled(p, FakeSource())
    assert not rec.ready.is_set()
    assert rec.startup()
    # Not listed until their pods are known (the node keeps their statuses and posts them again).
    assert r.svc.list_pods() == []
    by_name = {r.name: r.status() for r in r.svc.records()}
    assert set(by_name) == {"pod-u1", "pod-u2", "pod-u3"}
    assert (by_name["pod-u1"]["phase"], by_name["pod-u1"]["address"]) == ("Running", "198.51.100.9")
    assert by_name["pod-u2"]["phase"] == "Pending"
    assert (by_name["pod-u3"]["phase"], by_name["pod-u3"]["reason"]) == ("Failed", "InstanceDied")
    assert r.svc.used_gpus() == {"fake-a": 3}  # the dead instance holds its GPUs until deleted
    r.spawn.run_all()
    assert p.deleted == ["old-u3"]
    assert r.svc.used_gpus() == {"fake-a": 2}
    # the node's POST after the restart finds the record and creates nothing
    status = r.svc.create_pod(make_pod("pod-u1", uid="u1"))
    assert status["phase"] == "Running"
    assert status["containers"][0]["name"] == "server"
    assert p.created == []
    assert [s["name"] for s in r.svc.list_pods()] == ["pod-u1"]


def test_not_ready_while_a_provider_cannot_list() -> None:
    p = MemoryProvider("fake-a")
    p.list_error = "timeout"
    _, rec = reconciled(p, FakeSource())
    assert not rec.startup()
    rec.run_once()
    assert not rec.ready.is_set()
    p.list_error = None
    rec.run_once()
    assert rec.ready.is_set()


def test_ready_after_the_startup_grace_even_if_a_provider_stays_down() -> None:
    p = MemoryProvider("fake-a")
    p.list_error = "timeout"
    r = rig(p)
    rec = Reconciler(r.svc, None, timer=r.clock, startup_grace=60)
    rec.run_once()
    assert not rec.ready.is_set()
    r.clock.advance(61)
    rec.run_once()
    assert rec.ready.is_set()


def test_record_whose_instance_left_the_listing_fails_as_vanished() -> None:
    p = MemoryProvider("fake-a")
    source = FakeSource()
    r, rec = reconciled(p, source)
    rec.startup()
    pod = make_pod()
    source.pods.append(pod)
    r.submit(pod)
    (iid,) = p.created
    r.clock.advance(1)
    p.vanish(iid)
    report = rec.run_once()
    assert report.vanished == ["inference/web-1/uid-web-1"]
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "InstanceVanished")


def test_instance_assigned_during_the_listing_is_not_vanished() -> None:
    p = MemoryProvider("fake-a")
    source = FakeSource()
    r, rec = reconciled(p, source)
    pod = make_pod()
    source.pods.append(pod)
    r.svc.create_pod(pod)
    r.spawn.run_all()  # the clock did not move: assigned "at" the listing start
    p.vanish(p.created[0])
    assert rec.run_once().vanished == []


def test_metrics_after_a_pass() -> None:
    p = MemoryProvider("fake-a")
    p.add(tagged("u1", InstanceState.RUNNING))
    source = FakeSource()
    source.pods.append(make_pod("pod-u1", uid="u1"))
    r, rec = reconciled(p, source)
    rec.startup()
    assert r.status("pod-u1")["containers"] == []
    rec.run_once()
    # the live pod lends the rebuilt record its containers
    assert r.status("pod-u1")["containers"][0]["state"] == "running"
    reg = r.svc.metrics.registry
    assert reg.get_sample_value("gpucluster_burst_instances", {"provider": "fake-a", "state": "running"}) == 1.0
    assert reg.get_sample_value("gpucluster_burst_pods", {"phase": "Running"}) == 1.0
    assert reg.get_sample_value("gpucluster_burst_reconcile_duration_seconds_count") == 1.0


def test_orphaned_record_fails_without_blaming_the_provider_and_is_forgotten_later() -> None:
    p = MemoryProvider("fake-a")
    p.add(tagged("u1", InstanceState.RUNNING))
    source = FakeSource()  # the pod was deleted while the service was down
    r, rec = reconciled(p, source)
    rec.startup()
    assert r.status("pod-u1")["phase"] == "Running"
    rec.run_once()
    status = r.status("pod-u1", "inference")
    assert (status["phase"], status["reason"]) == ("Failed", "InstanceVanished")
    assert r.svc.tracker.rate("fake-a") == 0.0
    r.clock.advance(3599)
    assert rec.run_once().forgotten == []
    r.clock.advance(2)
    assert rec.run_once().forgotten == ["inference/pod-u1/u1"]
    assert r.svc.list_pods() == []


def test_live_pods_records_are_never_forgotten() -> None:
    p = MemoryProvider("fake-a")
    source = FakeSource()
    r, rec = reconciled(p, source)
    rec.startup()
    pod = make_pod()
    source.pods.append(pod)
    p.create_error = "refused"
    r.submit(pod)
    r.clock.advance(7200)
    assert rec.run_once().forgotten == []
    assert r.status()["reason"] == "ProviderCreateFailed"


def test_an_ended_orphan_that_stays_listed_is_deleted_and_counted_once() -> None:
    p = MemoryProvider("fake-a")
    source = FakeSource()
    p.add(tagged("died", InstanceState.FAILED))
    r, rec = reconciled(p, source)
    reports = [rec.run_once() for _ in range(3)]
    assert [r.orphans_deleted for r in reports] == [["fake-a/old-died"], [], []]
    assert "old-died" in p.instances  # still listed, as the provider keeps it for a while
    assert p.deleted == ["old-died"]
    metric = r.svc.metrics.registry.get_sample_value("gpucluster_burst_orphans_deleted_total", {"provider": "fake-a"})
    assert metric == 1.0
    p.set_state("old-died", InstanceState.RUNNING)  # a provider that brought it back: deleted again
    assert rec.run_once().orphans_deleted == ["fake-a/old-died"]
    p.vanish("old-died")
    rec.run_once()
    p.add(tagged("died", InstanceState.FAILED))  # listed again after leaving the listing: a new delete
    assert rec.run_once().orphans_deleted == ["fake-a/old-died"]


def test_two_clusters_sharing_a_provider_account_never_touch_each_others_instances() -> None:
    """Both virtual nodes are named gpu-burst; their cluster names tell their instances apart: neither lists,
    adopts nor deletes (as an orphan) the other's."""
    shared = MemoryProvider("fake-a")
    worlds = []
    for cluster in ("east", "west"):
        r = rig(shared, settings=make_settings(provider_entry("fake-a"), clusterName=cluster))
        pod = make_pod(f"web-{cluster}", uid=f"uid-{cluster}")
        r.source.pods.append(pod)
        r.submit(pod)
        worlds.append((r.svc, r.source, Reconciler(r.svc, r.source, None)))
    assert {shared.specs[i].tags.node for i in shared.created} == {"east.gpu-burst", "west.gpu-burst"}
    for svc, _, reconciler in worlds:
        report = reconciler.run_once()
        assert report.orphans_deleted == []
        assert [r.name for r in svc.records()] == [f"web-{svc.settings.virtual_node.cluster_name}"]
    assert shared.deleted == []
