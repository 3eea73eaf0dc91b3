"""PromQL evaluated by Prometheus' own engine: ``promtool test rules`` over series in promtool's notation."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.support.require import debian_tool


def expr_report(
    tmp_path: Path, series: list[dict[str, str]], expr: str, eval_time: str, samples: list[dict[str, Any]]
) -> str:
    """promtool's report on ``expr`` at ``eval_time`` (series a minute apart): "" when it returns exactly
    ``samples`` (``{"labels": ..., "value": ...}`` each), else what promtool says it expected and got."""
    (tmp_path / "empty.yml").write_text("groups: []\n")
    case = {
        "interval": "1m",
        "input_series": series,
        "promql_expr_test": [{"expr": expr, "eval_time": eval_time, "exp_samples": samples}],
    }
    (tmp_path / "test.yml").write_text(json.dumps({"rule_files": ["empty.yml"], "tests": [case]}))
    proc = subprocess.run(
        [debian_tool("promtool"), "test", "rules", str(tmp_path / "test.yml")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return "" if proc.returncode == 0 else proc.stdout + proc.stderr
