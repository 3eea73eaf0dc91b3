"""Parsers and verdict for the gpu_burn_in role.

Inputs are the results the role registered (``rc``, ``stdout``, ``stderr``, ``skipped``);
the verdict is a plain dict so it can be stored as a fact and written to the report.
"""

from __future__ import annotations

import json
import re
from typing import Any

DCGM_3X_ROOT = "DCGM GPU Diagnostic"
DCGM_4X_ROOT = "DCGM Diagnostic"
_PASS = {"pass", "passed"}
_NEUTRAL = {"skip", "skipped", "not run", "notrun", "n/a"}
_BURN_LINE = re.compile(r"^\s*GPU\s+(\d+):\s+(OK|FAULTY)\b", re.MULTILINE)


def _json_document(text: str) -> Any:
    """dcgmi may print warnings before the JSON document; parse from the first brace to the last."""
    start = text.find("{")
    end = text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("no JSON object in output")
    try:
        return json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"output is not valid JSON: {exc}") from exc


def _text(item: Any) -> str:
    """Warnings are strings in older DCGM and {"warning": ..., "error_id": ...} objects in newer."""
    if isinstance(item, dict):
        return str(item.get("warning") or item.get("message") or item)
    return str(item)


def _detail(entry: dict[str, Any]) -> str:
    """Warnings, then info lines, of one result or test summary, joined."""
    warnings = entry.get("warnings") or []
    info = entry.get("info") or []
    if not isinstance(warnings, list):
        warnings = [warnings]
    if not isinstance(info, list):
        info = [info]  # DCGM 2.x wrote info as one string
    return "; ".join(_text(x) for x in [*warnings, *info] if x)


def _items(node: dict[str, Any], key: str, where: str) -> list[Any]:
    """``node[key]`` as a list (absent reads as empty); anything else is a malformed document."""
    value = node.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where} > {key} is {type(value).__name__}, not a list")
    return value


def _tests(root: dict[str, Any], layout: str) -> list[tuple[str, dict[str, Any], str]]:
    """(category, test, where) for every test under ``test_categories``; null placeholders are dropped."""
    found = []
    for ci, category in enumerate(_items(root, "test_categories", f"{layout!r}")):
        where = f"{layout!r} > test_categories[{ci}]"
        if not isinstance(category, dict):
            raise ValueError(f"{where} is {type(category).__name__}, not an object")
        for ti, test in enumerate(_items(category, "tests", where)):
            if test is None:
                continue  # DCGM 3.x emits null placeholders between tests
            if not isinstance(test, dict):
                raise ValueError(f"{where} > tests[{ti}] is {type(test).__name__}, not an object")
            found.append((str(category.get("category", "")), test, f"{where} > tests[{ti}]"))
    return found


def _results(test: dict[str, Any], where: str) -> list[dict[str, Any]]:
    results = _items(test, "results", where)
    for ri, result in enumerate(results):
        if not isinstance(result, dict):
            raise ValueError(f"{where} > results[{ri}] is {type(result).__name__}, not an object")
    return results


def _row(category: str, test: str, gpus: str, entity: str, entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "category": category,
        "test": test,
        "gpus": gpus,
        "entity": entity,
        "status": str(entry.get("status", "")).strip(),
        "detail": _detail(entry),
    }


def _rows_3x(root: dict[str, Any]) -> list[dict[str, Any]]:
    """DCGM 2.x/3.x: one result per GPU group, named by ``gpu_ids`` (``gpu_id`` in some 3.3 output)."""
    rows = []
    for category, test, where in _tests(root, DCGM_3X_ROOT):
        name = str(test.get("name") or test.get("test_name") or "unnamed test")
        for result in _results(test, where):
            gpus = str(result.get("gpu_ids", result.get("gpu_id", "all")))
            rows.append(_row(category, name, gpus, f"GPU {gpus}", result))
    return rows


def _entity(result: dict[str, Any]) -> tuple[str, str]:
    """(gpus, entity) of a DCGM 4.x result: ``entity_group`` "GPU" names a GPU index, others name themselves."""
    group = str(result.get("entity_group", "")).strip()
    ident = result.get("entity_id")
    if ident is None:
        return "all", f"{group or 'GPU'} all"
    if group in ("", "GPU"):
        return str(ident), f"GPU {ident}"
    return "", f"{group} {ident}"


def _failing(status: str) -> bool:
    return status.lower() not in _PASS | _NEUTRAL


def _rows_4x(root: dict[str, Any]) -> list[dict[str, Any]]:
    """DCGM 4.x: one result per entity, plus a ``test_summary`` with the test's own status.

    ``dcgmi`` leaves out the results of entities a test did not run on, and the summary of a test that
    ran nowhere; such a test reads as "Not Run". A summary that fails while no entity does (an error
    DCGM tied to no entity) becomes a row of its own so the failure is not lost.
    """
    rows = []
    for category, test, where in _tests(root, DCGM_4X_ROOT):
        name = str(test.get("name") or "unnamed test")
        summary = test.get("test_summary")
        if summary is not None and not isinstance(summary, dict):
            raise ValueError(f"{where} > test_summary is {type(summary).__name__}, not an object")
        own = [_row(category, name, *_entity(r), r) for r in _results(test, where)]
        if summary is None and not own:
            own.append(_row(category, name, "all", "GPU all", {"status": "Not Run"}))
        elif (
            summary is not None
            and not any(_failing(r["status"]) for r in own)
            and (not own or _failing(str(summary.get("status", ""))))
        ):
            own.append(_row(category, name, "all", "GPU all", summary))
        rows.extend(own)
    return rows


def dcgm_diag_tests(stdout: str) -> list[dict[str, Any]]:
    """Flatten ``dcgmi diag -r N -j`` output into one row per (test, GPU or entity).

    Reads both layouts ``dcgmi`` has written:

    * DCGM 2.x/3.x: ``{"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name",
      "results": [{"gpu_ids", "status", "warnings", "info"}]}]}]}}``;
    * DCGM 4.x: ``{"DCGM Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results":
      [{"entity_group", "entity_id", "status", "warnings", "info"}], "test_summary": {"status"}}]}]},
      "entity_groups": [...], "metadata": {...}}`` (testing/python3/dcgm_diag_schema.json in DCGM).

    Each row has ``category``, ``test``, ``gpus`` (the GPU ids, "all" for the whole group), ``entity``
    (e.g. "GPU 3"), ``status`` as DCGM wrote it, and ``detail`` (warnings, then info).
    Raises ValueError naming the problem for output that is not one of these documents, for a run
    DCGM reports as a ``runtime_error``, and for a document that holds no test results.
    """
    doc = _json_document(stdout or "")
    if not isinstance(doc, dict):
        raise ValueError(f"diag output is a JSON {type(doc).__name__}, not an object")
    for key, reader in ((DCGM_4X_ROOT, _rows_4x), (DCGM_3X_ROOT, _rows_3x)):
        if key not in doc:
            continue
        root = doc[key]
        if not isinstance(root, dict):
            raise ValueError(f"{key!r} is {type(root).__name__}, not an object")
        if root.get("runtime_error"):
            raise ValueError(f"DCGM reported a runtime error: {root['runtime_error']}")
        rows = reader(root)
        if not rows:
            raise ValueError(f"{key!r} holds no test results")
        return rows
    keys = ", ".join(repr(k) for k in list(doc)[:5]) or "none"
    raise ValueError(
        f"diag output has neither {DCGM_4X_ROOT!r} (DCGM 4.x) nor {DCGM_3X_ROOT!r} (DCGM 3.x) at its top "
        f"(top-level keys: {keys})"
    )


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
        reasons.append(f"dcgmi diag -r {level}: no usable result ({exc})")
    details["diag_tests"] = rows
    for row in rows:
        status = row["status"].lower()
        warned = status.startswith("warn")
        if status in _PASS or status in _NEUTRAL or (warned and not fail_on_warn):
            continue
        label = "warned" if warned else "failed"
        msg = f"dcgmi diag test '{row['test']}' {label} on {row['entity']}"
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
