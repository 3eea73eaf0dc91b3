"""What a stack knows that its controllers' settings are filled from (:class:`StackFacts`).

A controller's spec (``contract/controllers/<name>.py``) says which of its settings' fields the stack fills
(``ControllerSpec.filled_by_stack``: a stack section that sets one is refused, naming where the value comes from) and
how (``ControllerSpec.fill``: its settings and these facts in, its complete settings out). The stack model
(``components/config/stack.py``) builds the facts once from the validated sections and calls every spec's ``fill``;
it names no controller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from contract.queues_settings import ClusterQueueSpec, GpuFlavor, Priorities, Team


@dataclass(frozen=True)
class StackFacts:
    """The stack's sections a controller's settings are filled from, each complete and validated."""

    #: ``gpucluster:flavors``.
    flavors: tuple[GpuFlavor, ...]
    #: ``gpucluster:queues``: the ClusterQueues by name.
    queues: Mapping[str, ClusterQueueSpec]
    #: Each team's namespace (``gpucluster:teams``), in the stack's order, each once.
    team_namespaces: tuple[str, ...]
    #: ``gpucluster:inferenceNamespaces``.
    inference_namespaces: tuple[str, ...]
    #: ``gpucluster:burstTaintKey``: the virtual node's switch, the one the descheduler acts on.
    burst_taint_key: str
    #: The virtual node's Node name; None while the stack does not burst.
    virtual_node_name: str | None
    #: ``gpucluster:teams`` and ``gpucluster:priorities``: each team's LocalQueue and the research priorities it may
    #: name.
    teams: tuple[Team, ...]
    priorities: Priorities
    #: ``gpucluster:kueue.cpuQueue.name``: the LocalQueue of CPU-only work in every team namespace.
    cpu_queue: str
    #: Whether the stack runs the checkpoint verifier (``gpucluster:checkpointVerifier``): only verified
    #: checkpoints count.
    checkpoints_verified: bool
    #: The scrape jobs of dcgm-exporter and of the fabric exporter (``gpucluster:telemetry``).
    dcgm_scrape_job: str
    fabric_scrape_job: str
