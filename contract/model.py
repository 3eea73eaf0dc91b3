"""The one base of every settings model (stack sections and daemon settings files) and the value rules they share.

Components and daemons alike import from here; it imports pydantic only (no Pulumi), so the daemon image can load
it. Each ``check_*`` returns the value or raises ValueError whose message shows the value bounded and redacted
(:func:`contract.issues.shown`). The annotated types (``DnsLabel``, ``PositiveDuration``, ``Quantity``, ...)
apply them as pydantic fields.

Values are strict: a settings file is YAML or JSON, and YAML turns ``yes`` into a boolean and leaves ``"5"`` a
string, so a count must be an integer (not a boolean, not a string), a name a string (not a number), and no number
may be NaN or infinite. Strings are at most :data:`MAX_STRING` characters, which also bounds every pattern's work.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self, overload
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake
from pydantic_core import InitErrorDetails, PydanticCustomError

from contract.documents import read_settings_file
from contract.issues import ConfigIssue, SettingsError, issues_from_validation_error, shown

#: Longest string any settings field takes (a PromQL query is the longest we write: well under 1000).
MAX_STRING = 4096


@dataclass(frozen=True)
class Problem:
    """A rule between a model's fields that does not hold: where (relative to the model, camelCase keys and list
    indexes), why, and the offending value."""

    loc: tuple[str | int, ...]
    message: str
    value: Any = None


def repeated(names: Iterable[str]) -> list[str]:
    """The names that stand more than once, sorted."""
    return sorted(n for n, count in Counter(names).items() if count > 1)


def listed_once(values: list[Any], what: str, names: Iterable[str] | None = None, how: str = "") -> list[Any]:
    """``values`` when each is listed once (by ``names``, the values themselves by default); else ValueError naming
    those listed twice (the first ten), as a field validator raises it: "<what> listed twice<how>: a, b"."""
    dupes = repeated(values if names is None else names)
    if dupes:
        raise ValueError(f"{what} listed twice{how}: {', '.join(dupes[:10])}")
    return values


def each_once(what: str, key: Callable[[Any], str] | None = None, how: str = "") -> AfterValidator:
    """A list field's rule, as its annotation (``Annotated[list[DnsLabel], each_once("namespaces")]``): each entry
    listed once, by ``key`` (the entries themselves by default); else :func:`listed_once`'s ValueError."""
    return AfterValidator(lambda values: listed_once(values, what, None if key is None else map(key, values), how))


class Seconds:
    """A duration field read in seconds, declared once beside it: ``interval_seconds = Seconds("interval")`` gives
    ``parse_duration(self.interval)`` (the field is validated when the model is, so reading it cannot fail)."""

    def __init__(self, field: str) -> None:
        self.field = field

    @overload
    def __get__(self, obj: None, owner: type[Any] | None = None) -> Seconds: ...

    @overload
    def __get__(self, obj: object, owner: type[Any] | None = None) -> float: ...

    def __get__(self, obj: object | None, owner: type[Any] | None = None) -> Seconds | float:
        if obj is None:
            return self
        return parse_duration(getattr(obj, self.field))


class ConfigModel(BaseModel):
    """camelCase keys in YAML/JSON, snake_case in Python; unknown keys are refused, values strict and frozen.

    A model's rules between its own fields go in :meth:`rule_problems`; each problem is reported at its own key
    path, like any field error, and every problem of a document is reported at once.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        str_strip_whitespace=True,
        strict=True,
        allow_inf_nan=False,
        str_max_length=MAX_STRING,
        ignored_types=(Seconds,),
    )

    def rule_problems(self) -> Iterator[Problem]:
        """The rules between this model's fields that do not hold (none by default)."""
        return iter(())

    def shorter_problems(self, rules: Mapping[str, tuple[str, str]]) -> Iterator[Problem]:
        """The rules of :func:`shorter` that do not hold here: each key of ``rules`` whose duration is not shorter
        than its bound's, in the rules' order."""
        for key, (bound, _why) in rules.items():
            value = getattr(self, to_snake(key))
            problem = shorter(rules, key, value, getattr(self, to_snake(bound)))
            if problem:
                yield Problem((key,), problem, value)

    @model_validator(mode="after")
    def _rules_hold(self) -> Self:
        problems = list(self.rule_problems())
        if problems:
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [
                    InitErrorDetails(
                        type=PydanticCustomError("rule", "{message}", {"message": p.message}), loc=p.loc, input=p.value
                    )
                    for p in problems
                ],
            )
        return self


# ----------------------------------------------------------------------------------------------------
# Kubernetes names
# ----------------------------------------------------------------------------------------------------

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def check_dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(f"{shown(value)} is not a DNS label (lower-case letters, digits and '-', at most 63)")
    return value


def check_dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ValueError(f"{shown(value)} is not a DNS subdomain name (lower-case letters, digits, '-' and '.')")
    return value


def check_qualified_name(value: str, what: str = "name") -> str:
    """A label key, taint key or extended resource name: an optional DNS prefix and a name."""
    if len(value) > 316 or not _QUALIFIED_NAME.match(value):
        raise ValueError(f"{what} {shown(value)} is not a valid Kubernetes qualified name (prefix/name)")
    return value


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    """Label keys are qualified names, label values at most 63 characters of the label alphabet."""
    for key, value in labels.items():
        check_qualified_name(key, "label key")
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            raise ValueError(f"label value {shown(value)} of {shown(key)} is not a valid Kubernetes label value")
    return labels


DnsLabel = Annotated[str, AfterValidator(check_dns_label)]
DnsSubdomain = Annotated[str, AfterValidator(check_dns_subdomain)]
QualifiedName = Annotated[str, AfterValidator(check_qualified_name)]
LabelKey = Annotated[str, AfterValidator(lambda v: check_qualified_name(v, "label key"))]
TaintKey = Annotated[str, AfterValidator(lambda v: check_qualified_name(v, "taint key"))]


# ----------------------------------------------------------------------------------------------------
# Durations
# ----------------------------------------------------------------------------------------------------

_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|ms|s|m|h))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|ms|s|m|h)")
_MAX_DURATION_TEXT = 32
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
#: Longest duration a daemon takes (a hold, a window, a timeout): beyond it a daemon would wait "forever".
MAX_DAEMON_DURATION_SECONDS = 7 * 24 * 3600.0
#: Shortest period a daemon polls at (Prometheus, a provider's API, the API server's Lease).
MIN_POLL_SECONDS = 1.0


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration such as ``30s``, ``10m`` or ``1h30m``; ValueError names the bad text."""
    if len(text) > _MAX_DURATION_TEXT or not _DURATION.match(text):
        raise ValueError(f"{shown(text)} is not a duration such as 90s, 5m or 1h30m")
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


def _check_size(value: str, size: Decimal | float, largest: Decimal | float, not_positive: str, too_large: str) -> str:
    """``value`` when its ``size`` (already parsed: seconds, a quantity) is above zero and at most ``largest``; else
    ValueError showing ``value``, then ``not_positive`` or ``too_large``."""
    if size <= 0:
        raise ValueError(f"{shown(value)} {not_positive}")
    if size > largest:
        raise ValueError(f"{shown(value)} {too_large}")
    return value


def check_duration_within(value: str, longest_seconds: float, longest: str) -> str:
    """A duration longer than zero and at most ``longest_seconds``, which ``longest`` names (and says why)."""
    return _check_size(
        value, parse_duration(value), longest_seconds, "must be longer than zero", f"is longer than {longest}"
    )


def check_positive_duration(value: str) -> str:
    """A duration a daemon waits or looks back: longer than zero, at most a week."""
    return check_duration_within(
        value, MAX_DAEMON_DURATION_SECONDS, "a week (168h): the daemon would in effect never act"
    )


def check_poll_interval(value: str) -> str:
    """How often a daemon polls: a positive duration of at least a second."""
    check_positive_duration(value)
    if parse_duration(value) < MIN_POLL_SECONDS:
        raise ValueError(
            f"{shown(value)} is shorter than {MIN_POLL_SECONDS:g}s: polling that often only loads the API it asks"
        )
    return value


#: Every period, timeout or window the stack or a daemon takes: longer than zero, at most a week.
PositiveDuration = Annotated[str, AfterValidator(check_positive_duration)]
PollInterval = Annotated[str, AfterValidator(check_poll_interval)]


def shorter(rules: Mapping[str, tuple[str, str]], name: str, value: str | None, limit: str | None) -> str | None:
    """Why the duration ``name`` must be shorter than the one ``rules[name]`` bounds it by (its key and why), when
    it is not; None when it is, or when either is unset."""
    if value is None or limit is None or parse_duration(value) < parse_duration(limit):
        return None
    other, why = rules[name]
    return f"{name} ({value}) must be shorter than {other} ({limit}): {why}"


def shorter_rule(rules: Mapping[str, tuple[str, str]], key: str, *, check_fields: bool | None = None) -> Any:
    """The field validator of the rule ``rules[key]`` (see :func:`shorter`), assigned in a model's body: ``key``'s
    duration is refused as it validates unless shorter than its bound, when that is declared (so validated) before
    it, and the rule then reports with every other problem of the document. ``check_fields=False``: the fields are
    declared by subclasses. :meth:`ConfigModel.shorter_problems` checks the rules again on the whole model, for the
    fields left at their defaults."""
    field, bound = to_snake(key), to_snake(rules[key][0])

    def check(cls: type[ConfigModel], value: str | None, info: ValidationInfo) -> str | None:
        problem = shorter(rules, key, value, info.data.get(bound))
        if problem:
            raise ValueError(problem)
        return value

    return field_validator(field, check_fields=check_fields)(classmethod(check))


#: A Lease's timings: each must be shorter than the one before it, and why.
LEASE_SHORTER = {
    "renewDeadline": ("leaseDuration", "the leader must give up the lease before another replica may take it"),
    "retryPeriod": ("renewDeadline", "the leader must get a retry in before its deadline"),
}


# ----------------------------------------------------------------------------------------------------
# Tolerations
# ----------------------------------------------------------------------------------------------------


class Toleration(ConfigModel):
    """A pod toleration as Kubernetes takes it."""

    key: Annotated[str, AfterValidator(lambda v: check_qualified_name(v, "toleration key"))]
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    def rule_problems(self) -> Iterator[Problem]:
        if self.operator == "Exists" and self.value is not None:
            yield Problem((), "operator Exists takes no value")

    def to_k8s(self) -> dict[str, str]:
        out = {"key": self.key, "operator": self.operator}
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        return out


class LeaseTimings(ConfigModel):
    """The rules of a daemon that stands by behind a Lease: leaseDuration > renewDeadline > retryPeriod.

    A subclass declares ``lease_duration``, ``renew_deadline`` and ``retry_period`` among its own fields (so its
    settings file keeps its key order); one with rules of its own yields ``super().rule_problems()`` from its
    :meth:`rule_problems`. Each rule is checked as its field validates, so it reports with every other problem, and
    again on the whole model, for the fields left at their defaults.
    """

    if TYPE_CHECKING:
        lease_duration: str
        renew_deadline: str
        retry_period: str

    _renew_below_lease = shorter_rule(LEASE_SHORTER, "renewDeadline", check_fields=False)
    _retry_below_renew = shorter_rule(LEASE_SHORTER, "retryPeriod", check_fields=False)

    def rule_problems(self) -> Iterator[Problem]:
        return self.shorter_problems(LEASE_SHORTER)

    # Seconds, for the daemon.
    @property
    def lease_duration_seconds(self) -> float:
        return parse_duration(self.lease_duration)

    @property
    def renew_deadline_seconds(self) -> float:
        return parse_duration(self.renew_deadline)

    @property
    def retry_period_seconds(self) -> float:
        return parse_duration(self.retry_period)


#: How many replicas of a controller behind a Lease run: the leader, and at most two standing by.
ControllerReplicas = Annotated[int, Field(ge=1, le=3)]


class ControllerSettings(LeaseTimings):
    """What every controller of ours that stands by behind a Lease shares: its switch, namespace, image, replicas and
    polling interval (declared by each subclass among its own fields, so its settings file keeps its key order), the
    Lease rules, the settings file it reads (:meth:`to_json`, :meth:`parse`, :meth:`load`).

    ``settings_format`` pins the file's format (the taint controller reads JSON only); None: JSON for ``.json``,
    YAML otherwise.
    """

    settings_format: ClassVar[Literal["json", "yaml"] | None] = None
    #: The fields that place the Deployment's pods: the stack's, not the daemon's, so left out of its settings file.
    PLACEMENT: ClassVar[frozenset[str]] = frozenset({"node_selector", "tolerations"})

    #: Where its pods run (the Deployment's nodeSelector and tolerations): as a rule system nodes, never the GPUs.
    node_selector: Annotated[dict[str, str], AfterValidator(check_labels)] = {}
    tolerations: list[Toleration] = []

    if TYPE_CHECKING:
        enabled: bool
        namespace: str
        image: str
        replicas: int
        interval: str
        lease_name: str

    @property
    def interval_seconds(self) -> float:
        return parse_duration(self.interval)

    def to_json(self) -> str:
        """The daemon's settings file, as the component renders it into the ConfigMap (no placement: the daemon
        never reads where it runs)."""
        return self.model_dump_json(by_alias=True, indent=2, exclude=set(self.PLACEMENT))

    @classmethod
    def parse(cls, data: Any, source: str = "settings") -> Self:
        """Validate already-parsed settings; SettingsError lists every problem with its key path."""
        if not isinstance(data, Mapping):
            raise SettingsError(
                [ConfigIssue("(top level)", None, f"expected a JSON object of settings, got {type(data).__name__}")],
                source,
            )
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            raise SettingsError(issues_from_validation_error(exc), source) from None

    @classmethod
    def load(cls, path: str | Path) -> Self:
        """Read the settings file; SettingsError on any problem, hostile files included (contract/documents.py)."""
        return cls.parse(read_settings_file(path, cls.settings_format), str(Path(path)))


# ----------------------------------------------------------------------------------------------------
# Versions, images, URLs
# ----------------------------------------------------------------------------------------------------

_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")
_IMAGE = re.compile(
    r"^(?P<name>[a-z0-9]+(?:[._\-/:][a-z0-9]+)*?)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
_HTTP_URL = re.compile(r"^https?://[^\s/]+(/\S*)?$")


def check_semver(value: str, *, v_prefix: bool = False) -> str:
    """An exact version such as ``1.2.3`` (``v1.2.3`` too when ``v_prefix``); ranges are refused."""
    if not _SEMVER.match(value.removeprefix("v") if v_prefix else value):
        raise ValueError(f"{shown(value)} is not an exact version such as 1.2.3 (ranges are not pins)")
    return value


def check_image(ref: str) -> str:
    """An image pinned by a version tag other than ``latest`` or by a sha256 digest."""
    m = _IMAGE.match(ref)
    if not m:
        raise ValueError(f"{shown(ref)} is not an image reference such as registry/name:1.2.3 or name@sha256:<64 hex>")
    tag, digest = m.group("tag"), m.group("digest")
    if not tag and not digest:
        raise ValueError(f"{shown(ref)} is not pinned: give a version tag or a sha256 digest")
    if tag == "latest" and not digest:
        raise ValueError(f"{shown(ref)} uses the moving tag 'latest': pin a version tag or a digest")
    return ref


def check_http_url(value: str) -> str:
    """An http(s) URL with a port in range, returned without a trailing slash."""
    if not _HTTP_URL.match(value):
        raise ValueError(f"{shown(value)} is not an http(s) URL such as http://127.0.0.1:9090")
    try:
        port = urlsplit(value).port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError(f"{shown(value)} has a port out of range (1-65535)")
    return value.rstrip("/")


SemVer = Annotated[str, AfterValidator(check_semver)]
#: Chart and image versions that may carry a leading ``v`` (``v0.36.0``).
SemVerOrV = Annotated[str, AfterValidator(lambda v: check_semver(v, v_prefix=True))]
Image = Annotated[str, AfterValidator(check_image)]
HttpUrl = Annotated[str, AfterValidator(check_http_url)]
#: A TCP port a daemon listens on as a non-root user.
UnprivilegedPort = Annotated[int, Field(ge=1024, le=65535)]


# ----------------------------------------------------------------------------------------------------
# Quantities
# ----------------------------------------------------------------------------------------------------

#: A Kubernetes quantity as we accept it: a decimal number and an optional suffix. ``m`` is milli (a thousandth),
#: as in Kubernetes: right for CPU (``500m`` is half a core), never a byte count (:func:`check_byte_quantity`
#: refuses it there, where ``500m`` is half a byte and almost always meant ``500M``).
QUANTITY = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<suffix>m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_MULTIPLIER: dict[str, Decimal] = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    **{s: Decimal(1000) ** (i + 1) for i, s in enumerate(("k", "M", "G", "T", "P", "E"))},
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}
#: Kubernetes keeps quantities in 64 bits: nothing larger can be a real size.
MAX_QUANTITY = Decimal(2**63 - 1)
_MAX_QUANTITY_TEXT = 32


def parse_quantity(text: str) -> Decimal:
    """The value of a Kubernetes quantity (``500m`` -> 0.5, ``2`` -> 2, ``16Gi`` -> 17179869184)."""
    m = QUANTITY.match(text) if len(text) <= _MAX_QUANTITY_TEXT else None
    if not m:
        raise ValueError(f"{shown(text)} is not a Kubernetes quantity such as 500m, 2 or 8Gi")
    try:
        return Decimal(m.group("number")) * _MULTIPLIER[m.group("suffix") or ""]
    except InvalidOperation:  # pragma: no cover - the pattern admits only plain decimals
        raise ValueError(f"{shown(text)} is not a Kubernetes quantity such as 500m, 2 or 8Gi") from None


def check_quantity(value: str) -> str:
    """A positive Kubernetes quantity that fits in 64 bits (CPU: ``500m``, ``2``)."""
    return _check_size(
        value,
        parse_quantity(value),
        MAX_QUANTITY,
        "is not a positive Kubernetes quantity such as 500m, 2 or 8Gi",
        "is larger than any Kubernetes quantity (2^63-1)",
    )


def check_byte_quantity(value: str) -> str:
    """A positive whole number of bytes (``8Gi``, ``50Ti``, ``512M``): ``m`` (milli) is refused."""
    check_quantity(value)
    if parse_quantity(value) % 1:
        hint = f": 'm' means a thousandth; write {value[:-1]}M or {value[:-1]}Mi" if value.endswith("m") else ""
        raise ValueError(f"{shown(value)} is a fraction of a byte{hint}")
    return value


Quantity = Annotated[str, AfterValidator(check_quantity)]
ByteQuantity = Annotated[str, AfterValidator(check_byte_quantity)]


def pod_resource_count(spec: object, resource: str) -> int:
    """How many of a countable ``resource`` (``nvidia.com/gpu``) a pod spec holds, as the scheduler counts it: the
    larger of its containers' sum and its largest init container, each container's request, else its limit (for an
    extended resource the API server makes them equal). The one rule for "the GPUs a pod holds".

    ValueError naming the field for anything that is not a pod spec's shape or not a whole, non-negative number.
    """
    if not isinstance(spec, Mapping):
        raise ValueError("spec is missing")

    def one(container: object, at: str) -> int:
        if not isinstance(container, Mapping):
            raise ValueError(f"{at} is not an object")
        resources = container.get("resources") or {}
        if not isinstance(resources, Mapping):
            raise ValueError(f"{at}.resources is not an object")
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if not isinstance(requests, Mapping) or not isinstance(limits, Mapping):
            raise ValueError(f"{at}.resources: requests and limits must be objects")
        value = requests.get(resource, limits.get(resource))
        if value is None:
            return 0
        where = f"{at}.resources {resource}"
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError(f"{where}: not a quantity")
        try:
            number = Decimal(value) if isinstance(value, int) else parse_quantity(value)
        except ValueError:
            raise ValueError(f"{where}: not a quantity") from None
        if number < 0 or number != number.to_integral_value():
            raise ValueError(f"{where}: not a whole number of devices")
        return int(number)

    def each(list_name: str) -> list[int]:
        items = spec.get(list_name) or []
        if not isinstance(items, list):
            raise ValueError(f"spec.{list_name} has the wrong type: a list is expected")
        return [one(c, f"spec.{list_name}[{i}]") for i, c in enumerate(items)]

    return max([sum(each("containers")), *each("initContainers")])
