"""The rules between sections: registered once, each a named function; twins of policies carry their names."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

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


def test_the_cpu_queue_name_is_taken_by_no_gpu_queue_flavor_or_team_queue() -> None:
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    sections, _ = parse_sections(raw)
    assert sections.kueue is not None
    assert sections.kueue.cpu_queue.name == "cpu-only"
    assert list(rules_module.cpu_queue_name_free(sections)) == []
    raw["kueue"] = {**(raw.get("kueue") or {}), "cpuQueue": {"name": "pretraining"}}
    raw["teams"][1] = {**raw["teams"][1], "localQueue": "pretraining"}
    raw["flavors"][0] = {**raw["flavors"][0], "name": "pretraining"}
    sections, _ = parse_sections(raw)
    found = list(rules_module.cpu_queue_name_free(sections))
    assert [i.path for i in found] == ["queues.pretraining", "flavors[0].name", "teams[1].localQueue"]
    assert all("kueue.cpuQueue.name" in str(i) for i in found)


# --- make-before-break --------------------------------------------------------------------------------------


def _bursting_prod() -> dict[str, Any]:
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    raw["burst"] = {**raw["burst"], "enabled": True}
    raw["makeBeforeBreak"] = {**raw["makeBeforeBreak"], "enabled": True}
    return raw


def test_make_before_break_goes_on_only_with_bursting() -> None:
    raw = _bursting_prod()
    sections, _ = parse_sections(raw)
    assert list(rules_module.make_before_break_has_somewhere_to_move(sections)) == []
    raw["burst"] = {**raw["burst"], "enabled": False}
    sections, _ = parse_sections(raw)
    found = list(rules_module.make_before_break_has_somewhere_to_move(sections))
    assert [i.path for i in found] == ["makeBeforeBreak.enabled"]
    assert "nowhere to move to" in str(found[0])
    assert "10m" in str(found[0])
    del raw["burst"]  # no burst section at all: nowhere either
    sections, _ = parse_sections(raw)
    assert [i.path for i in rules_module.make_before_break_has_somewhere_to_move(sections)] == [
        "makeBeforeBreak.enabled"
    ]
    raw["burst"] = {"enabled": "maybe"}  # a burst section with problems of its own: those are reported instead
    sections, _ = parse_sections(raw)
    assert sections.burst is None
    assert list(rules_module.make_before_break_has_somewhere_to_move(sections)) == []


def test_reserved_nodes_are_left_out_of_a_custom_headroom_query() -> None:
    raw = _bursting_prod()
    sections, _ = parse_sections(raw)
    assert list(rules_module.make_before_break_reserved_not_headroom(sections)) == []
    burst: Any = raw["burst"]
    raw["burst"] = {**burst, "taintController": {**burst["taintController"], "headroomQuery": "sum(x)"}}
    sections, _ = parse_sections(raw)
    found = list(rules_module.make_before_break_reserved_not_headroom(sections))
    assert [i.path for i in found] == ["burst.taintController.headroomQuery"]
    assert "gpucluster.io/reservation" in str(found[0])
    raw["makeBeforeBreak"] = {**raw["makeBeforeBreak"], "enabled": False}
    sections, _ = parse_sections(raw)
    assert list(rules_module.make_before_break_reserved_not_headroom(sections)) == []


def test_the_reservation_key_differs_from_the_stacks_burst_taint_key() -> None:
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    raw["burstTaintKey"] = "example.com/capacity"
    sections, _ = parse_sections(raw)
    assert list(rules_module.make_before_break_reservation_apart(sections)) == []
    raw["makeBeforeBreak"] = {**raw["makeBeforeBreak"], "reservationKey": "example.com/capacity"}
    sections, _ = parse_sections(raw)
    assert [i.path for i in rules_module.make_before_break_reservation_apart(sections)] == [
        "makeBeforeBreak.reservationKey"
    ]


def test_a_cpu_queue_without_room_for_a_pod_is_refused_naming_the_key() -> None:
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    raw["kueue"] = {**(raw.get("kueue") or {}), "cpuQueue": {"pods": 0}}
    _, issues = parse_sections(raw)
    assert [i.path for i in issues] == ["kueue.cpuQueue.pods"]
