"""The per-pod state machine with an in-memory provider, a queued background and a manual clock."""

from __future__ import annotations

from daemons.burst_provider.events import pod_event_sink
from daemons.burst_provider.providers.base import InstanceState
from tests.daemons.burst_provider.support import MemoryProvider, make_pod, make_settings, provider_entry, rig


def test_post_returns_pending_at_once_then_running() -> None:
    r = rig()
    status = r.svc.create_pod(make_pod())
    assert (status["phase"], status["reason"]) == ("Pending", "ProviderCreating")
    assert status["containers"][0]["state"] == "waiting"
    assert "startTime" not in status  # unknown times are left out, never ""
    assert r.provider.created == []  # nothing happened in the caller's thread
    r.spawn.run_all()
    (iid,) = r.provider.created
    assert r.status()["instanceId"] == iid
    r.provider.set_state(iid, InstanceState.RUNNING)
    r.svc.poll_once()
    status = r.status()
    assert status["phase"] == "Running"
    assert status["provider"] == "fake-a"
    assert status["gpuType"] == "H100"
    assert status["address"] == "203.0.113.1"
    assert status["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    assert status["containers"][0]["state"] == "running"
    assert status["startTime"]


def test_post_is_idempotent_by_uid() -> None:
    r = rig()
    r.submit(make_pod(), make_pod())
    assert len(r.provider.created) == 1
    assert len(r.svc.list_pods()) == 1


def test_create_error_fails_the_pod_without_retrying_elsewhere() -> None:
    bad = MemoryProvider("cheap", price=1.0)
    bad.create_error = "quota exceeded"
    good = MemoryProvider("dear", price=5.0)
    r = rig(bad, good)
    r.submit(make_pod())
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "ProviderCreateFailed")
    assert "quota exceeded" in status["message"]
    assert status["containers"][0]["state"] == "terminated"
    assert status["containers"][0]["exitCode"] == 1
    assert good.created == []
    assert r.svc.tracker.rate("cheap") == 1.0


def test_a_capacity_refusal_spills_to_the_next_provider_in_the_same_placement() -> None:
    """Nothing was created, nothing bills: no Failed pod and no new placement round, the next provider by price
    takes it at once."""
    cheap = MemoryProvider("cheap", price=1.0)
    cheap.capacity_refusal = "There are no longer any instances available with the requested specifications."
    dear = MemoryProvider("dear", price=2.5)
    r = rig(cheap, dear)
    r.submit(make_pod())
    (iid,) = dear.created
    assert cheap.created == []
    dear.set_state(iid, InstanceState.RUNNING)
    r.svc.poll_once()
    status = r.status()
    assert (status["phase"], status["provider"]) == ("Running", "dear")
    assert r.svc.tracker.rate("cheap") == 1.0  # the refusal still steers the next placements
    assert b'gpucluster_burst_capacity_spills_total{gpu_type="H100",provider="cheap"} 1.0' in r.svc.metrics.render()


def test_when_every_provider_refuses_for_capacity_the_pod_fails_no_capacity_naming_each() -> None:
    a, b = MemoryProvider("a", price=1.0), MemoryProvider("b", price=2.0)
    a.capacity_refusal, b.capacity_refusal = "sold out", "no H100 left"
    r = rig(a, b)
    r.submit(make_pod())
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "NoCapacity")
    assert "a refused for capacity: " in status["message"]
    assert "b refused for capacity: " in status["message"]
    assert r.svc.used_gpus() == {}


def test_failure_penalty_moves_the_replacement_to_another_provider() -> None:
    cheap = MemoryProvider("cheap", price=1.0)
    cheap.create_error = "boom"
    dear = MemoryProvider("dear", price=2.5)
    r = rig(cheap, dear, failurePenalty=2.0)
    r.submit(make_pod("web-1"))
    r.svc.create_pod(make_pod("web-2"))  # the ReplicaSet's replacement
    r.spawn.run_all()
    assert r.status("web-2")["provider"] == "dear"
    assert len(dear.created) == 1


def test_creation_timeout_fails_and_deletes_the_instance() -> None:
    r = rig(creationTimeout="10m")
    r.submit(make_pod())
    (iid,) = r.provider.created
    r.clock.advance(599)
    r.svc.poll_once()
    assert r.status()["phase"] == "Pending"
    r.clock.advance(2)
    r.svc.poll_once()
    r.spawn.run_all()
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "ProviderTimeout")
    assert status["containers"][0]["exitCode"] == 137
    assert r.provider.deleted == [iid]


def test_instance_death_fails_the_pod_with_its_exit_code() -> None:
    r = rig()
    r.submit(make_pod())
    (iid,) = r.provider.created
    r.provider.set_state(iid, InstanceState.RUNNING)
    r.svc.poll_once()
    r.provider.set_state(iid, InstanceState.FAILED, exit_code=3)
    r.svc.poll_once()
    r.spawn.run_all()
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "InstanceDied")
    assert status["containers"][0]["exitCode"] == 3
    assert r.provider.deleted == [iid]  # a dead instance is not left costing money


def test_exit_zero_is_succeeded_and_unknown_exit_is_137() -> None:
    r = rig()
    r.submit(make_pod("a"), make_pod("b"))
    ia, ib = r.provider.created
    r.provider.set_state(ia, InstanceState.EXITED, exit_code=0)
    r.provider.set_state(ib, InstanceState.TERMINATED)
    r.svc.poll_once()
    assert r.status("a")["phase"] == "Succeeded"
    b = r.svc.get_pod("inference", "b")
    assert b is not None
    assert (b["phase"], b["reason"], b["containers"][0]["exitCode"]) == ("Failed", "InstanceDied", 137)


def test_vanished_instance_fails_the_pod() -> None:
    r = rig()
    r.submit(make_pod())
    (iid,) = r.provider.created
    r.provider.set_state(iid, InstanceState.RUNNING)
    r.svc.poll_once()
    r.provider.vanish(iid)
    r.svc.poll_once()
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "InstanceVanished")
    assert status["containers"][0]["exitCode"] == 137


def test_no_capacity_fails_the_pod() -> None:
    p = MemoryProvider("fake-a", offers={"H100": 0})
    r = rig(p)
    r.submit(make_pod())
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "NoCapacity")
    assert "capacity: 0 H100 GPUs free" in status["message"]


def test_cap_counts_pods_being_created() -> None:
    r = rig(settings=make_settings(provider_entry("fake-a", max_gpus=1)))
    r.submit(make_pod("a"), make_pod("b"))
    assert r.status("a")["phase"] == "Pending"
    assert r.status("b")["reason"] == "NoCapacity"
    assert r.svc.used_gpus() == {"fake-a": 1}


def test_translation_failure_names_the_reference() -> None:
    r = rig()
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]
    r.submit(make_pod(env=env))
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "ProviderCreateFailed")
    assert "Secret inference/hf not found" in status["message"]
    assert r.provider.created == []


def test_pods_outside_inference_namespaces_are_refused() -> None:
    r = rig()
    r.submit(make_pod(namespace="research"))
    status = r.status("web-1", "research")
    assert status["reason"] == "ProviderCreateFailed"
    assert "not in inferenceNamespaces" in status["message"]


def test_delete_removes_the_instance_then_forgets_the_pod() -> None:
    r = rig()
    r.submit(make_pod())
    (iid,) = r.provider.created
    assert r.svc.delete_pod("inference", "web-1", "uid-web-1") == 0  # known, nothing to drain: deleted at once
    r.spawn.run_all()
    assert r.provider.deleted == [iid]
    assert r.svc.get_pod("inference", "web-1") is None
    assert r.svc.delete_pod("inference", "web-1", "uid-web-1") is None


def test_delete_with_another_uid_is_unknown() -> None:
    r = rig()
    r.submit(make_pod())
    assert r.svc.delete_pod("inference", "web-1", "someone-else") is None


def test_delete_during_create_deletes_the_new_instance() -> None:
    r = rig()
    r.svc.create_pod(make_pod())
    r.svc.delete_pod("inference", "web-1", None)  # before the create worker ran
    r.spawn.run_all()
    assert r.svc.get_pod("inference", "web-1") is None
    assert r.provider.instances == {}


def test_delete_is_retried_until_the_provider_confirms() -> None:
    p = MemoryProvider("fake-a")
    r = rig(p)
    r.submit(make_pod())
    (iid,) = p.created
    original = p.delete_instance
    p.delete_instance = lambda instance_id: None  # type: ignore[method-assign]  # accepted but not done
    r.svc.delete_pod("inference", "web-1", None)
    r.spawn.run_all()
    assert r.svc.get_pod("inference", "web-1") is not None
    p.delete_instance = original  # type: ignore[method-assign]
    r.svc.poll_once()
    assert r.svc.get_pod("inference", "web-1") is None
    assert p.deleted == [iid]


def test_logs_come_from_the_provider() -> None:
    r = rig()
    r.submit(make_pod())
    assert r.svc.logs("inference", "web-1", "server", 10) == "logs of fake-a-i1/server tail=10\n"
    assert r.svc.logs("inference", "nope", "server", None) is None


def test_a_spend_ceiling_lets_rentals_through_up_to_it_and_refuses_the_one_that_would_pass_it() -> None:
    """maxSpendPerHour 5 at 2 USD per GPU-hour: two one-GPU replicas rent (4 USD/h), the third would make 6 and is
    refused SpendCeiling with a Warning Event; once one instance is gone, a rental fits again."""
    r = rig(MemoryProvider("fake-a", price=2.0), maxSpendPerHour=5)
    r.svc.on_event = pod_event_sink(r.source, "gpu-burst", r.clock)
    for name in ("web-1", "web-2", "web-3"):
        r.submit(make_pod(name))
    assert len(r.provider.created) == 2
    assert r.svc.spend_rate() == {"fake-a": 4.0}
    refused = r.svc.get_pod("inference", "web-3")
    assert refused is not None
    assert (refused["phase"], refused["reason"]) == ("Failed", "SpendCeiling")
    assert "would pass maxSpendPerHour 5 USD/h (4 USD/h rented now)" in refused["message"]
    (event,) = r.source.events
    assert (event["type"], event["reason"]) == ("Warning", "SpendCeiling")
    assert event["involvedObject"]["name"] == "web-3"
    assert event["message"] == refused["message"]

    r.svc.delete_pod("inference", "web-1")
    r.spawn.run_all()
    r.submit(make_pod("web-4"))
    assert len(r.provider.created) == 3
    assert r.status("web-4")["phase"] == "Pending"


def test_rented_gpu_seconds_and_spend_are_counted_at_the_configured_price() -> None:
    r = rig(MemoryProvider("fake-a", price=2.0))
    for name in ("web-1", "web-2"):
        r.svc.create_pod(make_pod(name))
    r.spawn.run_all()
    r.svc.account()
    r.clock.advance(1800)
    r.svc.account()
    text = r.svc.metrics.render().decode()
    assert 'gpucluster_burst_gpu_seconds_total{gpu_type="H100",provider="fake-a"} 3600.0' in text
    assert 'gpucluster_burst_spend_usd_total{provider="fake-a"} 2.0' in text  # 2 GPUs x 2 USD/h x half an hour
    assert 'gpucluster_burst_spend_rate_usd_per_hour{provider="fake-a"} 4.0' in text


def test_an_address_outside_the_providers_ranges_is_refused_before_any_traffic_or_probe() -> None:
    """A provider that reports a private address (the cluster's own network, say) gets no EndpointSlice entry and
    no probe: the pod fails AddressRefused and the instance is deleted. Inside the ranges it runs."""
    provider = MemoryProvider("fake-a", address_prefix="10.0.0.")
    public_only = make_settings(provider_entry("fake-a", addressRanges=[]))
    r = rig(provider, settings=public_only)
    r.submit(make_pod())
    (iid,) = provider.created
    provider.set_state(iid, InstanceState.RUNNING)
    r.svc.poll_once()
    r.spawn.run_all()
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "AddressRefused")
    assert "'10.0.0.1', which is not a public address (addressRanges is empty)" in status["message"]
    assert status["address"] == ""
    assert provider.deleted == [iid]

    allowed = make_settings(provider_entry("fake-a", addressRanges=["10.0.0.0/24"]))
    r2 = rig(MemoryProvider("fake-a", address_prefix="10.0.0."), settings=allowed)
    r2.svc.create_pod(make_pod())
    r2.spawn.run_all()
    r2.provider.set_state(r2.provider.created[0], InstanceState.RUNNING)
    r2.svc.poll_once()
    assert r2.status()["phase"] == "Running"


SECRET_ENV = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}]


def test_refuse_keeps_a_pod_that_reads_a_secret_off_rented_providers_at_run_time() -> None:
    """confidentialEnvToRentedProviders: refuse holds at run time too: a pod the deploy-time policy never saw (made
    by hand or by a controller) is not sent to a provider that would hold its Secret in plain text."""
    r = rig(confidentialEnvToRentedProviders="refuse")
    r.source.secrets[("inference", "hf")] = {"token": "hf_0123456789abcdefghij"}
    r.submit(make_pod(env=SECRET_ENV))
    status = r.status()
    assert (status["phase"], status["reason"]) == ("Failed", "ConfidentialEnvRefused")
    assert "spec.containers[0].env[0] TOKEN (Secret hf)" in status["message"]
    assert "hf_0123456789" not in status["message"]  # names the reference, never the value
    assert r.provider.created == []
    # a pod without a Secret rents as before
    r.submit(make_pod("web-2", env=[{"name": "MODEL", "value": "sd3"}]))
    assert len(r.provider.created) == 1


def test_send_lets_a_pod_that_reads_a_secret_rent() -> None:
    r = rig()
    r.source.secrets[("inference", "hf")] = {"token": "hf_0123456789abcdefghij"}
    r.submit(make_pod(env=SECRET_ENV))
    assert len(r.provider.created) == 1


def test_refuse_sends_a_pod_that_reads_a_secret_only_to_a_cluster_of_ours() -> None:
    ours = provider_entry("ours", price=5.0, kind="kubernetes", kubernetes={"kubeconfigSecret": "oursKubeconfig"})
    del ours["fake"]
    settings = make_settings(provider_entry("cheap", price=1.0), ours, confidentialEnvToRentedProviders="refuse")
    r = rig(MemoryProvider("cheap", price=1.0), MemoryProvider("ours", price=5.0), settings=settings)
    r.source.secrets[("inference", "hf")] = {"token": "hf_0123456789abcdefghij"}
    r.submit(make_pod(env=SECRET_ENV), make_pod("web-2"))
    assert len(r.providers["ours"].created) == 1  # the dearer cluster of ours, not the cheaper rented one
    assert len(r.providers["cheap"].created) == 1  # the pod without a Secret goes by price as ever
    assert r.status()["provider"] == "ours"
