"""Guardrails the API server enforces: one ValidatingAdmissionPolicy and its Deny binding per rule of
``components/guardrails_policies/``, and each team's Role in its namespace bound to the team's group. The Pod
Security labels go on the namespaces where they are created (``GuardrailsSettings.labels``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.guardrails_policies import GuardrailInputs, manifests, policies, reliability_reader, team_role
from contract.guardrails_settings import GuardrailsSettings


@dataclass(frozen=True)
class GuardrailsArgs:
    settings: GuardrailsSettings
    inputs: GuardrailInputs
    labels: Mapping[str, str] = field(default_factory=dict)
    #: The namespaces the team Roles live in (created by the cluster component).
    depends_on: tuple[pulumi.Resource, ...] = ()

    def __post_init__(self) -> None:
        if not self.inputs.training_namespaces:
            raise ValueError("GuardrailsArgs.inputs.training_namespaces: name at least one team namespace")
        if not self.inputs.training_priority_class:
            raise ValueError("GuardrailsArgs.inputs.training_priority_class: the training PriorityClass is required")


class Guardrails(pulumi.ComponentResource):
    """The admission policies; nothing when ``settings.enabled`` is off."""

    def __init__(self, name: str, args: GuardrailsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:guardrails:Guardrails", name, None, opts)
        self.policies: dict[str, k8s.admissionregistration.v1.ValidatingAdmissionPolicy] = {}
        self.bindings: dict[str, k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding] = {}
        if args.settings.enabled:
            for rule in policies(args.inputs):
                doc, binding = manifests(rule)
                meta = doc["metadata"]
                policy = k8s.admissionregistration.v1.ValidatingAdmissionPolicy(
                    f"{name}-{rule.name}",
                    metadata={**meta, "labels": dict(args.labels)},
                    spec=doc["spec"],
                    opts=pulumi.ResourceOptions(parent=self),
                )
                self.policies[rule.name] = policy
                self.bindings[rule.name] = k8s.admissionregistration.v1.ValidatingAdmissionPolicyBinding(
                    f"{name}-{rule.name}-binding",
                    metadata={**binding["metadata"], "labels": dict(args.labels)},
                    spec=binding["spec"],
                    opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]),
                )
        # Each team's group: its Role in its namespace, and the reliability ConfigMap to read.
        self.team_roles: dict[str, k8s.rbac.v1.Role] = {}
        inputs = args.inputs
        docs = [team_role(ns, group) for ns, group in sorted(inputs.team_groups.items())]
        if inputs.reliability is not None and inputs.team_groups:
            docs.append(reliability_reader(*inputs.reliability, list(inputs.team_groups.values())))
        for role_doc, binding_doc in docs:
            ns = role_doc["metadata"]["namespace"]
            role = k8s.rbac.v1.Role(
                f"{name}-{ns}-{role_doc['metadata']['name']}",
                metadata={**role_doc["metadata"], "labels": dict(args.labels)},
                rules=role_doc["rules"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
            )
            self.team_roles[ns] = role
            k8s.rbac.v1.RoleBinding(
                f"{name}-{ns}-{role_doc['metadata']['name']}-binding",
                metadata={**binding_doc["metadata"], "labels": dict(args.labels)},
                role_ref=binding_doc["roleRef"],
                subjects=binding_doc["subjects"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[role]),
            )
        self.register_outputs({"policies": sorted(self.policies), "teamRoles": sorted(self.team_roles)})
