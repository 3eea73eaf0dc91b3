"""The burst settings model: a valid file loads; each invalid key is named by its path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from daemons.burst_provider.settings import (
    SettingsError,
    load_settings,
    node_capacity,
    parse_duration,
    parse_settings,
    settings_json,
)

VALID: dict[str, Any] = {
    "virtualNode": {
        "nodeName": "gpu-burst",
        "nodeImage": "ghcr.io/example/gpucluster-virtual-node:0.1.0",
        "providerImage": "ghcr.io/example/gpucluster-daemons:0.1.0",
        "inferenceNamespaces": ["inference"],
        "creationTimeout": "10m",
        "reconcileInterval": "5s",
        "failureWindow": "30m",
        "failurePenalty": 2.0,
        "defaultGpuType": "H100",
    },
    "providers": [
        {
            "name": "fake-a",
            "kind": "fake",
            "maxGpus": 16,
            "gpuTypes": {"H100": {"pricePerGpuHour": 2.5}},
            "fake": {"url": "http://127.0.0.1:18080"},
        },
        {
            "name": "runpod",
            "kind": "runpod",
            "maxGpus": 8,
            "gpuTypes": {"H100": {"pricePerGpuHour": 2.99, "providerType": "NVIDIA H100 80GB HBM3"}},
            "runpod": {"apiKeySecret": "runpodApiKey", "cloudType": "SECURE"},
        },
        {
            "name": "east",
            "kind": "kubernetes",
            "maxGpus": 32,
            "preference": 1,
            "gpuTypes": {"H100": {"pricePerGpuHour": 1.8}},
            "kubernetes": {
                "kubeconfigSecret": "eastKubeconfig",
                "namespaceMap": {"inference": "burst-inference"},
                "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            },
        },
    ],
}


def with_change(path: str, value: Any) -> dict[str, Any]:
    """VALID with one key (dotted path, list indexes as numbers) set, or removed when value is ...."""
    raw: dict[str, Any] = json.loads(json.dumps(VALID))
    *parents, last = path.split(".")
    node: Any = raw
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    key: Any = int(last) if last.isdigit() else last
    if value is ...:
        del node[key]
    else:
        node[key] = value
    return raw


def issues(raw: Any) -> list[str]:
    with pytest.raises(SettingsError) as err:
        parse_settings(raw)
    return [str(i) for i in err.value.issues]


def test_valid_settings_load_with_defaults_and_parsed_durations() -> None:
    s = parse_settings(VALID)
    vn = s.virtual_node
    assert vn.creation_timeout_seconds == 600
    assert vn.reconcile_interval_seconds == 5
    assert vn.failure_window_seconds == 1800
    assert vn.port == 10299
    assert [p.name for p in s.providers] == ["fake-a", "runpod", "east"]
    assert s.provider("runpod").runpod is not None
    assert s.provider("east").kubernetes is not None
    assert s.provider("east").kubernetes.target_namespace("inference") == "burst-inference"  # type: ignore[union-attr]
    assert s.provider("east").kubernetes.target_namespace("other") == "other"  # type: ignore[union-attr]
    assert s.secret_names() == ("eastKubeconfig", "runpodApiKey")
    assert s.provider("fake-a").price("H100") == 2.5
    assert s.provider("fake-a").price("A100") is None


def test_node_capacity_sums_the_caps() -> None:
    cap = node_capacity(parse_settings(VALID))
    assert cap["nvidia.com/gpu"] == "56"
    assert set(cap) == {"nvidia.com/gpu", "cpu", "memory", "pods"}


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("10m", 600), ("1h30m", 5400), ("500ms", 0.5), ("1.5h", 5400)]
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "ten minutes", "5d", "-1s"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("path", "value", "expected_path"),
    [
        ("providers.0.maxGpus", 0, "providers[0].maxGpus"),
        ("providers.1.gpuTypes", {"H100": {"pricePerGpuHour": 0}}, "providers[1].gpuTypes.H100.pricePerGpuHour"),
        ("providers.1.gpuTypes", {"H100": {"pricePerGpuHour": -1}}, "providers[1].gpuTypes.H100.pricePerGpuHour"),
        ("providers.1.gpuTypes", {}, "providers[1].gpuTypes"),
        ("providers.0.name", "Fake_A", "providers[0].name"),
        ("providers.0.kind", "aws", "providers[0].kind"),
        ("providers.0.fake", {"url": "ftp://x"}, "providers[0].fake.url"),
        ("providers.1.runpod", {"apiKeySecret": "sk live key!"}, "providers[1].runpod.apiKeySecret"),
        ("providers.1.runpod", {"apiKeySecret": "k", "cloudType": "CHEAP"}, "providers[1].runpod.cloudType"),
        ("providers.2.kubernetes", {"kubeconfigSecret": "k", "color": 1}, "providers[2].kubernetes.color"),
        ("virtualNode.creationTimeout", "10 minutes", "virtualNode.creationTimeout"),
        ("virtualNode.creationTimeout", "0s", "virtualNode.creationTimeout"),
        ("virtualNode.reconcileInterval", "soon", "virtualNode.reconcileInterval"),
        ("virtualNode.failurePenalty", -1, "virtualNode.failurePenalty"),
        ("virtualNode.nodeName", "GPU Burst", "virtualNode.nodeName"),
        ("virtualNode.nodeImage", "ghcr.io/example/node:latest", "virtualNode.nodeImage"),
        ("virtualNode.providerImage", ..., "virtualNode.providerImage"),
        ("virtualNode.port", 70000, "virtualNode.port"),
        ("virtualNode.inferenceNamespaces", [], "virtualNode.inferenceNamespaces"),
        ("virtualNode.bogus", 1, "virtualNode.bogus"),
    ],
)
def test_each_invalid_key_is_named(path: str, value: Any, expected_path: str) -> None:
    found = issues(with_change(path, value))
    assert any(i.startswith(f"{expected_path}:") for i in found), found


def test_kind_section_must_match() -> None:
    missing = issues(with_change("providers.0.fake", ...))
    assert any("providers[0]" in i and "kind fake needs its section `fake:`" in i for i in missing), missing
    raw = with_change("providers.0.runpod", {"apiKeySecret": "k"})
    foreign = issues(raw)
    assert any("kind fake takes no section `runpod:`" in i for i in foreign), foreign


def test_provider_names_are_unique() -> None:
    found = issues(with_change("providers.1.name", "fake-a"))
    assert any("providers[1].name: 'fake-a' is already the name of providers[0]" in i for i in found), found


def test_default_gpu_type_must_be_offered() -> None:
    found = issues(with_change("virtualNode.defaultGpuType", "B200"))
    assert any("virtualNode.defaultGpuType" in i for i in found), found


def test_enabled_needs_a_provider_but_disabled_does_not() -> None:
    found = issues(with_change("providers", []))
    assert any("at least one provider" in i for i in found), found
    raw = with_change("providers", [])
    raw["enabled"] = False
    assert parse_settings(raw).providers == []


def test_every_problem_is_listed_at_once() -> None:
    raw = with_change("providers.0.maxGpus", 0)
    raw["virtualNode"]["creationTimeout"] = "never"
    raw["providers"][1]["gpuTypes"]["H100"]["pricePerGpuHour"] = 0
    assert len(issues(raw)) == 3


def test_load_settings_reads_json_and_yaml_and_stack_excerpts(tmp_path: Path) -> None:
    j = tmp_path / "burst.json"
    j.write_text(json.dumps(VALID))
    y = tmp_path / "burst.yaml"
    y.write_text(yaml.safe_dump({"gpucluster:burst": VALID}))
    assert load_settings(j) == load_settings(y)


def test_rendered_json_round_trips(tmp_path: Path) -> None:
    s = parse_settings(VALID)
    f = tmp_path / "s.json"
    f.write_text(settings_json(s))
    assert load_settings(f) == s


def test_load_settings_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(SettingsError, match="not valid JSON/YAML"):
        load_settings(bad)
    wrong = tmp_path / "list.yaml"
    wrong.write_text("- 1\n")
    with pytest.raises(SettingsError, match="expected a map"):
        load_settings(wrong)
