"""The descheduler's policy: a replica make-before-break moved on purpose (``prefer-no-eviction``) is never evicted
(``noEvictionPolicy: Mandatory``, which descheduler v0.36.0's DefaultEvictor takes), every other one as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from components.config import load_stack_file
from components.descheduler import NO_EVICTION_ANNOTATION, NO_EVICTION_POLICY, Descheduler, DeschedulerArgs
from contract.controllers.make_before_break import NO_EVICTION_ANNOTATION as MOVED_ANNOTATION
from contract.descheduler_settings import DeschedulerSettings
from tests.support.pulumi_harness import deploy

ROOT = Path(__file__).resolve().parents[2]
#: The two values descheduler v0.36.0 accepts (pkg/framework/plugins/defaultevictor/validation.go).
ACCEPTED = ("Preferred", "Mandatory")


def _evictor_args(settings: DeschedulerSettings) -> dict[str, object]:
    graph = deploy(
        lambda: Descheduler(
            "d", DeschedulerArgs(settings=settings, burst_taint_key="k.io/burst", inference_namespaces=["inference"])
        )
    )
    (chart,) = graph.of_type("kubernetes:helm.sh/v4:Chart")
    (profile,) = chart.inputs["values"]["deschedulerPolicy"]["profiles"]
    (evictor,) = [p for p in profile["pluginConfig"] if p["name"] == "DefaultEvictor"]
    args: dict[str, object] = evictor["args"]
    return args


def test_moved_replicas_are_never_evicted() -> None:
    args = _evictor_args(DeschedulerSettings())
    assert args["noEvictionPolicy"] == NO_EVICTION_POLICY == "Mandatory"
    assert NO_EVICTION_POLICY in ACCEPTED
    # The annotation the controller sets on a moved replica's template is the one Mandatory honours.
    assert MOVED_ANNOTATION == NO_EVICTION_ANNOTATION == "descheduler.alpha.kubernetes.io/prefer-no-eviction"


def test_node_fit_is_kept_beside_it() -> None:
    assert _evictor_args(DeschedulerSettings(node_fit=False))["nodeFit"] is False
    assert _evictor_args(DeschedulerSettings())["nodeFit"] is True


def test_every_stack_renders_it() -> None:
    for stack in ("local", "dev", "staging", "prod"):
        cfg = load_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
        assert _evictor_args(cfg.descheduler)["noEvictionPolicy"] == "Mandatory", stack


@pytest.mark.parametrize("interval", ["0s", "0m"])
def test_an_interval_of_zero_is_refused(interval: str) -> None:
    with pytest.raises(ValidationError, match="must be longer than zero"):
        DeschedulerSettings.model_validate({"interval": interval})


def test_a_positive_interval_is_taken() -> None:
    assert DeschedulerSettings.model_validate({"interval": "30s"}).interval == "30s"


def _values(settings: DeschedulerSettings) -> dict[str, object]:
    graph = deploy(
        lambda: Descheduler(
            "d", DeschedulerArgs(settings=settings, burst_taint_key="k.io/burst", inference_namespaces=["inference"])
        )
    )
    (chart,) = graph.of_type("kubernetes:helm.sh/v4:Chart")
    values: dict[str, object] = chart.inputs["values"]
    return values


def test_the_pod_runs_the_release_the_policy_is_written_for_not_the_charts_older_default() -> None:
    """The chart of the v0.36.0 module names appVersion 0.35.0: left to it, the pod would run v0.35.0."""
    chart = (Path(__file__).resolve().parents[2] / "stacks" / "Pulumi.local.yaml").read_text()
    assert "path: charts/descheduler" in chart
    assert "version: v0.36.0" in chart
    assert _values(DeschedulerSettings())["image"] == {
        "repository": "registry.k8s.io/descheduler/descheduler",
        "tag": "v0.36.0",
    }
    digest = "sha256:" + "a" * 64
    pinned = DeschedulerSettings(image=f"registry.example.org/descheduler:v0.36.0@{digest}")
    assert _values(pinned)["image"] == {"repository": "registry.example.org/descheduler", "tag": f"v0.36.0@{digest}"}


def test_an_image_without_a_tag_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match=r"image\n.*composes repository:tag"):
        DeschedulerSettings.model_validate({"image": "registry.k8s.io/descheduler/descheduler@sha256:" + "b" * 64})


def test_the_pods_placement_goes_to_the_chart_and_the_policys_node_selector_stays_apart() -> None:
    assert "nodeSelector" not in _values(DeschedulerSettings())
    assert "tolerations" not in _values(DeschedulerSettings())
    placed = DeschedulerSettings.model_validate(
        {
            "podNodeSelector": {"node-role.example.org/system": "true"},
            "podTolerations": [{"key": "node-role.example.org/system", "operator": "Exists", "effect": "NoSchedule"}],
        }
    )
    values = _values(placed)
    assert values["nodeSelector"] == {"node-role.example.org/system": "true"}
    assert values["tolerations"] == [
        {"key": "node-role.example.org/system", "operator": "Exists", "effect": "NoSchedule"}
    ]
    policy = values["deschedulerPolicy"]
    assert isinstance(policy, dict)
    assert "nodeSelector" not in policy
