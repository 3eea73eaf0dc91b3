"""What every controller of ours exports whatever its work: its registry, whether this replica leads, the text.

A controller's ``Metrics`` subclasses :class:`ControllerMetrics` with its prefix and adds its own families to
``self.registry``; the runner serves :meth:`render` on ``/metrics`` and keeps ``is_leader`` in step with the Lease.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest


class ControllerMetrics:
    def __init__(self, prefix: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        #: ``<prefix>_is_leader``: 1 while this replica holds the Lease (the runner's elector sets it).
        self.is_leader = Gauge(f"{prefix}_is_leader", "1 while this replica holds the Lease", registry=self.registry)

    def render(self) -> bytes:
        """The Prometheus text exposition of every family."""
        return generate_latest(self.registry)
