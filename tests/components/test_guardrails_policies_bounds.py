"""The bounds a controller's spec declares (``contract/bounds.py``) become admission policies for the controllers a
stack runs, and for no other (what each policy refuses is tried on a real API server in test_guardrails_policies)."""

from __future__ import annotations

import yaml

from components.guardrails_policies import policies
from components.guardrails_policies.controllers import CLUSTER_QUEUE_SPEC_FIELDS, declared_bounds
from contract.registry import CONTROLLERS, INTERRUPTIONS, QUARANTINE, STALL_DETECTOR
from tests.support.admission import controller_inputs
from tests.support.apiserver import kueue_crds

USERS = {
    INTERRUPTIONS.name: "system:serviceaccount:gpucluster-training:gpucluster-interruptions",
    QUARANTINE.name: "system:serviceaccount:gpucluster-capacity:gpucluster-quarantine",
}


def test_each_running_controllers_bounds_are_policies_matched_to_its_user() -> None:
    inputs = controller_inputs("team-a", controller_users=USERS, gpu_resources=("nvidia.com/gpu",))
    found = {p.name: p for p in declared_bounds(inputs)}
    assert set(found) == {b.policy for name in USERS for b in next(s for s in CONTROLLERS if s.name == name).bounds}
    ledger = found["interruptions-writes-only-its-ledger"]
    assert USERS[INTERRUPTIONS.name] in str(ledger.match_conditions)
    marks = found["quarantine-writes-only-its-marks"]
    assert USERS[QUARANTINE.name] in str(marks.match_conditions)
    assert "nvidia.com/gpu" in " ".join(v.expression for v in marks.validations), "the taint on GPU nodes only"
    assert set(found) <= {p.name for p in policies(inputs)}


def test_a_controller_the_stack_does_not_run_gets_no_policy() -> None:
    inputs = controller_inputs("team-a", controller_users=USERS)
    names = {p.name for p in declared_bounds(inputs)}
    assert not names & {b.policy for b in STALL_DETECTOR.bounds}
    assert declared_bounds(controller_inputs("team-a")) == []


def test_the_quota_controllers_rule_covers_every_field_of_the_pinned_cluster_queue() -> None:
    """Every spec field of the pinned Kueue's v1beta2 ClusterQueue but resourceGroups is held unchanged by
    quota-controller-writes-only-quotas: an upgrade that adds one fails here until the rule covers it."""
    crd = yaml.safe_load((kueue_crds("clusterqueues")[0]).read_text())
    (v1beta2,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    fields = set(v1beta2["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])
    assert "concurrentAdmissionPolicy" in fields  # Kueue 0.19's
    assert fields - {"resourceGroups"} == set(CLUSTER_QUEUE_SPEC_FIELDS)
