"""What a workload reads from a Secret stays in our clusters, when the stack says so.

The provider service resolves a bursting pod's env in the source cluster and hands the provider literal values. A
provider that is not a Kubernetes cluster of ours (kind ``runpod``, or the ``fake`` test cloud) receives them in
plain text over its API, stores them with the rented pod and returns them on every read of it (RunPod's ``env``
on ``getPod`` and ``listPods``). With ``virtualNode.confidentialEnvToRentedProviders: refuse`` in the burst section,
this policy refuses every workload that may burst (it tolerates ``virtual-kubelet.io/provider``) and reads a
Secret into its env (``valueFrom.secretKeyRef`` or ``envFrom.secretRef``) while such a provider is configured. The
default, ``send``, leaves the choice to the stack, and the policy is not applicable.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from fnmatch import fnmatch
from typing import Any

import yaml
from pulumi_policy import PolicyResource, StackValidationArgs, StackValidationPolicy

from contract.constants import SETTINGS_LABEL, VIRTUAL_NODE_TAINT_KEY
from policies.common import MANDATORY, Report, containers, dig, labels_of, object_ref, pod_spec

CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
SETTINGS_CONFIG_MAPS = ("gpucluster-virtual-node-settings",)
SETTING = "virtualNode.confidentialEnvToRentedProviders"
#: The provider kind that is a cluster of ours; every other kind is rented.
OUR_CLUSTER_KIND = "kubernetes"


def _decode(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def _settings(resources: list[PolicyResource]) -> Iterator[Mapping[str, Any]]:
    """Every burst provider settings document among the stack's ConfigMaps."""
    for r in resources:
        if r.resource_type != CONFIG_MAP:
            continue
        name = str(dig(r.props, "metadata", "name") or r.name)
        labelled = labels_of(r.props).get(SETTINGS_LABEL) == "burst-provider"
        if not (labelled or any(fnmatch(name, p) for p in SETTINGS_CONFIG_MAPS)):
            continue
        for text in (r.props.get("data") or {}).values():
            document = _decode(text) if isinstance(text, str) else None
            if isinstance(document, Mapping) and isinstance(document.get("providers"), list):
                yield document


def rented_providers(document: Mapping[str, Any]) -> list[str]:
    """``name (kind)`` of every configured provider that is not a Kubernetes cluster of ours."""
    out = []
    for p in document.get("providers") or []:
        if isinstance(p, Mapping) and p.get("kind") != OUR_CLUSTER_KIND:
            out.append(f"{p.get('name')} ({p.get('kind')})")
    return out


def _may_burst(spec: Mapping[str, Any]) -> bool:
    return any(
        isinstance(t, Mapping)
        and (t.get("key") == VIRTUAL_NODE_TAINT_KEY or (not t.get("key") and t.get("operator") == "Exists"))
        for t in spec.get("tolerations") or []
    )


def secret_reads(spec: Mapping[str, Any]) -> Iterator[str]:
    """``container: what`` for each env entry of the pod spec that reads a Secret."""
    for _, c in containers(spec):
        name = c.get("name")
        for env in c.get("env") or []:
            ref = dig(env, "valueFrom", "secretKeyRef")
            if isinstance(ref, Mapping):
                yield f"{name}: env {env.get('name')} from Secret {ref.get('name')} key {ref.get('key')}"
        for source in c.get("envFrom") or []:
            ref = dig(source, "secretRef")
            if isinstance(ref, Mapping):
                yield f"{name}: envFrom Secret {ref.get('name')}"


def _validate(args: StackValidationArgs, report: Report) -> None:
    refusing = [d for d in _settings(args.resources) if dig(d, *SETTING.split(".")) == "refuse"]
    rented = sorted({p for d in refusing for p in rented_providers(d)})
    if not refusing:
        args.not_applicable(f"no burst settings with {SETTING}: refuse")
        return
    if not rented:
        return  # every provider is a cluster of ours: what a pod reads stays with us
    for r in args.resources:
        spec = pod_spec(r.resource_type, r.props)
        if spec is None or not _may_burst(spec):
            continue
        ref = object_ref(r.props, r.name)
        for read in secret_reads(spec):
            report(
                f"{ref} {read}: this workload may burst, and {', '.join(rented)} would receive the value in plain "
                f"text and return it on every read of the rented pod ({SETTING} is refuse); keep the Secret out of "
                "its env, or burst it only to a Kubernetes cluster of ours"
            )


confidential_env_stays_in_our_clusters = StackValidationPolicy(
    name="confidential-env-stays-in-our-clusters",
    description=(
        "With virtualNode.confidentialEnvToRentedProviders: refuse, no workload that may burst reads a Secret into "
        "its env while a provider that is not a Kubernetes cluster of ours is configured."
    ),
    enforcement_level=MANDATORY,
    validate=_validate,
)
