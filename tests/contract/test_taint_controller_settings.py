"""Taint controller settings: defaults, camelCase keys, every refusal names its key path; hostile files refused."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from contract.constants import QUARANTINE_TAINT_KEY, RESERVATION_KEY
from contract.taint_controller_queries import (
    DEFAULT_BURST_QUERY,
    DEFAULT_HEADROOM_BY_TYPE_QUERY,
    DEFAULT_HEADROOM_QUERY,
    DEFAULT_PENDING_BY_TYPE_QUERY,
    DEFAULT_PENDING_QUERY,
    DEFAULT_RESERVED_QUERY,
    MAX_GPU_TYPES,
    NO_GPU_TYPES,
    gpu_type_of,
    gpu_types_in_cluster,
    ksm_label_name,
)
from contract.taint_controller_settings import (
    SettingsError,
    TaintControllerSettings,
    load_settings,
    parse_duration,
    parse_settings,
)
from tests.support.promtool import expr_report
from tests.support.require import debian_tool

ROOT = Path(__file__).resolve().parents[2]


def problems(data: dict[str, Any]) -> dict[str, str]:
    """Key path -> reason, for every problem."""
    with pytest.raises(SettingsError) as info:
        parse_settings(data)
    return {issue.path: issue.reason for issue in info.value.issues}


def test_defaults_are_valid_and_round_trip_through_json() -> None:
    s = TaintControllerSettings()
    assert (s.high_mark, s.low_mark, s.hold_add_seconds, s.hold_remove_seconds) == (4, 1, 600, 120)
    assert (s.lease_duration_seconds, s.renew_deadline_seconds, s.retry_period_seconds) == (15, 10, 2)
    assert s.taint_effect == "NoSchedule"
    again = parse_settings(json.loads(s.to_json()))
    assert again == s
    assert "highMark" in json.loads(s.to_json())


def test_camel_case_file(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(
        json.dumps(
            {
                "nodeName": "burst-1",
                "taintKey": "example.com/cap",
                "highMark": 16,
                "lowMark": 0,
                "holdAdd": "1h30m",
                "inferenceNamespaces": ["inference", "serving"],
                "queryTimeout": "500ms",
                "prometheusUrl": "http://prom:9090/",
            }
        )
    )
    s = load_settings(path)
    assert s.hold_add_seconds == 5400
    assert s.query_timeout_seconds == 0.5
    assert s.prometheus_url == "http://prom:9090"
    pending = s.render_query(s.pending_query)
    assert 'namespace=~"inference|serving"' in pending
    assert "$INFERENCE_NAMESPACES" not in pending
    assert "<= 120)" in pending  # freshWithin's default, in seconds
    assert 'node!="burst-1"' in s.render_query(s.headroom_query)


def test_query_timeout_defaults_to_a_third_of_the_interval_capped() -> None:
    assert TaintControllerSettings(interval="15s").query_timeout_seconds == 5
    assert TaintControllerSettings(interval="5m").query_timeout_seconds == 10


@pytest.mark.parametrize(
    ("data", "path", "text"),
    [
        ({"lowMark": 4, "highMark": 4}, "lowMark", "must be below highMark"),
        ({"lowMark": 9}, "lowMark", "must be below highMark (4)"),
        ({"highMark": -1}, "highMark", "greater than or equal to 0"),
        ({"taintEffect": "NoExecute"}, "taintEffect", "always NoSchedule"),
        ({"taintEffect": "PreferNoSchedule"}, "taintEffect", "refused"),
        ({"holdAdd": "ten minutes"}, "holdAdd", "not a duration"),
        ({"interval": "0s"}, "interval", "longer than zero"),
        ({"replicas": 4}, "replicas", "less than or equal to 3"),
        ({"replicas": 0}, "replicas", "greater than or equal to 1"),
        ({"renewDeadline": "15s"}, "renewDeadline", "shorter than leaseDuration"),
        ({"retryPeriod": "10s"}, "retryPeriod", "shorter than renewDeadline"),
        ({"namespace": "Bad_NS"}, "namespace", "DNS label"),
        ({"inferenceNamespaces": []}, "inferenceNamespaces", "at least 1"),
        ({"inferenceNamespaces": ["a", "a"]}, "inferenceNamespaces", "listed twice"),
        ({"inferenceNamespaces": ["ok", "No"]}, "inferenceNamespaces[1]", "DNS label"),
        ({"taintKey": "bad key!"}, "taintKey", "qualified name"),
        ({"image": "registry/daemons:latest"}, "image", "latest"),
        ({"image": "registry/daemons"}, "image", "not pinned"),
        ({"prometheusUrl": "prometheus:9090"}, "prometheusUrl", "http(s) URL"),
        ({"headroomQuery": "  "}, "headroomQuery", "empty"),
        ({"highmark": 3}, "highmark", "unknown key"),
        # YAML's and JSON's coercions do not pass
        ({"highMark": True}, "highMark", "valid integer (got True)"),
        ({"highMark": "4"}, "highMark", "valid integer (got '4')"),
        ({"replicas": 2.0}, "replicas", "valid integer (got 2.0)"),
        ({"enabled": "false"}, "enabled", "valid boolean (got 'false')"),
        ({"leaseName": 7}, "leaseName", "valid string (got 7)"),
        # well-formed values that would make the daemon misbehave
        ({"interval": "1ns"}, "interval", "'1ns' is shorter than 1s"),
        ({"interval": "500ms"}, "interval", "'500ms' is shorter than 1s"),
        ({"retryPeriod": "1ns"}, "retryPeriod", "'1ns' is shorter than 1s"),
        ({"holdAdd": "200h"}, "holdAdd", "longer than a week"),
        ({"queryTimeout": "30s"}, "queryTimeout", "queryTimeout (30s) must be shorter than interval (30s)"),
        (
            {"queryTimeout": "1m", "interval": "10s"},
            "queryTimeout",
            "must be shorter than interval (10s): a cycle would outlast",
        ),
        ({"leaseDuration": "10s", "renewDeadline": "10s"}, "renewDeadline", "shorter than leaseDuration (10s)"),
        ({"renewDeadline": "2s"}, "retryPeriod", "retryPeriod (2s) must be shorter than renewDeadline (2s)"),
        ({"highMark": 10**9}, "highMark", "less than or equal to 100000"),
        ({"highMark": 1}, "lowMark", "lowMark (1) must be below highMark (1)"),  # the default lowMark is checked too
        ({"leaseDuration": "5s"}, "renewDeadline", "renewDeadline (10s) must be shorter than leaseDuration (5s)"),
        ({"prometheusUrl": "http://prom:0"}, "prometheusUrl", "port out of range"),
    ],
)
def test_invalid_settings_name_the_key(data: dict[str, Any], path: str, text: str) -> None:
    found = problems(data)
    assert path in found, found
    assert text in found[path]


@pytest.mark.parametrize(
    "data",
    [
        {"interval": "1s", "retryPeriod": "1s", "renewDeadline": "2s", "leaseDuration": "3s"},
        {"interval": "10s", "queryTimeout": "9s"},
        {"holdAdd": "1ms", "holdRemove": "168h"},
        {"highMark": 100_000, "lowMark": 0},
    ],
)
def test_values_at_the_limits_are_accepted(data: dict[str, Any]) -> None:
    assert parse_settings(data) is not None


def test_noexecute_cannot_be_constructed_in_python_either() -> None:
    with pytest.raises(ValueError, match="NoSchedule"):
        TaintControllerSettings(taint_effect="NoExecute")


def test_every_problem_is_reported_at_once() -> None:
    assert set(problems({"replicas": 9, "holdRemove": "x", "unknown": 1})) == {"replicas", "holdRemove", "unknown"}


def test_settings_are_frozen() -> None:
    s = TaintControllerSettings()
    with pytest.raises(ValueError, match="frozen"):
        s.high_mark = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "line 1, column 2: invalid JSON"),
        (b"[1]", "expected a JSON object of settings, got list"),
        (b'{"highMark": 4}\0', "is binary (a NUL byte at offset 15)"),
        ('{"namespace": "caf\xe9"}'.encode("latin-1"), "is not UTF-8 text"),
        (b'{"highMark": 4, "highMark": 40}', "the key 'highMark' is given twice"),
        (b'{"highMark": NaN}', "NaN is not a number settings take"),
        (("[" * 5000 + "]" * 5000).encode(), "nests deeper than 64 levels"),
        (b" " * (1024 * 1024 + 1), "is larger than 1024 KiB"),
    ],
)
def test_unreadable_and_hostile_files(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(content)
    with pytest.raises(SettingsError) as err:
        load_settings(path)
    assert str(err.value).startswith(f"{path}: 1 problem(s)")
    assert message in str(err.value)
    with pytest.raises(SettingsError, match="cannot read"):
        load_settings(tmp_path / "missing.json")


def test_long_values_are_cut_in_messages() -> None:
    found = problems({"namespace": "N" * 3000})
    assert "(3000 characters)" in found["namespace"]
    assert len(found["namespace"]) < 200


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("1h30m", 5400), ("250ms", 0.25), ("2.5m", 150)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_default_queries_keep_an_empty_result_possible() -> None:
    """Only the requests side (headroom) and a ksm-alive guard (pending) fall back to zero."""
    assert DEFAULT_HEADROOM_QUERY.count("or vector(0)") == 1
    assert DEFAULT_HEADROOM_QUERY.rstrip().endswith("or vector(0))")  # inside the subtraction's right side
    # The allocatable side falls back only to the same series times zero (every node reserved): empty with ksm down.
    assert DEFAULT_HEADROOM_QUERY.startswith("(sum(((kube_node_status_allocatable")
    assert " or (sum(((kube_node_status_allocatable" in DEFAULT_HEADROOM_QUERY
    assert "vector(0)" not in DEFAULT_PENDING_QUERY
    assert DEFAULT_PENDING_QUERY.endswith(
        " or (count((kube_node_info and (time() - timestamp(kube_node_info) <= $FRESH_SECONDS))) * 0)"
    )


# --- the default headroom query and reserved nodes, under promtool ---------------------------------------------

_NODES = {"gpu-a": 8, "gpu-c": 8, "gpu-burst": 16}
_PODS = [("research", "train", "gpu-a", 2), ("inference", "serve", "gpu-c", 1)]


def _headroom_series(taints: list[tuple[str, str]], taint_values: str = "1x5") -> list[dict[str, str]]:
    series = []
    for node, gpus in _NODES.items():
        series.append(
            {
                "series": f'kube_node_status_allocatable{{resource="nvidia_com_gpu",node="{node}"}}',
                "values": f"{gpus}x5",
            }
        )
        series.append({"series": f'kube_node_spec_unschedulable{{node="{node}"}}', "values": "0x5"})
        series.append({"series": f'kube_node_info{{node="{node}"}}', "values": "1x5"})
    for ns, pod, node, gpus in _PODS:
        labels = f'namespace="{ns}",pod="{pod}"'
        series.append(
            {
                "series": f'kube_pod_container_resource_requests{{resource="nvidia_com_gpu",node="{node}",{labels}}}',
                "values": f"{gpus}x5",
            }
        )
        series.append({"series": f'kube_pod_status_phase{{{labels},phase="Running"}}', "values": "1x5"})
    for node, key in taints:
        series.append(
            {"series": f'kube_node_spec_taint{{node="{node}",key="{key}",effect="NoSchedule"}}', "values": taint_values}
        )
    return series


def _promtool_headroom(
    tmp_path: Path,
    taints: list[tuple[str, str]],
    expected: int,
    query: str = "headroom_query",
    *,
    taint_values: str = "1x5",
    eval_time: str = "2m",
    fresh_within: str = "2m",
) -> subprocess.CompletedProcess[str]:
    s = TaintControllerSettings(node_name="gpu-burst", fresh_within=fresh_within)
    (tmp_path / "empty.yml").write_text("groups: []\n")
    case = {
        "interval": "1m",
        "input_series": _headroom_series(taints, taint_values),
        "promql_expr_test": [
            {
                "expr": s.render_query(getattr(s, query)),
                "eval_time": eval_time,
                "exp_samples": [{"labels": "{}", "value": expected}],
            }
        ],
    }
    (tmp_path / "test.yml").write_text(json.dumps({"rule_files": ["empty.yml"], "tests": [case]}))
    return subprocess.run(
        [debian_tool("promtool"), "test", "rules", str(tmp_path / "test.yml")],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("taints", "expected", "wrong"),
    [
        ([], 13, 6),  # gpu-a 8 + gpu-c 8 - 3 requested
        ([("gpu-c", RESERVATION_KEY)], 6, 13),  # gpu-c and its pod left out
        ([("gpu-c", "example.com/other")], 13, 6),  # another taint is still headroom
        ([("gpu-a", RESERVATION_KEY), ("gpu-c", RESERVATION_KEY)], 0, 13),  # all reserved: 0, not empty
    ],
    ids=["no-reservation", "one-reserved", "other-taint", "all-reserved"],
)
def test_default_headroom_leaves_reserved_nodes_out(
    tmp_path: Path, taints: list[tuple[str, str]], expected: int, wrong: int
) -> None:
    right = _promtool_headroom(tmp_path, taints, expected)
    assert right.returncode == 0, right.stdout + right.stderr
    assert _promtool_headroom(tmp_path, taints, wrong).returncode != 0


@pytest.mark.parametrize(
    ("taints", "expected", "wrong"),
    [
        ([], 0, 1),  # none reserved: zero, not empty (the hold applies)
        ([("gpu-c", RESERVATION_KEY)], 1, 0),
        ([("gpu-a", RESERVATION_KEY), ("gpu-c", RESERVATION_KEY)], 2, 1),
        ([("gpu-c", "example.com/other")], 0, 1),  # another taint is no reservation
    ],
    ids=["none", "one", "two", "other-taint"],
)
def test_default_reserved_query_counts_the_reserved_nodes(
    tmp_path: Path, taints: list[tuple[str, str]], expected: int, wrong: int
) -> None:
    right = _promtool_headroom(tmp_path, taints, expected, "reserved_query")
    assert right.returncode == 0, right.stdout + right.stderr
    assert _promtool_headroom(tmp_path, taints, wrong, "reserved_query").returncode != 0


_FRESH = re.compile(r"\((?P<s>[a-z_]+(\{[^}]*\})?) and \(time\(\) - timestamp\((?P=s)\) <= \$FRESH_SECONDS\)\)")


@pytest.mark.parametrize(
    ("taint_values", "fresh_within", "expected", "wrong"),
    [
        ("1x5", "2m", 6, 13),  # reserved, and scraped every minute: left out
        # The reservation's last sample at 1m and nothing after, no staleness marker (it went while Prometheus was
        # down, which empties the scrape cache): at 4m Prometheus still answers it (lookback 5m) ...
        ("1 1", "1h", 6, 13),
        # ... and freshWithin (2m) drops it: the node is headroom again.
        ("1 1", "2m", 13, 6),
        ("1 1 stale", "1h", 13, 6),  # a staleness marker (scraped without it): gone at once, as always
    ],
    ids=["fresh", "restart-ghost-unguarded", "restart-ghost-dropped", "staleness-marker"],
)
def test_a_reservation_gone_while_prometheus_was_down_is_no_ghost(
    tmp_path: Path, taint_values: str, fresh_within: str, expected: int, wrong: int
) -> None:
    taints = [("gpu-c", RESERVATION_KEY)]
    kw = {"taint_values": taint_values, "eval_time": "4m", "fresh_within": fresh_within}
    right = _promtool_headroom(tmp_path, taints, expected, **kw)
    assert right.returncode == 0, right.stdout + right.stderr
    assert _promtool_headroom(tmp_path, taints, wrong, **kw).returncode != 0
    reserved = _promtool_headroom(tmp_path, taints, 1 if expected == 6 else 0, "reserved_query", **kw)
    assert reserved.returncode == 0, reserved.stdout + reserved.stderr


def test_fresh_within_shorter_than_ten_seconds_is_refused() -> None:
    with pytest.raises(SettingsError, match="freshWithin"):
        TaintControllerSettings.parse({"freshWithin": "5s"})
    assert TaintControllerSettings.parse({"freshWithin": "10s"}).fresh_within_seconds == 10


def test_the_daemon_readme_shows_the_default_queries_as_they_are() -> None:
    readme = (Path(__file__).resolve().parents[2] / "daemons" / "taint_controller" / "README.md").read_text()
    shown = [re.sub(r"\s+", "", block) for block in re.findall(r"```promql\n(.*?)```", readme, re.S)]
    queries = (
        DEFAULT_HEADROOM_QUERY,
        DEFAULT_PENDING_QUERY,
        DEFAULT_RESERVED_QUERY,
        DEFAULT_HEADROOM_BY_TYPE_QUERY,
        DEFAULT_PENDING_BY_TYPE_QUERY,
        DEFAULT_BURST_QUERY,
    )
    for query in queries:
        assert "$FRESH_SECONDS" in query
        # The README writes fresh(x) for the freshness guard it explains once.
        assert re.sub(r"\s+", "", _FRESH.sub(r"fresh(\g<s>)", query)) in shown


# --- GPU types ----------------------------------------------------------------------------------------------------


def test_no_gpu_types_by_default_and_the_queries_by_type_match_nothing() -> None:
    s = TaintControllerSettings()
    assert s.gpu_types == []
    assert s.gpu_type_node_label == "nvidia.com/gpu.product"
    assert s.ksm_flags() == []
    for query in (s.headroom_by_type_query, s.pending_by_type_query, s.burst_query):
        rendered = s.render_query(query)
        assert NO_GPU_TYPES in rendered
        assert "$" not in rendered


def test_gpu_types_expand_into_every_query_by_type() -> None:
    s = parse_settings({"gpuTypes": ["H100", "L40S"], "nodeName": "burst-1"})
    headroom = s.render_query(s.headroom_by_type_query)
    assert "$" not in headroom
    assert 'kube_node_labels{label_nvidia_com_gpu_product="L40S"}' in headroom
    assert 'label_nvidia_com_gpu_product=~"(?i).*(H100).*"' in headroom
    assert 'node!="burst-1"' in headroom
    pending = s.render_query(s.pending_by_type_query)
    assert 'kube_pod_annotations{annotation_burst_gpucluster_io_gpu_type="L40S"}' in pending
    assert "kube_pod_nodeselectors{nodeselector_nvidia_com_gpu_product" in pending
    assert NO_GPU_TYPES not in pending
    assert s.ksm_flags() == [
        "--metric-labels-allowlist=nodes=[nvidia.com/gpu.product]",
        "--metric-annotations-allowlist=pods=[burst.gpucluster.io/gpu-type]",
        "--metric-opt-in-list=kube_pod_nodeselectors",
    ]
    other = parse_settings({"gpuTypes": ["H100", "L40S"], "gpuTypeNodeLabel": "example.com/gpuModel"})
    assert "label_example_com_gpu_model=" in other.render_query(other.headroom_by_type_query)
    assert other.ksm_flags()[0] == "--metric-labels-allowlist=nodes=[example.com/gpuModel]"


@pytest.mark.parametrize(
    ("data", "path", "text"),
    [
        ({"gpuTypes": ["H100", "h100"]}, "gpuTypes", "listed twice (in any case): h100"),
        ({"gpuTypes": ["H 100"]}, "gpuTypes[0]", "not a GPU type name"),
        ({"gpuTypes": [f"T{i}" for i in range(MAX_GPU_TYPES + 1)]}, "gpuTypes", f"at most {MAX_GPU_TYPES} items"),
        ({"gpuTypeNodeLabel": "not a label!"}, "gpuTypeNodeLabel", "qualified name"),
        ({"burstQuery": ""}, "burstQuery", "empty"),
        ({"headroomByTypeQuery": ""}, "headroomByTypeQuery", "empty"),
    ],
)
def test_invalid_gpu_type_settings_name_the_key(data: dict[str, Any], path: str, text: str) -> None:
    found = problems(data)
    assert path in found, found
    assert text in found[path]


def test_as_many_gpu_types_as_the_limit_are_accepted() -> None:
    assert len(parse_settings({"gpuTypes": [f"T{i}" for i in range(MAX_GPU_TYPES)]}).gpu_types) == MAX_GPU_TYPES


@pytest.mark.parametrize(
    ("prefix", "key", "name"),
    [
        ("label", "nvidia.com/gpu.product", "label_nvidia_com_gpu_product"),
        ("annotation", "burst.gpucluster.io/gpu-type", "annotation_burst_gpucluster_io_gpu_type"),
        ("label", "example.com/gpuModel", "label_example_com_gpu_model"),
    ],
)
def test_ksm_label_names(prefix: str, key: str, name: str) -> None:
    assert ksm_label_name(prefix, key) == name


@pytest.mark.parametrize(
    ("value", "gpu_type"),
    [
        ("NVIDIA-H100-80GB-HBM3", "H100"),
        ("NVIDIA-L40S", "L40S"),
        ("nvidia-l40s", "L40S"),  # any case
        ("L40S", "L40S"),
        ("Tesla-T4", None),
        ("H100-or-L40S", None),  # names two: neither
    ],
)
def test_gpu_type_of_a_node_label_value(value: str, gpu_type: str | None) -> None:
    assert gpu_type_of(value, ["H100", "L40S"]) == gpu_type


def test_an_exact_name_wins_over_one_it_contains() -> None:
    assert gpu_type_of("H100-NVL", ["H100", "H100-NVL"]) == "H100-NVL"
    assert gpu_type_of("NVIDIA-H100-NVL", ["H100", "H100-NVL"]) is None


def test_the_prod_stack_tells_its_two_gpu_types_apart() -> None:
    """Prod's flavors select NVIDIA-H100-80GB-HBM3 and NVIDIA-L40S nodes; its providers offer H100 and L40S."""
    config = yaml.safe_load((ROOT / "stacks" / "Pulumi.prod.yaml").read_text())["config"]
    products = [f["nodeLabels"].get("nvidia.com/gpu.product", "") for f in config["gpucluster:flavors"]]
    offered = [t for p in config["gpucluster:burst"]["providers"] for t in p["gpuTypes"]]
    assert gpu_types_in_cluster(products, offered) == ["H100", "L40S"]


@pytest.mark.parametrize(
    "products",
    [
        ["NVIDIA-H100-80GB-HBM3"],  # one GPU type: the one pool decides as before
        ["NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3"],  # two flavors, one type
        ["NVIDIA-H100-80GB-HBM3", "Tesla-T4"],  # the other offers no burst type
        [],
    ],
)
def test_one_gpu_type_gets_no_gpu_types(products: list[str]) -> None:
    assert gpu_types_in_cluster(products, ["H100", "L40S"]) == []


# --- the queries by type, under promtool -------------------------------------------------------------------------

#: node -> (GPUs, product label, taint key or None, GPUs requested by a Running pod on it)
_TYPED_NODES: dict[str, tuple[int, str, str | None, int]] = {
    "h100-a": (8, "NVIDIA-H100-80GB-HBM3", None, 2),
    "h100-q": (8, "NVIDIA-H100-80GB-HBM3", QUARANTINE_TAINT_KEY, 1),
    "l40s-a": (8, "NVIDIA-L40S", None, 8),
    "t4-a": (4, "Tesla-T4", None, 0),
    "gpu-burst": (16, "", None, 0),
}


def _typed_series(quarantined: bool) -> list[dict[str, str]]:
    series = []
    for node, (gpus, product, taint, used) in _TYPED_NODES.items():
        labels = f'node="{node}",label_nvidia_com_gpu_product="{product}"' if product else f'node="{node}"'
        series += [
            {
                "series": f'kube_node_status_allocatable{{resource="nvidia_com_gpu",node="{node}"}}',
                "values": f"{gpus}x5",
            },
            {"series": f'kube_node_spec_unschedulable{{node="{node}"}}', "values": "0x5"},
            {"series": f'kube_node_info{{node="{node}"}}', "values": "1x5"},
            {"series": f"kube_node_labels{{{labels}}}", "values": "1x5"},
        ]
        if taint and quarantined:
            series.append(
                {"series": f'kube_node_spec_taint{{node="{node}",key="{taint}",effect="NoExecute"}}', "values": "1x5"}
            )
        if used:
            pod = f'namespace="inference",pod="on-{node}"'
            series += [
                {
                    "series": f'kube_pod_container_resource_requests{{resource="nvidia_com_gpu",node="{node}",{pod}}}',
                    "values": f"{used}x5",
                },
                {"series": f'kube_pod_status_phase{{{pod},phase="Running"}}', "values": "1x5"},
            ]
    return series


def _promtool(tmp_path: Path, series: list[dict[str, str]], expr: str, samples: list[dict[str, Any]]) -> bool:
    return expr_report(tmp_path, series, expr, "2m", samples) == ""


@pytest.mark.parametrize(
    ("quarantined", "whole", "h100", "l40s"),
    [(False, 6 + 7 + 0 + 4, 6 + 7, 0), (True, 6 + 0 + 4, 6, 0)],
    ids=["healthy", "h100-q-quarantined"],
)
def test_quarantined_gpus_are_no_headroom(tmp_path: Path, quarantined: bool, whole: int, h100: int, l40s: int) -> None:
    s = TaintControllerSettings(node_name="gpu-burst", gpu_types=["H100", "L40S"])
    series = _typed_series(quarantined)
    by_type: list[dict[str, Any]] = [
        {"labels": '{gpu_type="H100"}', "value": h100},
        {"labels": '{gpu_type="L40S"}', "value": l40s},
    ]
    assert _promtool(tmp_path, series, s.render_query(s.headroom_query), [{"labels": "{}", "value": whole}])
    assert _promtool(tmp_path, series, s.render_query(s.headroom_by_type_query), by_type)
    # and the check can fail: the other case's numbers are refused
    wrong: list[dict[str, Any]] = [{"labels": '{gpu_type="H100"}', "value": 13 if quarantined else 6}, by_type[1]]
    assert not _promtool(tmp_path, series, s.render_query(s.headroom_by_type_query), wrong)
