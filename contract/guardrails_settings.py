"""Guardrails the API server enforces (``components/guardrails.py``): ``gpucluster:guardrails``.

``gpucluster submit`` and the CrossGuard pack check what goes in through our own tools; these are the rules the
API server itself holds, whoever sends the object (a researcher's kubectl, a controller, an admin):

* **Pod Security** labels on every namespace the stack creates, by the namespace's role
  (:func:`pod_security_levels`): ``restricted`` for our controllers, ``baseline`` for inference and training,
  ``privileged`` only for the telemetry exporters (they read ``/sys`` from the host) and for training namespaces
  whose fabric needs ``IPC_LOCK``, which ``baseline`` refuses; there a ValidatingAdmissionPolicy holds the
  rest of ``baseline`` (``components/guardrails_policies/workloads.py``).
* **ValidatingAdmissionPolicies** (CEL), one per rule, listed in ``guardrails_policies.RULES``.

The rule data (which env names change what GPUs a container sees, which annotations opt out of confinement) has
one home here, read by the policies, by ``gpucluster submit`` and by the policy pack.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field

from contract.model import ConfigModel, DnsLabel

#: Pod Security admission's labels (kubernetes.io/docs/concepts/security/pod-security-admission).
POD_SECURITY_PREFIX = "pod-security.kubernetes.io/"
PodSecurityLevel = Literal["privileged", "baseline", "restricted"]

#: Env names the NVIDIA container runtime reads to decide which GPUs a container sees: set by hand, a pod that
#: asked for one GPU sees every GPU of its node (``NVIDIA_VISIBLE_DEVICES=all``).
GPU_VISIBILITY_ENV = ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES")
#: Pod annotation prefixes whose value ``unconfined`` turns AppArmor or seccomp off (the pre-field forms).
CONFINEMENT_ANNOTATION_PREFIXES = (
    "container.apparmor.security.beta.kubernetes.io/",
    "seccomp.security.alpha.kubernetes.io/",
    "container.seccomp.security.alpha.kubernetes.io/",
)
UNCONFINED = "unconfined"
#: An env name that would hold a credential (``HF_TOKEN``, ``WANDB_API_KEY``, ``AWS_SECRET_ACCESS_KEY``): one of
#: these words as a whole ``_``-separated part, so ``TOKENIZERS_PARALLELISM`` is not one. Matched on the upper-cased
#: name; the same pattern in Python (``gpucluster submit``) and in CEL's RE2 (the API server).
CREDENTIAL_ENV_NAME = r"(^|_)(TOKEN|KEY|APIKEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|CREDENTIALS)(_|$)"
#: A value that is a credential whatever its name: the prefixes the common providers give their keys and tokens
#: (Hugging Face, OpenAI-style, Stripe, GitHub, GitLab, Slack, RunPod, AWS access keys, JWTs); anywhere in it, a PEM
#: block, an HTTP bearer token, a URL carrying a password (``postgres://user:pass@host``) or a kubeconfig's client
#: key (the shapes the policy pack refuses in settings). RE2 and Python alike.
CREDENTIAL_ENV_VALUE = (
    r"^\s*(hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|sk_live_[A-Za-z0-9]{10,}|ghp_[A-Za-z0-9]{20,}|"
    r"gho_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|xox[abpr]-[A-Za-z0-9-]{10,}|"
    r"rpa_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})|"
    r"-----BEGIN [A-Z ]*(PRIVATE KEY|CERTIFICATE)-----|\bBearer\s+\S{8,}|://[^/@\s:]+:[^/@\s]+@|client-key-data"
)


def credential_literal(name: str, value: str) -> str | None:
    """Why a literal env ``name=value`` would put a credential in the job spec (and etcd, and a dry run's output),
    or None. A credential-like name with an absolute path is a file the pod mounts (``GOOGLE_APPLICATION_CREDENTIALS
    =/var/run/secrets/...``), not the credential itself. The value is never part of the answer."""
    if re.search(CREDENTIAL_ENV_VALUE, value):
        return "its value is a key or token"
    if re.search(CREDENTIAL_ENV_NAME, name.upper()) and value and not value.startswith("/"):
        return "its name says it holds a credential"
    return None


#: The capabilities Pod Security ``baseline`` lets a container add (its "Capabilities" control).
BASELINE_CAPABILITIES = (
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
)

#: Each namespace role's Pod Security level: what the API server enforces, and what it warns about and audits.
#: ``training`` is raised to privileged (with the baseline-plus-IPC_LOCK policy) when a flavor's fabric needs it.
ROLE_LEVELS: dict[str, tuple[PodSecurityLevel, PodSecurityLevel]] = {
    "training": ("baseline", "restricted"),
    "inference": ("baseline", "restricted"),
    "burst": ("restricted", "restricted"),
    "capacity": ("restricted", "restricted"),
    "accounting": ("restricted", "restricted"),
    "metrics": ("restricted", "restricted"),
    "telemetry": ("privileged", "baseline"),
    "system": ("baseline", "restricted"),
}


def confinement_opt_out(annotations: dict[str, str]) -> str | None:
    """The first annotation that turns AppArmor or seccomp off, or None."""
    for key, value in sorted(annotations.items()):
        if key.startswith(CONFINEMENT_ANNOTATION_PREFIXES) and value.strip().lower() == UNCONFINED:
            return key
    return None


class GuardrailsSettings(ConfigModel):
    """What the API server holds for every namespace of the stack."""

    #: Off: no labels and no policies (a cluster whose admission is someone else's).
    enabled: bool = True
    #: Namespaces the GPU-visibility and confinement rules leave alone besides the telemetry namespace: system
    #: agents (the device plugin, the GPU operator) that must see every GPU of a node.
    exempt_namespaces: list[DnsLabel] = ["kube-system"]
    #: The Pod Security standard's version the labels pin (``latest``, or ``v1.<minor>`` to hold it across upgrades).
    pod_security_version: Annotated[str, Field(pattern=r"^(latest|v1\.[0-9]{1,3})$")] = "latest"
    #: Namespaces whose pods may reach our controllers' ``/metrics`` (where Prometheus runs): each controller gets
    #: a NetworkPolicy admitting only them (the kubelet's probes come from the node, which NetworkPolicy never
    #: blocks). Empty: nothing may scrape them.
    metrics_scrapers: list[DnsLabel] = ["monitoring"]

    def labels(self, role: str, *, ipc_lock: bool = False) -> dict[str, str]:
        """The Pod Security labels of a namespace of ``role`` (empty when off)."""
        if not self.enabled:
            return {}
        enforce, warn = pod_security_levels(role, ipc_lock=ipc_lock)
        version = self.pod_security_version
        out = {f"{POD_SECURITY_PREFIX}enforce": enforce, f"{POD_SECURITY_PREFIX}enforce-version": version}
        for mode in ("warn", "audit"):
            out[f"{POD_SECURITY_PREFIX}{mode}"] = warn
            out[f"{POD_SECURITY_PREFIX}{mode}-version"] = version
        return out


def pod_security_levels(role: str, *, ipc_lock: bool = False) -> tuple[PodSecurityLevel, PodSecurityLevel]:
    """(enforce, warn and audit) for a namespace of ``role``; an unknown role gets ``baseline``."""
    enforce, warn = ROLE_LEVELS.get(role, ("baseline", "restricted"))
    if role == "training" and ipc_lock:
        # baseline refuses IPC_LOCK; the API server holds the rest of baseline by policy (training_pods_stay_baseline)
        return "privileged", "baseline"
    return enforce, warn
