"""components/controller.py: where a controller's pods run is the stack's to say (nodeSelector, tolerations), for
every registered controller, and never part of the settings file the daemon reads."""

from __future__ import annotations

import json
from typing import Any

import pytest

from components.controller import Controller, ControllerArgs
from contract.constants import SETTINGS_DIGEST_ANNOTATION
from contract.controllers.stall_detector import SPEC
from contract.issues import SettingsError
from contract.spec import WORKLOAD_NAMESPACES
from contract.stall_detector_settings import StallDetectorSettings
from tests.support.pulumi_harness import Graph, deploy

TEAMS = ["team-a"]
SYSTEM = {"node-role.example.com/system": "true"}
TOLERATE = [{"key": "node-role.example.com/system", "operator": "Exists", "effect": "NoSchedule"}]


def graph_of(**placement: Any) -> Graph:
    settings = StallDetectorSettings.model_validate({"workloadNamespaces": TEAMS, **placement})
    return deploy(
        lambda: Controller("sd", ControllerArgs(spec=SPEC, settings=settings, context={WORKLOAD_NAMESPACES: TEAMS}))
    )


def pod_spec(graph: Graph) -> dict[str, Any]:
    spec: dict[str, Any] = graph.one("kubernetes:apps/v1:Deployment", "sd-deployment").inputs["spec"]["template"][
        "spec"
    ]
    return spec


def test_the_stacks_placement_is_the_deployments_and_not_the_daemons_setting() -> None:
    graph = graph_of(nodeSelector=SYSTEM, tolerations=TOLERATE)
    spec = pod_spec(graph)
    assert spec["nodeSelector"] == SYSTEM
    assert spec["tolerations"] == TOLERATE
    document = json.loads(graph.one("kubernetes:core/v1:ConfigMap", "sd-settings").inputs["data"]["settings.json"])
    assert not {"nodeSelector", "tolerations"} & set(document)
    # The daemon reads its file with the same model: what it reads back places nothing.
    assert StallDetectorSettings.parse(document).node_selector == {}


def test_no_placement_leaves_the_scheduler_free() -> None:
    spec = pod_spec(graph_of())
    assert "nodeSelector" not in spec
    assert "tolerations" not in spec


@pytest.mark.parametrize(
    ("placement", "fragment"),
    [
        ({"nodeSelector": {"bad key!": "x"}}, "nodeSelector: label key 'bad key!' is not a valid"),
        ({"nodeSelector": {"a": "not a value!"}}, "is not a valid Kubernetes label value"),
        ({"tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}, "operator Exists takes no value"),
    ],
)
def test_a_placement_kubernetes_would_refuse_is_refused_naming_the_key(
    placement: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(SettingsError) as err:
        StallDetectorSettings.parse({"workloadNamespaces": TEAMS, **placement})
    assert fragment in str(err.value)


def _digest(graph: Graph) -> str:
    template = graph.one("kubernetes:apps/v1:Deployment", "sd-deployment").inputs["spec"]["template"]
    digest: str = template["metadata"]["annotations"][SETTINGS_DIGEST_ANNOTATION]
    return digest


def test_a_change_of_settings_rolls_the_pods_and_a_change_of_placement_alone_does_not_touch_the_digest() -> None:
    """The daemon reads its settings once, at start, from a ConfigMap that keeps its name: only a changed pod template
    makes the Deployment replace its pods, so the template names the settings by digest."""
    base = _digest(graph_of())
    assert len(base) == 64
    assert _digest(graph_of()) == base
    changed = StallDetectorSettings.model_validate({"workloadNamespaces": TEAMS, "stallAfter": "7m"})
    other = deploy(
        lambda: Controller("sd", ControllerArgs(spec=SPEC, settings=changed, context={WORKLOAD_NAMESPACES: TEAMS}))
    )
    assert _digest(other) != base
    # Placement is the template's own field already: it changes the pods without changing what the daemon reads.
    assert _digest(graph_of(nodeSelector=SYSTEM, tolerations=TOLERATE)) == base
