"""Parsers and verdict for the gpu_burn_in role.

Inputs are the results the role registered (``rc``, ``stdout``, ``stderr``, ``skipped``);
the verdict is a plain dict so it can be stored as a fact and written to the report.
"""

from __future__ import annotations

import json
import re
from typing import Any

_PASS = {"pass", "passed"}
_NEUTRAL = {"skip", "skipped", "not run", "notrun", "n/a"}
_BURN_LINE = re.compile(r"^\s*GPU\s+(\d+):\s+(OK|FAULTY)\b", re.MULTILINE)


def _json_document(text: str) -> Any:
    """dcgmi may print warnings before the JSON document; parse from the first brace."""
    start = text.find("{")
    end = text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in output")
    return json.loads(text[start : end + 1])


def _text(item: Any) -> str:
    """Warnings are strings in older DCGM and {"warning": ..., "error_id": ...} objects in newer."""
    if isinstance(item, dict):
        return str(item.get("warning") or item.get("message") or item)
    return str(item)


def dcgm_diag_tests(stdout: str) -> list[dict[str, Any]]:
    """Flatten ``dcgmi diag -j`` output into one row per (test, GPU group).

    Understands the DCGM 3.x layout (``DCGM GPU Diagnostic`` > ``test_categories`` > ``tests`` >
    ``results``) and the 4.x layout that puts ``tests`` at the top of the document.
    Raises ValueError when the document holds no test results at all.
    """
    doc = _json_document(stdout or "")
    if not isinstance(doc, dict):
        raise ValueError("diag output is not a JSON object")
    root = doc.get("DCGM GPU Diagnostic", doc)
    if not isinstance(root, dict):
        raise ValueError("'DCGM GPU Diagnostic' is not an object")
    pairs: list[tuple[str, Any]] = []
    for category in root.get("test_categories") or []:
        if isinstance(category, dict):
            pairs.extend((str(category.get("category", "")), t) for t in category.get("tests") or [])
    pairs.extend(("", t) for t in root.get("tests") or [])
    rows: list[dict[str, Any]] = []
    for category, test in pairs:
        if not isinstance(test, dict):
            continue  # DCGM 3.x emits null placeholders between tests
        name = str(test.get("name") or test.get("test_name") or "unnamed test")
        for result in test.get("results") or []:
            if not isinstance(result, dict):
                continue
            info = result.get("info") or []
            warnings = result.get("warnings") or []
            rows.append(
                {
                    "category": category,
                    "test": name,
                    "gpus": str(result.get("gpu_ids", result.get("gpu_id", "all"))),
                    "status": str(result.get("status", "")).strip(),
                    "detail": "; ".join(_text(x) for x in [*warnings, *info] if x),
                }
            )
    if not rows:
        raise ValueError("diag output holds no test results")
    return rows


def gpu_burn_results(stdout: str) -> dict[int, str]:
    """Per-GPU outcome from gpu_burn's closing summary (``GPU <n>: OK|FAULTY``)."""
    text = stdout or ""
    if "Tested " not in text:
        raise ValueError("gpu_burn output has no 'Tested N GPUs' summary (run cut short?)")
    return {int(m.group(1)): m.group(2) for m in _BURN_LINE.finditer(text)}


def _cmd_error(what: str, result: dict[str, Any]) -> str:
    err = (result.get("stderr") or result.get("msg") or "").strip().splitlines()
    tail = err[-1] if err else "no error output"
    return f"{what} exited rc={result.get('rc')}: {tail}"


def gpu_burn_in_verdict(
    diag: dict[str, Any],
    load: dict[str, Any] | None,
    level: int,
    expected_gpus: int,
    load_enabled: bool = True,
    fail_on_warn: bool = True,
) -> dict[str, Any]:
    """Combine the DCGM diagnostic and the sustained load into one verdict."""
    details: dict[str, Any] = {"diag_level": level, "expected_gpus": expected_gpus}
    if diag.get("skipped"):
        return {"status": "skipped", "reasons": ["not run (check mode)"], "details": details}
    reasons: list[str] = []
    try:
        rows = dcgm_diag_tests(diag.get("stdout", ""))
    except ValueError as exc:
        rows = []
        if diag.get("rc", 0) != 0:
            reasons.append(_cmd_error(f"dcgmi diag -r {level}", diag))
        reasons.append(f"dcgmi diag -r {level}: unreadable JSON ({exc})")
    details["diag_tests"] = rows
    for row in rows:
        status = row["status"].lower()
        warned = status.startswith("warn")
        if status in _PASS or status in _NEUTRAL or (warned and not fail_on_warn):
            continue
        label = "warned" if warned else "failed"
        msg = f"dcgmi diag test '{row['test']}' {label} on GPU {row['gpus']}"
        reasons.append(f"{msg}: {row['detail']}" if row["detail"] else msg)
    if rows and diag.get("rc", 0) != 0 and not reasons:
        reasons.append(_cmd_error(f"dcgmi diag -r {level}", diag))

    if load_enabled:
        if load is None or load.get("skipped"):
            reasons.append("gpu_burn load did not run")
        else:
            try:
                burn = gpu_burn_results(load.get("stdout", ""))
            except ValueError as exc:
                burn = {}
                reasons.append(f"gpu_burn: {exc}; {_cmd_error('gpu_burn', load)}")
            details["load"] = {str(k): v for k, v in sorted(burn.items())}
            for gpu, state in sorted(burn.items()):
                if state != "OK":
                    reasons.append(f"gpu_burn reported GPU {gpu} {state} (computation errors under load)")
            if burn and len(burn) != expected_gpus:
                reasons.append(f"gpu_burn tested {len(burn)} GPUs, expected {expected_gpus}")
            if burn and load.get("rc", 0) != 0:
                reasons.append(_cmd_error("gpu_burn", load))
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "details": details}


class FilterModule:
    """gpu_burn_in filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "gpu_burn_in_diag_tests": dcgm_diag_tests,
            "gpu_burn_in_verdict": gpu_burn_in_verdict,
        }
