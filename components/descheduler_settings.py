"""Settings of the descheduler room (``components/descheduler.py``): ``gpucluster:descheduler``, the gradual
return of inference from the virtual node."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from components.chart_settings import ChartSource
from components.model import ConfigModel, DnsLabel, PositiveDuration, SemVer


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
