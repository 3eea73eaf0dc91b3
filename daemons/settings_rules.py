"""Value rules shared by the daemons' settings models (the burst provider service's and the taint controller's).

Both models validate a stack's config and the file their daemon reads, and the daemon image ships only ``daemons/``,
so the rules live here rather than in ``components/``. Each check returns the value or raises ValueError naming it.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|ms|s|m|h)")
_DURATION = re.compile(r"^(\d+(\.\d+)?(ns|us|ms|s|m|h))+$")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_IMAGE = re.compile(
    r"^(?P<name>[a-z0-9]+(?:[._\-/:][a-z0-9]+)*?)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)
_HTTP_URL = re.compile(r"^https?://[^\s/]+(/\S*)?$")


class SettingsModel(BaseModel):
    """camelCase keys in YAML/JSON, snake_case in Python; unknown keys are refused, values frozen."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        str_strip_whitespace=True,
    )


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration such as ``30s``, ``10m`` or ``1h30m``; ValueError names the bad text."""
    if not _DURATION.match(text):
        raise ValueError(f"{text!r} is not a duration such as 30s, 10m or 1h30m")
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


def check_duration(value: str) -> str:
    parse_duration(value)
    return value


def check_positive_duration(value: str) -> str:
    if parse_duration(value) <= 0:
        raise ValueError(f"{value!r} must be longer than zero")
    return value


def check_dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(f"{value!r} is not a DNS label (lower-case letters, digits and '-', at most 63)")
    return value


def check_qualified_name(value: str) -> str:
    if len(value) > 316 or not _QUALIFIED_NAME.match(value):
        raise ValueError(f"{value!r} is not a valid Kubernetes qualified name (prefix/name)")
    return value


def check_image(ref: str) -> str:
    """An image pinned by a version tag other than ``latest`` or by a sha256 digest."""
    m = _IMAGE.match(ref)
    if not m:
        raise ValueError(f"{ref!r} is not an image reference such as registry/name:1.2.3 or name@sha256:<64 hex>")
    tag, digest = m.group("tag"), m.group("digest")
    if not tag and not digest:
        raise ValueError(f"{ref!r} is not pinned: give a version tag or a sha256 digest")
    if tag == "latest" and not digest:
        raise ValueError(f"{ref!r} uses the moving tag 'latest': pin a version tag or a digest")
    return ref


def check_http_url(value: str) -> str:
    """An http(s) URL, returned without a trailing slash."""
    if not _HTTP_URL.match(value):
        raise ValueError(f"{value!r} is not an http(s) URL such as http://127.0.0.1:9090")
    return value.rstrip("/")
