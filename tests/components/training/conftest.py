"""The local stack and a valid spec, shared by the training tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components.config import StackConfig, parse_stack_config, read_stack_file

ROOT = Path(__file__).resolve().parents[3]
LOCAL_STACK = ROOT / "stacks" / "Pulumi.local.yaml"
EXAMPLE = ROOT / "examples" / "training" / "job.yaml"


def spec_doc(**change: Any) -> dict[str, Any]:
    """A valid spec document (camelCase, as a researcher writes it), with ``change`` applied."""
    base: dict[str, Any] = {
        "name": "llm-pretrain",
        "team": "foundation",
        "image": "ghcr.io/example/trainer:1.0.0",
        "command": ["torchrun"],
        "args": ["train.py"],
        "nodes": 2,
        "gpusPerNode": 8,
        "priority": "research-default",
    }
    base.update(change)
    return {k: v for k, v in base.items() if v is not None}


def local_raw() -> dict[str, Any]:
    return read_stack_file(LOCAL_STACK)


@pytest.fixture(scope="session")
def stack() -> StackConfig:
    return parse_stack_config(local_raw(), str(LOCAL_STACK))
