"""burst-taint-never-noexecute, in taints, tolerations and controller settings."""

from __future__ import annotations

import yaml

from policies.taints import burst_taint_never_noexecute
from tests.policies.support import (
    KEY,
    check_resource,
)


def test_burst_taint_noschedule_passes_and_noexecute_fails() -> None:
    node = {"spec": {"taints": [{"key": KEY, "effect": "NoSchedule"}]}}
    assert check_resource(burst_taint_never_noexecute, "kubernetes:core/v1:Node", node) == []
    node["spec"]["taints"][0]["effect"] = "NoExecute"
    (violation,) = check_resource(burst_taint_never_noexecute, "kubernetes:core/v1:Node", node)
    assert "spec.taints[0]: the burst taint" in violation


def test_burst_taint_in_a_controller_config_map_and_tolerations() -> None:
    text = yaml.safe_dump({"taint": {"key": KEY, "effect": "NoExecute"}, "highMark": 8})
    (violation,) = check_resource(burst_taint_never_noexecute, "kubernetes:core/v1:ConfigMap", {"data": {"c": text}})
    assert "NoExecute" in violation
    # tolerating a NoExecute taint is not setting one
    pod = {"spec": {"tolerations": [{"key": KEY, "operator": "Exists", "effect": "NoExecute"}]}}
    assert check_resource(burst_taint_never_noexecute, "kubernetes:core/v1:Pod", pod) == []
    # other keys may be NoExecute
    other = {"spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]}}
    assert check_resource(burst_taint_never_noexecute, "kubernetes:core/v1:Node", other) == []
