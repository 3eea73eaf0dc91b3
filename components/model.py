"""The base every stack-config section derives from, and the Kubernetes name rules they share."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, field_validator, model_validator
from pydantic.alias_generators import to_camel


class ConfigModel(BaseModel):
    """camelCase keys in the stack YAML, snake_case in Python; unknown keys are refused, values frozen."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        str_strip_whitespace=True,
    )


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|ms|s|m|h))+$")
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.-]+)?$")


def check_dns_label(v: str) -> str:
    if len(v) > 63 or not _DNS_LABEL.match(v):
        raise ValueError(f"{v!r} is not a DNS label (lower-case letters, digits and '-', at most 63)")
    return v


def check_qualified_name(value: str, what: str) -> str:
    """A label key, taint key or extended resource name: an optional DNS prefix and a name."""
    if len(value) > 316 or not _QUALIFIED_NAME.match(value):
        raise ValueError(f"{what} {value!r} is not a valid Kubernetes qualified name (prefix/name)")
    return value


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    for key, value in labels.items():
        check_qualified_name(key, "label key")
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            raise ValueError(f"label value {value!r} of {key!r} is not a valid Kubernetes label value")
    return labels


def check_duration(v: str) -> str:
    if not _DURATION.match(v):
        raise ValueError(f"{v!r} is not a duration such as 90s, 5m or 1h30m")
    return v


def check_semver(v: str) -> str:
    if not _SEMVER.match(v):
        raise ValueError(f"{v!r} is not an exact version such as 1.2.3 (ranges are not pins)")
    return v


DnsLabel = Annotated[str, AfterValidator(check_dns_label)]
Duration = Annotated[str, AfterValidator(check_duration)]
SemVer = Annotated[str, AfterValidator(check_semver)]


class Toleration(ConfigModel):
    key: str
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        return check_qualified_name(v, "toleration key")

    @model_validator(mode="after")
    def _exists_has_no_value(self) -> Toleration:
        if self.operator == "Exists" and self.value is not None:
            raise ValueError("operator Exists takes no value")
        return self

    def to_k8s(self) -> dict[str, str]:
        out = {"key": self.key, "operator": self.operator}
        if self.value is not None:
            out["value"] = self.value
        if self.effect is not None:
            out["effect"] = self.effect
        return out
