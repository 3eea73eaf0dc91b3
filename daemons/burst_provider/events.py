"""Events about pods on the virtual node, written to the source cluster: what ``kubectl describe pod`` shows."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from daemons.burst_provider.record import PodRecord
from daemons.burst_provider.service import EventSink
from daemons.burst_provider.source import SourceCluster
from daemons.toolkit.events import event_body

log = logging.getLogger("burst_provider.events")

COMPONENT = "gpucluster-burst-provider"


def pod_event_sink(source: SourceCluster, node: str, clock: Callable[[], float] = time.time) -> EventSink:
    """The service's ``on_event``: an Event on the record's pod; one that cannot be written is logged, never
    raised (an Event is for the operator, never a reason to fail the work it describes)."""

    def record(rec: PodRecord, event_type: str, reason: str, message: str) -> None:
        involved = {"apiVersion": "v1", "kind": "Pod", "name": rec.name, "namespace": rec.namespace, "uid": rec.uid}
        body = event_body(
            involved,
            rec.namespace,
            event_type=event_type,
            reason=reason,
            message=message,
            now=clock(),
            component=COMPONENT,
            identity=node,
        )
        try:
            source.create_event(body)
        except Exception as exc:
            log.warning("event not recorded", extra={"pod": rec.key, "reason": reason, "err": str(exc)})

    return record
