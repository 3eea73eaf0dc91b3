"""contract/registry.py: every controller of ours declared once, and what reads the declarations.

The stack model has each registered controller's section, the image has its command, the simulated cluster runs it
on its spec's port; a spec that breaks the registry's or its own rules is refused, naming what is wrong.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import pytest

from components.config import load_stack_file
from contract.rbac import Grant, Rule
from contract.registry import CONTROLLERS, QUOTA_CONTROLLER, by_name, check_unique
from contract.spec import ControllerSpec
from daemons.image import DAEMON_MODULES

ROOT = Path(__file__).resolve().parents[2]
STACKS = sorted((ROOT / "stacks").glob("Pulumi.*.yaml"))


@pytest.mark.parametrize("stack_file", STACKS, ids=lambda p: p.name)
def test_every_stack_has_each_registered_controllers_section_in_its_model(stack_file: Path) -> None:
    cfg = load_stack_file(stack_file)
    for spec in CONTROLLERS:
        if spec.nested and cfg.burst is None:  # the taint controller's, in a stack without a burst section
            with pytest.raises(KeyError, match="no burst section"):
                cfg.controller(spec)
            assert cfg.running(spec) is None
            continue
        settings = cfg.controller(spec)
        assert isinstance(settings, spec.settings_model), spec.name
        assert (cfg.running(spec) is settings) == (settings.enabled and (cfg.burst_enabled or not spec.nested))


def test_each_controller_is_its_package_run_by_the_images_python_and_no_console_script() -> None:
    """Adding a controller declares no command: its Deployment runs ``python3 -m daemons.<name>``."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for spec in CONTROLLERS:
        assert spec.command == ("python3", "-m", spec.module), spec.name
        assert spec.app not in scripts, spec.name
        assert f"{spec.module}.__main__" in DAEMON_MODULES
        main = (ROOT / spec.module.replace(".", "/") / "__main__.py").read_text()
        assert 'if __name__ == "__main__":' in main, spec.name


def test_the_specs_are_distinct_and_by_name_finds_each() -> None:
    check_unique(CONTROLLERS)
    assert [by_name(s.name) for s in CONTROLLERS] == list(CONTROLLERS)
    with pytest.raises(KeyError, match="no controller named 'nope'"):
        by_name("nope")


@pytest.mark.parametrize("attribute", ["name", "metrics_port", "metrics_prefix", "stack_key", "component_type"])
def test_two_controllers_sharing_a_name_port_prefix_key_or_type_are_refused(attribute: str) -> None:
    other = next(s for s in CONTROLLERS if s is not QUOTA_CONTROLLER)
    twin = dataclasses.replace(QUOTA_CONTROLLER, **{attribute: getattr(other, attribute)})
    with pytest.raises(ValueError, match=f"share a {attribute}"):
        check_unique(tuple(twin if s is QUOTA_CONTROLLER else s for s in CONTROLLERS))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"name": "Quota Controller"}, "lower-case DNS label"),
        ({"metrics_port": 80}, "not in 1024-65535"),
        ({"metrics_prefix": "quota"}, "metrics_prefix 'quota' does not begin gpucluster_"),
        ({"namespace_role": "inference"}, "namespace_role 'inference'"),
        ({"after": ("the-moon",)}, "after names \\['the-moon'\\]"),
    ],
)
def test_a_spec_that_breaks_its_rules_is_refused(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(QUOTA_CONTROLLER, **change)


def test_a_spec_names_its_command_settings_and_package_from_its_name() -> None:
    spec: ControllerSpec[Any] = QUOTA_CONTROLLER
    assert (spec.app, spec.settings_dir, spec.module) == (
        "gpucluster-quota-controller",
        "/etc/gpucluster/quota-controller",
        "daemons.quota_controller",
    )


def test_a_grant_names_its_binding_and_refuses_an_empty_role() -> None:
    rule = Rule(("",), ("events",), ("create",))
    grant = Grant("events-role-default", "x-events", (rule,), "default")
    assert grant.binding_resource == "events-rolebinding-default"
    assert grant.k8s_rules() == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    with pytest.raises(ValueError, match="no rules"):
        Grant("role", "x", ())
    with pytest.raises(ValueError, match="must name the role"):
        Grant("binding", "x", (rule,))


def test_a_controller_of_the_team_namespaces_is_refused_without_them_or_with_others() -> None:
    from contract.registry import CHECKPOINT_VERIFIER, STALL_DETECTOR  # noqa: PLC0415
    from contract.spec import WORKLOAD_NAMESPACES  # noqa: PLC0415

    context = {WORKLOAD_NAMESPACES: ["team-a", "team-b"]}
    stall = STALL_DETECTOR.settings_model()
    with pytest.raises(ValueError, match=r"settings\.workload_namespaces: no team namespace to watch"):
        STALL_DETECTOR.check(stall, context)
    with pytest.raises(ValueError, match=r"\['team-a'\] are not the stack's team namespaces \['team-a', 'team-b'\]"):
        STALL_DETECTOR.check(stall.model_copy(update={"workload_namespaces": ["team-a"]}), context)
    STALL_DETECTOR.check(stall.model_copy(update={"workload_namespaces": ["team-b", "team-a"]}), context)
    verifier = CHECKPOINT_VERIFIER.settings_model()
    with pytest.raises(ValueError, match=r"ControllerArgs\(checkpoint-verifier\)\.settings\.teams: no team namespace"):
        CHECKPOINT_VERIFIER.check(verifier, context)
    teams = [{"namespace": ns, "localQueue": "training", "priority": "research-low"} for ns in ("team-a", "team-b")]
    CHECKPOINT_VERIFIER.check(CHECKPOINT_VERIFIER.settings_model.parse({"teams": teams}), context)
