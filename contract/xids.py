"""Whose fault an XID is: the program's, or the card's.

Source: NVIDIA, "Xid Errors", the Xid catalog for Ampere and newer GPUs
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), whose two "Resolution Bucket" columns say
what to do first (immediate action) and where to look (investigatory action). The program's XIDs are those whose
immediate action is ``RESTART_APP`` and whose investigation starts at the application (``CHECK_APP/CUDA``, or the
catalog's own workflow for 13 and 31), and the two that only follow another error (43: ``IGNORE``; 45: "follow
other Xid"): the card is fine, and a node is never quarantined for them. Every other XID, including one this table
does not know, is the card's (48 double-bit ECC, 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 94/95
contained/uncontained memory errors, 119/120 GSP ...): the node is quarantined at the first, as before. 80
(corrupted data sent to the GPU) has the program's buckets too, but the catalog's older listing names hardware, bus
and memory corruption among its causes: it stays the card's.

DCGM exports only the last XID a GPU reported (``DCGM_FI_DEV_XID_ERRORS``, its value the code), so a program XID
that follows a hardware one hides it from a scrape that comes later; the hardware XID's own scrape, and the
counters beside it (ECC, row remap, NVLink), still carry it.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The program's XIDs: code -> the catalog's description.
PROGRAM_XIDS: Mapping[int, str] = {
    11: "Invalid or corrupted push buffer stream (RESTART_APP; CHECK_APP/CUDA)",
    13: "Graphics Engine Exception (RESTART_APP; WORKFLOW_XID_13)",
    31: "GPU memory page fault (RESTART_APP; WORKFLOW_XID_31)",
    32: "Invalid or corrupted push buffer stream (RESTART_APP; CHECK_APP/CUDA)",
    43: "GPU stopped processing: the channel was reset after the program's fault (IGNORE)",
    45: "Preemptive cleanup, due to previous errors (follow the other Xid)",
    69: "Graphics Engine class error (RESTART_APP; CHECK_APP/CUDA)",
}


def new_xid_filter(metric: str, window: str) -> str:
    """PromQL: the samples of ``metric`` whose XID changed within ``window`` (or appeared in it), unparenthesised."""
    return f"(changes({metric}[{window}]) > 0 and {metric} > 0) or ({metric} > 0 unless {metric} offset {window})"


def program_xid_filter(metric: str) -> str:
    """PromQL: the samples of ``metric`` (its value an XID code) that are the program's."""
    return " or ".join(f"{metric} == {code}" for code in sorted(PROGRAM_XIDS))
