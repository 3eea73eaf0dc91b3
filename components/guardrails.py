"""Guardrails the API server enforces: one ValidatingAdmissionPolicy and its Deny binding per rule of
``components/guardrails_policies.py``. The Pod Security labels go on the namespaces where they are created
(``GuardrailsSettings.labels``); this component holds the policies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.guardrails_policies import GuardrailInputs, manifests, policies
from components.guardrails_settings import GuardrailsSettings


@dataclass(frozen=True)
class GuardrailsArgs:
    settings: GuardrailsSettings
    inputs: GuardrailInputs
    labels: Mapping[str, str] = field(default_factory=dict)

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
        self.register_outputs({"policies": sorted(self.policies)})
