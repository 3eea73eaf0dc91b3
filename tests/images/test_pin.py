"""``python -m images pin``: only the digests change, comments stay, a pin that would not validate writes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from components.config import load_stack_file
from contract.images_settings import DAEMONS_IMAGE, VIRTUAL_NODE_IMAGE
from contract.registry import MAKE_BEFORE_BREAK
from images.__main__ import main
from images.pin import PinError, pin_stack, pinned_text

ROOT = Path(__file__).resolve().parents[2]
D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64


def digests_of(text: str) -> dict[str, str]:
    return dict(yaml.safe_load(text)["config"]["gpucluster:images"]["digests"])


def test_existing_digests_are_replaced_and_every_other_line_kept() -> None:
    text = (
        "# top comment\nconfig:\n  gpucluster:environment: prod\n  gpucluster:images:\n"
        "    registry: r.example/x  # where\n    # written by make images PIN=prod\n    digests:\n"
        "      gpucluster-daemons: sha256:" + "1" * 64 + "\n      gpucluster-virtual-node: sha256:" + "2" * 64 + "\n"
        "  # the queues\n  gpucluster:cohort: research\n"
    )
    new = pinned_text(text, {DAEMONS_IMAGE: D1, VIRTUAL_NODE_IMAGE: D2})
    assert digests_of(new) == {DAEMONS_IMAGE: D1, VIRTUAL_NODE_IMAGE: D2}
    removed = set(text.splitlines()) - set(new.splitlines())
    assert all("sha256:" in line for line in removed)
    assert len(removed) == 2
    for kept in (
        "# top comment",
        "    registry: r.example/x  # where",
        "    # written by make images PIN=prod",
        "  # the queues",
    ):
        assert kept in new.splitlines()
    assert yaml.safe_load(new)["config"]["gpucluster:cohort"] == "research"


def test_section_without_digests_and_stack_without_section() -> None:
    with_section = "config:\n  gpucluster:images:\n    registry: r.example/x\n  gpucluster:cohort: c\n"
    assert digests_of(pinned_text(with_section, {DAEMONS_IMAGE: D1})) == {DAEMONS_IMAGE: D1}
    without = "config:\n  gpucluster:cohort: c\n  gpucluster:environment: dev\n"
    new = pinned_text(without, {VIRTUAL_NODE_IMAGE: D2})
    assert digests_of(new) == {VIRTUAL_NODE_IMAGE: D2}
    assert yaml.safe_load(new)["config"]["gpucluster:environment"] == "dev"


@pytest.mark.parametrize(
    ("digests", "message"),
    [
        ({"gpucluster-other": D1}, "no image of ours is named 'gpucluster-other'"),
        ({DAEMONS_IMAGE: "sha256:abc"}, "is not a digest such as sha256:"),
        ({DAEMONS_IMAGE: "1" * 64}, "is not a digest such as sha256:"),
    ],
)
def test_bad_digests_are_refused(digests: dict[str, str], message: str) -> None:
    with pytest.raises(PinError, match=message):
        pinned_text("config:\n  gpucluster:cohort: c\n", digests)


def test_no_config_map_is_refused() -> None:
    with pytest.raises(PinError, match="no top-level `config:`"):
        pinned_text("encryptionsalt: x\n", {DAEMONS_IMAGE: D1})


def test_pin_prod_stack_validates_and_resolves(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.prod.yaml"
    shutil.copy(ROOT / "stacks" / "Pulumi.prod.yaml", stack)
    pin_stack(stack, {DAEMONS_IMAGE: D1, VIRTUAL_NODE_IMAGE: D2})
    cfg = load_stack_file(stack)
    assert cfg.images.digests == {DAEMONS_IMAGE: D1, VIRTUAL_NODE_IMAGE: D2}
    assert cfg.controller(MAKE_BEFORE_BREAK).image.endswith(f"/{DAEMONS_IMAGE}:{cfg.images.version}@{D1}")
    assert cfg.burst is not None
    assert cfg.burst.settings.virtual_node.node_image.endswith(f"@{D2}")


def test_a_stack_that_would_not_validate_is_left_as_it_was(tmp_path: Path) -> None:
    stack = tmp_path / "Pulumi.bad.yaml"
    text = (
        (ROOT / "stacks" / "Pulumi.prod.yaml")
        .read_text()
        .replace("gpucluster:cohort: research", "gpucluster:cohort: Not_A_Label")
    )
    stack.write_text(text)
    with pytest.raises(PinError, match="would not validate; nothing written"):
        pin_stack(stack, {DAEMONS_IMAGE: D1})
    assert stack.read_text() == text
    assert list(tmp_path.iterdir()) == [stack]


def test_cli_pin_reads_the_last_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stack = tmp_path / "Pulumi.prod.yaml"
    shutil.copy(ROOT / "stacks" / "Pulumi.prod.yaml", stack)
    out = tmp_path / "out"
    assert main(["pin", str(stack), "--out", str(out)]) == 1
    assert "digests.json is missing: make images builds the images" in capsys.readouterr().err
    out.mkdir()
    (out / "digests.json").write_text('{"gpucluster-daemons": {"digest": "' + D1 + '"}}')
    assert main(["pin", str(stack), "--out", str(out)]) == 0
    assert load_stack_file(stack).images.digests[DAEMONS_IMAGE] == D1
