"""The few NVML calls the NVLink collector makes, behind a Protocol.

``PynvmlApi`` calls the real library (``nvidia-ml-py``, module ``pynvml``). ``FakeNvml`` has the same
semantics for tests and benchmarks: it raises ``pynvml.NVMLError_NotSupported`` for GPUs without NVLink,
``pynvml.NVMLError_InvalidArgument`` for link indices the GPU does not have (as NVML does), and reports a
link that is down as state 0 (``NVML_FEATURE_DISABLED``) whose error counters raise NotSupported.

Privileges: NVML needs read/write access to the device nodes ``/dev/nvidiactl`` and ``/dev/nvidia<N>``
(in Kubernetes: the NVIDIA container runtime with ``NVIDIA_VISIBLE_DEVICES=all`` or a GPU device-plugin
allocation, and the ``utility`` driver capability). No ``privileged`` container and no Linux capability
are needed for the queries used here (link state, speed and error counters are read-only).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import pynvml

# Error counter ids (nvmlNvLinkErrorCounter_t) -> our `type` label.
NVLINK_ERROR_COUNTERS: dict[int, str] = {
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: "crc_flit",
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: "crc_data",
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY: "replay",
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: "recovery",
}
MAX_LINKS: int = pynvml.NVML_NVLINK_MAX_LINKS


class LinkReading(NamedTuple):
    """One NVLink link: state, speed (None when NVML does not report it), error counters by type.

    ``errors`` holds only the counters NVML returned (a link that is down, or an architecture without a
    counter, answers NotSupported and the counter is absent); ``problems`` lists unexpected NVML errors.
    """

    up: bool
    speed_mbytes: int | None
    errors: dict[str, int]
    problems: tuple[str, ...] = ()


def read_link(api: NvmlApi, handle: Any, link: int) -> LinkReading:
    """Compose a ``LinkReading`` from the single NVML calls.

    Raises ``NVMLError_NotSupported`` when the GPU (or this link) has no NVLink and
    ``NVMLError_InvalidArgument`` past the GPU's last link, as ``nvmlDeviceGetNvLinkState`` does.
    """
    state = api.nvlink_state(handle, link)
    problems: list[str] = []
    speed: int | None = None
    try:
        speed = api.nvlink_speed_mbytes(handle, link)
    except pynvml.NVMLError_NotSupported:
        pass
    except pynvml.NVMLError as exc:
        problems.append(f"speed: {exc}")
    errors: dict[str, int] = {}
    for counter_id, type_name in NVLINK_ERROR_COUNTERS.items():
        try:
            errors[type_name] = api.nvlink_error_counter(handle, link, counter_id)
        except pynvml.NVMLError_NotSupported:
            continue
        except pynvml.NVMLError as exc:
            problems.append(f"{type_name}: {exc}")
    return LinkReading(state == pynvml.NVML_FEATURE_ENABLED, speed, errors, tuple(problems))


class NvmlApi(Protocol):
    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def device_count(self) -> int: ...
    def device_handle(self, index: int) -> Any: ...
    def device_uuid(self, handle: Any) -> str: ...
    def nvlink_state(self, handle: Any, link: int) -> int: ...
    def nvlink_speed_mbytes(self, handle: Any, link: int) -> int: ...
    def nvlink_error_counter(self, handle: Any, link: int, counter: int) -> int: ...
    def nvlink_link(self, handle: Any, link: int) -> LinkReading: ...


class PynvmlApi:
    """The real NVML library."""

    def init(self) -> None:
        pynvml.nvmlInit()

    def shutdown(self) -> None:
        pynvml.nvmlShutdown()

    def device_count(self) -> int:
        return int(pynvml.nvmlDeviceGetCount())

    def device_handle(self, index: int) -> Any:
        return pynvml.nvmlDeviceGetHandleByIndex(index)

    def device_uuid(self, handle: Any) -> str:
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        return uuid.decode() if isinstance(uuid, bytes) else str(uuid)

    def nvlink_state(self, handle: Any, link: int) -> int:
        return int(pynvml.nvmlDeviceGetNvLinkState(handle, link))

    def nvlink_speed_mbytes(self, handle: Any, link: int) -> int:
        # NVML_FI_DEV_NVLINK_GET_SPEED with the link as scope: per-link speed in MB/s.
        values = pynvml.nvmlDeviceGetFieldValues(handle, [(pynvml.NVML_FI_DEV_NVLINK_GET_SPEED, link)])
        ret = values[0].nvmlReturn
        if ret != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(ret)
        return int(values[0].value.uiVal)

    def nvlink_error_counter(self, handle: Any, link: int, counter: int) -> int:
        return int(pynvml.nvmlDeviceGetNvLinkErrorCounter(handle, link, counter))

    def nvlink_link(self, handle: Any, link: int) -> LinkReading:
        return read_link(self, handle, link)


@dataclass
class FakeLink:
    up: bool = True
    speed_mbytes: int = 53125  # one NVLink4 link: 50 GB/s per direction (x 1.0625 line coding)
    errors: dict[str, int] = field(default_factory=dict)  # crc_flit, crc_data, replay, recovery


@dataclass
class FakeGpu:
    uuid: str
    nvlink_supported: bool = True
    links: list[FakeLink] = field(default_factory=list)


class FakeNvml:
    """In-memory NVML with NVML's error behaviour. Mutable so tests can advance counters."""

    def __init__(self, gpus: list[FakeGpu], *, library_missing: bool = False) -> None:
        self.gpus = gpus
        self.library_missing = library_missing
        self.initialized = False

    @classmethod
    def from_json(cls, path: str | Path) -> FakeNvml:
        """Load ``{"gpus": [{"uuid": "GPU-...", "nvlinkSupported": true, "links": [{"up": true,
        "speedMBytes": 53125, "errors": {"crc_flit": 0}}]}]}``."""
        try:
            doc = json.loads(Path(path).read_text())
            gpus = [
                FakeGpu(
                    uuid=str(g["uuid"]),
                    nvlink_supported=bool(g.get("nvlinkSupported", True)),
                    links=[
                        FakeLink(
                            up=bool(lk.get("up", True)),
                            speed_mbytes=int(lk.get("speedMBytes", 53125)),
                            errors={str(k): int(v) for k, v in lk.get("errors", {}).items()},
                        )
                        for lk in g.get("links", [])
                    ],
                )
                for g in doc["gpus"]
            ]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"NVML fixture {path}: {type(exc).__name__}: {exc}") from exc
        return cls(gpus)

    def _check(self) -> None:
        if self.library_missing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        if not self.initialized:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def init(self) -> None:
        if self.library_missing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialized = True

    def shutdown(self) -> None:
        self._check()
        self.initialized = False

    def device_count(self) -> int:
        self._check()
        return len(self.gpus)

    def device_handle(self, index: int) -> Any:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[index]

    def device_uuid(self, handle: Any) -> str:
        self._check()
        return str(handle.uuid)

    def _link(self, handle: Any, link: int) -> FakeLink:
        self._check()
        gpu: FakeGpu = handle
        if not gpu.nvlink_supported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= link < len(gpu.links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.links[link]

    def nvlink_state(self, handle: Any, link: int) -> int:
        lk = self._link(handle, link)
        return int(pynvml.NVML_FEATURE_ENABLED if lk.up else pynvml.NVML_FEATURE_DISABLED)

    def nvlink_speed_mbytes(self, handle: Any, link: int) -> int:
        lk = self._link(handle, link)
        return lk.speed_mbytes if lk.up else 0

    def nvlink_error_counter(self, handle: Any, link: int, counter: int) -> int:
        lk = self._link(handle, link)
        if not lk.up:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if counter not in NVLINK_ERROR_COUNTERS:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(lk.errors.get(NVLINK_ERROR_COUNTERS[counter], 0))

    def nvlink_link(self, handle: Any, link: int) -> LinkReading:
        """Same result and errors as ``read_link(self, ...)``, without six Python calls per link."""
        lk = self._link(handle, link)
        if not lk.up:
            return LinkReading(False, 0, {})
        errors = lk.errors
        return LinkReading(True, lk.speed_mbytes, {name: errors.get(name, 0) for name in _TYPE_NAMES})


_TYPE_NAMES = tuple(NVLINK_ERROR_COUNTERS.values())
