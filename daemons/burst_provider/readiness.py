"""Running is not Ready: a record's probes begin once its instance runs and its pod is known, and its readiness is
what they say. The kubelet's rules themselves are in ``probes.py``; running one probe is ``prober.py``.

Every function here works on records the caller holds the lock for; none calls a provider or the network.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from daemons.burst_provider.probes import Probe, ProbeState, ReplicaProbes, last_ready, pod_probes
from daemons.burst_provider.record import RUNNING, PodRecord

log = logging.getLogger("burst_provider.readiness")


def start_probes(rec: PodRecord, now: float) -> bool:
    """Begin probing a Running record whose pod is known; True when they began now. Raises ``ProbeSpecError`` when
    the pod's probes cannot be read (refused at translation, so only for a record rebuilt from an older service). A
    record rebuilt after a restart served before it: what the cluster last saw holds until its probes say otherwise."""
    if rec.probes is not None or not rec.pod or rec.phase != RUNNING:
        return False
    probes = pod_probes(rec.pod)
    names = [str(c.get("name", "")) for c in (rec.pod.get("spec") or {}).get("containers") or []]
    if rec.rebuilt:
        rec.probes = ReplicaProbes.resumed(probes, names, rec.start_time or now, now, last_ready(rec.pod))
    else:
        rec.probes = ReplicaProbes.for_pod(probes, names, rec.start_time or now)
    return True


def update_ready(rec: PodRecord, now: float) -> bool:
    """Recompute the record's readiness from its probes; True when it changed (the endpoints must be re-synced)."""
    ready = rec.phase == RUNNING and rec.probes is not None and rec.probes.ready()
    rec.not_ready_detail = rec.probes.failing() if rec.probes is not None else ""
    if ready == rec.ready:
        return False
    rec.ready = ready
    rec.unready_since = None if ready else now
    if ready:
        log.info("pod ready", extra={"pod": rec.key, "provider": rec.provider, "address": rec.address})
    else:
        log.warning("pod not ready", extra={"pod": rec.key, "detail": rec.not_ready_detail})
    return True


def published_port(rec: PodRecord, probe: Probe) -> int:
    """Where the probe's container port is reachable on the instance: a port the provider published under the
    container port's name (a port mapping), else the container port itself."""
    if probe.port_name:
        for p in rec.ports:
            if p.name == probe.port_name:
                return p.port
    return probe.port


@dataclass(frozen=True)
class ProbeJob:
    """One probe that is due: run it against ``address:port`` and record the result in ``probes``."""

    uid: str
    probes: ReplicaProbes
    state: ProbeState
    address: str
    port: int


def due(records: Iterable[PodRecord], now: float, not_ready_limit: float) -> tuple[list[ProbeJob], list[str]]:
    """The probes due now on records that serve, and the uids of records not ready for longer than the limit (they
    are failed, not probed). Records must have had :func:`start_probes` called."""
    jobs: list[ProbeJob] = []
    expired: list[str] = []
    for rec in records:
        if rec.phase != RUNNING or rec.deleting:
            continue
        if not rec.ready and rec.unready_since is not None and now - rec.unready_since > not_ready_limit:
            expired.append(rec.uid)
            continue
        if rec.probes is None or not rec.address:
            continue
        for state in rec.probes.due(now):
            jobs.append(ProbeJob(rec.uid, rec.probes, state, rec.address, published_port(rec, state.probe)))
    return jobs, expired
