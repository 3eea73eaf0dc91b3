"""The pod's own probes, judged for a rented replica the way the kubelet judges them for a local one.

Nothing runs a rented replica's probes but this service: the provider only reports that the instance's containers
are up, which is not the same as serving (a model server is up for minutes before its weights are loaded). So the
service runs each container's ``startupProbe``, ``readinessProbe`` and ``livenessProbe`` against the instance's
address (``prober.py`` performs one probe; this module decides when to, and what the results mean).

The rules are the kubelet's (``pkg/kubelet/prober/worker.go``, Kubernetes 1.36):

- defaults: ``periodSeconds`` 10, ``timeoutSeconds`` 1, ``successThreshold`` 1, ``failureThreshold`` 3,
  ``initialDelaySeconds`` 0, counted from when the container started (here: the instance ran);
- readiness starts *failed* (a container with a readiness probe is not ready until it passes), liveness starts
  passed, and a container without a readiness probe is ready once it is started;
- with a startup probe, readiness and liveness are not run until it has passed; it is not run again after;
- a result changes only after ``failureThreshold`` failures, or ``successThreshold`` successes, in a row;
- a liveness or startup probe that reaches its failure threshold kills the container. A rented instance is not
  restarted in place: the pod fails, its instance is deleted, and the ReplicaSet's replacement is placed afresh.

One rule is this service's own. After a restart of the service, its records are rebuilt from the providers'
listings while the replicas go on serving; nothing it knew of their probes survived. A replica is then **resumed**
(:meth:`ReplicaProbes.resumed`) with the readiness the cluster last recorded for its containers (the pod's
``containerStatuses[].ready``), not started as if it had just booted: readiness that is not known is not taken
away (fail-static). Its probes run at once, and a replica that really stopped serving goes unready after
``failureThreshold`` failures, as any running replica does.

A probe the service cannot run remotely is refused when the pod is translated, naming the field: ``exec`` (a
command inside the container: no provider runs one for us), ``grpc``, and ``httpGet.host`` (a replica is probed at
its own address, never at a host the pod names).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

ProbeKind = Literal["startup", "readiness", "liveness"]
PROBE_KINDS: tuple[ProbeKind, ...] = ("startup", "readiness", "liveness")
_FIELDS: dict[ProbeKind, str] = {
    "startup": "startupProbe",
    "readiness": "readinessProbe",
    "liveness": "livenessProbe",
}

#: The kubelet's defaults (k8s.io/api/core/v1 Probe, and the API server's defaulting).
DEFAULT_PERIOD_SECONDS = 10
DEFAULT_TIMEOUT_SECONDS = 1
DEFAULT_SUCCESS_THRESHOLD = 1
DEFAULT_FAILURE_THRESHOLD = 3


class ProbeSpecError(ValueError):
    """A probe this service cannot run against a rented replica; the message names the field and why."""


@dataclass(frozen=True)
class Probe:
    """One container probe, with its port resolved to the container's port number."""

    kind: ProbeKind
    container: str
    action: Literal["http", "tcp"]
    port: int
    port_name: str = ""
    path: str = "/"
    scheme: Literal["http", "https"] = "http"
    headers: tuple[tuple[str, str], ...] = ()
    initial_delay: float = 0.0
    period: float = DEFAULT_PERIOD_SECONDS
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    success_threshold: int = DEFAULT_SUCCESS_THRESHOLD
    failure_threshold: int = DEFAULT_FAILURE_THRESHOLD

    def describe(self) -> str:
        if self.action == "tcp":
            return f"{self.kind} probe tcp-socket :{self.port}"
        return f"{self.kind} probe {self.scheme}-get :{self.port}{self.path}"


def _whole(spec: Mapping[str, Any], key: str, default: int, low: int, where: str) -> int:
    value = spec.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ProbeSpecError(f"{where}.{key}: expected a whole number of at least {low}, got {value!r}"[:200])
    return value


def _port(target: object, container: Mapping[str, Any], where: str) -> tuple[int, str]:
    """(number, name) of a probe's port: a number as given, a name looked up among the container's ports."""
    if isinstance(target, int) and not isinstance(target, bool) and 0 < target < 65536:
        for p in container.get("ports") or []:
            if p.get("containerPort") == target:
                return target, str(p.get("name") or "")
        return target, ""
    if isinstance(target, str) and target:
        if target.isdigit() and 0 < int(target) < 65536:
            return _port(int(target), container, where)
        for p in container.get("ports") or []:
            if p.get("name") == target:
                return int(p["containerPort"]), target
        raise ProbeSpecError(f"{where}.port: no container port is named {target!r}"[:200])
    raise ProbeSpecError(f"{where}.port: expected a port number or a container port's name, got {target!r}"[:200])


def parse_probe(kind: ProbeKind, raw: object, container: Mapping[str, Any], where: str) -> Probe:
    """One probe of a container; ProbeSpecError names what cannot be run remotely."""
    if not isinstance(raw, Mapping):
        raise ProbeSpecError(f"{where}: expected an object")
    name = str(container.get("name") or "")
    handlers = [h for h in ("exec", "httpGet", "tcpSocket", "grpc") if raw.get(h) is not None]
    if len(handlers) != 1:
        raise ProbeSpecError(f"{where}: exactly one of exec, httpGet, tcpSocket, grpc is required, got {handlers}")
    handler = handlers[0]
    if handler == "exec":
        raise ProbeSpecError(
            f"{where}.exec: a command probe runs inside the container, which no rented provider does for this "
            "service; declare an httpGet or tcpSocket probe to burst this pod"
        )
    if handler == "grpc":
        raise ProbeSpecError(f"{where}.grpc: gRPC probes are not run against rented replicas; use httpGet or tcpSocket")
    timing = {
        "initial_delay": float(_whole(raw, "initialDelaySeconds", 0, 0, where)),
        "period": float(_whole(raw, "periodSeconds", DEFAULT_PERIOD_SECONDS, 1, where)),
        "timeout": float(_whole(raw, "timeoutSeconds", DEFAULT_TIMEOUT_SECONDS, 1, where)),
        "success_threshold": _whole(raw, "successThreshold", DEFAULT_SUCCESS_THRESHOLD, 1, where),
        "failure_threshold": _whole(raw, "failureThreshold", DEFAULT_FAILURE_THRESHOLD, 1, where),
    }
    if kind != "readiness" and timing["success_threshold"] != 1:
        raise ProbeSpecError(f"{where}.successThreshold: must be 1 for a {kind} probe (the API server's rule)")
    h = raw[handler]
    if not isinstance(h, Mapping):
        raise ProbeSpecError(f"{where}.{handler}: expected an object")
    port, port_name = _port(h.get("port"), container, f"{where}.{handler}")
    if handler == "tcpSocket":
        if h.get("host"):
            raise ProbeSpecError(f"{where}.tcpSocket.host: a rented replica is probed at its own address only")
        return Probe(kind, name, "tcp", port, port_name, **timing)  # type: ignore[arg-type]
    if h.get("host"):
        raise ProbeSpecError(f"{where}.httpGet.host: a rented replica is probed at its own address only")
    scheme = str(h.get("scheme") or "HTTP").lower()
    if scheme not in ("http", "https"):
        raise ProbeSpecError(f"{where}.httpGet.scheme: expected HTTP or HTTPS, got {h.get('scheme')!r}"[:200])
    path = str(h.get("path") or "/")
    if not path.startswith("/"):
        path = "/" + path
    headers = tuple(
        (str(x.get("name") or ""), str(x.get("value") or "")) for x in h.get("httpHeaders") or [] if x.get("name")
    )
    return Probe(
        kind,
        name,
        "http",
        port,
        port_name,
        path=path,
        scheme=scheme,  # type: ignore[arg-type]
        headers=headers,
        **timing,  # type: ignore[arg-type]
    )


def pod_probes(pod: Mapping[str, Any]) -> tuple[Probe, ...]:
    """Every probe of every container of the pod, in container order; ProbeSpecError for the first bad one."""
    out: list[Probe] = []
    for i, c in enumerate((pod.get("spec") or {}).get("containers") or []):
        for kind in PROBE_KINDS:
            raw = c.get(_FIELDS[kind])
            if raw is not None:
                out.append(parse_probe(kind, raw, c, f"spec.containers[{i}].{_FIELDS[kind]}"))
    return tuple(out)


def last_ready(pod: Mapping[str, Any]) -> frozenset[str]:
    """The containers a pod's status (as the cluster last recorded it) says are ready; none unless it is Running."""
    status = pod.get("status")
    if not isinstance(status, Mapping) or status.get("phase") != "Running":
        return frozenset()
    found = status.get("containerStatuses")
    return frozenset(
        str(c.get("name"))
        for c in (found if isinstance(found, list) else [])
        if isinstance(c, Mapping) and c.get("ready") is True
    )


@dataclass
class ProbeState:
    """One probe's worker state: the kubelet's ``lastResult``/``resultRun`` and the result it has set."""

    probe: Probe
    result: bool | None  # None: unknown (a startup probe before it is settled)
    last: bool | None = None
    run: int = 0
    next_at: float = 0.0
    on_hold: bool = False  # a startup probe that passed, a liveness or startup probe that failed
    in_flight: bool = False
    detail: str = ""  # what the last failure said

    @classmethod
    def start(cls, probe: Probe, started_at: float) -> ProbeState:
        initial = {"readiness": False, "liveness": True, "startup": None}[probe.kind]
        return cls(probe, initial, next_at=started_at + probe.initial_delay)


@dataclass(frozen=True)
class Killed:
    """A liveness or startup probe reached its failure threshold: the container would be killed."""

    container: str
    kind: ProbeKind
    failures: int
    detail: str

    def message(self) -> str:
        return f"{self.kind} probe of container {self.container} failed {self.failures} times in a row: {self.detail}"


@dataclass
class ReplicaProbes:
    """The probes of one rented replica, from when its instance ran. Pure: the caller passes the time."""

    started_at: float
    states: list[ProbeState] = field(default_factory=list)
    containers: tuple[str, ...] = ()

    @classmethod
    def for_pod(cls, probes: Sequence[Probe], containers: Sequence[str], started_at: float) -> ReplicaProbes:
        return cls(started_at, [ProbeState.start(p, started_at) for p in probes], tuple(containers))

    @classmethod
    def resumed(
        cls, probes: Sequence[Probe], containers: Sequence[str], started_at: float, now: float, ready: Iterable[str]
    ) -> ReplicaProbes:
        """The probes of a replica that ran before the service restarted: each container in ``ready`` (the ones the
        cluster last saw ready) counts as started and ready until its probes say otherwise; every probe is due now.
        The others start as a new replica's."""
        last_ready = set(ready)
        states = []
        for p in probes:
            state = ProbeState.start(p, started_at)
            if p.container in last_ready:
                if p.kind == "startup":
                    state.result, state.on_hold = True, True
                elif p.kind == "readiness":
                    state.result = True
                state.next_at = now
            states.append(state)
        return cls(started_at, states, tuple(containers))

    def _state(self, container: str, kind: ProbeKind) -> ProbeState | None:
        for s in self.states:
            if s.probe.container == container and s.probe.kind == kind:
                return s
        return None

    def started(self, container: str) -> bool:
        """The container counts as started: no startup probe, or it has passed."""
        s = self._state(container, "startup")
        return s is None or s.result is True

    def container_ready(self, container: str) -> bool:
        if not self.started(container):
            return False
        s = self._state(container, "readiness")
        return s is None or s.result is True

    def ready(self) -> bool:
        """Every container is ready: the pod's Ready condition, and its endpoints' ``ready``."""
        return all(self.container_ready(c) for c in self.containers)

    def due(self, now: float) -> list[ProbeState]:
        """The probes to run now; each is marked in flight until :meth:`record` gets its result."""
        out = []
        for s in self.states:
            if s.in_flight or s.on_hold or now < s.next_at:
                continue
            # A startup probe runs until the container has started; readiness and liveness only after that.
            if (s.probe.kind == "startup") == self.started(s.probe.container):
                continue
            s.in_flight = True
            out.append(s)
        return out

    def record(self, state: ProbeState, ok: bool, detail: str, now: float) -> Killed | None:
        """Apply one probe's result (the kubelet's threshold rule); a Killed when the container would be killed."""
        state.in_flight = False
        state.next_at = now + state.probe.period
        if not ok:
            state.detail = detail
        if state.last == ok:
            state.run += 1
        else:
            state.last, state.run = ok, 1
        threshold = state.probe.failure_threshold if not ok else state.probe.success_threshold
        if state.run < threshold:
            return None
        state.result = ok
        kind = state.probe.kind
        if kind == "startup" or (kind == "liveness" and not ok):
            state.on_hold = True
            runs, state.run = state.run, 0
            if not ok:
                return Killed(state.probe.container, kind, runs, state.detail)
        return None

    def failing(self) -> str:
        """What the failing readiness or startup probes last said, for the pod's message."""
        parts = [
            f"{s.probe.describe()} of {s.probe.container}: {s.detail}"
            for s in self.states
            if s.detail and s.result is not True and s.probe.kind in ("readiness", "startup")
        ]
        return "; ".join(parts)
