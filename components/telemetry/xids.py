"""Whose fault an XID is: the program's, or the card's.

Source: NVIDIA, "Xid Errors", the Xid catalog for Ampere and newer GPUs
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), whose "Resolution Bucket" columns say what
to do first for each XID. The XIDs below are those whose first action is to restart the application and whose
investigation starts at the application (its CUDA code, its memory accesses) or that only follow an earlier error:
the card is fine, and a node is never quarantined for them. Every other XID, including one this table does not
know, is the card's (a double-bit or uncontained ECC error, a row-remap failure, an NVLink error, a GPU fallen off
the bus, a GSP error ...): the node is quarantined at the first, as before.

DCGM exports only the last XID a GPU reported (``DCGM_FI_DEV_XID_ERRORS``, its value the code), so a program XID
that follows a hardware one hides it from a scrape that comes later; the hardware XID's own scrape, and the
counters beside it (ECC, row remap, NVLink), still carry it.
"""

from __future__ import annotations

from collections.abc import Mapping

#: The program's XIDs: code -> the catalog's description.
PROGRAM_XIDS: Mapping[int, str] = {
    13: "Graphics Engine Exception (an illegal instruction or address in the program's kernel)",
    31: "GPU memory page fault (the program touched memory it does not own)",
    43: "GPU stopped processing (the driver reset the program's channel after its fault)",
    45: "Preemptive cleanup (the driver cleans up after an earlier error or a killed process)",
}


def is_program_xid(code: int) -> bool:
    return code in PROGRAM_XIDS


def program_xid_filter(metric: str) -> str:
    """PromQL: the samples of ``metric`` (its value an XID code) that are the program's."""
    return " or ".join(f"{metric} == {code}" for code in sorted(PROGRAM_XIDS))
