"""Report, summary and taint value for the node_admission role."""

from __future__ import annotations

import re
from typing import Any

# Short names used in the taint value; a taint value is a label value (<= 63 chars, [A-Za-z0-9._-]).
SHORT = {
    "nvidia_container_toolkit": "gpu-visibility",
    "gpu_burn_in": "burn-in",
    "gpu_thermal_acceptance": "thermal",
    "nvlink_acceptance": "nvlink",
    "ib_acceptance": "ib",
    "ib_acceptance_pairs": "ib-pairs",
    "ib_acceptance_collective": "nccl",
    "storage_acceptance": "storage",
}


def admission_report(host: str, run_id: str, verdicts: dict[str, Any], roles: list[str]) -> dict[str, Any]:
    """One node's report from each required role's ``<role>_verdict`` (``verdicts[role]``), and its status."""
    checks: dict[str, Any] = {}
    failing: list[str] = []
    skipped = 0
    for role in roles:
        verdict = verdicts.get(role)
        if not isinstance(verdict, dict) or verdict.get("status") not in {"pass", "fail", "skipped"}:
            verdict = {"status": "fail", "reasons": [f"{role} did not run or left no verdict"], "details": {}}
        checks[role] = verdict
        if verdict["status"] == "fail":
            failing.append(role)
        elif verdict["status"] == "skipped":
            skipped += 1
    if failing:
        status = "fail"
    elif skipped:
        status = "skipped"
    else:
        status = "pass"
    reasons = [f"{role}: {reason}" for role in failing for reason in checks[role]["reasons"]]
    return {
        "host": host,
        "run_id": run_id,
        "status": status,
        "failed_checks": failing,
        "reasons": reasons,
        "checks": checks,
    }


def taint_reason(report: dict[str, Any]) -> str:
    """Label-safe summary of the failing checks, e.g. ``thermal.nvlink``."""
    names = [SHORT.get(r, r) for r in report.get("failed_checks", [])] or ["unknown"]
    value = re.sub(r"[^A-Za-z0-9._-]", "-", ".".join(names))[:63]
    return value.strip("._-") or "unknown"


def admission_summary(run_id: str, report_list: list[dict[str, Any]], all_hosts: list[str]) -> dict[str, Any]:
    """Fleet summary: every host's status and every failing host's reasons."""
    reports = {r["host"]: r for r in report_list}
    hosts: dict[str, Any] = {}
    for host in all_hosts:
        rep = reports.get(host)
        if not isinstance(rep, dict):
            hosts[host] = {
                "status": "fail",
                "reasons": ["no report: the host failed or was unreachable before admission"],
            }
        else:
            hosts[host] = {"status": rep["status"], "reasons": rep["reasons"]}
    failing = sorted(h for h, v in hosts.items() if v["status"] == "fail")
    return {
        "run_id": run_id,
        "hosts_total": len(all_hosts),
        "passed": sorted(h for h, v in hosts.items() if v["status"] == "pass"),
        "failed": {h: hosts[h]["reasons"] for h in failing},
        "skipped": sorted(h for h, v in hosts.items() if v["status"] == "skipped"),
    }


class FilterModule:
    """node_admission filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "node_admission_report": admission_report,
            "node_admission_taint_reason": taint_reason,
            "node_admission_summary": admission_summary,
        }
