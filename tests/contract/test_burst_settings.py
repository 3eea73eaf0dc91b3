"""The burst settings model: a valid file loads; each invalid key is named by its path; hostile files are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.burst_settings import (
    PROVIDER_KINDS,
    REPLICA_TRANSPORTS,
    SettingsError,
    load_settings,
    node_capacity,
    parse_duration,
    parse_settings,
    settings_json,
    with_cluster_name,
)
from contract.images_settings import DEFAULT_DAEMONS_IMAGE, DEFAULT_VIRTUAL_NODE_IMAGE
from contract.issues import REDACTED

VALID: dict[str, Any] = {
    "virtualNode": {
        "nodeName": "gpu-burst",
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
            "addressRanges": ["10.96.0.0/12"],
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


def test_rules_between_keys_are_one_issue_each_at_its_own_path() -> None:
    raw = with_change("providers.1.name", "fake-a")
    raw["virtualNode"]["defaultGpuType"] = "B200"
    with pytest.raises(SettingsError) as err:
        parse_settings(raw)
    assert [(i.path, i.reason) for i in err.value.issues] == [
        ("providers[1].name", "'fake-a' is already the name of providers[0]"),
        ("virtualNode.defaultGpuType", "'B200' is in no provider's gpuTypes"),
    ]


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
        ("virtualNode.providerImage", "ghcr.io/example/gpucluster-daemons", "virtualNode.providerImage"),
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
    with pytest.raises(SettingsError, match=r"bad\.json: line 1, column 2: invalid JSON"):
        load_settings(bad)
    wrong = tmp_path / "list.yaml"
    wrong.write_text("- 1\n")
    with pytest.raises(SettingsError, match="expected a map"):
        load_settings(wrong)


# --- hostile files: refused with the file and a short reason ----------------------------------------------------


def _laughs() -> str:
    lines = ["a0: &a0 [" + ", ".join(["x"] * 10) + "]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    return "virtualNode:\n  x:\n" + "\n".join("    " + line for line in lines) + "\n"


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("s.json", b'{"virtualNode": {}\0}', "is binary (a NUL byte"),
        ("s.yaml", "virtualNode: caf\xe9\n".encode("latin-1"), "is not UTF-8 text"),
        ("s.json", b" " * (1024 * 1024 + 1), "is larger than 1024 KiB"),
        ("s.yaml", ("x: " + "[" * 10_000 + "]" * 10_000).encode(), "nests deeper than 64 levels"),
        ("s.json", ("[" * 10_000 + "]" * 10_000).encode(), "nests deeper than 64 levels"),
        ("s.yaml", _laughs().encode(), "expands to more than 100000 values"),
        ("s.yaml", b"enabled: true\nenabled: false\n", "found the key 'enabled' twice"),
        ("s.json", b'{"enabled": true, "enabled": false}', "the key 'enabled' is given twice"),
        ("s.json", b'{"virtualNode": {"failurePenalty": NaN}}', "NaN is not a number settings take"),
    ],
)
def test_hostile_files_are_refused_naming_the_file(tmp_path: Path, name: str, content: bytes, reason: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    (issue,) = err.value.issues
    assert issue.path == str(path)
    assert reason in issue.reason


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("providers.0.maxGpus", True, "providers[0].maxGpus: Input should be a valid integer (got True)"),
        ("providers.0.maxGpus", "16", "providers[0].maxGpus: Input should be a valid integer (got '16')"),
        ("providers.0.name", 123, "providers[0].name: Input should be a valid string (got 123)"),
        ("enabled", "yes", "enabled: Input should be a valid boolean (got 'yes')"),
        ("virtualNode.failurePenalty", False, "virtualNode.failurePenalty: Input should be a valid number (got False)"),
    ],
)
def test_yaml_coercions_do_not_pass(path: str, value: Any, expected: str) -> None:
    assert expected in issues(with_change(path, value))


def test_a_key_pasted_where_a_secret_name_goes_is_never_echoed(tmp_path: Path) -> None:
    key = "rpa_0123456789ABCDEFGHIJKLMNOP"
    for pasted in (f"Bearer {key}", f"{key}!", 12345):
        found = issues(with_change("providers.1.runpod", {"apiKeySecret": pasted}))
        assert any(i.startswith("providers[1].runpod.apiKeySecret:") for i in found), found
        assert all(key not in i and "12345" not in i for i in found), found
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(with_change("providers.1.runpod", {"apiKeySecret": 987654321})))
    with pytest.raises(SettingsError) as err:
        load_settings(f)
    assert REDACTED in str(err.value)
    assert "987654321" not in str(err.value)


def test_long_values_are_cut_in_messages() -> None:
    (found,) = issues(with_change("virtualNode.nodeName", "N" * 3000))
    assert "(3000 characters)" in found
    assert len(found) < 250


# --- well-formed values that would make the daemon misbehave ------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("virtualNode.reconcileInterval", "1ns", "virtualNode.reconcileInterval: '1ns' is shorter than 1s"),
        ("virtualNode.reconcileInterval", "0s", "virtualNode.reconcileInterval: '0s' must be longer than zero"),
        ("virtualNode.creationTimeout", "1ns", "virtualNode.creationTimeout: '1ns' is shorter than 10s"),
        ("virtualNode.creationTimeout", "200h", "virtualNode.creationTimeout: '200h' is longer than a week"),
        ("virtualNode.failureWindow", "5s", "virtualNode.failureWindow: '5s' is shorter than a minute"),
        ("virtualNode.notReadyTimeout", "20s", "virtualNode.notReadyTimeout: '20s' is shorter than 30s"),
        ("virtualNode.maxSpendPerHour", 0, "virtualNode.maxSpendPerHour: Input should be greater than 0"),
        ("providers.2.addressRanges", [], "providers[2].addressRanges: provider 'east': a kubernetes provider's"),
        ("providers.0.addressRanges", ["10.0.0.0/33"], "providers[0].addressRanges[0]: '10.0.0.0/33' is not a CIDR"),
        ("virtualNode.port", 80, "virtualNode.port: Input should be greater than or equal to 1024 (got 80)"),
        ("virtualNode.port", 0, "virtualNode.port: Input should be greater than or equal to 1024 (got 0)"),
        ("virtualNode.memory", "500m", "virtualNode.memory: '500m' is a fraction of a byte"),
        ("virtualNode.memory", "99999999999Ei", "virtualNode.memory: '99999999999Ei' is larger than any Kubernetes"),
        ("virtualNode.cpu", "0", "virtualNode.cpu: '0' is not a positive Kubernetes quantity"),
        ("virtualNode.maxPods", 10**9, "virtualNode.maxPods: Input should be less than or equal to 100000"),
        ("providers.0.preference", 10**12, "providers[0].preference: Input should be less than or equal to 1000"),
        (
            "providers.0.fake",
            {"url": "http://127.0.0.1:99999"},
            "providers[0].fake.url: 'http://127.0.0.1:99999' has a port",
        ),
    ],
)
def test_values_that_would_make_the_daemon_misbehave_are_refused(path: str, value: Any, expected: str) -> None:
    found = issues(with_change(path, value))
    assert any(i.startswith(expected) for i in found), found


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("virtualNode.reconcileInterval", "1s"),
        ("virtualNode.creationTimeout", "10s"),
        ("virtualNode.failureWindow", "1m"),
        ("virtualNode.port", 1024),
        ("virtualNode.memory", "512Mi"),
        ("virtualNode.cpu", "500m"),
        ("providers.0.preference", -1000),
    ],
)
def test_values_at_the_limits_are_accepted(path: str, value: Any) -> None:
    assert parse_settings(with_change(path, value)) is not None


@pytest.mark.parametrize("url", ["https://rest.runpod.io/v1", "https://rest.runpod.io", "https://proxy.example/v1/"])
def test_runpod_rest_v1_is_refused_it_was_retired(url: str) -> None:
    found = issues(with_change("providers.1.runpod", {"apiKeySecret": "runpodApiKey", "url": url}))
    assert any(
        i.startswith("providers[1].runpod.url:") and "v1 was retired on 2026-11-15" in i and "api.runpod.io/v2" in i
        for i in found
    ), found


def test_runpod_v2_defaults_and_what_is_sent() -> None:
    s = parse_settings(with_change("providers.1.runpod", {"apiKeySecret": "runpodApiKey", "containerDiskGb": 20}))
    rp = s.provider("runpod").runpod
    assert rp is not None
    assert (str(rp.url), rp.container_disk_gb, rp.cpu_flavor) == ("https://api.runpod.io/v2", 20, "cpu5c")
    assert s.virtual_node.confidential_env_to_rented_providers == "send"
    found = issues(with_change("providers.1.runpod", {"apiKeySecret": "k", "containerDiskGb": 0}))
    assert any(i.startswith("providers[1].runpod.containerDiskGb:") for i in found), found
    found = issues(with_change("virtualNode.confidentialEnvToRentedProviders", "maybe"))
    assert any(i.startswith("virtualNode.confidentialEnvToRentedProviders:") for i in found), found


def test_a_file_without_images_takes_the_schemes_defaults() -> None:
    vn = parse_settings(VALID).virtual_node
    assert (vn.node_image, vn.provider_image) == (DEFAULT_VIRTUAL_NODE_IMAGE, DEFAULT_DAEMONS_IMAGE)
    explicit = with_change("virtualNode.nodeImage", "registry.test.example/gpucluster-virtual-node:0.2.0-dev.1")
    assert (
        parse_settings(explicit).virtual_node.node_image == "registry.test.example/gpucluster-virtual-node:0.2.0-dev.1"
    )


def test_the_cluster_name_defaults_to_the_stacks_and_tags_every_instance_with_the_node() -> None:
    base = parse_settings(VALID, "test")
    filled = with_cluster_name(base, "Prod_EU.1")
    assert filled.virtual_node.cluster_name == "prod-eu-1"
    assert filled.virtual_node.instance_owner == "prod-eu-1.gpu-burst"
    named = parse_settings(with_change("virtualNode.clusterName", "east"), "test")
    assert with_cluster_name(named, "prod").virtual_node.instance_owner == "east.gpu-burst"
    assert base.virtual_node.instance_owner == "gpu-burst"  # none set: the node's name alone, as before


def test_each_kind_says_how_its_replicas_are_reached_and_the_stack_cannot_say_otherwise() -> None:
    # Derived from what the adapters implement: none puts TLS in front of a replica today (EndpointSlices carry the
    # reported IP and port; RunPod's ports are created as <port>/tcp and reached at their public IP).
    assert set(REPLICA_TRANSPORTS) == set(PROVIDER_KINDS)
    s = parse_settings(VALID)
    assert {p.name: p.replica_transport for p in s.providers} == {"fake-a": "http", "runpod": "http", "east": "http"}
    # Read-only: not a settings key, so a stack cannot claim TLS it does not have.
    found = issues(with_change("providers.1.replicaTransport", "https"))
    assert any(i.startswith("providers[1].replicaTransport:") for i in found), found
    assert "replicaTransport" not in settings_json(s)
