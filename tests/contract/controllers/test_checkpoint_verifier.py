"""contract/controllers/checkpoint_verifier.py: what the stack fills in the verifier's settings."""

from __future__ import annotations

from pathlib import Path

from components.config import load_stack_file, parse_stack_config, read_stack_file
from contract.registry import CHECKPOINT_VERIFIER

ROOT = Path(__file__).resolve().parents[3]


def test_each_team_namespace_queues_its_checks_in_its_cpu_only_queue_at_the_lowest_priority_it_may_name() -> None:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    teams = {t.namespace: t for t in cfg.controller(CHECKPOINT_VERIFIER).teams}
    assert set(teams) == {t.namespace for t in cfg.teams}
    # Never a GPU queue: the check Jobs ask for no GPU, and a topology-aware queue would refuse them.
    assert {t.local_queue for t in teams.values()} == {"cpu-only"}
    assert not {t.local_queue for t in teams.values()} & {t.local_queue for t in cfg.teams}
    value = {p.name: p.value for p in cfg.priorities.workload}
    for team in cfg.teams:
        allowed = cfg.priorities.allowed_for(team.name)
        assert teams[team.namespace].priority == min(allowed, key=lambda n: value[n])


def test_a_renamed_cpu_queue_is_the_one_the_checks_name() -> None:
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    raw["kueue"] = {**(raw.get("kueue") or {}), "cpuQueue": {"name": "batch-cpu", "pods": 4}}
    cfg = parse_stack_config(raw, "prod")
    assert {t.local_queue for t in cfg.controller(CHECKPOINT_VERIFIER).teams} == {"batch-cpu"}
