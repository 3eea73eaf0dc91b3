"""Settings of the descheduler room (``components/descheduler.py``): ``gpucluster:descheduler``, the gradual
return of inference from the virtual node."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from pydantic import Field

from contract.chart_settings import ChartSource
from contract.image_refs import tag_of
from contract.model import (
    ConfigModel,
    DnsLabel,
    Image,
    PositiveDuration,
    Problem,
    QualifiedName,
    SemVer,
    Toleration,
)

#: The descheduler's image, at the release its policy is written for (``components/descheduler.py``:
#: ``noEvictionPolicy`` is descheduler v0.36.0's). Set, not left to the chart: the chart of the v0.36.0 module names
#: appVersion 0.35.0, so its default image is an older release than the policy's.
DESCHEDULER_IMAGE = "registry.k8s.io/descheduler/descheduler:v0.36.0"


class DeschedulerSettings(ConfigModel):
    """The gradual return of inference from the virtual node: bounded evictions every interval."""

    enabled: bool = True
    chart_version: SemVer = "0.36.0"
    chart: ChartSource = ChartSource(repo="https://kubernetes-sigs.github.io/descheduler/", name="descheduler")
    namespace: DnsLabel = "kube-system"
    interval: PositiveDuration = "1m"
    max_pods_to_evict_per_node: Annotated[int, Field(ge=1, le=100)] = 2
    max_pods_to_evict_total: Annotated[int, Field(ge=1, le=1000)] = 4
    max_pods_to_evict_per_namespace: Annotated[int, Field(ge=1, le=1000)] | None = None
    #: Limits the nodes the descheduler sees. Unset on purpose: it skips a cycle when it sees fewer than two
    #: nodes, and nodeFit looks for room only among the nodes it sees, so selecting just the virtual node would
    #: make it do nothing. Only the virtual node ever carries the burst taint, so includedTaints already confines
    #: the evictions to it.
    node_selector: str | None = None
    #: Evict a pod only when it fits on another node, so a replica leaves only when it has somewhere to go.
    node_fit: bool = True
    #: The chart composes ``repository:tag``, so a tag is needed (a digest may follow it: ``...:v0.36.0@sha256:...``).
    image: Image = DESCHEDULER_IMAGE
    #: Where the descheduler's own pod runs (the chart's nodeSelector and tolerations), as a rule system nodes. Not
    #: ``nodeSelector`` above, which is the policy's: the nodes the descheduler looks at.
    pod_node_selector: dict[QualifiedName, str] = {}
    pod_tolerations: list[Toleration] = []

    def rule_problems(self) -> Iterator[Problem]:
        if tag_of(self.image) is None:
            yield Problem(
                ("image",),
                "the descheduler chart composes repository:tag: name a tag, such as "
                f"{DESCHEDULER_IMAGE.rsplit(':', 1)[0]}:v0.36.0 (a digest may follow it)",
                self.image,
            )
