"""The local stack's webhooks: point the Kueue and JobSet charts' webhook objects at controllers outside the cluster.

On the simulated cluster Kueue and JobSet run as local processes (sim/kueue.sh, sim/jobset.sh) and serve their
admission and conversion webhooks on loopback with a certificate of their own. When the stack sets
``gpucluster:kueue.localWebhooks``, ``__main__.py`` registers :func:`local_webhooks_transform` as a stack
transform: the engine then hands it every resource it registers, the objects the charts render included, and it
rewrites the webhook ones. Pulumi owns the rewritten objects, so a re-run shows no drift; production stacks never
register it.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pulumi

from components.queues_settings import LocalWebhooks

ROOT = Path(__file__).resolve().parent.parent

WEBHOOK_CONFIGURATION_TYPES = (
    "kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfiguration",
    "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration",
)
CRD_TYPE = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"

Transform = Callable[[pulumi.ResourceTransformArgs], pulumi.ResourceTransformResult | None]


class LocalWebhooksError(RuntimeError):
    """The local webhook settings cannot be applied; the message names the setting and the problem."""


def read_ca_bundle(local: LocalWebhooks, root: Path = ROOT) -> str:
    """The base64 caBundle for the local webhook URL, from ``kueue.localWebhooks.caBundleFile``."""
    path = Path(local.ca_bundle_file)
    if not path.is_absolute():
        path = root / path
    try:
        pem = path.read_bytes()
    except OSError as exc:
        raise LocalWebhooksError(
            f"gpucluster:kueue.localWebhooks.caBundleFile: cannot read {path} ({exc.strerror}); "
            "create the local webhook certificate first (sim/kueue.sh certs, run by make up)"
        ) from None
    if b"-----BEGIN CERTIFICATE-----" not in pem:
        raise LocalWebhooksError(f"gpucluster:kueue.localWebhooks.caBundleFile: {path} holds no PEM certificate")
    return base64.b64encode(pem).decode("ascii")


def _url_client_config(client_config: Mapping[str, Any], base_url: str, ca_bundle: str) -> dict[str, Any]:
    """A webhook clientConfig for ``base_url`` plus the path its Service reference had."""
    service = client_config.get("service") or {}
    path = service.get("path") or ""
    return {"url": f"{base_url}{path}", "caBundle": ca_bundle}


def local_webhooks_props(type_: str, props: Mapping[str, Any], base_url: str, ca_bundle: str) -> dict[str, Any] | None:
    """The chart object's properties with every webhook pointed at the local controller; None when untouched.

    Admission webhook configurations get ``clientConfig: {url, caBundle}`` in place of their Service
    reference, and CRDs with a conversion webhook (Kueue's v1beta1/v1beta2 conversion) get the same for ``/convert``.
    """
    if type_ in WEBHOOK_CONFIGURATION_TYPES:
        out = copy.deepcopy(dict(props))
        for hook in out.get("webhooks") or []:
            hook["clientConfig"] = _url_client_config(hook.get("clientConfig") or {}, base_url, ca_bundle)
        return out
    if type_ == CRD_TYPE:
        webhook = ((props.get("spec") or {}).get("conversion") or {}).get("webhook")
        if not webhook or "clientConfig" not in webhook:
            return None
        out = copy.deepcopy(dict(props))
        hook = out["spec"]["conversion"]["webhook"]
        hook["clientConfig"] = _url_client_config(hook["clientConfig"], base_url, ca_bundle)
        return out
    return None


def service_namespace(type_: str, props: Mapping[str, Any]) -> str | None:
    """The namespace of the Service a webhook object calls (its first webhook's), None when it names none."""
    if type_ in WEBHOOK_CONFIGURATION_TYPES:
        for hook in props.get("webhooks") or []:
            service = (hook.get("clientConfig") or {}).get("service") or {}
            if service.get("namespace"):
                return str(service["namespace"])
        return None
    webhook = ((props.get("spec") or {}).get("conversion") or {}).get("webhook") or {}
    service = (webhook.get("clientConfig") or {}).get("service") or {}
    return str(service["namespace"]) if service.get("namespace") else None


def local_webhooks_transform(
    local: LocalWebhooks, root: Path = ROOT, others: Mapping[str, LocalWebhooks] | None = None
) -> Transform:
    """A Pulumi transform that makes the charts' webhooks call controllers running outside the cluster.

    ``local`` serves every webhook object (Kueue's); ``others`` maps the namespace of the Service a chart's webhooks
    name to the controller that serves them instead (JobSet's, in ``jobset-system``). Every other resource passes
    untouched (None). A CA file is read when the first webhook object for it is transformed, never at import.
    """
    routes = dict(others or {})
    cas: dict[str, str] = {}

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if args.type_ not in (*WEBHOOK_CONFIGURATION_TYPES, CRD_TYPE):
            return None
        target = routes.get(service_namespace(args.type_, args.props) or "", local)
        if target.ca_bundle_file not in cas:
            cas[target.ca_bundle_file] = read_ca_bundle(target, root)
        props = local_webhooks_props(args.type_, args.props, target.url, cas[target.ca_bundle_file])
        if props is None:
            return None
        return pulumi.ResourceTransformResult(props=props, opts=args.opts)

    return transform


def register(local: LocalWebhooks | None, others: Mapping[str, LocalWebhooks] | None = None) -> bool:
    """Register the transform for this program run when the stack sets ``kueue.localWebhooks``; True if it did.

    ``others``: the Service namespace -> local controller of further charts (``jobset.localWebhooks``).
    """
    if local is None:
        return False
    pulumi.runtime.register_resource_transform(local_webhooks_transform(local, others=others))
    return True
