"""Training never tolerates the quarantine taint: a hot or erroring GPU must not keep (or get) a training pod.

The quarantine controller (daemons/quarantine/) puts ``gpucluster.io/quarantine:NoExecute`` on such a node so that
Kubernetes evicts every pod that does not tolerate it. A training pod template that tolerates it, by its key or by
the match-everything toleration (``operator: Exists`` without a key), would stay on the bad GPU and throttle the
whole gang. Inference tolerates it on purpose (components/inference.py); training must not.

Training is what runs in a team namespace (a Namespace the stack labels ``gpucluster.io/workload: training``, or one
the ``teamNamespaces`` config lists) or carries Kueue's ``kueue.x-k8s.io/queue-name`` label anywhere: Pods, the
workload kinds, batch Jobs and CronJobs, JobSets and PyTorchJobs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from pulumi_policy import StackValidationArgs, StackValidationPolicy

from contract.constants import QUARANTINE_TAINT_EFFECT, QUARANTINE_TAINT_KEY, WORKLOAD_LABEL
from policies.common import MANDATORY, Report, config_value, dig, labels_of, object_ref, pod_spec, schema

NAMESPACE = "kubernetes:core/v1:Namespace"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOBSET_TYPES = ("kubernetes:jobset.x-k8s.io/v1alpha2:JobSet",)
PYTORCHJOB_TYPES = ("kubernetes:kubeflow.org/v1:PyTorchJob",)


def tolerates_quarantine(toleration: Mapping[str, Any]) -> bool:
    """Whether one toleration lets a pod stay on (or onto) a node with the NoExecute quarantine taint."""
    if (toleration.get("effect") or "") not in ("", QUARANTINE_TAINT_EFFECT):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"  # the empty key with Exists tolerates every taint
    return bool(key == QUARANTINE_TAINT_KEY)


def pod_specs(resource_type: str, props: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every pod template of a resource, with where it sits."""
    spec = pod_spec(resource_type, props)
    if spec is not None:
        yield "pod template", spec
    if resource_type in JOBSET_TYPES:
        for i, job in enumerate(dig(props, "spec", "replicatedJobs") or []):
            inner = dig(job, "template", "spec", "template", "spec")
            if isinstance(inner, Mapping):
                yield f"replicatedJobs[{i}] ({dig(job, 'name') or i})", inner
    if resource_type in PYTORCHJOB_TYPES:
        replicas = dig(props, "spec", "pytorchReplicaSpecs")
        for role, replica in replicas.items() if isinstance(replicas, Mapping) else []:
            inner = dig(replica, "template", "spec")
            if isinstance(inner, Mapping):
                yield f"pytorchReplicaSpecs.{role}", inner


def _team_namespaces(args: StackValidationArgs) -> set[str]:
    named = config_value(args.get_config(), "teamNamespaces", [])
    out = {str(n) for n in named} if isinstance(named, list) else set()
    for r in args.resources:
        if r.resource_type == NAMESPACE and labels_of(r.props).get(WORKLOAD_LABEL) == "training":
            name = dig(r.props, "metadata", "name")
            if isinstance(name, str):
                out.add(name)
    return out


def _validate(args: StackValidationArgs, report: Report) -> None:
    teams = _team_namespaces(args)
    looked = 0
    for r in args.resources:
        namespace = dig(r.props, "metadata", "namespace")
        training = namespace in teams or KUEUE_QUEUE_LABEL in labels_of(r.props)
        specs = list(pod_specs(r.resource_type, r.props))
        if not training or not specs:
            continue
        looked += 1
        for where, spec in specs:
            for i, t in enumerate(spec.get("tolerations") or []):
                if isinstance(t, Mapping) and tolerates_quarantine(t):
                    what = "the match-everything toleration" if not t.get("key") else f"{QUARANTINE_TAINT_KEY}"
                    report(
                        f"{object_ref(r.props, r.name)} ({r.resource_type.split(':')[-1]}, training) {where} "
                        f"tolerations[{i}] tolerates {what}: training would stay on a quarantined GPU (hot or "
                        "erroring) and slow the whole gang; tolerate only the taints it needs, never the quarantine"
                    )
    if not teams and not looked:
        args.not_applicable("no team namespace and no Kueue workload in this stack")


training_never_tolerates_quarantine = StackValidationPolicy(
    name="training-never-tolerates-quarantine",
    description="No training pod template (team namespace or Kueue workload) tolerates the quarantine taint.",
    enforcement_level=MANDATORY,
    validate=_validate,
    config_schema=schema(teamNamespaces={"type": "array", "items": {"type": "string"}, "default": []}),
)
