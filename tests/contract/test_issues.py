"""Problems as data: one translation of pydantic's errors into key paths; values shown bounded, credentials never."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import Field, ValidationError

from contract.issues import (
    REDACTED,
    ConfigIssue,
    SettingsError,
    issues_from_validation_error,
    join_path,
    looks_like_credential,
    shown,
    shown_names,
)
from contract.model import ConfigModel, DnsLabel

KEY_LIKE = [
    "rpa_0123456789ABCDEFGHIJ",
    "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
    "sk-live-abcdefghijklmnop",
    "AKIAABCDEFGHIJKLMNOP",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.sig",
    "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----",
    "apiVersion: v1\nusers:\n- user:\n    client-key-data: AAAA",
    "dGhpcyBpcyBhIHNlY3JldCB2YWx1ZSAxMjM0NTY3ODkw",
]


@pytest.mark.parametrize("value", KEY_LIKE)
def test_values_that_look_like_keys_are_redacted(value: str) -> None:
    assert looks_like_credential(value)
    assert shown(value) == REDACTED


@pytest.mark.parametrize("value", ["gpu-burst", "H100", "10m", "http://127.0.0.1:9090", "runpodApiKey", 42, None])
def test_ordinary_values_are_shown(value: Any) -> None:
    assert not looks_like_credential(value)
    assert shown(value) == repr(value)


@pytest.mark.parametrize("key", ["apiKey", "api_key", "token", "password", "passwd", "kubeconfig", "clientSecret"])
def test_values_under_credential_keys_are_redacted(key: str) -> None:
    assert shown("hunter2", key) == REDACTED


def test_long_values_are_cut_and_counted() -> None:
    text = shown("x" * 5000)
    assert text.endswith("... (5000 characters)")
    assert len(text) < 100
    assert shown(list(range(10_000))) == "a list of 10000 item(s)"
    assert shown({"a": 1}) == "a map of 1 key(s)"
    assert "digits" in shown(10**1000)


def test_name_lists_are_bounded() -> None:
    assert shown_names(["a", "b"]) == "['a', 'b']"
    listed = shown_names([f"ns-{i}" for i in range(1000)])
    assert listed.endswith(", ... and 990 more]")
    assert listed.count("'ns-") == 10


def test_key_paths() -> None:
    assert join_path("burst", ["providers", 0, "maxGpus"]) == "burst.providers[0].maxGpus"
    assert join_path("", ["virtualNode", "port"]) == "virtualNode.port"
    assert join_path("", []) == "(top level)"
    assert join_path("queues", ["q" * 500]).startswith("queues.'qqq")
    assert join_path("x", ["ghp_abcdefghijklmnopqrstuvwxyz0123456789"]) == f"x.{REDACTED}"


class _Provider(ConfigModel):
    name: DnsLabel
    max_gpus: Annotated[int, Field(ge=1)]
    api_key: str = ""
    note: str = ""


class _Doc(ConfigModel):
    providers: list[_Provider] = []


def _issues(data: dict[str, Any], prefix: str = "burst") -> list[ConfigIssue]:
    with pytest.raises(ValidationError) as err:
        _Doc.model_validate(data)
    return issues_from_validation_error(err.value, prefix, unknown_key_hint="see the README")


def test_errors_become_key_paths_with_plain_reasons() -> None:
    found = _issues({"providers": [{"name": "Bad_Name", "maxGpus": 0, "colour": "red"}, {"name": "b"}]})
    assert [str(i) for i in found] == [
        "burst.providers[0].name: 'Bad_Name' is not a DNS label (lower-case letters, digits and '-', at most 63)",
        "burst.providers[0].maxGpus: Input should be greater than or equal to 1 (got 0)",
        "burst.providers[0].colour: unknown key (see the README)",
        "burst.providers[1].maxGpus: required key is missing",
    ]
    assert [i.value for i in found] == ["Bad_Name", 0, None, None]  # an unknown key's value is never kept


def test_a_credential_is_never_kept_nor_shown() -> None:
    (by_key,) = _issues({"providers": [{"name": "a", "maxGpus": 1, "apiKey": 12345}]})
    assert str(by_key) == f"burst.providers[0].apiKey: Input should be a valid string (got {REDACTED})"
    assert by_key.value is None
    (by_value,) = _issues({"providers": [{"name": "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "maxGpus": 1}]})
    assert "ghp_" not in str(by_value)
    assert by_value.value is None


def test_a_long_value_is_shown_cut() -> None:
    (issue,) = _issues({"providers": [{"name": "a", "maxGpus": 1, "note": 7 * 10**200}]})
    assert "digits" in issue.reason
    assert len(str(issue)) < 200


def test_settings_error_lists_every_issue() -> None:
    err = SettingsError([ConfigIssue("a", 1, "too big"), ConfigIssue("b", None, "missing")], "file.json")
    assert str(err) == "file.json: 2 problem(s)\n  - a: too big\n  - b: missing"
    assert [i.path for i in err.issues] == ["a", "b"]
