"""The guardrails' settings and component under Pulumi mocks: which Pod Security level each namespace gets, one
policy and binding per rule, nothing when off, and the stack rule on research priorities held to teams. What the
API server does with them is ``test_guardrails_policies.py``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pydantic import ValidationError

from components.cluster import GpuCluster, GpuClusterArgs, guardrail_inputs
from components.config import load_stack_file, read_stack_file
from components.config import rules as rules_module
from components.config.stack import parse_sections
from components.guardrails_policies import GuardrailInputs, policies
from contract.guardrails_settings import GuardrailsSettings, confinement_opt_out, pod_security_levels
from contract.registry import CONTROLLERS, QUOTA_CONTROLLER
from daemons.toolkit.listen import parse_listen
from tests.support.pulumi_harness import deploy, secrets_of

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "stacks" / "Pulumi.local.yaml"
ENFORCE = "pod-security.kubernetes.io/enforce"


def test_levels_by_role() -> None:
    assert pod_security_levels("capacity") == ("restricted", "restricted")
    assert pod_security_levels("inference") == ("baseline", "restricted")
    assert pod_security_levels("training") == ("baseline", "restricted")
    # IPC_LOCK is beyond baseline: privileged enforced, baseline warned and held by policy
    assert pod_security_levels("training", ipc_lock=True) == ("privileged", "baseline")
    assert pod_security_levels("telemetry") == ("privileged", "baseline")


def test_labels_pin_a_version_and_are_absent_when_off() -> None:
    labels = GuardrailsSettings(pod_security_version="v1.36").labels("inference")
    assert labels[ENFORCE] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == "v1.36"
    assert GuardrailsSettings(enabled=False).labels("inference") == {}
    with pytest.raises(ValidationError, match="podSecurityVersion"):
        GuardrailsSettings.model_validate({"podSecurityVersion": "1.36; rm"})


def test_confinement_opt_out_reads_every_prefix_and_only_unconfined() -> None:
    assert confinement_opt_out({"seccomp.security.alpha.kubernetes.io/pod": " Unconfined "}) is not None
    assert confinement_opt_out({"container.apparmor.security.beta.kubernetes.io/x": "runtime/default"}) is None
    assert confinement_opt_out({"example.com/unconfined": "unconfined"}) is None


def test_the_local_stack_labels_every_namespace_and_holds_every_rule() -> None:
    cfg = load_stack_file(LOCAL)
    graph = deploy(lambda: GpuCluster("sim", GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    namespaces = {
        r.inputs["metadata"]["name"]: r.inputs["metadata"]["labels"]
        for r in graph.of_type("kubernetes:core/v1:Namespace")
    }
    assert all(ENFORCE in labels for labels in namespaces.values()), sorted(
        n for n, labels in namespaces.items() if ENFORCE not in labels
    )
    assert namespaces["team-foundation"][ENFORCE] == "baseline"  # no flavor of the local stack adds IPC_LOCK
    assert namespaces["inference"][ENFORCE] == "baseline"
    assert namespaces[cfg.telemetry.namespace][ENFORCE] == "privileged"
    assert namespaces[cfg.controller(QUOTA_CONTROLLER).namespace][ENFORCE] == "restricted"
    assert namespaces[cfg.kueue.namespace][ENFORCE] == "baseline"

    inputs = guardrail_inputs(cfg)
    assert inputs.priorities_by_namespace["team-vision"] == ("research-default", "research-scavenger")
    assert "research-urgent" in inputs.priorities_by_namespace["team-foundation"]
    names = {p.name for p in policies(inputs)}
    vaps = graph.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
    bindings = graph.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding")
    assert {r.inputs["metadata"]["name"] for r in vaps} == {f"gpucluster-{n}" for n in names}
    assert {r.inputs["spec"]["policyName"] for r in bindings} == {f"gpucluster-{n}" for n in names}
    assert all(r.inputs["spec"]["validationActions"] == ["Deny"] for r in bindings)
    guard = graph.one("gpucluster:guardrails:Guardrails", "sim-guardrails")
    assert all(r.parent == guard.urn for r in vaps + bindings)

    # each team's group gets its Role in its namespace, and reads the reliability ConfigMap
    role_bindings = [
        r for r in graph.of_type("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding") if r.parent == guard.urn
    ]
    subjects = {
        (r.inputs["metadata"]["namespace"], r.inputs["roleRef"]["name"]): sorted(
            x["name"] for x in r.inputs["subjects"]
        )
        for r in role_bindings
    }
    assert subjects[("team-foundation", "gpucluster-team")] == ["gpucluster-team-foundation"]
    assert subjects[("team-vision", "gpucluster-team")] == ["gpucluster-team-vision"]
    reader = (cfg.training.reliability_namespace, "gpucluster-teams-read-reliability")
    assert subjects[reader] == ["gpucluster-team-foundation", "gpucluster-team-vision"]


def test_each_controller_takes_connections_only_from_the_scrapers_and_listens_on_its_pod_address() -> None:
    cfg = load_stack_file(LOCAL)
    graph = deploy(lambda: GpuCluster("sim", GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    network_policies = graph.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    policies_ = {r.inputs["metadata"]["name"]: r for r in network_policies}
    running = [spec for spec in CONTROLLERS if cfg.running(spec) is not None]
    assert running, "the local stack runs controllers of ours"
    assert sorted(policies_) == sorted(spec.app for spec in running)
    for spec in running:
        policy = policies_[spec.app].inputs["spec"]
        assert policy["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": spec.app}}
        assert policy["policyTypes"] == ["Ingress"]
        (rule,) = policy["ingress"]
        assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
        assert rule["ports"] == [{"protocol": "TCP", "port": spec.metrics_port}]
    # the daemon's --listen is its pod's address, which the kubelet expands from the downward API
    dep = next(
        r for r in graph.of_type("kubernetes:apps/v1:Deployment") if r.inputs["metadata"]["name"] == running[0].app
    )
    (container,) = dep.inputs["spec"]["template"]["spec"]["containers"]
    listen = container["args"][container["args"].index("--listen") + 1]
    assert {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}} in container["env"]
    for pod_ip in ("10.244.3.7", "fd00:10:244::7"):
        assert parse_listen(listen.replace("$(POD_IP)", pod_ip)) == (pod_ip, running[0].metrics_port)


def test_no_scraper_means_no_ingress_at_all() -> None:
    cfg = load_stack_file(LOCAL)
    cfg = dataclasses.replace(cfg, guardrails=GuardrailsSettings(metrics_scrapers=[]))
    graph = deploy(lambda: GpuCluster("sim", GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    policies_ = graph.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    assert policies_
    assert all(r.inputs["spec"]["ingress"] == [] for r in policies_)
    with pytest.raises(ValidationError, match="metricsScrapers"):
        GuardrailsSettings.model_validate({"metricsScrapers": ["Not A Namespace"]})


def test_turned_off_there_are_no_labels_and_no_policies() -> None:
    cfg = load_stack_file(LOCAL)
    cfg = dataclasses.replace(cfg, guardrails=GuardrailsSettings(enabled=False))
    graph = deploy(lambda: GpuCluster("sim", GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    assert not graph.of_type("kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy")
    assert not graph.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
    for r in graph.of_type("kubernetes:core/v1:Namespace"):
        assert ENFORCE not in r.inputs["metadata"]["labels"]


def test_prods_infiniband_makes_its_team_namespaces_privileged_held_to_baseline_by_policy() -> None:
    cfg = load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    inputs = guardrail_inputs(cfg)
    assert inputs.ipc_lock
    assert cfg.guardrails.labels("training", ipc_lock=inputs.ipc_lock)[ENFORCE] == "privileged"
    assert "training-pods-stay-baseline" in {p.name for p in policies(inputs)}


def test_without_rdma_the_team_namespaces_enforce_baseline_and_need_no_extra_policy() -> None:
    inputs = GuardrailInputs(("t",), {"t": ("p",)}, "train", ("gpu-telemetry",), ipc_lock=False)
    assert "training-pods-stay-baseline" not in {p.name for p in policies(inputs)}
    assert "training-pods-stay-baseline" in {p.name for p in policies(dataclasses.replace(inputs, ipc_lock=True))}


def test_a_priority_held_to_a_team_the_stack_lacks_is_refused() -> None:
    raw = read_stack_file(LOCAL)
    sections, _ = parse_sections(raw)
    assert list(rules_module.workload_priority_teams_declared(sections)) == []
    raw["priorities"]["workload"][0]["teams"] = ["foundation", "fundation"]
    sections, _ = parse_sections(raw)
    (issue,) = rules_module.workload_priority_teams_declared(sections)
    assert issue.path == "priorities.workload[0].teams[1]"
    assert "no team 'fundation'" in str(issue)


def test_a_team_no_research_priority_allows_is_refused() -> None:
    raw = read_stack_file(LOCAL)
    sections, _ = parse_sections(raw)
    assert list(rules_module.teams_have_a_research_priority(sections)) == []
    team = raw["teams"][1]["name"]
    for priority in raw["priorities"]["workload"]:
        priority["teams"] = [t for t in (priority.get("teams") or [raw["teams"][0]["name"]]) if t != team]
    sections, _ = parse_sections(raw)
    (issue,) = rules_module.teams_have_a_research_priority(sections)
    assert issue.path == "teams[1].name"
    assert f"team {team!r} may name no research priority" in str(issue)
