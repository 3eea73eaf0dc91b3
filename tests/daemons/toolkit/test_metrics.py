"""daemons/toolkit/metrics.py: families declared under a daemon's prefix, on a registry of its own."""

from __future__ import annotations

import itertools

import pytest

from daemons.toolkit.metrics import ControllerMetrics, Families


def _families(families: Families) -> dict[str, tuple[str, str, set[tuple[tuple[str, str], ...]]]]:
    """name -> (type, help, label sets of its samples), as the registry collects them."""
    return {
        f.name: (f.type, f.documentation, {tuple(sorted(s.labels.items())) for s in f.samples})
        for f in families.registry.collect()
    }


def test_families_carry_the_prefix_help_labels_and_known_series() -> None:
    f = Families("gpucluster_test")
    f.counter("writes", "Writes, by what and result", ["what", "result"], known=itertools.product("ab", ["ok"]))
    f.gauge("queues", "Queues, by flavor", ["flavor"], known=["h100", "a100"])
    f.histogram("cycle_seconds", "Seconds one cycle took", (0.1, 1.0))

    got = _families(f)

    assert set(got) == {"gpucluster_test_writes", "gpucluster_test_queues", "gpucluster_test_cycle_seconds"}
    assert got["gpucluster_test_writes"][:2] == ("counter", "Writes, by what and result")
    # A plain string is one label value, not its letters.
    assert got["gpucluster_test_queues"] == (
        "gauge",
        "Queues, by flavor",
        {(("flavor", "h100"),), (("flavor", "a100"),)},
    )
    assert f.registry.get_sample_value("gpucluster_test_writes_total", {"what": "b", "result": "ok"}) == 0.0
    buckets = {dict(labels).get("le") for labels in got["gpucluster_test_cycle_seconds"][2]}
    assert {"0.1", "1.0", "+Inf"} <= buckets
    assert "# TYPE gpucluster_test_writes_total counter" in f.render().decode()


def test_each_instance_has_its_own_registry() -> None:
    """Two daemons (or two tests) with the same prefix never collide."""
    one, two = ControllerMetrics("gpucluster_test"), ControllerMetrics("gpucluster_test")
    one.is_leader.set(1)

    assert one.registry.get_sample_value("gpucluster_test_is_leader") == 1.0
    assert two.registry.get_sample_value("gpucluster_test_is_leader") == 0.0


def test_kube_errors_have_a_series_per_operation_from_the_start() -> None:
    m = ControllerMetrics("gpucluster_test")
    m.kube_errors_counter(["read-node", "patch-node"]).labels("patch-node").inc()

    assert _families(m)["gpucluster_test_kube_errors"] == (
        "counter",
        "Failed Kubernetes API calls, by operation",
        {(("operation", op),) for op in ("read-node", "patch-node")},
    )
    assert m.registry.get_sample_value("gpucluster_test_kube_errors_total", {"operation": "patch-node"}) == 1.0


def test_a_name_declared_twice_is_refused() -> None:
    f = ControllerMetrics("gpucluster_test")
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        f.gauge("is_leader", "Declared again")


def test_known_values_must_match_the_label_names() -> None:
    with pytest.raises(ValueError, match="Incorrect label count"):
        Families("gpucluster_test").counter("writes", "Writes", ["what", "result"], known=["applied"])
