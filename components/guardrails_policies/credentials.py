"""Credentials stay out of job specs: a team's JobSets and pods carry no key or token as a literal env value.

A literal value is stored in the JobSet, in etcd, in every Job and pod made from it, and in a dry run's output. A
team keeps its keys in Secrets of its own namespace (its Role may write them there) and names them
(``secretEnv``, ``secretFiles`` in a job spec; ``valueFrom.secretKeyRef`` in a pod). The shapes and names are
``guardrails_settings.CREDENTIAL_ENV_VALUE`` and ``CREDENTIAL_ENV_NAME``, the ones ``gpucluster submit`` refuses; a
refusal names the container and the variable, never the value.
"""

from __future__ import annotations

from components.guardrails_policies.model import (
    JOBSET_CREATES,
    POD_CONTAINERS,
    GuardrailInputs,
    Policy,
    Validation,
    cel,
    is_in,
    team_pod_rule,
)
from contract.guardrails_settings import CREDENTIAL_ENV_NAME, CREDENTIAL_ENV_VALUE

#: CEL: the env entry ``e`` holds a credential as a literal value (the same rule as ``credential_literal``).
LITERAL = (
    f"(has(e.value) && (e.value.matches({cel(CREDENTIAL_ENV_VALUE)}) || "
    f"(e.name.upperAscii().matches({cel(CREDENTIAL_ENV_NAME)}) && e.value != '' && !e.value.startsWith('/'))))"
)
HOLDS = f"(has(c.env) && c.env.exists(e, {LITERAL}))"
WHY = (
    "a literal env value would keep a credential in the job's spec, etcd and every pod made from it; keep it in a "
    "Secret of the team's namespace and reference it (secretEnv in a job spec, valueFrom.secretKeyRef in a pod)"
)


def team_pods_carry_no_credentials(inputs: GuardrailInputs) -> Policy:
    containers = POD_CONTAINERS.format(spec="object.spec")
    return team_pod_rule(
        inputs,
        "team-pods-carry-no-credentials",
        "A pod in a team namespace holds no key or token as a literal env value: it references a Secret.",
        Validation(
            expression=f"!{containers}.exists(c, {HOLDS})",
            message=WHY,
            message_expression=f"{containers}.filter(c, {HOLDS}).map(c, 'container ' + c.name + ' env ' + "
            f"c.env.filter(e, {LITERAL}).map(e, e.name).join(', ')).join('; ') + ': ' + {cel(WHY)}",
        ),
    )


def team_jobsets_carry_no_credentials(inputs: GuardrailInputs) -> Policy:
    specs = "(has(object.spec.replicatedJobs) ? object.spec.replicatedJobs : [])"
    containers = POD_CONTAINERS.format(spec="r.template.spec.template.spec")
    return Policy(
        name="team-jobsets-carry-no-credentials",
        summary="A team's JobSet holds no key or token as a literal env value: it references a Secret.",
        resource_rules=(JOBSET_CREATES,),
        namespace_selector=is_in(inputs.training_namespaces),
        validations=(
            Validation(
                expression=f"!{specs}.exists(r, {containers}.exists(c, {HOLDS}))",
                message=WHY,
                message_expression=f"{specs}.filter(r, {containers}.exists(c, {HOLDS})).map(r, 'replicatedJob ' + "
                f"r.name + ' env ' + {containers}.filter(c, {HOLDS}).map(c, c.env.filter(e, {LITERAL}).map(e, "
                f"e.name).join(', ')).join(', ')).join('; ') + ': ' + {cel(WHY)}",
            ),
        ),
    )
