"""Provider objects from settings, by kind. Each adapter module is imported only when a provider of its kind is
configured, so a deployment without RunPod never imports the RunPod adapter.

Every adapter class is built the same way: ``Cls.from_settings(settings: ProviderSettings, context: AdapterContext)``
(the context carries the provider secrets and the source cluster's reader), so the registry has no case per kind.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

from contract.burst_settings import BurstSettings
from daemons.burst_provider.providers.base import AdapterContext, Provider, ProviderSettingsLike

#: kind -> (module, class)
ADAPTERS: dict[str, tuple[str, str]] = {
    "fake": ("daemons.burst_provider.providers.fake", "FakeCloudProvider"),
    "runpod": ("daemons.burst_provider.providers.runpod", "RunPodProvider"),
    "kubernetes": ("daemons.burst_provider.providers.kubernetes.provider", "KubernetesClusterProvider"),
}

Factory = Callable[[ProviderSettingsLike, AdapterContext], Provider]


class ProviderBuildError(ValueError):
    """A configured provider could not be built; the message names it and why (never a secret value)."""


def adapter_class(kind: str) -> Factory:
    """The ``from_settings`` of the adapter class for ``kind``."""
    try:
        module_name, class_name = ADAPTERS[kind]
    except KeyError:
        raise ProviderBuildError(f"unknown provider kind {kind!r}; known: {', '.join(sorted(ADAPTERS))}") from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ProviderBuildError(f"provider kind {kind}: cannot import {module_name}: {exc}") from None
    cls = getattr(module, class_name, None)
    factory = getattr(cls, "from_settings", None)
    if not callable(factory):
        raise ProviderBuildError(f"provider kind {kind}: {module_name} has no {class_name}.from_settings")
    built: Factory = factory
    return built


def build_providers(
    settings: BurstSettings, context: AdapterContext, factories: Mapping[str, Factory] | None = None
) -> dict[str, Provider]:
    """name -> Provider, in the settings' order; `factories` (kind -> factory) overrides the adapters.
    Every problem is collected into one ProviderBuildError."""
    out: dict[str, Provider] = {}
    problems = []
    for p in settings.providers:
        try:
            factory = (factories or {}).get(p.kind) or adapter_class(p.kind)
            out[p.name] = factory(p, context)
        except ProviderBuildError as exc:
            problems.append(f"providers {p.name}: {exc}")
        except Exception as exc:  # an adapter refusing its settings or a missing secret
            problems.append(f"providers {p.name} ({p.kind}): {exc}")
    if problems:
        raise ProviderBuildError("; ".join(problems))
    return out
