"""The PromQL the stall detector sends, one query per input, whatever the number of gangs.

Each query covers every gang at once (one answer per GPU or per node, joined with the gangs in ``readings.py``), so
a cycle costs the same few queries at 8 GPUs or 4,096. Series are read only from the exporters' own scrape jobs
(the stack fills them), so a pod serving look-alike series cannot make a gang look busy or a node look bad.

* tensor activity, per GPU a gang's pod holds: dcgm-exporter's ``DCGM_FI_PROF_PIPE_TENSOR_ACTIVE`` with the pod
  mapping it attaches (``namespace``, ``pod``, ``gpu``); the window's highest (:func:`tensor_max`: the stall
  verdict) and its average (:func:`tensor_mean`: who straggles);
* fabric traffic, per node: the fabric exporter's InfiniBand data counters, both ways, as a rate over the window;
* filesystem writes, per node: the fabric exporter's filesystem collector (NFS and Lustre clients' write bytes), as
  a rate over the window (a checkpoint being written);
* evidence, per node: InfiniBand transport retries and timeouts (``hw_counters``) and hard link events (InfiniBand
  link downs and recoveries, NVLink recoveries), over the window; the card's XIDs (not the program's:
  ``contract/xids.py``) that appeared within it (:func:`hardware_xids`); and the share of the window each node's
  most throttled GPU spent slowed for heat or power (:func:`throttled`).
"""

from __future__ import annotations

from collections.abc import Sequence

from contract.constants import IB_TRANSPORT_ERRORS
from contract.dcgm import with_node
from contract.xids import new_xid_filter, program_xid_filter
from daemons.fabric_exporter import METRIC_PREFIX as FABRIC

TENSOR_METRIC = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
#: The labels dcgm-exporter's pod mapping puts on a GPU's series (``kubernetes.enablePodLabels`` aside).
POD_LABELS = ("namespace", "pod", "gpu")
FABRIC_DATA = (
    f"{FABRIC}_infiniband_port_transmit_data_bytes_total",
    f"{FABRIC}_infiniband_port_receive_data_bytes_total",
)
FS_WRITES = f"{FABRIC}_filesystem_write_bytes_total"
IB_HW_COUNTERS = f"{FABRIC}_infiniband_hw_counters_total"
IB_ERRORS = f"{FABRIC}_infiniband_port_errors_total"
NVLINK_ERRORS = f"{FABRIC}_nvlink_errors_total"
#: dcgm-exporter's last XID of a GPU (its value the code) and its clock event (throttle) reasons bitmask.
XID_METRIC = "DCGM_FI_DEV_XID_ERRORS"
CLOCK_EVENTS_METRIC = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS"
#: The bits of DCGM's clock event reasons (``DCGM_CLOCKS_EVENT_REASON_*``) that mean heat or power trouble:
#: HW_SLOWDOWN (0x8), SW_THERMAL (0x20), HW_THERMAL (0x40), HW_POWER_BRAKE (0x80). Not SW_POWER_CAP (0x4): a GPU
#: held at its power limit under full load works as designed. PromQL has no bitwise operators: bit 3 is
#: ``floor(x / 8) % 2``, bits 5 to 7 ``floor(x / 32) % 8``.
_SLOWED = "clamp_max(floor({x} / 8) % 2 + floor({x} / 32) % 8, 1)"
#: Subquery resolution of the throttled share: this many steps over the window.
_THROTTLE_STEPS = 10


def _selector(metric: str, *matchers: str) -> str:
    """``metric{m1,m2}`` with the empty matchers left out."""
    return metric + "{" + ",".join(m for m in matchers if m) + "}"


def _node(expr: str) -> str:
    """``expr`` (dcgm-exporter series) with its host label (either spelling) copied into ``node``, as the alerts
    do."""
    return with_node(expr)


def _job(job: str | None) -> str:
    return f'job="{job}"' if job else ""


def _namespaces(namespaces: Sequence[str]) -> str:
    return 'namespace=~"' + "|".join(sorted(namespaces)) + '"' if namespaces else 'namespace!=""'


def window(seconds: float) -> str:
    """A range selector's duration: whole seconds, at least one."""
    return f"{max(1, round(seconds))}s"


def _by_gpu(over: str, job: str | None, namespaces: Sequence[str], seconds: float) -> str:
    series = _selector(TENSOR_METRIC, _job(job), _namespaces(namespaces), 'pod!=""')
    return f"max by ({', '.join(POD_LABELS)}) ({over}({series}[{window(seconds)}]))"


def tensor_max(job: str | None, namespaces: Sequence[str], seconds: float) -> str:
    return _by_gpu("max_over_time", job, namespaces, seconds)


def tensor_mean(job: str | None, namespaces: Sequence[str], seconds: float) -> str:
    return _by_gpu("avg_over_time", job, namespaces, seconds)


def fabric_bytes(job: str | None, seconds: float) -> str:
    """Both ways, summed per node. Two sums added, not one over both names: ``rate`` drops the name, and a port's
    transmit and receive series would then collide. A node missing either direction has no reading (unknown)."""
    w = window(seconds)
    return " + ".join(f"sum by (node) (rate({_selector(name, _job(job))}[{w}]))" for name in FABRIC_DATA)


def storage_writes(job: str | None, seconds: float) -> str:
    """Bytes per second each node's filesystem clients wrote over the window (every export and instance summed)."""
    return f"sum by (node) (rate({_selector(FS_WRITES, _job(job))}[{window(seconds)}]))"


def transport_errors(job: str | None, seconds: float) -> str:
    series = _selector(IB_HW_COUNTERS, _job(job), 'counter=~"' + "|".join(IB_TRANSPORT_ERRORS) + '"')
    return f"sum by (node) (increase({series}[{window(seconds)}]))"


def link_errors(job: str | None, seconds: float) -> str:
    """Hard link events only (an InfiniBand link down or recovering, an NVLink recovery): the background trickle of
    symbol and CRC errors a healthy fleet shows is the alerts' business, judged as a ratio, not a suspect's."""
    names = '__name__=~"' + IB_ERRORS + "|" + NVLINK_ERRORS + '"'
    series = _selector("", names, _job(job), 'type=~"link_downed|link_error_recovery|recovery"')
    return f"sum by (node) (increase({series}[{window(seconds)}]))"


def hardware_xids(job: str | None, seconds: float) -> str:
    """Per node, the GPUs whose XID changed within the window (or appeared in it) to a code that is the card's."""
    x = _selector(XID_METRIC, _job(job))
    w = window(seconds)
    new = f"({new_xid_filter(x, w)})"
    return f"count by (node) ({_node(f'{new} unless ({program_xid_filter(x)})')})"


def throttled(job: str | None, seconds: float) -> str:
    """Per node, the share of the window (0 to 1) its most throttled GPU spent slowed for heat or power."""
    x = _selector(CLOCK_EVENTS_METRIC, _job(job))
    step = window(max(1.0, seconds / _THROTTLE_STEPS))
    share = f"avg_over_time(({_SLOWED.format(x=x)})[{window(seconds)}:{step}])"
    return f"max by (node) ({_node(share)})"


def cycle_queries(
    dcgm_job: str | None, fabric_job: str | None, namespaces: Sequence[str], seconds: float
) -> dict[str, str]:
    """Every query of one cycle by its name, in the order the controller reads them."""
    return {
        "tensor-max": tensor_max(dcgm_job, namespaces, seconds),
        "tensor-mean": tensor_mean(dcgm_job, namespaces, seconds),
        "fabric": fabric_bytes(fabric_job, seconds),
        "storage-writes": storage_writes(fabric_job, seconds),
        "transport-errors": transport_errors(fabric_job, seconds),
        "link-errors": link_errors(fabric_job, seconds),
        "hardware-xids": hardware_xids(dcgm_job, seconds),
        "throttled": throttled(dcgm_job, seconds),
    }
