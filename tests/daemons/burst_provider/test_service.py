"""The per-pod state machine with an in-memory provider, a queued background and a manual clock."""

from __future__ import annotations

from daemons.burst_provider.events import pod_event_sink
from daemons.burst_provider.providers.base import InstanceState
from daemons.burst_provider.service import BurstService
from tests.daemons.burst_provider.support import (
    FakeSource,
    ManualClock,
    MemoryProvider,
    QueuedSpawn,
    make_pod,
    make_settings,
    provider_entry,
)


def setup(
    *providers: MemoryProvider, **vn: object
) -> tuple[BurstService, ManualClock, QueuedSpawn, dict[str, MemoryProvider]]:
    providers = providers or (MemoryProvider("fake-a"),)
    settings = make_settings(*(provider_entry(p.name, price=p.price) for p in providers), **vn)
    clock = ManualClock()
    spawn = QueuedSpawn()
    svc = BurstService(settings, {p.name: p for p in providers}, FakeSource(), clock=clock, spawn=spawn)
    return svc, clock, spawn, {p.name: p for p in providers}


def test_post_returns_pending_at_once_then_running() -> None:
    svc, _, spawn, ps = setup()
    status = svc.create_pod(make_pod())
    assert (status["phase"], status["reason"]) == ("Pending", "ProviderCreating")
    assert status["containers"][0]["state"] == "waiting"
    assert "startTime" not in status  # unknown times are left out, never ""
    assert ps["fake-a"].created == []  # nothing happened in the caller's thread
    spawn.run_all()
    (iid,) = ps["fake-a"].created
    assert svc.get_pod("inference", "web-1")["instanceId"] == iid  # type: ignore[index]
    ps["fake-a"].set_state(iid, InstanceState.RUNNING)
    svc.poll_once()
    status = svc.get_pod("inference", "web-1")  # type: ignore[assignment]
    assert status["phase"] == "Running"
    assert status["provider"] == "fake-a"
    assert status["gpuType"] == "H100"
    assert status["address"] == "203.0.113.1"
    assert status["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert status["containers"][0]["state"] == "running"
    assert status["startTime"]


def test_post_is_idempotent_by_uid() -> None:
    svc, _, spawn, ps = setup()
    svc.create_pod(make_pod())
    svc.create_pod(make_pod())
    spawn.run_all()
    assert len(ps["fake-a"].created) == 1
    assert len(svc.list_pods()) == 1


def test_create_error_fails_the_pod_without_retrying_elsewhere() -> None:
    bad = MemoryProvider("cheap", price=1.0)
    bad.create_error = "quota exceeded"
    good = MemoryProvider("dear", price=5.0)
    svc, _, spawn, _ = setup(bad, good)
    svc.create_pod(make_pod())
    spawn.run_all()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["reason"]) == ("Failed", "ProviderCreateFailed")
    assert "quota exceeded" in status["message"]
    assert status["containers"][0]["state"] == "terminated"
    assert status["containers"][0]["exitCode"] == 1
    assert good.created == []
    assert svc.tracker.rate("cheap") == 1.0


def test_a_capacity_refusal_spills_to_the_next_provider_in_the_same_placement() -> None:
    """Nothing was created, nothing bills: no Failed pod and no new placement round, the next provider by price
    takes it at once."""
    cheap = MemoryProvider("cheap", price=1.0)
    cheap.capacity_refusal = "There are no longer any instances available with the requested specifications."
    dear = MemoryProvider("dear", price=2.5)
    svc, _, spawn, _ = setup(cheap, dear)
    svc.create_pod(make_pod())
    spawn.run_all()
    (iid,) = dear.created
    assert cheap.created == []
    dear.set_state(iid, InstanceState.RUNNING)
    svc.poll_once()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["provider"]) == ("Running", "dear")
    assert svc.tracker.rate("cheap") == 1.0  # the refusal still steers the next placements
    assert b'gpucluster_burst_capacity_spills_total{gpu_type="H100",provider="cheap"} 1.0' in svc.metrics.render()


def test_when_every_provider_refuses_for_capacity_the_pod_fails_no_capacity_naming_each() -> None:
    a, b = MemoryProvider("a", price=1.0), MemoryProvider("b", price=2.0)
    a.capacity_refusal, b.capacity_refusal = "sold out", "no H100 left"
    svc, _, spawn, _ = setup(a, b)
    svc.create_pod(make_pod())
    spawn.run_all()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["reason"]) == ("Failed", "NoCapacity")
    assert "a refused for capacity: " in status["message"]
    assert "b refused for capacity: " in status["message"]
    assert svc.used_gpus() == {}


def test_failure_penalty_moves_the_replacement_to_another_provider() -> None:
    cheap = MemoryProvider("cheap", price=1.0)
    cheap.create_error = "boom"
    dear = MemoryProvider("dear", price=2.5)
    svc, _, spawn, _ = setup(cheap, dear, failurePenalty=2.0)
    svc.create_pod(make_pod("web-1"))
    spawn.run_all()
    svc.create_pod(make_pod("web-2"))  # the ReplicaSet's replacement
    spawn.run_all()
    assert svc.get_pod("inference", "web-2")["provider"] == "dear"  # type: ignore[index]
    assert len(dear.created) == 1


def test_creation_timeout_fails_and_deletes_the_instance() -> None:
    svc, clock, spawn, ps = setup(creationTimeout="10m")
    svc.create_pod(make_pod())
    spawn.run_all()
    (iid,) = ps["fake-a"].created
    clock.advance(599)
    svc.poll_once()
    assert svc.get_pod("inference", "web-1")["phase"] == "Pending"  # type: ignore[index]
    clock.advance(2)
    svc.poll_once()
    spawn.run_all()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["reason"]) == ("Failed", "ProviderTimeout")
    assert status["containers"][0]["exitCode"] == 137
    assert ps["fake-a"].deleted == [iid]


def test_instance_death_fails_the_pod_with_its_exit_code() -> None:
    svc, _, spawn, ps = setup()
    svc.create_pod(make_pod())
    spawn.run_all()
    (iid,) = ps["fake-a"].created
    ps["fake-a"].set_state(iid, InstanceState.RUNNING)
    svc.poll_once()
    ps["fake-a"].set_state(iid, InstanceState.FAILED, exit_code=3)
    svc.poll_once()
    spawn.run_all()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["reason"]) == ("Failed", "InstanceDied")
    assert status["containers"][0]["exitCode"] == 3
    assert ps["fake-a"].deleted == [iid]  # a dead instance is not left costing money


def test_exit_zero_is_succeeded_and_unknown_exit_is_137() -> None:
    svc, _, spawn, ps = setup()
    svc.create_pod(make_pod("a"))
    svc.create_pod(make_pod("b"))
    spawn.run_all()
    ia, ib = ps["fake-a"].created
    ps["fake-a"].set_state(ia, InstanceState.EXITED, exit_code=0)
    ps["fake-a"].set_state(ib, InstanceState.TERMINATED)
    svc.poll_once()
    assert svc.get_pod("inference", "a")["phase"] == "Succeeded"  # type: ignore[index]
    b = svc.get_pod("inference", "b")
    assert b is not None
    assert (b["phase"], b["reason"], b["containers"][0]["exitCode"]) == ("Failed", "InstanceDied", 137)


def test_vanished_instance_fails_the_pod() -> None:
    svc, _, spawn, ps = setup()
    svc.create_pod(make_pod())
    spawn.run_all()
    (iid,) = ps["fake-a"].created
    ps["fake-a"].set_state(iid, InstanceState.RUNNING)
    svc.poll_once()
    ps["fake-a"].vanish(iid)
    svc.poll_once()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["reason"]) == ("Failed", "InstanceVanished")
    assert status["containers"][0]["exitCode"] == 137


def test_no_capacity_fails_the_pod() -> None:
    p = MemoryProvider("fake-a", offers={"H100": 0})
    svc, _, spawn, _ = setup(p)
    svc.create_pod(make_pod())
    spawn.run_all()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["reason"]) == ("Failed", "NoCapacity")
    assert "capacity: 0 H100 GPUs free" in status["message"]


def test_cap_counts_pods_being_created() -> None:
    p = MemoryProvider("fake-a")
    settings = make_settings(provider_entry("fake-a", max_gpus=1))
    spawn = QueuedSpawn()
    svc = BurstService(settings, {"fake-a": p}, FakeSource(), clock=ManualClock(), spawn=spawn)
    svc.create_pod(make_pod("a"))
    svc.create_pod(make_pod("b"))
    spawn.run_all()
    assert svc.get_pod("inference", "a")["phase"] == "Pending"  # type: ignore[index]
    assert svc.get_pod("inference", "b")["reason"] == "NoCapacity"  # type: ignore[index]
    assert svc.used_gpus() == {"fake-a": 1}


def test_translation_failure_names_the_reference() -> None:
    svc, _, spawn, ps = setup()
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]
    svc.create_pod(make_pod(env=env))
    spawn.run_all()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["reason"]) == ("Failed", "ProviderCreateFailed")
    assert "Secret inference/hf not found" in status["message"]
    assert ps["fake-a"].created == []


def test_pods_outside_inference_namespaces_are_refused() -> None:
    svc, _, spawn, _ = setup()
    svc.create_pod(make_pod(namespace="research"))
    spawn.run_all()
    status = svc.get_pod("research", "web-1")
    assert status is not None
    assert status["reason"] == "ProviderCreateFailed"
    assert "not in inferenceNamespaces" in status["message"]


def test_delete_removes_the_instance_then_forgets_the_pod() -> None:
    svc, _, spawn, ps = setup()
    svc.create_pod(make_pod())
    spawn.run_all()
    (iid,) = ps["fake-a"].created
    assert svc.delete_pod("inference", "web-1", "uid-web-1") == 0  # known, nothing to drain: deleted at once
    spawn.run_all()
    assert ps["fake-a"].deleted == [iid]
    assert svc.get_pod("inference", "web-1") is None
    assert svc.delete_pod("inference", "web-1", "uid-web-1") is None


def test_delete_with_another_uid_is_unknown() -> None:
    svc, _, spawn, _ = setup()
    svc.create_pod(make_pod())
    spawn.run_all()
    assert svc.delete_pod("inference", "web-1", "someone-else") is None


def test_delete_during_create_deletes_the_new_instance() -> None:
    svc, _, spawn, ps = setup()
    svc.create_pod(make_pod())
    svc.delete_pod("inference", "web-1", None)  # before the create worker ran
    spawn.run_all()
    assert svc.get_pod("inference", "web-1") is None
    assert ps["fake-a"].instances == {}


def test_delete_is_retried_until_the_provider_confirms() -> None:
    p = MemoryProvider("fake-a")
    svc, _, spawn, _ = setup(p)
    svc.create_pod(make_pod())
    spawn.run_all()
    (iid,) = p.created
    original = p.delete_instance
    p.delete_instance = lambda instance_id: None  # type: ignore[method-assign]  # accepted but not done
    svc.delete_pod("inference", "web-1", None)
    spawn.run_all()
    assert svc.get_pod("inference", "web-1") is not None
    p.delete_instance = original  # type: ignore[method-assign]
    svc.poll_once()
    assert svc.get_pod("inference", "web-1") is None
    assert p.deleted == [iid]


def test_logs_come_from_the_provider() -> None:
    svc, _, spawn, _ = setup()
    svc.create_pod(make_pod())
    spawn.run_all()
    assert svc.logs("inference", "web-1", "server", 10) == "logs of fake-a-i1/server tail=10\n"
    assert svc.logs("inference", "nope", "server", None) is None


def test_a_spend_ceiling_lets_rentals_through_up_to_it_and_refuses_the_one_that_would_pass_it() -> None:
    """maxSpendPerHour 5 at 2 USD per GPU-hour: two one-GPU replicas rent (4 USD/h), the third would make 6 and is
    refused SpendCeiling with a Warning Event; once one instance is gone, a rental fits again."""
    provider = MemoryProvider("fake-a", price=2.0)
    settings = make_settings(provider_entry("fake-a", price=2.0), maxSpendPerHour=5)
    clock, spawn, source = ManualClock(), QueuedSpawn(), FakeSource()
    svc = BurstService(settings, {"fake-a": provider}, source, clock=clock, spawn=spawn)
    svc.on_event = pod_event_sink(source, "gpu-burst", clock)
    for name in ("web-1", "web-2", "web-3"):
        svc.create_pod(make_pod(name))
        spawn.run_all()
    assert len(provider.created) == 2
    assert svc.spend_rate() == {"fake-a": 4.0}
    refused = svc.get_pod("inference", "web-3")
    assert refused is not None
    assert (refused["phase"], refused["reason"]) == ("Failed", "SpendCeiling")
    assert "would pass maxSpendPerHour 5 USD/h (4 USD/h rented now)" in refused["message"]
    (event,) = source.events
    assert (event["type"], event["reason"]) == ("Warning", "SpendCeiling")
    assert event["involvedObject"]["name"] == "web-3"
    assert event["message"] == refused["message"]

    svc.delete_pod("inference", "web-1")
    spawn.run_all()
    svc.create_pod(make_pod("web-4"))
    spawn.run_all()
    assert len(provider.created) == 3
    assert svc.get_pod("inference", "web-4")["phase"] == "Pending"  # type: ignore[index]


def test_rented_gpu_seconds_and_spend_are_counted_at_the_configured_price() -> None:
    provider = MemoryProvider("fake-a", price=2.0)
    settings = make_settings(provider_entry("fake-a", price=2.0))
    clock, spawn = ManualClock(), QueuedSpawn()
    svc = BurstService(settings, {"fake-a": provider}, FakeSource(), clock=clock, spawn=spawn)
    for name in ("web-1", "web-2"):
        svc.create_pod(make_pod(name))
    spawn.run_all()
    svc.account()
    clock.advance(1800)
    svc.account()
    text = svc.metrics.render().decode()
    assert 'gpucluster_burst_gpu_seconds_total{gpu_type="H100",provider="fake-a"} 3600.0' in text
    assert 'gpucluster_burst_spend_usd_total{provider="fake-a"} 2.0' in text  # 2 GPUs x 2 USD/h x half an hour
    assert 'gpucluster_burst_spend_rate_usd_per_hour{provider="fake-a"} 4.0' in text


def test_an_address_outside_the_providers_ranges_is_refused_before_any_traffic_or_probe() -> None:
    """A provider that reports a private address (the cluster's own network, say) gets no EndpointSlice entry and
    no probe: the pod fails AddressRefused and the instance is deleted. Inside the ranges it runs."""
    provider = MemoryProvider("fake-a", address_prefix="10.0.0.")
    settings = make_settings(provider_entry("fake-a", addressRanges=[]))  # public addresses only
    spawn = QueuedSpawn()
    svc = BurstService(settings, {"fake-a": provider}, FakeSource(), clock=ManualClock(), spawn=spawn)
    svc.create_pod(make_pod())
    spawn.run_all()
    (iid,) = provider.created
    provider.set_state(iid, InstanceState.RUNNING)
    svc.poll_once()
    spawn.run_all()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["reason"]) == ("Failed", "AddressRefused")
    assert "'10.0.0.1', which is not a public address (addressRanges is empty)" in status["message"]
    assert status["address"] == ""
    assert provider.deleted == [iid]

    allowed = make_settings(provider_entry("fake-a", addressRanges=["10.0.0.0/24"]))
    provider2 = MemoryProvider("fake-a", address_prefix="10.0.0.")
    svc2 = BurstService(allowed, {"fake-a": provider2}, FakeSource(), clock=ManualClock(), spawn=spawn)
    svc2.create_pod(make_pod())
    spawn.run_all()
    provider2.set_state(provider2.created[0], InstanceState.RUNNING)
    svc2.poll_once()
    assert svc2.get_pod("inference", "web-1")["phase"] == "Running"  # type: ignore[index]


SECRET_ENV = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]


def test_refuse_keeps_a_pod_that_reads_a_secret_off_rented_providers_at_run_time() -> None:
    """confidentialEnvToRentedProviders: refuse holds at run time too: a pod the deploy-time policy never saw (made
    by hand or by a controller) is not sent to a provider that would hold its Secret in plain text."""
    svc, _, spawn, ps = setup(confidentialEnvToRentedProviders="refuse")
    svc.resolver.secrets[("inference", "hf")] = {"token": "hf_0123456789abcdefghij"}  # type: ignore[attr-defined]
    svc.create_pod(make_pod(env=SECRET_ENV))
    spawn.run_all()
    status = svc.get_pod("inference", "web-1")
    assert status is not None
    assert (status["phase"], status["reason"]) == ("Failed", "ConfidentialEnvRefused")
    assert "spec.containers[0].env[0] TOKEN (Secret hf)" in status["message"]
    assert "hf_0123456789" not in status["message"]  # names the reference, never the value
    assert ps["fake-a"].created == []
    # a pod without a Secret rents as before
    svc.create_pod(make_pod("web-2", env=[{"name": "MODEL", "value": "sd3"}]))
    spawn.run_all()
    assert len(ps["fake-a"].created) == 1


def test_send_lets_a_pod_that_reads_a_secret_rent() -> None:
    svc, _, spawn, ps = setup()
    svc.resolver.secrets[("inference", "hf")] = {"token": "hf_0123456789abcdefghij"}  # type: ignore[attr-defined]
    svc.create_pod(make_pod(env=SECRET_ENV))
    spawn.run_all()
    assert len(ps["fake-a"].created) == 1


def test_refuse_sends_a_pod_that_reads_a_secret_only_to_a_cluster_of_ours() -> None:
    ours = provider_entry("ours", price=5.0, kind="kubernetes", kubernetes={"kubeconfigSecret": "oursKubeconfig"})
    del ours["fake"]
    settings = make_settings(provider_entry("cheap", price=1.0), ours, confidentialEnvToRentedProviders="refuse")
    providers = {"cheap": MemoryProvider("cheap", price=1.0), "ours": MemoryProvider("ours", price=5.0)}
    source = FakeSource()
    source.secrets[("inference", "hf")] = {"token": "hf_0123456789abcdefghij"}
    spawn = QueuedSpawn()
    svc = BurstService(settings, providers, source, clock=ManualClock(), spawn=spawn)
    svc.create_pod(make_pod(env=SECRET_ENV))
    svc.create_pod(make_pod("web-2"))
    spawn.run_all()
    assert len(providers["ours"].created) == 1  # the dearer cluster of ours, not the cheaper rented one
    assert len(providers["cheap"].created) == 1  # the pod without a Secret goes by price as ever
    assert svc.get_pod("inference", "web-1")["provider"] == "ours"  # type: ignore[index]
