"""The checkpoint layout contract: the step a directory's name says, as the frameworks name their directories."""

from __future__ import annotations

import pytest

from contract.checkpoints import step_of


@pytest.mark.parametrize(
    ("name", "step"),
    [
        ("step-1200", 1200),  # torchtitan
        ("iter_0001200", 1200),  # Megatron
        ("checkpoint-1200", 1200),  # Hugging Face Trainer
        ("global_step1200", 1200),  # DeepSpeed
        ("run3-step-1200", 1200),  # the last run of digits
        ("latest", None),
        ("", None),
    ],
)
def test_the_step_is_the_names_last_run_of_digits(name: str, step: int | None) -> None:
    assert step_of(name) == step
