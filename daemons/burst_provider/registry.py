"""Provider objects from settings, by kind. Each adapter module is imported only when a provider of its kind is
configured, so a deployment without RunPod never imports the RunPod adapter.

Every adapter class offers ``Cls.from_settings(settings: ProviderSettings, secrets: SecretStore)`` (else its
constructor takes those two); the kubernetes adapter also takes ``source_reader=`` (the source cluster, to copy the
ConfigMaps and Secrets a pod references).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from components.burst_settings import BurstSettings, ProviderSettings
from daemons.burst_provider.pods import ReferenceResolver
from daemons.burst_provider.providers.base import Provider
from daemons.burst_provider.secrets import SecretStore

#: kind -> (module, class)
ADAPTERS: dict[str, tuple[str, str]] = {
    "fake": ("daemons.burst_provider.providers.fake", "FakeCloudProvider"),
    "runpod": ("daemons.burst_provider.providers.runpod", "RunPodProvider"),
    "kubernetes": ("daemons.burst_provider.providers.kubernetes_cluster", "KubernetesClusterProvider"),
}

Factory = Callable[[ProviderSettings, SecretStore], Provider]


class ProviderBuildError(ValueError):
    """A configured provider could not be built; the message names it and why (never a secret value)."""


def adapter_class(kind: str) -> Factory:
    try:
        module_name, class_name = ADAPTERS[kind]
    except KeyError:
        raise ProviderBuildError(f"unknown provider kind {kind!r}; known: {', '.join(sorted(ADAPTERS))}") from None
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ProviderBuildError(f"provider kind {kind}: cannot import {module_name}: {exc}") from None
    cls: Any = getattr(module, class_name, None)
    if cls is None:
        raise ProviderBuildError(f"provider kind {kind}: {module_name} has no {class_name}")
    factory: Factory = getattr(cls, "from_settings", cls)
    return factory


def build_providers(
    settings: BurstSettings,
    secrets: SecretStore,
    factories: dict[str, Factory] | None = None,
    source: ReferenceResolver | None = None,
) -> dict[str, Provider]:
    """name -> Provider, in the settings' order; `factories` (kind -> constructor) overrides the adapters.
    Every problem is collected into one ProviderBuildError."""
    out: dict[str, Provider] = {}
    problems = []
    for p in settings.providers:
        try:
            override = (factories or {}).get(p.kind)
            if override is not None:
                out[p.name] = override(p, secrets)
            elif p.kind == "kubernetes":
                build: Any = adapter_class(p.kind)
                out[p.name] = build(p, secrets, source_reader=source)
            else:
                out[p.name] = adapter_class(p.kind)(p, secrets)
        except ProviderBuildError as exc:
            problems.append(f"providers {p.name}: {exc}")
        except Exception as exc:  # an adapter refusing its settings or a missing secret
            problems.append(f"providers {p.name} ({p.kind}): {exc}")
    if problems:
        raise ProviderBuildError("; ".join(problems))
    return out
