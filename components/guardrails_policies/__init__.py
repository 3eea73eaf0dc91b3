"""The ValidatingAdmissionPolicies the API server holds, one small named function per rule, listed in :data:`RULES`.

Pure: each rule takes :class:`GuardrailInputs` (what of the stack it reads) and returns a :class:`Policy`, or None
when the stack has nothing for it to hold; :func:`manifests` renders each as a ``ValidatingAdmissionPolicy`` and
its ``Deny`` binding. ``components/guardrails.py`` applies them; the tests apply the very same dicts to a real
kube-apiserver and send it what each rule refuses and what it lets through.

One concern per module: ``model`` (the inputs, a rule as data, CEL helpers, rendering), ``workloads`` (what a
workload may be, whoever sends it), ``placement`` (what a team's pod may mount and where it may run),
``credentials`` (no key or token in a spec), ``controllers`` (the fields each controller of ours may write),
``checkpoints`` (the verifier's records, which only it writes, and its check Jobs), ``teams`` (a team's Role).
The list of rules is here, in one place.
"""

from __future__ import annotations

from collections.abc import Callable

from components.guardrails_policies.checkpoints import (
    checkpoint_verifier_changes_claims_only_by_its_records,
    checkpoint_verifier_creates_only_check_jobs,
    checkpoint_verifier_deletes_only_its_jobs,
    resume_entries_are_the_verifiers,
    verified_records_are_the_verifiers,
)
from components.guardrails_policies.controllers import (
    burst_provider_annotates_pods_only,
    burst_provider_writes_only_its_endpoint_slices,
    declared_bounds,
    interruptions_only_stops_workloads,
    make_before_break_marks_pods_only_for_removal,
    make_before_break_moves_only_by_annotations,
    make_before_break_writes_only_its_check,
    make_before_break_writes_only_its_reservations,
    quota_controller_writes_only_quotas,
    taint_controller_writes_only_its_taint,
    virtual_node_registers_only_its_node,
)
from components.guardrails_policies.credentials import team_jobsets_carry_no_credentials, team_pods_carry_no_credentials
from components.guardrails_policies.model import GuardrailInputs, MakeBeforeBreakMarks, Policy, Validation, manifests
from components.guardrails_policies.placement import (
    team_jobs_aim_at_no_node,
    team_pods_mount_only_claims,
    team_pods_name_no_node,
)
from components.guardrails_policies.teams import reliability_reader, team_role
from components.guardrails_policies.workloads import (
    confinement_stays_on,
    gpu_visibility_is_requested,
    research_priority_by_team,
    research_priority_by_team_on_workloads,
    team_pods_belong_to_jobs,
    training_pods_stay_baseline,
    training_priority_jobs_are_queued,
    training_priority_jobsets_are_queued,
    training_priority_pods_belong_to_jobs,
)

__all__ = [
    "RULES",
    "GuardrailInputs",
    "MakeBeforeBreakMarks",
    "Policy",
    "Validation",
    "manifests",
    "policies",
    "reliability_reader",
    "team_role",
]

RULES: list[Callable[[GuardrailInputs], Policy | None]] = [
    gpu_visibility_is_requested,
    confinement_stays_on,
    team_pods_belong_to_jobs,
    training_priority_pods_belong_to_jobs,
    training_priority_jobs_are_queued,
    training_priority_jobsets_are_queued,
    research_priority_by_team,
    research_priority_by_team_on_workloads,
    training_pods_stay_baseline,
    team_pods_mount_only_claims,
    team_pods_name_no_node,
    team_jobs_aim_at_no_node,
    team_pods_carry_no_credentials,
    team_jobsets_carry_no_credentials,
    quota_controller_writes_only_quotas,
    interruptions_only_stops_workloads,
    verified_records_are_the_verifiers,
    resume_entries_are_the_verifiers,
    checkpoint_verifier_changes_claims_only_by_its_records,
    checkpoint_verifier_creates_only_check_jobs,
    checkpoint_verifier_deletes_only_its_jobs,
    make_before_break_writes_only_its_reservations,
    make_before_break_moves_only_by_annotations,
    make_before_break_marks_pods_only_for_removal,
    make_before_break_writes_only_its_check,
    virtual_node_registers_only_its_node,
    burst_provider_annotates_pods_only,
    burst_provider_writes_only_its_endpoint_slices,
    taint_controller_writes_only_its_taint,
]


def policies(inputs: GuardrailInputs) -> list[Policy]:
    """Every rule's policy, then the bounds the registered controllers' specs declare."""
    return [*(p for rule in RULES if (p := rule(inputs)) is not None), *declared_bounds(inputs)]
