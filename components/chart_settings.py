"""Where a Helm chart comes from, as stack data: exactly one of an OCI reference, a repository and chart name, a
directory, or a chart inside a Go module (read from the module cache). Pure pydantic, so the settings models that
name a chart import no Pulumi; ``components.charts`` turns a source into a chart.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator
from pydantic.alias_generators import to_camel

from components.image_refs import tag_of
from components.model import ConfigModel, Problem

_SEMVER = r"^v?\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$"


class GoModuleChart(ConfigModel):
    module: Annotated[str, Field(min_length=3, pattern=r"^[A-Za-z0-9.\-_~/]+$")]
    version: Annotated[str, Field(pattern=_SEMVER)]
    path: Annotated[str, Field(min_length=1)]

    @model_validator(mode="after")
    def _relative_path(self) -> GoModuleChart:
        if self.path.startswith("/") or ".." in Path(self.path).parts:
            raise ValueError(f"path {self.path!r} must be relative to the module root and stay inside it")
        return self


class ChartSource(ConfigModel):
    """Exactly one of ``oci``, ``repo`` (+ ``name``), ``path`` or ``goModule``."""

    oci: Annotated[str | None, Field(pattern=r"^oci://\S+$")] = None
    repo: Annotated[str | None, Field(pattern=r"^https?://\S+$")] = None
    name: str | None = None
    path: str | None = None
    go_module: GoModuleChart | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ChartSource:
        given = [k for k in ("oci", "repo", "path", "go_module") if getattr(self, k) is not None]
        if len(given) != 1:
            shown = ", ".join(to_camel(k) for k in given) or "none"
            raise ValueError(f"give exactly one of oci, repo, path, goModule (got {shown})")
        if self.repo is not None and not self.name:
            raise ValueError("a repo source needs the chart name in `name`")
        if self.repo is None and self.name is not None:
            raise ValueError("`name` only goes with a repo source")
        return self

    @property
    def kind(self) -> Literal["oci", "repo", "path", "goModule"]:
        if self.oci is not None:
            return "oci"
        if self.repo is not None:
            return "repo"
        if self.path is not None:
            return "path"
        return "goModule"


def image_problems(image: str | None, repository: str, chart_version: str) -> Iterator[Problem]:
    """A chart controller's ``image`` setting that its chart cannot compose (the charts write ``repository:tag``)."""
    if image is not None and tag_of(image) is None:
        yield Problem(
            ("image",),
            f"the chart composes repository:tag: name a tag, such as {repository}:v{chart_version.removeprefix('v')} "
            "(a digest may follow it)",
            image,
        )
