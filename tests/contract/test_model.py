"""The one base settings model and its value rules: each rule accepts what it should and refuses the rest, naming it."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Annotated, Any

import pytest
from pydantic import Field, ValidationError

from contract.model import (
    MAX_STRING,
    ByteQuantity,
    ConfigModel,
    DnsLabel,
    HttpUrl,
    Image,
    PollInterval,
    PositiveDuration,
    Problem,
    Quantity,
    SemVer,
    SemVerOrV,
    Toleration,
    check_dns_label,
    check_dns_subdomain,
    check_labels,
    check_qualified_name,
    each_once,
    parse_duration,
    parse_quantity,
    pod_resource_count,
    shorter_rule,
)


class _Sample(ConfigModel):
    count: Annotated[int, Field(ge=0)] = 0
    ratio: float = 1.0
    name: str = "x"
    enabled: bool = True
    cpu: Quantity = "1"
    memory: ByteQuantity = "1Gi"
    poll: PollInterval = "5s"
    wait: PositiveDuration = "1m"
    url: HttpUrl = "http://127.0.0.1:9090"
    image: Image = "registry.example/app:1.0.0"
    version: SemVer = "1.2.3"
    chart_version: SemVerOrV = "1.2.3"
    label: DnsLabel = "ok"


def _errors(**data: Any) -> list[str]:
    with pytest.raises(ValidationError) as err:
        _Sample.model_validate(data)
    return [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.value.errors()]


# --- YAML's coercions do not pass -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"count": True}, "count: Input should be a valid integer"),  # nodeCount: yes
        ({"count": "5"}, "count: Input should be a valid integer"),  # nodeCount: "5"
        ({"count": 1.0}, "count: Input should be a valid integer"),
        ({"name": 123}, "name: Input should be a valid string"),  # name: 123
        ({"name": False}, "name: Input should be a valid string"),  # name: no
        ({"enabled": "yes"}, "enabled: Input should be a valid boolean"),
        ({"enabled": 1}, "enabled: Input should be a valid boolean"),
        ({"ratio": True}, "ratio: Input should be a valid number"),
        ({"ratio": float("nan")}, "ratio: Input should be a finite number"),
        ({"ratio": float("inf")}, "ratio: Input should be a finite number"),
    ],
)
def test_values_are_strict(data: dict[str, Any], expected: str) -> None:
    assert any(e.startswith(expected) for e in _errors(**data)), _errors(**data)


def test_exact_types_are_accepted() -> None:
    s = _Sample.model_validate({"count": 5, "ratio": 2, "name": "n", "enabled": False})
    assert (s.count, s.ratio, s.name, s.enabled) == (5, 2.0, "n", False)


def test_strings_are_bounded() -> None:
    assert _Sample(name="x" * MAX_STRING).name == "x" * MAX_STRING
    assert _errors(name="x" * (MAX_STRING + 1)) == [f"name: String should have at most {MAX_STRING} characters"]


def test_unknown_keys_are_refused_and_models_are_frozen() -> None:
    assert any("Extra inputs" in e for e in _errors(colour=1))
    with pytest.raises(ValidationError, match="frozen"):
        _Sample().count = 3  # type: ignore[misc]


# --- rules between fields are reported at their own key path --------------------------------------------------


class _Ranged(ConfigModel):
    low: int = 0
    high: int = 1

    def rule_problems(self) -> Iterator[Problem]:
        if self.low >= self.high:
            yield Problem(("low",), f"{self.low} is not below high ({self.high})", self.low)
            yield Problem((), "the range is empty")


class _Holder(ConfigModel):
    ranges: list[_Ranged] = []


def test_model_rules_are_structured_problems_at_their_paths() -> None:
    assert _Holder.model_validate({"ranges": [{"low": 0, "high": 1}]}).ranges[0].high == 1
    with pytest.raises(ValidationError) as err:
        _Holder.model_validate({"ranges": [{}, {"low": 5, "high": 2}]})
    found = [(e["loc"], e["msg"], e["input"]) for e in err.value.errors()]
    assert found == [
        (("ranges", 1, "low"), "5 is not below high (2)", 5),
        (("ranges", 1), "the range is empty", None),
    ]


_WINDOWS = {
    "window": ("period", "a window must fit in a period"),
    "grace": ("window", "the grace must end within the window"),
}


class _Windows(ConfigModel):
    names: Annotated[list[str], each_once("names", key=str.lower, how=" (in any case)")] = []
    period: PositiveDuration = "1h"
    window: PositiveDuration = "10m"
    grace: PositiveDuration = "1m"

    _window_within_period = shorter_rule(_WINDOWS, "window")

    def rule_problems(self) -> Iterator[Problem]:
        return self.shorter_problems(_WINDOWS)


def test_list_entries_stand_once_by_their_key() -> None:
    assert _Windows.model_validate({"names": ["a", "b"]}).names == ["a", "b"]
    with pytest.raises(ValidationError, match=r"names listed twice \(in any case\): a"):
        _Windows.model_validate({"names": ["A", "b", "a"]})


def test_shorter_rules_hold_as_fields_validate_and_on_the_whole_model() -> None:
    def found(**data: Any) -> list[tuple[object, str]]:
        with pytest.raises(ValidationError) as err:
            _Windows.model_validate(data)
        return [(e["loc"], e["msg"]) for e in err.value.errors()]

    window = "window (10m) must be shorter than period (5m): a window must fit in a period"
    grace = "grace (10m) must be shorter than window (10m): the grace must end within the window"
    # as the window validates (its period is validated before it), beside any other problem
    assert found(period="5m", window="10m", names=["a", "a"]) == [
        (("names",), "Value error, names listed twice (in any case): a"),
        (("window",), f"Value error, {window}"),
    ]
    # on the whole model, in the rules' order: a window left at its default, a rule no field validator holds
    assert found(period="5m", grace="10m") == [(("window",), window), (("grace",), grace)]


def test_a_message_with_braces_is_kept_as_written() -> None:
    class _Braces(ConfigModel):
        def rule_problems(self) -> Iterator[Problem]:
            yield Problem((), "write {secure: ...} here")

    with pytest.raises(ValidationError) as err:
        _Braces()
    assert err.value.errors()[0]["msg"] == "write {secure: ...} here"


# --- quantities: one pattern; `m` is milli -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", Decimal("0.5")), ("2", Decimal(2)), ("1.5", Decimal("1.5")), ("8Gi", Decimal(8 * 2**30)), ("4k", 4000)],
)
def test_parse_quantity(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("cpu", ["500m", "2", "0.25", "1000"])
def test_cpu_takes_milli(cpu: str) -> None:
    assert _Sample(cpu=cpu).cpu == cpu


@pytest.mark.parametrize("memory", ["512Mi", "8Gi", "500M", "1.5Gi", "2048"])
def test_memory_takes_whole_bytes(memory: str) -> None:
    assert _Sample(memory=memory).memory == memory


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"memory": "500m"}, "'500m' is a fraction of a byte: 'm' means a thousandth; write 500M or 500Mi"),
        ({"memory": "0.5"}, "'0.5' is a fraction of a byte"),
        ({"cpu": "0"}, "'0' is not a positive Kubernetes quantity"),
        ({"cpu": "lots"}, "'lots' is not a Kubernetes quantity such as 500m, 2 or 8Gi"),
        ({"cpu": "1e3"}, "is not a Kubernetes quantity"),
        ({"cpu": "-1"}, "is not a Kubernetes quantity"),
        ({"memory": "9000000Ei"}, "is larger than any Kubernetes quantity"),
        ({"cpu": "1" * 40}, "is not a Kubernetes quantity"),
    ],
)
def test_bad_quantities_are_refused(data: dict[str, Any], expected: str) -> None:
    assert any(expected in e for e in _errors(**data)), _errors(**data)


# --- durations -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("1h30m", 5400), ("250ms", 0.25), ("2.5m", 150)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "10", "ten minutes", "5d", "-1s", "1s" * 20])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration such as 90s"):
        parse_duration(text)


@pytest.mark.parametrize(("poll", "wait"), [("1s", "1ns"), ("2s", "168h"), ("10m", "30m")])
def test_durations_in_range_are_accepted(poll: str, wait: str) -> None:
    s = _Sample(poll=poll, wait=wait)
    assert (s.poll, s.wait) == (poll, wait)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"poll": "1ns"}, "'1ns' is shorter than 1s: polling that often only loads the API it asks"),
        ({"poll": "999ms"}, "'999ms' is shorter than 1s"),
        ({"poll": "0s"}, "'0s' must be longer than zero"),
        ({"wait": "0s"}, "'0s' must be longer than zero"),
        ({"wait": "169h"}, "'169h' is longer than a week"),
        ({"wait": "99999999h"}, "is longer than a week"),
    ],
)
def test_durations_out_of_range_are_refused(data: dict[str, Any], expected: str) -> None:
    assert any(expected in e for e in _errors(**data)), _errors(**data)


# --- names, versions, images, URLs --------------------------------------------------------------------------


def test_names() -> None:
    assert check_dns_label("gpu-burst") == "gpu-burst"
    assert check_dns_subdomain("gpu.burst-1") == "gpu.burst-1"
    assert check_qualified_name("nvidia.com/gpu") == "nvidia.com/gpu"
    assert check_labels({"gpucluster.io/fabric": "ib-ndr"}) == {"gpucluster.io/fabric": "ib-ndr"}
    with pytest.raises(ValueError, match="'GPU_Burst' is not a DNS label"):
        check_dns_label("GPU_Burst")
    with pytest.raises(ValueError, match=r"'a\.\.b' is not a DNS subdomain"):
        check_dns_subdomain("a..b")
    with pytest.raises(ValueError, match="taint key 'bad key!' is not a valid Kubernetes qualified name"):
        check_qualified_name("bad key!", "taint key")
    with pytest.raises(ValueError, match="label value 'not ok' of 'k' is not a valid"):
        check_labels({"k": "not ok"})


def test_a_long_bad_name_is_shown_cut() -> None:
    with pytest.raises(ValueError, match="is not a DNS label") as err:
        check_dns_label("X" * 10_000)
    assert "(10000 characters)" in str(err.value)
    assert len(str(err.value)) < 200


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"version": "^1.2"}, "'^1.2' is not an exact version such as 1.2.3 (ranges are not pins)"),
        ({"version": "v1.2.3"}, "is not an exact version"),
        ({"chart_version": "v1.2"}, "is not an exact version"),
        ({"image": "registry.example/app"}, "is not pinned"),
        ({"image": "registry.example/app:latest"}, "uses the moving tag 'latest'"),
        ({"image": "Not An Image"}, "is not an image reference"),
        ({"url": "prometheus:9090"}, "is not an http(s) URL"),
        ({"url": "http://127.0.0.1:0"}, "has a port out of range (1-65535)"),
        ({"url": "http://127.0.0.1:70000"}, "has a port out of range (1-65535)"),
        ({"label": "Bad_Label"}, "is not a DNS label"),
    ],
)
def test_bad_references_are_refused(data: dict[str, Any], expected: str) -> None:
    assert any(expected in e for e in _errors(**data)), _errors(**data)


def test_good_references_are_accepted() -> None:
    digest = "sha256:" + "a" * 64
    s = _Sample(
        chart_version="v0.36.0",
        image=f"registry:5000/x/d:1@{digest}",
        url="https://prom.example:65535/",
        version="1.2.3-rc.1",
    )
    assert (s.chart_version, s.url, s.version) == ("v0.36.0", "https://prom.example:65535", "1.2.3-rc.1")


# --- tolerations --------------------------------------------------------------------------------------------


def test_toleration() -> None:
    t = Toleration.model_validate({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"})
    assert t.to_k8s() == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    with pytest.raises(ValidationError, match="operator Exists takes no value"):
        Toleration.model_validate({"key": "gpu", "operator": "Exists", "value": "x"})
    with pytest.raises(ValidationError, match="toleration key 'bad key' is not a valid"):
        Toleration.model_validate({"key": "bad key"})
    with pytest.raises(ValidationError, match="NoSchedule"):
        Toleration.model_validate({"key": "gpu", "effect": "Evict"})


# --- the GPUs a pod holds ---------------------------------------------------------------------------------------

GPU = "nvidia.com/gpu"


def container(requests: object = None, limits: object = None) -> dict[str, object]:
    resources: dict[str, object] = {}
    if requests is not None:
        resources["requests"] = {GPU: requests}
    if limits is not None:
        resources["limits"] = {GPU: limits}
    return {"name": "c", "resources": resources}


@pytest.mark.parametrize(
    ("spec", "held"),
    [
        ({"containers": [container(limits="2"), container(requests=3)]}, 5),  # a request, else the limit
        ({"containers": [container(requests="1", limits="4")]}, 1),  # the request wins
        ({"containers": [container(limits=2)], "initContainers": [container(limits="4")]}, 4),  # the larger init
        ({"containers": [container(limits=2), container(limits=2)], "initContainers": [container(limits=3)]}, 4),
        ({"containers": [{"name": "cpu-only"}]}, 0),
        ({}, 0),
    ],
)
def test_the_gpus_a_pod_holds_are_counted_as_the_scheduler_does(spec: dict[str, object], held: int) -> None:
    assert pod_resource_count(spec, GPU) == held


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (None, "spec is missing"),
        ({"containers": ["x"]}, r"spec\.containers\[0\] is not an object"),
        ({"containers": [container(limits="1.5")]}, r"spec\.containers\[0\]\.resources nvidia.com/gpu: not a whole"),
        ({"containers": [container(limits="lots")]}, "not a quantity"),
        ({"containers": [container(limits=True)]}, "not a quantity"),
        ({"initContainers": [container(requests=-1)]}, r"spec\.initContainers\[0\].*not a whole number"),
        ({"containers": "all"}, r"spec\.containers has the wrong type"),
    ],
)
def test_a_pod_that_is_no_pod_spec_is_refused_naming_the_field(spec: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pod_resource_count(spec, GPU)
