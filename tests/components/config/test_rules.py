"""The rules between sections: registered once, each a named function; twins of policies carry their names."""

from __future__ import annotations

import inspect
from pathlib import Path

import policies
from components.config import RULES, read_stack_file
from components.config import rules as rules_module
from components.config.stack import parse_sections

ROOT = Path(__file__).resolve().parents[3]

#: Rules that check before rendering what a policy of the pack checks on the rendered resources.
POLICY_TWINS = (
    "quota_within_capacity",
    "training_above_inference",
    "workload_priorities_ordered",
    "descheduler_bounded",
    "provider_secrets_not_in_config",
)


def test_every_rule_function_is_registered_once() -> None:
    defined = {
        name
        for name, fn in inspect.getmembers(rules_module, inspect.isfunction)
        if fn.__module__ == rules_module.__name__ and list(inspect.signature(fn).parameters) == ["s"]
    }
    registered = [rule.__name__ for rule in RULES]
    assert len(registered) == len(set(registered))
    assert set(registered) == defined


def test_twins_of_policies_carry_the_policy_names() -> None:
    registered = {rule.__name__ for rule in RULES}
    for name in POLICY_TWINS:
        assert name in registered
        assert hasattr(policies, name), f"policies has no {name}"


def test_the_four_stacks_break_no_rule() -> None:
    for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        sections, issues = parse_sections(read_stack_file(path))
        assert issues == []
        for rule in RULES:
            assert list(rule(sections)) == [], (path.name, rule.__name__)


def test_a_rule_waits_for_the_sections_it_reads() -> None:
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    raw["flavors"] = "not a list"
    raw["queues"]["pretraining"]["quota"]["h100"] = 100_000
    sections, issues = parse_sections(raw)
    assert sections.flavors is None
    assert [i.path for i in issues] == ["flavors"]
    assert list(rules_module.quota_within_capacity(sections)) == []
