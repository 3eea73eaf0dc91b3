"""No secret in clear in the program's inputs.

Provider keys and other credentials reach the cluster only as Kubernetes Secrets built from Pulumi secrets
(``pulumi config set --secret``), whose values the program marks secret so the engine encrypts them in state.
This policy refuses the ways a credential slips out in clear: a Secret whose data is not declared a secret
output, a ConfigMap entry named like a credential, and a container env var named like one that carries a literal
value instead of a ``secretKeyRef``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pulumi_policy import ResourceValidationArgs, ResourceValidationPolicy

from policies.common import MANDATORY, Report, containers, object_ref, pod_spec

_CREDENTIAL = re.compile(r"(api[_-]?key|apikey|token|passw(or)?d|secret|credential|private[_-]?key)", re.IGNORECASE)
SECRET = "kubernetes:core/v1:Secret"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"


def looks_like_credential(name: str) -> bool:
    return bool(_CREDENTIAL.search(name))


def _validate(args: ResourceValidationArgs, report: Report) -> None:
    ref = object_ref(args.props, args.name)
    if args.resource_type == SECRET:
        secret_outputs = set(args.opts.additional_secret_outputs or [])
        for field in ("data", "stringData"):
            if args.props.get(field) and field not in secret_outputs:
                report(
                    f"Secret {ref}: {field} is not declared a secret output; build it from Pulumi secret config "
                    f"and pass additional_secret_outputs=['{field}']"
                )
        return
    if args.resource_type == CONFIG_MAP:
        data: Mapping[str, Any] = args.props.get("data") or {}
        for key, value in data.items():
            if looks_like_credential(key) and value:
                report(f"ConfigMap {ref}: key {key} looks like a credential; keep it in a Secret")
        return
    spec = pod_spec(args.resource_type, args.props)
    if spec is None:
        args.not_applicable("neither a Secret, a ConfigMap nor a workload")
        return
    for field, c in containers(spec):
        for env in c.get("env") or []:
            if looks_like_credential(str(env.get("name", ""))) and env.get("value"):
                report(
                    f"{ref} {field}/{c.get('name')}: env {env.get('name')} carries a literal value; "
                    "use valueFrom.secretKeyRef"
                )


no_secrets_in_clear = ResourceValidationPolicy(
    name="no-secrets-in-clear",
    description="Credentials reach the cluster only through Secrets built from Pulumi secrets.",
    enforcement_level=MANDATORY,
    validate=_validate,
)
