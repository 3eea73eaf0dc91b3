"""Topology-aware placement: the stack's topologies become Kueue Topologies and flavors' topologyName, a job's
level becomes its pod-set annotation, and what Kueue would leave pending forever is refused before."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import StackConfig, StackConfigError, parse_stack_config
from components.config import rules as rules_module
from components.config.stack import parse_sections
from components.queues import QueuesArgs, flavor_spec
from components.training.checks import check_spec, topology_is_known, topology_level_exists
from components.training.manifest import checkpoint_interval, job_context, jobset_manifest
from components.training.spec import SpecError, parse_spec
from contract.queues_settings import Topology
from tests.components.training.conftest import local_raw, spec_doc
from tests.support.pulumi_harness import Graph, deploy, secrets_of

KUEUE = "kubernetes:kueue.x-k8s.io/v1beta2"
FABRIC = {
    "name": "ib-fabric",
    "levels": [
        {"name": "block", "nodeLabel": "gpucluster.io/ib-block"},
        {"name": "leaf", "nodeLabel": "gpucluster.io/ib-leaf"},
        {"name": "host", "nodeLabel": "kubernetes.io/hostname"},
    ],
}


def raw_with(*topologies: str | None) -> dict[str, Any]:
    """The local stack with one flavor per entry (its topology, or none), all in the training queue."""
    raw = local_raw()
    flavors = []
    for i, topology in enumerate(topologies):
        flavor = {**raw["flavors"][0], "name": f"gpu{i}", "nodeLabels": {"gpucluster.io/pool": f"gpu{i}"}}
        flavor.pop("topology", None)
        if topology is not None:
            flavor["topology"] = topology
        flavors.append(flavor)
    raw["flavors"] = flavors
    raw["topologies"] = [FABRIC]
    raw["queues"]["training"]["quota"] = {f["name"]: 32 for f in flavors}
    return raw


def stack_with(*topologies: str | None) -> StackConfig:
    return parse_stack_config(raw_with(*topologies))


def pod_annotations(stack: StackConfig, **change: Any) -> dict[str, str]:
    spec = parse_spec(spec_doc(**change))
    check_spec(spec, stack)
    m = jobset_manifest(spec, job_context(spec, stack, checkpoint_interval(spec, stack, None)))
    template = m["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    return dict(template["metadata"].get("annotations", {}))


# --- the stack ----------------------------------------------------------------------------------------------------


def test_a_topology_ends_with_the_host_and_names_each_level_once() -> None:
    t = Topology.model_validate(FABRIC)
    assert t.to_k8s() == {
        "levels": [
            {"nodeLabel": "gpucluster.io/ib-block"},
            {"nodeLabel": "gpucluster.io/ib-leaf"},
            {"nodeLabel": "kubernetes.io/hostname"},
        ]
    }
    assert (t.default, t.label_of("leaf"), t.label_of("rack")) == ("leaf", "gpucluster.io/ib-leaf", None)
    with pytest.raises(ValidationError, match=r"the last level must be kubernetes\.io/hostname"):
        Topology.model_validate({**FABRIC, "levels": FABRIC["levels"][:2]})
    with pytest.raises(ValidationError, match="listed twice: leaf"):
        Topology.model_validate({**FABRIC, "levels": [FABRIC["levels"][1], *FABRIC["levels"][1:]]})
    with pytest.raises(ValidationError, match="defaultLevel 'rack' is not a level"):
        Topology.model_validate({**FABRIC, "defaultLevel": "rack"})
    assert Topology.model_validate({**FABRIC, "defaultLevel": "block"}).default == "block"


def test_a_flavor_names_a_declared_topology() -> None:
    sections, _ = parse_sections(raw_with("ib-fabric"))
    assert list(rules_module.flavor_topologies_declared(sections)) == []
    sections, _ = parse_sections(raw_with("ib-fabrik"))
    (issue,) = rules_module.flavor_topologies_declared(sections)
    assert str(issue).startswith("flavors[0].topology: ")
    assert "no topology 'ib-fabrik' in topologies (declared: ['ib-fabric'])" in str(issue)
    with pytest.raises(StackConfigError, match=r"flavors\[0\]\.topology"):
        stack_with("ib-fabrik")


def test_the_topology_and_the_flavor_reach_kueue_and_a_change_replaces_them() -> None:
    cfg = stack_with("ib-fabric", None)
    graph: Graph = deploy(lambda: GpuCluster("sim", GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    topology = graph.one(f"{KUEUE}:Topology", "sim-queues-topology-ib-fabric")
    assert topology.inputs["spec"] == Topology.model_validate(FABRIC).to_k8s()
    tas = graph.one(f"{KUEUE}:ResourceFlavor", "sim-queues-flavor-gpu0")
    assert tas.inputs["spec"]["topologyName"] == "ib-fabric"
    assert "topologyName" not in graph.one(f"{KUEUE}:ResourceFlavor", "sim-queues-flavor-gpu1").inputs["spec"]
    assert flavor_spec(cfg.flavors[0])["topologyName"] == "ib-fabric"
    # Inference pods are marked so that Kueue counts the GPUs they hold as free to a training gang.
    deployments = [r for r in graph.of_type("kubernetes:apps/v1:Deployment") if "inference" in r.name]
    assert deployments
    for d in deployments:
        annotations = d.inputs["spec"]["template"]["metadata"]["annotations"]
        assert annotations["kueue.x-k8s.io/podset-unconstrained-topology"] == "true"


def test_queues_args_refuse_a_flavor_of_an_unknown_topology() -> None:
    cfg = stack_with("ib-fabric")
    with pytest.raises(ValueError, match="flavor 'gpu0' names unknown topology 'ib-fabric'"):
        QueuesArgs(
            kueue=cfg.kueue,
            cohort=cfg.cohort,
            flavors=cfg.flavors,
            queues=cfg.queues,
            teams=cfg.teams,
            priorities=cfg.priorities,
        )


# --- the job ------------------------------------------------------------------------------------------------------


def test_a_job_without_a_level_is_preferred_at_the_leaf_and_one_with_a_level_gets_it() -> None:
    stack = stack_with("ib-fabric")
    assert pod_annotations(stack) == {"kueue.x-k8s.io/podset-preferred-topology": "gpucluster.io/ib-leaf"}
    assert pod_annotations(stack, topology={"required": "block"}) == {
        "kueue.x-k8s.io/podset-required-topology": "gpucluster.io/ib-block"
    }
    assert pod_annotations(stack, topology={"preferred": "host"}) == {
        "kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname"
    }
    # A flavor without a topology: no annotation, Kueue places the gang as before.
    assert pod_annotations(stack_with(None)) == {}


@pytest.mark.parametrize(
    ("topologies", "change", "expected"),
    [
        (
            ("ib-fabric",),
            {"topology": {"required": "rack"}},
            "spec.topology.required: no level 'rack' in topology 'ib-fabric' (levels: block, leaf, host)",
        ),
        (
            ("ib-fabric",),
            {"topology": {"required": "host"}, "nodes": 2},
            "spec.topology.required: 2 nodes cannot sit inside one host",
        ),
        (
            (None,),
            {"topology": {"preferred": "leaf"}},
            "spec.topology.preferred: the job's flavors (gpu0) are placed by no topology; remove spec.topology",
        ),
    ],
)
def test_a_level_kueue_would_leave_pending_forever_is_refused(
    topologies: tuple[str | None, ...], change: dict[str, Any], expected: str
) -> None:
    stack = stack_with(*topologies)
    (issue,) = topology_level_exists(parse_spec(spec_doc(**change)), stack)
    assert str(issue).startswith(expected), str(issue)
    assert (
        list(
            topology_level_exists(parse_spec(spec_doc(topology={"required": "host"}, nodes=1)), stack_with("ib-fabric"))
        )
        == []
    )
    assert (
        list(topology_level_exists(parse_spec(spec_doc(topology={"required": "leaf"})), stack_with("ib-fabric"))) == []
    )


def test_flavors_placed_by_different_topologies_need_the_job_to_name_one() -> None:
    stack = stack_with("ib-fabric", None)
    (issue,) = topology_is_known(parse_spec(spec_doc()), stack)
    assert "placed by different topologies (gpu0 (ib-fabric), gpu1 (no topology)); name one" in str(issue)
    assert list(topology_is_known(parse_spec(spec_doc(flavor="gpu0")), stack)) == []
    assert pod_annotations(stack, flavor="gpu1") == {}


def test_a_spec_names_exactly_one_level_and_sets_no_kueue_annotation_itself() -> None:
    with pytest.raises(SpecError, match=r"spec\.topology: .*exactly one of required or preferred"):
        parse_spec(spec_doc(topology={"required": "leaf", "preferred": "block"}))
    with pytest.raises(SpecError, match=r"spec\.topology: .*exactly one of required or preferred"):
        parse_spec(spec_doc(topology={}))
    with pytest.raises(SpecError, match=r"podset-required-topology is Kueue's and the package sets it"):
        parse_spec(spec_doc(podAnnotations={"kueue.x-k8s.io/podset-required-topology": "kubernetes.io/hostname"}))
