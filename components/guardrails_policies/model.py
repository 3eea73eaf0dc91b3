"""What every admission rule is made of: the stack's inputs, a rule as data, the CEL helpers, the rendering.

:class:`GuardrailInputs` is what of the stack the rules read; a rule returns a :class:`Policy` (or None when the
stack has nothing for it to hold); :func:`manifests` renders one as a ``ValidatingAdmissionPolicy`` and its ``Deny``
binding.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contract.constants import (
    NAMESPACE_NAME_LABEL,
)
from contract.jobset_settings import JOBSET_API

ADMISSION_API = "admissionregistration.k8s.io/v1"
NAME_PREFIX = "gpucluster-"
JOBSETS = {
    "apiGroups": ["jobset.x-k8s.io"],
    "apiVersions": [JOBSET_API.split("/")[1]],
    "resources": ["jobsets"],
    "operations": ["CREATE", "UPDATE"],
}
JOBSET_CREATES = {**JOBSETS, "operations": ["CREATE"]}
PODS = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}
JOBS = {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"], "operations": ["CREATE", "UPDATE"]}
JOB_CREATES = {**JOBS, "operations": ["CREATE"]}
#: CEL: a pod spec's containers and init containers (one CEL type, so one list).
POD_CONTAINERS = "({spec}.containers + (has({spec}.initContainers) ? {spec}.initContainers : []))"


def owned_by(kind: str, api: str) -> str:
    """CEL: the object's controlling owner is a ``kind`` of ``api``."""
    return (
        "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, "
        f"r.kind == {cel(kind)} && r.apiVersion == {cel(api)} && has(r.controller) && r.controller)"
    )


@dataclass(frozen=True)
class MakeBeforeBreakMarks:
    """The make-before-break controller's user and the keys it owns (daemons/make_before_break/)."""

    user: str
    reservation_key: str
    check_name: str
    deployment_annotations: tuple[str, ...]
    template_annotations: tuple[str, ...]
    pod_annotation: str


@dataclass(frozen=True)
class GuardrailInputs:
    """What of the stack the rules read."""

    #: The team namespaces: the only place training runs.
    training_namespaces: tuple[str, ...]
    #: Team namespace -> the research (Kueue workload) priorities its jobs may name.
    priorities_by_namespace: Mapping[str, tuple[str, ...]]
    #: The Kubernetes PriorityClass that preempts inference.
    training_priority_class: str
    #: Namespaces the GPU-visibility and confinement rules leave alone (the telemetry namespace, system agents).
    exempt_namespaces: tuple[str, ...]
    #: Each research (Kueue workload) priority's value, by name: a Workload's ``spec.priority`` is its class's.
    workload_priority_values: Mapping[str, int] = field(default_factory=dict)
    #: A flavor's fabric adds IPC_LOCK, so the team namespaces enforce ``privileged`` and a policy holds baseline.
    ipc_lock: bool = False
    #: Team namespace -> the group whose members submit for it (``teams[].group``).
    team_groups: Mapping[str, str] = field(default_factory=dict)
    #: Where ``gpucluster submit`` reads the measured reliability: (namespace, ConfigMap name); None: nowhere.
    reliability: tuple[str, str] | None = None
    #: The GPU resources the flavors' nodes advertise: quarantine marks only a Node whose capacity lists one.
    gpu_resources: tuple[str, ...] = ()
    #: The user of each controller of the registry the stack runs (``system:serviceaccount:<ns>:<app>``), by its
    #: spec's name; one the stack does not run is absent.
    controller_users: Mapping[str, str] = field(default_factory=dict)
    #: What the make-before-break controller writes, and as whom; None: the stack runs none.
    make_before_break: MakeBeforeBreakMarks | None = None
    #: The taint controller's user and its burst taint key (on the virtual node); None: the stack runs none.
    taint_controller: tuple[str, str] | None = None
    #: The virtual node's user and the one Node it may register; None: the stack does not burst.
    virtual_node: tuple[str, str] | None = None
    #: The burst provider service's user (the virtual node pod's internet-facing container); None: no burst.
    burst_provider: str | None = None
    #: The image of the checkpoint verifier's check Jobs (the only one its token may run); None: it does not run.
    checkpoint_verifier_image: str | None = None

    def user_of(self, controller: str) -> str | None:
        """The user of the controller named ``controller`` (a spec's name); None while the stack runs none."""
        return self.controller_users.get(controller)


@dataclass(frozen=True)
class Validation:
    expression: str
    message: str
    #: CEL naming what is wrong in this object (the container, the annotation); ``message`` when it fails.
    message_expression: str | None = None


@dataclass(frozen=True)
class Policy:
    """One rule: what it matches, where, and what must hold."""

    name: str
    #: One sentence for ``kubectl describe`` and the docs.
    summary: str
    resource_rules: tuple[Mapping[str, Any], ...]
    validations: tuple[Validation, ...]
    namespace_selector: Mapping[str, Any] = field(default_factory=dict)
    variables: tuple[Mapping[str, str], ...] = ()
    #: CEL conditions a request must meet to be judged at all (whose request it is).
    match_conditions: tuple[Mapping[str, str], ...] = ()


def team_pod_rule(inputs: GuardrailInputs, name: str, summary: str, *validations: Validation) -> Policy:
    """A rule on every pod created in a team namespace (where research jobs run)."""
    return Policy(
        name=name,
        summary=summary,
        resource_rules=(PODS,),
        namespace_selector=is_in(inputs.training_namespaces),
        validations=validations,
    )


def cel(value: object) -> str:
    """A CEL literal of a string, a list of strings or a map of them (JSON's syntax is CEL's for these)."""
    return json.dumps(value, sort_keys=True)


def label(obj: str, key: str) -> str:
    """CEL: ``obj``'s label ``key``, or ``''``."""
    labels = f"{obj}.metadata.labels"
    return f"((has({labels}) && {cel(key)} in {labels}) ? {labels}[{cel(key)}] : '')"


def unchanged_on_update(expression: str) -> str:
    """CEL: true on an update that leaves ``expression``'s value as it was."""
    return f"(request.operation == 'UPDATE' && {expression.replace('object.', 'oldObject.')} == {expression})"


def not_in(names: Sequence[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "NotIn", "values": sorted(names)}]}


def is_in(names: Sequence[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(names)}]}


def manifests(policy: Policy) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``ValidatingAdmissionPolicy`` and its ``Deny`` binding."""
    name = NAME_PREFIX + policy.name
    validations = []
    for v in policy.validations:
        out: dict[str, Any] = {"expression": v.expression, "message": v.message, "reason": "Forbidden"}
        if v.message_expression:
            out["messageExpression"] = v.message_expression
        validations.append(out)
    spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [dict(r) for r in policy.resource_rules]},
        "validations": validations,
    }
    if policy.variables:
        spec["variables"] = [dict(v) for v in policy.variables]
    if policy.match_conditions:
        spec["matchConditions"] = [dict(c) for c in policy.match_conditions]
    doc = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "annotations": {"gpucluster.io/summary": policy.summary}},
        "spec": spec,
    }
    match: dict[str, Any] = {}
    if policy.namespace_selector:
        match["namespaceSelector"] = dict(policy.namespace_selector)
    binding_spec: dict[str, Any] = {"policyName": name, "validationActions": ["Deny"]}
    if match:
        binding_spec["matchResources"] = match
    binding = {
        "apiVersion": ADMISSION_API,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": binding_spec,
    }
    return doc, binding
