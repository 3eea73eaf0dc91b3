"""How a chart source (``contract.chart_settings``) turns into `helm.v4.Chart` arguments.

Every chart the stack installs (Kueue, the descheduler, the DCGM exporter) is pinned and its source is data in
the stack file, one of:

* ``oci``      — an OCI reference, e.g. ``oci://registry.k8s.io/kueue/charts/kueue`` (production default);
* ``repo``     — a classic chart repository URL plus the chart ``name`` in it;
* ``path``     — a chart directory on disk (relative paths are taken from the project root);
* ``goModule`` — a chart carried inside a Go module that the Go module proxy serves, read from the local
  module cache (``go mod download`` fills it when missing). The simulated cluster uses this: the production
  code path, with no chart registry in reach.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from contract.chart_settings import ChartSource, GoModuleChart

PROJECT_ROOT = Path(__file__).resolve().parent.parent

__all__ = ["ChartResolutionError", "ChartSource", "GoModuleChart", "ResolvedChart", "helm_chart", "resolve_chart"]


class ChartResolutionError(RuntimeError):
    """A chart source that cannot be turned into a chart on disk or a reference."""


@dataclass(frozen=True)
class ResolvedChart:
    """What `helm.v4.Chart` needs: the chart reference, an optional version and repository."""

    chart: str
    version: str | None
    repo: str | None


def escape_module_path(module: str) -> str:
    """Spell a module path as the module cache does: each capital as ``!`` + lower case.

    ``github.com/NVIDIA/dcgm-exporter`` -> ``github.com/!n!v!i!d!i!a/dcgm-exporter``.
    """
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), module)


def go_module_dir(module: str, version: str) -> Path:
    """The module's directory in the Go module cache, downloading it through the module proxy when absent."""
    try:
        gomodcache = (
            os.environ.get("GOMODCACHE")
            or subprocess.run(["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True).stdout.strip()
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ChartResolutionError(f"cannot find the Go module cache (is `go` installed?): {exc}") from exc
    cached = Path(gomodcache) / f"{escape_module_path(module)}@{version}"
    if cached.is_dir():
        return cached
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"], capture_output=True, text=True, check=False
    )
    try:
        info = json.loads(proc.stdout or "{}")
    except json.JSONDecodeError:
        info = {}
    if proc.returncode != 0 or "Dir" not in info:
        reason = info.get("Error") or proc.stderr.strip() or f"exit {proc.returncode}"
        raise ChartResolutionError(f"go mod download {module}@{version} failed: {reason}")
    return Path(info["Dir"])


#: Registry charts whose upstream Go module carries the same chart: ``(oci ref or repo URL + name) ->
#: (module, module version for a chart version, path in the module)``. Offline mode uses them, so the real
#: engine can preview a production stack with no chart registry in reach.
OFFLINE_MIRRORS: dict[str, tuple[str, Callable[[str], str], str]] = {
    "oci://registry.k8s.io/kueue/charts/kueue": ("sigs.k8s.io/kueue", lambda v: f"v{v}", "charts/kueue"),
    "oci://registry.k8s.io/jobset/charts/jobset": ("sigs.k8s.io/jobset", lambda v: f"v{v}", "charts/jobset"),
    "https://kubernetes-sigs.github.io/descheduler/descheduler": (
        "sigs.k8s.io/descheduler",
        lambda v: f"v{v}",
        "charts/descheduler",
    ),
}
#: Set (to any non-empty value) to resolve registry charts through OFFLINE_MIRRORS.
OFFLINE_ENV = "GPUCLUSTER_OFFLINE_CHARTS"


def offline_equivalent(source: ChartSource, version: str) -> ChartSource | None:
    """The Go-module source carrying the same chart as a registry source, if one is known."""
    if source.oci is not None:
        key = source.oci
    elif source.repo is not None:
        key = source.repo.rstrip("/") + "/" + (source.name or "")
    else:
        return None
    mirror = OFFLINE_MIRRORS.get(key)
    if mirror is None:
        return None
    module, module_version, path = mirror
    return ChartSource(go_module=GoModuleChart(module=module, version=module_version(version), path=path))


def offline_without_mirror(source: ChartSource, version: str) -> bool:
    """True when offline mode is on and this registry chart has no Go module carrying it.

    A component may then leave the chart out (and say so) rather than fail a whole offline preview.
    """
    return (
        bool(os.environ.get(OFFLINE_ENV)) and source.kind in ("oci", "repo") and not offline_equivalent(source, version)
    )


def resolve_chart(source: ChartSource, version: str) -> ResolvedChart:
    """Turn a configured source and pinned chart version into `helm.v4.Chart` arguments.

    Local sources (``path``, ``goModule``) are checked to be chart directories; their pin is the directory
    (or module version) itself, so no version is passed to Helm. With ``GPUCLUSTER_OFFLINE_CHARTS`` set, a
    registry source is read from the Go module that carries the same chart, or refused when none is known.
    """
    if os.environ.get(OFFLINE_ENV) and source.kind in ("oci", "repo"):
        mirrored = offline_equivalent(source, version)
        if mirrored is None:
            ref = source.oci or f"{source.repo} {source.name}"
            raise ChartResolutionError(f"offline mode: no Go module is known to carry chart {ref} {version}")
        source = mirrored
    if source.oci is not None:
        return ResolvedChart(chart=source.oci, version=version, repo=None)
    if source.repo is not None:
        assert source.name is not None  # enforced by the model
        return ResolvedChart(chart=source.name, version=version, repo=source.repo)
    if source.path is not None:
        directory = Path(source.path)
        if not directory.is_absolute():
            directory = PROJECT_ROOT / directory
    else:
        assert source.go_module is not None
        gm = source.go_module
        directory = go_module_dir(gm.module, gm.version) / gm.path
    if not (directory / "Chart.yaml").is_file():
        raise ChartResolutionError(f"{directory} is not a Helm chart directory (no Chart.yaml)")
    return ResolvedChart(chart=str(directory), version=None, repo=None)


def helm_chart(
    name: str, resolved: ResolvedChart, *, namespace: str, values: Mapping[str, Any], opts: pulumi.ResourceOptions
) -> k8s.helm.v4.Chart:
    """A resolved chart installed as a `helm.v4.Chart` (``opts`` carries the parent and dependencies)."""
    return k8s.helm.v4.Chart(
        name,
        chart=resolved.chart,
        version=resolved.version,
        repository_opts=k8s.helm.v4.RepositoryOptsArgs(repo=resolved.repo) if resolved.repo else None,
        namespace=namespace,
        values=dict(values),
        opts=opts,
    )
