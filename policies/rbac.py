"""The burst daemons' ClusterRoles stay least-privilege: no wildcards, no Secrets and no pod writes cluster-wide, no
escalation.

The virtual node and the taint controller act on the whole cluster (Nodes, Pods); their ClusterRoles are the
cluster-wide power this project hands out, so each rule is checked, not trusted.
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatch
from typing import Any

from pulumi_policy import ResourceValidationArgs, ResourceValidationPolicy

from policies.common import MANDATORY, Report, config_value, dig, schema

CLUSTER_ROLE = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole"
DEFAULT_CLUSTER_ROLES = ["gpucluster-virtual-node*", "gpucluster-taint-controller*"]
#: Verbs that hand out more than the role holds: creating roles above one's own, binding them, acting as others.
ESCALATING_VERBS = ("escalate", "bind", "impersonate")
#: Verbs that change an object: on pods, granted only in the namespaces the daemon serves.
WRITING_VERBS = ("create", "update", "patch", "delete", "deletecollection")


def rule_problems(rule: Mapping[str, Any]) -> list[str]:
    """What makes one PolicyRule more than least privilege (empty when nothing does)."""
    problems = []
    verbs = [str(v) for v in rule.get("verbs") or []]
    resources = [str(r) for r in rule.get("resources") or []]
    groups = [str(g) for g in rule.get("apiGroups") or []]
    if "*" in verbs:
        problems.append("grants every verb ('*')")
    if "*" in resources or any(r.endswith("/*") for r in resources):
        problems.append("grants every resource ('*')")
    if "*" in groups:
        problems.append("grants every API group ('*')")
    if "*" in [str(u) for u in rule.get("nonResourceURLs") or []]:
        problems.append("grants every non-resource URL ('*')")
    if "secrets" in resources:
        problems.append("grants Secrets cluster-wide (bind a Role in the namespaces that need them)")
    writes = [v for v in verbs if v in WRITING_VERBS]
    if writes and {"pods", "pods/status"} & set(resources):
        problems.append(
            f"grants {writes} on pods cluster-wide: every team's pods (bind a Role in the inference namespaces)"
        )
    escalating = [v for v in verbs if v in ESCALATING_VERBS]
    if escalating:
        problems.append(f"grants {escalating}, which hand out more than the role itself holds")
    return problems


def _validate(args: ResourceValidationArgs, report: Report) -> None:
    name = str(dig(args.props, "metadata", "name") or args.name)
    patterns = list(config_value(args.get_config(), "clusterRoles", DEFAULT_CLUSTER_ROLES))
    if args.resource_type != CLUSTER_ROLE or not any(fnmatch(name, p) for p in patterns):
        args.not_applicable("not a burst daemon's ClusterRole")
        return
    if args.props.get("aggregationRule"):
        report(f"ClusterRole {name} aggregates other roles: its rules would not be the ones reviewed here")
    for i, rule in enumerate(args.props.get("rules") or []):
        if isinstance(rule, Mapping):
            for problem in rule_problems(rule):
                report(f"ClusterRole {name} rules[{i}] {problem}")


virtual_node_least_privilege = ResourceValidationPolicy(
    name="virtual-node-least-privilege",
    description="The virtual node's and taint controller's ClusterRoles grant no wildcards, Secrets, pod writes "
    "or escalation.",
    enforcement_level=MANDATORY,
    validate=_validate,
    config_schema=schema(
        clusterRoles={"type": "array", "items": {"type": "string"}, "default": DEFAULT_CLUSTER_ROLES},
    ),
)
