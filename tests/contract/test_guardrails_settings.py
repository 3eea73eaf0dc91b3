"""What counts as a credential in a job's env: the names and the shapes of keys and tokens, never the value shown."""

from __future__ import annotations

import re

import pytest

from contract.guardrails_settings import CREDENTIAL_ENV_NAME, CREDENTIAL_ENV_VALUE, credential_literal

#: One of each shape the value pattern knows, as it would sit in an env value (made up, of the real formats).
SHAPES = [
    "hf_" + "aB3" * 8,
    "sk-" + "x9Y_" * 6,
    "sk_live_" + "4eC39HqLyjWD",
    "ghp_" + "A1b2" * 6,
    "github_pat_" + "11AB" * 6,
    "glpat-" + "Zz_9" * 6,
    "xoxb-" + "1234-5678-abcd",
    "rpa_" + "K3Y" * 10,
    "AKIA" + "IOSFODNN7EXAMPLE",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n",
    "Bearer " + "abcDEF123456",
    "postgres://trainer:hunter2hunter2@db.internal:5432/runs",
    "client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ==",
]

#: Values a job really sets that only look a little like one.
BENIGN = [
    "false",
    "3",
    "https://wandb.example.org",
    "s3://checkpoints/run-7",
    "/var/run/secrets/gpucluster/gcp/key.json",
    "sk-short",
    "Bearer",
    "hf_short",
    "meta-llama/Llama-3.1-8B",
]


@pytest.mark.parametrize("value", SHAPES)
def test_a_value_of_a_known_shape_is_a_credential_whatever_its_name(value: str) -> None:
    assert re.search(CREDENTIAL_ENV_VALUE, value)
    why = credential_literal("MODEL_URL", value)
    assert why == "its value is a key or token"
    assert value not in why


@pytest.mark.parametrize("value", BENIGN)
def test_an_ordinary_value_under_an_ordinary_name_passes(value: str) -> None:
    assert credential_literal("MODEL_URL", value) is None


@pytest.mark.parametrize(
    ("name", "held"),
    [("HF_TOKEN", True), ("WANDB_API_KEY", True), ("db_password", True), ("TOKENIZERS_PARALLELISM", False)],
)
def test_a_credential_name_holds_a_literal_but_may_name_a_mounted_file(name: str, held: bool) -> None:
    assert bool(re.search(CREDENTIAL_ENV_NAME, name.upper())) is held
    assert (credential_literal(name, "plain-literal") is not None) is held
    assert credential_literal(name, "/var/run/secrets/gpucluster/x/key") is None
