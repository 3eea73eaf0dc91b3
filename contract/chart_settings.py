"""Where a Helm chart comes from, as stack data: exactly one of an OCI reference, a repository and chart name, a
directory, or a chart inside a Go module (read from the module cache). Pure pydantic, so the settings models that
name a chart import no Pulumi; ``components.charts`` turns a source into a chart.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator
from pydantic.alias_generators import to_camel

from contract.image_refs import tag_of
from contract.model import ConfigModel, Image, Problem, QualifiedName, SemVer, Toleration

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


class ChartController(ConfigModel):
    """An upstream chart's controller: its image and where its pods run (Kueue's and JobSet's sections).

    A subclass names the chart's release (``chart_version``) and upstream's repository (``IMAGE_REPOSITORY``)."""

    IMAGE_REPOSITORY: ClassVar[str]
    chart_version: SemVer
    #: The controller's image (``repository:tag``, a digest may follow). Unset: upstream's at the chart's release.
    #: Always set in the chart's values, never left to the chart: the charts inside the Go modules name staging
    #: images at branch tags, pulled Always.
    image: Image | None = None
    #: Where the controller's pods run (the chart's nodeSelector and tolerations), as a rule system nodes.
    pod_node_selector: dict[QualifiedName, str] = {}
    pod_tolerations: list[Toleration] = []

    @property
    def controller_image(self) -> str:
        return self.image or f"{self.IMAGE_REPOSITORY}:v{self.chart_version.removeprefix('v')}"

    def rule_problems(self) -> Iterator[Problem]:
        if self.image is not None and tag_of(self.image) is None:
            yield Problem(
                ("image",),
                f"the chart composes repository:tag: name a tag, such as {self.IMAGE_REPOSITORY}:"
                f"v{self.chart_version.removeprefix('v')} (a digest may follow it)",
                self.image,
            )

    def image_values(self) -> dict[str, str]:
        """The chart's image values: upstream's ``repository`` and ``tag``, pulled only when absent."""
        image = tag_of(self.controller_image)
        assert image is not None, f"{type(self).__name__} refuses an image without a tag"
        return {"repository": image[0], "tag": image[1], "pullPolicy": "IfNotPresent"}

    def placement_values(self) -> dict[str, Any]:
        """The pod's ``nodeSelector`` and ``tolerations``, each only when the stack sets it."""
        out: dict[str, Any] = {}
        if self.pod_node_selector:
            out["nodeSelector"] = dict(self.pod_node_selector)
        if self.pod_tolerations:
            out["tolerations"] = [t.to_k8s() for t in self.pod_tolerations]
        return out
