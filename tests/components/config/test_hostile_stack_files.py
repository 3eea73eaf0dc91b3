"""Hostile stack files get a clear refusal: the file and a short reason, no traceback, nothing secret, nothing huge."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.config import StackConfigError, load_stack_file, parse_stack_config, project_defaults, read_stack_file
from components.config.stack import SECTIONS
from contract.constants import DEFAULT_BURST_TAINT_KEY
from contract.issues import REDACTED
from contract.jobset_settings import JOBSET_CHART_VERSION
from contract.queues_settings import KUEUE_CHART_VERSION

ROOT = Path(__file__).resolve().parents[3]
PROD = ROOT / "stacks" / "Pulumi.prod.yaml"
KEY = "rpa_0123456789ABCDEFGHIJKLMNOP"


def _prod_text() -> str:
    return PROD.read_text()


def _laughs() -> str:
    lines = ["a0: &a0 [" + ", ".join(["lol"] * 10) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    return "  gpucluster:kueue:\n    extraValues:\n" + "\n".join("      " + line for line in lines) + "\n"


HOSTILE: list[tuple[str, bytes, str]] = [
    ("nul-byte", _prod_text().encode() + b"\0", "is binary (a NUL byte at offset"),
    ("latin-1", "config:\n  gpucluster:environment: caf\xe9\n".encode("latin-1"), "is not UTF-8 text (byte 0xe9"),
    ("png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01", "is binary"),
    ("too-big", b"config:\n" + b"#" * (1024 * 1024), "is larger than 1024 KiB"),
    (
        "deep-lists",
        ("config:\n  gpucluster:kueue:\n    extraValues: " + "[" * 50_000 + "]" * 50_000).encode(),
        "deeper",
    ),
    (
        "deep-maps",
        ("config:\n  gpucluster:kueue:\n    extraValues: " + "{a: " * 3000 + "1" + "}" * 3000).encode(),
        "deeper",
    ),
    ("billion-laughs", ("config:\n" + _laughs()).encode(), "expands to more than 100000 values"),
    ("recursive-alias", b"config:\n  gpucluster:kueue:\n    extraValues: &x [*x]\n", "nests deeper than 64 levels"),
    (
        "duplicate-key",
        b"config:\n  gpucluster:environment: prod\n  gpucluster:clusterName: a\n  gpucluster:environment: dev\n",
        "line 4, column 3: invalid YAML: found the key 'gpucluster:environment' twice",
    ),
    ("python-tag", b"config: !!python/object/apply:os.system ['true']\n", "invalid YAML: "),
    ("huge-integer", ("config:\n  gpucluster:cohort: " + "9" * 5000 + "\n").encode(), "more digits than can be read"),
]


@pytest.mark.parametrize(("content", "reason"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_files_are_refused_with_the_file_and_a_reason(tmp_path: Path, content: bytes, reason: str) -> None:
    path = tmp_path / "Pulumi.hostile.yaml"
    path.write_bytes(content)
    started = time.monotonic()
    with pytest.raises(StackConfigError) as err:
        load_stack_file(path)
    assert time.monotonic() - started < 5
    (issue,) = err.value.issues
    assert issue.path == str(path)
    assert reason in issue.reason
    assert err.value.source == str(path)


def test_the_cli_refuses_hostile_files_without_a_traceback(tmp_path: Path) -> None:
    paths = []
    for name, content, _ in HOSTILE:
        path = tmp_path / f"Pulumi.{name}.yaml"
        path.write_bytes(content)
        paths.append(str(path))
    proc = subprocess.run(
        [sys.executable, "-m", "components.config", "check", *paths, str(PROD)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout.count("1 problem(s)") == len(HOSTILE)
    assert f"{PROD}: ok (" in proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines()) < 300


def test_merge_keys_and_anchors_used_sparingly_are_fine(tmp_path: Path) -> None:
    doc = yaml.safe_load(_prod_text())
    text = "x-defaults: &lbl {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}\n" + yaml.safe_dump(doc)
    path = tmp_path / "Pulumi.anchors.yaml"
    path.write_text(text)
    assert load_stack_file(path).environment == "prod"


# --- YAML's coercions do not pass as values ----------------------------------------------------------------------


def _with_yaml(tmp_path: Path, old: str, new: str) -> list[str]:
    text = _prod_text()
    assert old in text
    path = tmp_path / "Pulumi.coerced.yaml"
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(StackConfigError) as err:
        load_stack_file(path)
    return [str(i) for i in err.value.issues]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("nodeCount: 64", "nodeCount: yes", "flavors[0].nodeCount: Input should be a valid integer (got True)"),
        ("nodeCount: 64", 'nodeCount: "64"', "flavors[0].nodeCount: Input should be a valid integer (got '64')"),
        ("gpusPerNode: 8", "gpusPerNode: 8.0", "flavors[0].gpusPerNode: Input should be a valid integer (got 8.0)"),
        ("name: h100", "name: 100", "flavors[0].name: Input should be a valid string (got 100)"),
        ("gpucluster:environment: prod", "gpucluster:environment: no", "environment: Input should be a valid string"),
        ("readOnly: true", "readOnly: 'yes'", "storage.datasets.readOnly: Input should be a valid boolean (got 'yes')"),
    ],
)
def test_yaml_coercions_are_refused(tmp_path: Path, old: str, new: str, expected: str) -> None:
    found = _with_yaml(tmp_path, old, new)
    assert any(i.startswith(expected) for i in found), found


def test_the_stack_as_written_is_accepted() -> None:
    assert load_stack_file(PROD).flavor("h100").node_count == 64


# --- nothing secret, nothing unbounded in a message --------------------------------------------------------------


def _issues(mutate: Any) -> list[str]:
    raw = read_stack_file(PROD)
    mutate(raw)
    with pytest.raises(StackConfigError) as err:
        parse_stack_config(raw, "test")
    return [str(i) for i in err.value.issues]


def test_a_key_pasted_as_a_secret_name_is_never_echoed() -> None:
    def paste(raw: dict[str, Any]) -> None:
        raw["burst"]["providers"][0]["runpod"]["apiKeySecret"] = f"Bearer {KEY}"
        raw["burst"]["providers"][1]["kubernetes"]["kubeconfigSecret"] = 1234567

    found = _issues(paste)
    assert any(i.startswith("burst.providers[0].runpod.apiKeySecret: is not a secret name") for i in found), found
    assert f"burst.providers[1].kubernetes.kubeconfigSecret: Input should be a valid string (got {REDACTED})" in found
    assert not any(KEY in i or "1234567" in i for i in found)


def test_a_key_like_value_anywhere_is_never_echoed() -> None:
    found = _issues(lambda raw: raw["flavors"][0].update(name="ghp_abcdefghijklmnopqrstuvwxyz0123456789"))
    assert found == [f"flavors[0].name: {REDACTED} is not a DNS label (lower-case letters, digits and '-', at most 63)"]


def test_long_values_and_keys_are_cut() -> None:
    found = _issues(lambda raw: raw["flavors"][0].update(name="H" * 4000))
    assert found[0].startswith("flavors[0].name: 'HHHH")
    assert "(4000 characters)" in found[0]
    found = _issues(lambda raw: raw.update({"k" * 5000: 1}))
    # the cut key and the list of the known ones, never the 5000 characters
    assert len(found[0]) < 250 + len(", ".join(SECTIONS))
    assert "(5000 characters)" in found[0]
    found = _issues(lambda raw: raw.update(inferenceNamespaces=[f"ns-{i}" for i in range(2000)]))
    assert all(len(i) < 400 for i in found), [len(i) for i in found]


def test_a_string_longer_than_any_setting_is_refused_short() -> None:
    (found,) = _issues(lambda raw: raw["storage"].update(provisioner="p" * 100_000))
    assert found.startswith("storage.provisioner: String should have at most 4096 characters (got 'pppp")
    assert found.endswith("... (100000 characters))")
    assert len(found) < 200


# --- one burst taint key default ---------------------------------------------------------------------------------


def test_pulumi_yaml_declares_the_same_burst_taint_key_default() -> None:
    assert project_defaults()["burstTaintKey"] == DEFAULT_BURST_TAINT_KEY


# --- the charts' controller images are ones their charts can compose -------------------------------------------


@pytest.mark.parametrize(
    ("section", "image", "refusal"),
    [
        ("kueue", f"registry.k8s.io/kueue/kueue:v{KUEUE_CHART_VERSION}", None),
        ("kueue", f"mirror.example/kueue/kueue:v{KUEUE_CHART_VERSION}@sha256:" + "a" * 64, None),
        ("kueue", "registry.k8s.io/kueue/kueue", "is not pinned"),
        # Pinned, but the chart writes repository:tag, so a digest alone makes no reference.
        ("kueue", "registry.k8s.io/kueue/kueue@sha256:" + "a" * 64, "the chart composes repository:tag: name a tag"),
        ("jobset", f"registry.k8s.io/jobset/jobset:v{JOBSET_CHART_VERSION}", None),
        ("jobset", "registry.k8s.io/jobset/jobset@sha256:" + "a" * 64, "the chart composes repository:tag"),
    ],
)
def test_a_chart_controller_image_needs_a_tag(section: str, image: str, refusal: str | None) -> None:
    def set_image(raw: dict[str, Any]) -> None:
        raw.setdefault(section, {})["image"] = image

    if refusal is None:
        raw = read_stack_file(PROD)
        set_image(raw)
        assert getattr(parse_stack_config(raw, "test"), section).controller_image == image
    else:
        issues = _issues(set_image)
        assert any(i.startswith(f"{section}.image: ") and refusal in i for i in issues), issues
