"""The policy pack under the real engine: a stack that passes, and one the pack refuses.

Offline previews (render mode, charts from Go modules): they need the built tools but no cluster.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.require import missing
from tests.support.sim import tools_bin

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def _tools() -> None:
    if not (tools_bin() / "pulumi").exists():
        missing("the pinned tools are not built (make tools)")


def _preview(*stacks: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "policies" / "preview-stacks.sh"), *stacks],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )


def test_staging_passes_the_pack_under_the_real_engine() -> None:
    proc = _preview("staging")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    # staging ships make-before-break off with bursting off: the one finding is the advisory that prices it
    assert "training-queues-make-before-break-off" in proc.stdout
    assert "mandatory" not in proc.stdout.lower(), proc.stdout[-4000:]


def test_a_stack_violating_a_mandatory_policy_fails_the_preview(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.dev.yaml").read_text())
    # Valid stack config (the model allows up to 1000), but the pack caps total evictions at 20.
    doc["config"]["gpucluster:descheduler"]["maxPodsToEvictTotal"] = 50
    drafts = tmp_path / "drafts"
    drafts.mkdir()
    draft = drafts / "Pulumi.unbounded.yaml"
    draft.write_text(yaml.safe_dump(doc))
    proc = _preview(str(draft))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert "descheduler-bounded-burst-return" in out
    assert "maxNoOfPodsToEvictTotal is 50, above the allowed 20" in out
    assert "policy preview failed for: unbounded" in out
    shutil.rmtree(ROOT / ".state" / "policy" / "unbounded", ignore_errors=True)


def test_prod_passes_pinned_and_is_refused_with_an_image_by_tag_alone(tmp_path: Path) -> None:
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())
    # The daemons' image by its tag alone: the virtual node's stays pinned.
    del doc["config"]["gpucluster:images"]["digests"]["gpucluster-daemons"]
    drafts = tmp_path / "drafts"
    drafts.mkdir()
    draft = drafts / "Pulumi.prod-unpinned.yaml"
    draft.write_text(yaml.safe_dump(doc))
    proc = _preview("prod", str(draft))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert "prod-images-by-digest" in out
    assert "registry.internal.example/gpucluster/gpucluster-daemons:" in out
    assert "policy preview failed for: prod-unpinned" in out
    # prod itself, pinned, is not among the failures.
    failed = next(line for line in out.splitlines() if "policy preview failed for:" in line)
    assert failed.split("failed for:", 1)[1].split() == ["prod-unpinned"], failed
    shutil.rmtree(ROOT / ".state" / "policy" / "prod-unpinned", ignore_errors=True)
