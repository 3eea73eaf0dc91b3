"""What each team's ``checkpoint-resume`` ConfigMap should hold: pure.

A restart resumes from the latest verified checkpoint: each job's pods mount its entry (``<job>.json``,
``contract.checkpoint_record.resume_entry``) read-only as ``GPUCLUSTER_RESUME_FILE``. :func:`resume_changes` compares
what the records say with what the ConfigMap holds and gives the merge patch's ``data``: each entry to write, and
``None`` for each to remove (a job whose record an operator removed, to start afresh). Fail-static: the entry of a
job whose record is there but does not read is left as it is (never removed, never rewritten), and a key not named
``*.json`` (no job's entry) is left alone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from contract.checkpoint_record import Record, resume_entry, resume_key


def resume_changes(
    records: Mapping[str, Record], unreadable: Collection[str], data: Mapping[str, str]
) -> dict[str, str | None]:
    """The merge patch's ``data`` for one namespace: ``records`` by job, the ConfigMap's ``data`` as read."""
    want = {resume_key(job): resume_entry(job, r.verified) for job, r in records.items() if r.verified is not None}
    keep = {resume_key(job) for job in unreadable}
    changes: dict[str, str | None] = {key: value for key, value in want.items() if data.get(key) != value}
    for key in data:
        if key.endswith(".json") and key not in want and key not in keep:
            changes[key] = None
    return changes
