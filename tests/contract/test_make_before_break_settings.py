"""``gpucluster:makeBeforeBreak``: its defaults, every bound both ways with the key path named, the rules between
its fields and the stack's, and the document the daemon reads."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from components.config import StackConfigError, load_stack_file, parse_stack_config, read_stack_file
from contract.constants import RESERVATION_KEY
from contract.issues import SettingsError
from contract.make_before_break_settings import (
    FILLED,
    MakeBeforeBreakSettings,
    load_settings,
    parse_settings,
)
from contract.registry import MAKE_BEFORE_BREAK
from contract.taint_controller_queries import DEFAULT_RESERVED_QUERY
from daemons.make_before_break.policy import policy_of
from tests.contract.settings_checks import read_back

ROOT = Path(__file__).resolve().parents[2]
#: prod as it will run once its provider secrets are set: bursting on, and make-before-break with it.
PROD = read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
PROD["burst"] = {**PROD["burst"], "enabled": True}
PROD.update({"runpodApiKey": {"secure": "v1:c2VjcmV0"}, "eastKubeconfig": {"secure": "v1:c2VjcmV0"}})
PROD["makeBeforeBreak"] = {**PROD["makeBeforeBreak"], "enabled": True}


def prod_with(**section: Any) -> dict[str, Any]:
    raw = copy.deepcopy(PROD)
    raw["makeBeforeBreak"] = {**raw["makeBeforeBreak"], **section}
    return raw


def problems(raw: dict[str, Any]) -> list[str]:
    try:
        parse_stack_config(raw, "test")
    except StackConfigError as err:
        return [str(issue) for issue in err.issues]
    return []


def test_off_until_a_stack_sets_it() -> None:
    s = MakeBeforeBreakSettings()
    assert not s.enabled
    assert (s.namespace, s.replicas, s.max_hold, s.node_grace, s.return_batch) == (
        "gpucluster-burst",
        2,
        "5m",
        "60s",
        2,
    )
    assert (s.deletion_cost, s.reservation_key) == (-1000, "gpucluster.io/reservation")
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    del raw["makeBeforeBreak"]
    assert not parse_stack_config(raw, "test").controller(MAKE_BEFORE_BREAK).enabled


def test_the_reservation_key_is_the_one_the_daemon_and_the_headroom_query_use() -> None:
    assert MakeBeforeBreakSettings().reservation_key == RESERVATION_KEY
    assert policy_of(MakeBeforeBreakSettings()).reservation_key == RESERVATION_KEY
    assert f'key="{RESERVATION_KEY}"' in DEFAULT_RESERVED_QUERY


def test_every_stack_sets_it_on_with_bursting_and_off_without() -> None:
    stacks = {
        name: load_stack_file(ROOT / "stacks" / f"Pulumi.{name}.yaml") for name in ("local", "dev", "staging", "prod")
    }
    enabled = {name: (cfg.controller(MAKE_BEFORE_BREAK).enabled, cfg.burst_enabled) for name, cfg in stacks.items()}
    assert enabled == {"local": (True, True), "dev": (False, False), "staging": (False, False), "prod": (False, False)}


def test_inference_namespaces_come_from_the_stack() -> None:
    cfg = parse_stack_config(copy.deepcopy(PROD), "test")
    assert cfg.controller(MAKE_BEFORE_BREAK).inference_namespaces == list(cfg.inference_namespaces)
    narrowed = parse_stack_config(prod_with(inferenceNamespaces=["inference"]), "test")
    assert narrowed.controller(MAKE_BEFORE_BREAK).inference_namespaces == ["inference"]


# (id, section keys, the key path the message must name, a fragment of the reason)
INVALID: list[tuple[str, dict[str, Any], str, str]] = [
    ("replicas-zero", {"replicas": 0}, "makeBeforeBreak.replicas", "greater than or equal to 1"),
    ("replicas-four", {"replicas": 4}, "makeBeforeBreak.replicas", "less than or equal to 3"),
    ("replicas-text", {"replicas": "2"}, "makeBeforeBreak.replicas", "integer"),
    ("image-floating", {"image": "ghcr.io/example/d:latest"}, "makeBeforeBreak.image", "latest"),
    ("image-unpinned", {"image": "ghcr.io/example/d"}, "makeBeforeBreak.image", "not pinned"),
    ("hold-not-duration", {"maxHold": "ten minutes"}, "makeBeforeBreak.maxHold", "duration"),
    ("hold-zero", {"maxHold": "0s"}, "makeBeforeBreak.maxHold", "longer than zero"),
    ("hold-over-an-hour", {"maxHold": "61m"}, "makeBeforeBreak.maxHold", "longer than 1h"),
    ("grace-over-hold", {"maxHold": "5m", "nodeGrace": "5m"}, "makeBeforeBreak.nodeGrace", "shorter than maxHold"),
    ("return-batch-zero", {"returnBatch": 0}, "makeBeforeBreak.returnBatch", "greater than or equal to 1"),
    ("return-batch-unbounded", {"returnBatch": 51}, "makeBeforeBreak.returnBatch", "less than or equal to 50"),
    ("deletion-cost-zero", {"deletionCost": 0}, "makeBeforeBreak.deletionCost", "less than or equal to -1"),
    ("deletion-cost-int32", {"deletionCost": -(2**31) - 1}, "makeBeforeBreak.deletionCost", "greater than"),
    ("reservation-not-a-key", {"reservationKey": "not a key!"}, "makeBeforeBreak.reservationKey", "qualified name"),
    (
        "reservation-is-burst-taint",
        {"reservationKey": "gpucluster.io/in-cluster-capacity"},
        "makeBeforeBreak.reservationKey",
        "burst taint",
    ),
    (
        "reservation-is-virtual-node-taint",
        {"reservationKey": "virtual-kubelet.io/provider"},
        "makeBeforeBreak.reservationKey",
        "virtual node",
    ),
    ("interval-too-short", {"interval": "100ms"}, "makeBeforeBreak.interval", "shorter than 1s"),
    ("renew-over-lease", {"renewDeadline": "15s"}, "makeBeforeBreak.renewDeadline", "shorter than leaseDuration"),
    ("retry-over-renew", {"retryPeriod": "10s"}, "makeBeforeBreak.retryPeriod", "shorter than renewDeadline"),
    ("namespace-not-dns", {"namespace": "Burst_NS"}, "makeBeforeBreak.namespace", "DNS label"),
    ("namespace-is-inference", {"namespace": "inference"}, "makeBeforeBreak.namespace", "namespace of its own"),
    (
        "namespaces-unknown",
        {"inferenceNamespaces": ["inference", "elsewhere"]},
        "makeBeforeBreak.inferenceNamespaces",
        "['elsewhere'] not in gpucluster:inferenceNamespaces",
    ),
    ("typo-key", {"maxHolds": "5m"}, "makeBeforeBreak.maxHolds", "unknown key"),
    ("enabled-text", {"enabled": "yes"}, "makeBeforeBreak.enabled", "boolean"),
    # prod's waitForPodsReady.timeout is 15m
    ("hold-at-pods-ready-timeout", {"maxHold": "15m"}, "makeBeforeBreak.maxHold", "waitForPodsReady.timeout (15m)"),
]


@pytest.mark.parametrize(("section", "path", "reason"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_section_names_the_key(section: dict[str, Any], path: str, reason: str) -> None:
    found = problems(prod_with(**section))
    matching = [m for m in found if m.startswith(f"{path}:")]
    assert matching, f"no message for {path} in {found}"
    assert any(reason in m for m in matching), f"{reason!r} not in {matching}"


VALID: list[tuple[str, dict[str, Any]]] = [
    ("replicas-one", {"replicas": 1}),
    ("replicas-three", {"replicas": 3}),
    ("hold-just-below-timeout", {"maxHold": "14m59s"}),
    ("grace-just-below-hold", {"maxHold": "5m", "nodeGrace": "4m59s"}),
    ("return-batch-bounds", {"returnBatch": 50}),
    ("deletion-cost-int32", {"deletionCost": -(2**31)}),
    ("interval-one-second", {"interval": "1s"}),
]


@pytest.mark.parametrize("section", [c[1] for c in VALID], ids=[c[0] for c in VALID])
def test_values_at_the_bounds_are_accepted(section: dict[str, Any]) -> None:
    assert problems(prod_with(**section)) == []


def test_the_hold_rule_waits_for_the_gate_and_the_switch() -> None:
    """maxHold only has to stay below the timeout while both the gate and the controller are on."""
    raw = prod_with(maxHold="20m")
    assert any(m.startswith("makeBeforeBreak.maxHold:") for m in problems(raw))
    off = prod_with(maxHold="20m", enabled=False)
    assert problems(off) == []
    no_gate = copy.deepcopy(raw)
    no_gate["kueue"]["waitForPodsReady"]["enable"] = False
    assert problems(no_gate) == []


def test_every_problem_of_the_section_is_reported_at_once() -> None:
    found = problems(prod_with(replicas=9, returnBatch=0, image="x:latest"))
    paths = {m.split(":", 1)[0] for m in found}
    assert {"makeBeforeBreak.replicas", "makeBeforeBreak.returnBatch", "makeBeforeBreak.image"} <= paths


def test_a_section_that_is_not_a_map() -> None:
    raw = copy.deepcopy(PROD)
    raw["makeBeforeBreak"] = ["enabled"]
    assert any(m.startswith("makeBeforeBreak:") for m in problems(raw))


def test_parse_settings_refuses_what_is_not_an_object() -> None:
    with pytest.raises(Exception, match="expected a JSON object"):
        parse_settings(["x"])
    assert parse_settings({"enabled": True}).enabled


def test_the_document_is_what_the_daemon_reads(tmp_path: Path) -> None:
    """The stack's section, filled, is the daemon's file: written and read back, it is the same model."""
    daemon = read_back(parse_stack_config(copy.deepcopy(PROD), "test").controller(MAKE_BEFORE_BREAK), tmp_path)
    assert (daemon.admission_check_name, daemon.return_batch) == ("make-before-break", 2)
    # bursting on: the virtual node is the stack's
    assert (daemon.virtual_node_name, daemon.burst_taint_key) == ("gpu-burst", "gpucluster.io/in-cluster-capacity")
    policy = policy_of(daemon)
    assert (policy.max_hold_s, policy.node_grace_s, policy.max_returning, policy.deletion_cost) == (
        600.0,
        60.0,
        2,
        -1000,
    )


def test_the_virtual_node_is_the_stacks_while_it_bursts() -> None:
    local = read_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    assert (
        parse_stack_config(copy.deepcopy(local), "test").controller(MAKE_BEFORE_BREAK).virtual_node_name == "gpu-burst"
    )
    local["burst"] = {**local["burst"], "enabled": False}
    del local["runpodFakeApiKey"]  # the provider secret: no enabled section names it any more
    local["makeBeforeBreak"] = {**local["makeBeforeBreak"], "enabled": False}  # on only with bursting
    assert parse_stack_config(local, "test").controller(MAKE_BEFORE_BREAK).virtual_node_name is None


def test_the_burst_taint_key_comes_from_the_stack() -> None:
    raw = copy.deepcopy(PROD)
    raw["burstTaintKey"] = "example.com/burst"
    assert parse_stack_config(raw, "test").controller(MAKE_BEFORE_BREAK).burst_taint_key == "example.com/burst"


@pytest.mark.parametrize("key", sorted(FILLED))
def test_a_filled_field_is_refused_in_the_stack(key: str) -> None:
    value: Any = ["example.com/q"] if key == "quarantineTaintKeys" else "example.com/x"
    found = problems(prod_with(**{key: value}))
    assert any(m.startswith(f"makeBeforeBreak.{key}:") and "do not set it" in m for m in found), found


def test_the_defaults_hold_below_the_default_pods_ready_timeout() -> None:
    """Only ``enabled`` set: the 5m hold is below Kueue's 10m default waitForPodsReady timeout."""
    raw = copy.deepcopy(PROD)
    raw["makeBeforeBreak"] = {"enabled": True}
    raw["kueue"] = {**raw["kueue"], "waitForPodsReady": {"enable": True}}
    assert problems(raw) == []
    raw["makeBeforeBreak"] = {"enabled": True, "maxHold": "10m"}
    assert any(m.startswith("makeBeforeBreak.maxHold:") for m in problems(raw))


def test_quarantine_keys_listed_twice_are_refused() -> None:
    with pytest.raises(Exception, match=r"taint keys listed twice: a\.io/q"):
        parse_settings({"quarantineTaintKeys": ["a.io/q", "a.io/q"]})


def test_settings_from_yaml_and_their_rules(tmp_path: Path) -> None:
    good = tmp_path / "s.yaml"
    good.write_text("maxHold: 5m\nnodeGrace: 30s\ninferenceNamespaces: [inference, llm]\n")
    s = load_settings(good)
    assert (policy_of(s).max_hold_s, policy_of(s).node_grace_s, s.inference_namespaces) == (
        300.0,
        30.0,
        ["inference", "llm"],
    )
    bad = tmp_path / "s.json"
    bad.write_text('{"maxHold": "1m", "nodeGrace": "2m", "deletionCost": 5, "bogus": 1}')
    with pytest.raises(SettingsError) as info:
        load_settings(bad)
    text = str(info.value)
    assert "nodeGrace (2m) must be shorter than maxHold (1m)" in text
    assert "deletionCost" in text
    assert "bogus" in text


@pytest.mark.parametrize(
    ("good", "bad", "words"),
    [
        ({"leaseDuration": "15s", "renewDeadline": "14s"}, {"renewDeadline": "15s"}, "renewDeadline (15s) must be"),
        ({"renewDeadline": "10s", "retryPeriod": "9s"}, {"retryPeriod": "10s"}, "retryPeriod (10s) must be"),
        ({"maxHold": "2m", "nodeGrace": "119s"}, {"maxHold": "2m", "nodeGrace": "2m"}, "nodeGrace (2m) must be"),
        ({"deletionCost": -1}, {"deletionCost": 0}, "deletionCost"),
        ({"returnBatch": 1}, {"returnBatch": 0}, "returnBatch"),
        ({"returnBatch": 50}, {"returnBatch": 51}, "returnBatch"),
    ],
)
def test_each_settings_bound_holds_at_its_edge_and_fails_past_it(
    tmp_path: Path, good: dict[str, Any], bad: dict[str, Any], words: str
) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(good))
    load_settings(path)
    path.write_text(json.dumps(bad))
    with pytest.raises(SettingsError, match=re.escape(words)):
        load_settings(path)
