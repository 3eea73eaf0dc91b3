"""The local stack on the simulated cluster: what Pulumi applied, and Kueue and the scheduler acting on it.

One session-wide ``local_stack`` (conftest.py) runs `make up`'s script; each test cleans up the workloads it
creates, so quota and nodes are free for the next.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.cluster import guardrail_inputs
from components.config import load_stack_file
from contract.constants import (
    BURST_ENDPOINTS_MANAGER,
    ENDPOINT_SLICE_MANAGED_BY_LABEL,
    PODSET_UNCONSTRAINED_TOPOLOGY,
    RESERVATION_KEY,
)
from contract.jobset_settings import JOBSET_API
from contract.make_before_break_settings import FIELD_MANAGER as MBB_FIELD_MANAGER
from contract.registry import INTERRUPTIONS, QUARANTINE, QUOTA_CONTROLLER, STALL_DETECTOR
from daemons.quarantine.kube import node_from, quarantine_ops
from tests.support.local_stack import LocalStack, condition, delete, gpu_job, wait_for
from tests.support.sim import load_sim_module

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CFG = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
KUEUE = "kueue.x-k8s.io"
TEST_LABEL = "gpucluster.io/integration-test"
flip = load_sim_module("flip")
processes = load_sim_module("processes")


def workload_of(stack: LocalStack, namespace: str, job: str) -> dict[str, Any] | None:
    for wl in stack.items(f"workloads.{KUEUE}", "-n", namespace):
        if any(ref.get("name") == job for ref in wl["metadata"].get("ownerReferences", [])):
            return wl
    return None


def admitted(stack: LocalStack, namespace: str, job: str) -> bool:
    wl = workload_of(stack, namespace, job)
    return wl is not None and condition(wl, "Admitted") == "True"


def job_pods(stack: LocalStack, namespace: str, job: str) -> list[dict[str, Any]]:
    return stack.items("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")


def running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p.get("status", {}).get("phase") == "Running"]


def exactly_running(stack: LocalStack, namespace: str, job: str, count: int) -> list[dict[str, Any]] | None:
    """The job's running pods when there are exactly ``count`` of them, else None."""
    pods = running(job_pods(stack, namespace, job))
    return pods if len(pods) == count else None


def labelled(manifest: dict[str, Any]) -> dict[str, Any]:
    manifest["metadata"].setdefault("labels", {})[TEST_LABEL] = "true"
    return manifest


@pytest.fixture(scope="class")
def without_inference(local_stack: LocalStack) -> Any:
    """These tests count GPUs: the stack's own inference services are scaled to zero for the class's tests (once,
    not once per test: each way waits for pods) and back, Ready, after the last of them."""
    services = [(s.namespace, s.name, s.replicas) for s in CFG.inference_services]
    for ns, name, _ in services:
        local_stack.kubectl("scale", "deployment", name, "-n", ns, "--replicas=0")
    names = ",".join(name for _, name, _ in services)
    stack_pods = f"app.kubernetes.io/name in ({names})" if services else TEST_LABEL
    wait_for("the stack's inference pods to be gone", lambda: _no_pods(local_stack, stack_pods), timeout=90)
    yield
    for ns, name, replicas in services:
        local_stack.kubectl("scale", "deployment", name, "-n", ns, f"--replicas={replicas}")
    for ns, name, replicas in services:
        wait_for(
            f"{ns}/{name} back at {replicas} ready replicas",
            lambda ns=ns, name=name, replicas=replicas: (
                local_stack.get("deployment", name, "-n", ns).get("status", {}).get("readyReplicas") == replicas
            ),
            timeout=120,
        )


def _no_pods(stack: LocalStack, selector: str) -> bool:
    namespaces = {t.namespace for t in CFG.teams} | set(CFG.inference_namespaces)
    return not any(
        stack.items("pods", "-n", ns, "-l", selector, "--field-selector=status.phase!=Succeeded") for ns in namespaces
    )


@pytest.fixture
def cleanup(local_stack: LocalStack, without_inference: None) -> Any:
    """Whatever a test created is deleted, and gone, before the next."""
    yield
    for ns in sorted({t.namespace for t in CFG.teams} | set(CFG.inference_namespaces)):
        delete(local_stack, ["jobs", "deployments"], ns, TEST_LABEL)
    wait_for("test pods to be gone", lambda: _no_pods(local_stack, TEST_LABEL), timeout=60)


# --- what Pulumi applied ------------------------------------------------------------------------------------------


def test_local_stack_applies_and_exports_its_inventory(local_stack: LocalStack) -> None:
    out = json.loads(local_stack.pulumi("stack", "output", "--json", "--stack", "local").stdout)
    assert out["environment"] == "local"
    assert out["gpus"] == {f.name: f.capacity for f in CFG.flavors}
    assert out["clusterQueues"] == {q: dict(s.quota) for q, s in CFG.queues.items()}


def test_fake_gpu_nodes_follow_the_flavors(local_stack: LocalStack) -> None:
    nodes = local_stack.items("nodes", "-l", "gpucluster.io/flavor")
    for flavor in CFG.flavors:
        mine = [n for n in nodes if n["metadata"]["labels"]["gpucluster.io/flavor"] == flavor.name]
        assert len(mine) == flavor.node_count
        for n in mine:
            assert n["status"]["allocatable"][flavor.gpu_resource] == str(flavor.gpus_per_node)
            assert condition(n, "Ready") == "True"
            assert n["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
            for key, value in flavor.node_labels.items():
                assert n["metadata"]["labels"][key] == value


def test_kwok_leaves_nodes_without_its_annotation_alone(local_stack: LocalStack) -> None:
    name = "virtual-node-probe"
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"type": "virtual-kubelet", TEST_LABEL: "true"}},
    }
    local_stack.apply(node)
    try:
        # kwok marks a node it manages Ready within a second or two (the GPU nodes prove it does); give it ample
        # time to (wrongly) take this one.
        for _ in range(8):
            status = local_stack.get("node", name).get("status", {})
            assert not status.get("conditions"), f"kwok took over the unannotated node: {status}"
            time.sleep(1)
    finally:
        local_stack.kubectl("delete", "node", name, "--ignore-not-found")


def test_kueue_objects_match_the_stack_config(local_stack: LocalStack) -> None:
    flavors = {f["metadata"]["name"]: f for f in local_stack.items(f"resourceflavors.{KUEUE}")}
    for f in CFG.flavors:
        # the flavor's own labels and, unless it says otherwise, the acceptance label
        assert flavors[f.name]["spec"]["nodeLabels"] == f.selector_labels
        assert flavors[f.name]["spec"]["nodeLabels"]["gpucluster.io/accepted"] == "true"
        assert flavors[f.name]["metadata"]["annotations"]["gpucluster.io/declared-gpus"] == str(f.capacity)

    cqs = {c["metadata"]["name"]: c for c in local_stack.items(f"clusterqueues.{KUEUE}")}
    cpu = CFG.kueue.cpu_queue
    assert set(cqs) == {*CFG.queues, cpu.name}
    # the queue of CPU-only work: a count of pods, outside the cohort, Active like the rest
    assert cqs[cpu.name]["spec"]["resourceGroups"][0]["flavors"] == [
        {"name": cpu.name, "resources": [{"name": "pods", "nominalQuota": str(cpu.pods)}]}
    ]
    assert "cohortName" not in cqs[cpu.name]["spec"]
    assert condition(cqs[cpu.name], "Active") == "True"
    for name, spec in CFG.queues.items():
        cq = cqs[name]
        assert cq["spec"]["cohortName"] == CFG.cohort
        quota = {
            fl["name"]: int(r["nominalQuota"])
            for group in cq["spec"]["resourceGroups"]
            for fl in group["flavors"]
            for r in fl["resources"]
        }
        assert quota == dict(spec.quota)
        assert cq["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
        assert condition(cq, "Active") == "True", f"ClusterQueue {name} is not Active"

    lqs = {
        (q["metadata"]["namespace"], q["metadata"]["name"]): q["spec"]["clusterQueue"]
        for q in local_stack.items(f"localqueues.{KUEUE}", "-A")
    }
    assert lqs == {
        **{(t.namespace, t.local_queue): t.cluster_queue for t in CFG.teams},
        **{(t.namespace, cpu.name): cpu.name for t in CFG.teams},
    }

    wpcs = {w["metadata"]["name"]: w["value"] for w in local_stack.items(f"workloadpriorityclasses.{KUEUE}")}
    assert wpcs == {w.name: w.value for w in CFG.priorities.workload}


def test_pod_priority_classes_put_training_above_inference(local_stack: LocalStack) -> None:
    pcs = {p["metadata"]["name"]: p for p in local_stack.items("priorityclasses", "-l", "gpucluster.io/tier")}
    train, infer = CFG.priorities.pod.training, CFG.priorities.pod.inference
    assert pcs[train.name]["value"] == train.value
    assert pcs[infer.name]["value"] == infer.value
    assert pcs[train.name]["value"] > pcs[infer.name]["value"]
    assert pcs[train.name]["preemptionPolicy"] == train.preemption_policy


def test_every_training_namespace_has_its_claims(local_stack: LocalStack) -> None:
    storage = CFG.storage
    for ns in CFG.training_namespaces:
        pvcs = {p["metadata"]["name"]: p for p in local_stack.items("pvc", "-n", ns)}
        assert set(pvcs) >= {"checkpoints", "datasets"}
        for name, claim in (("checkpoints", storage.checkpoints), ("datasets", storage.datasets)):
            spec = pvcs[name]["spec"]
            assert spec["accessModes"] == ["ReadWriteMany"]
            assert spec["storageClassName"] == storage.storage_class_name
            assert spec["resources"]["requests"]["storage"] == claim.size
    sc = local_stack.get("storageclass", storage.storage_class_name)
    assert sc["provisioner"] == storage.provisioner
    assert sc["reclaimPolicy"] == "Retain"


# --- Kueue and the scheduler at work -----------------------------------------------------------------------------


@pytest.fixture
def check_answered_at_once(local_stack: LocalStack) -> Iterator[None]:
    """The make-before-break controllers answer the check at once (today's path, which they fall back to)."""
    flip.answer_at_once(True)
    try:
        yield
    finally:
        flip.answer_at_once(False)


class TestGpusCountedWithoutInference:
    """Tests that count GPUs, with the stack's inference services scaled to zero for all of them at once."""

    def test_gang_is_admitted_only_when_all_four_pods_fit(self, local_stack: LocalStack, cleanup: None) -> None:
        team_a, team_b = CFG.teams[0].namespace, CFG.teams[-1].namespace
        local_stack.apply(
            labelled(gpu_job("blocker", team_b, parallelism=1, gpus=8, workload_priority="research-default"))
        )
        wait_for("the blocker to be admitted", lambda: admitted(local_stack, team_b, "blocker"))
        wait_for("the blocker pod to run", lambda: running(job_pods(local_stack, team_b, "blocker")))

        local_stack.apply(
            labelled(gpu_job("gang", team_a, parallelism=4, gpus=8, workload_priority="research-default"))
        )
        # Kueue's webhook (served by the local controller) suspended it at creation.
        assert local_stack.get("job", "gang", "-n", team_a)["spec"]["suspend"] is True
        wl = wait_for("the gang's Workload", lambda: workload_of(local_stack, team_a, "gang"))
        assert [int(ps["count"]) for ps in wl["spec"]["podSets"]] == [4]
        # 32 GPUs are needed, 24 are free: it must wait, whole, with no pod created.
        for _ in range(5):
            assert not admitted(local_stack, team_a, "gang")
            assert not job_pods(local_stack, team_a, "gang")
            time.sleep(1)

        local_stack.kubectl("delete", "job", "blocker", "-n", team_b, "--wait=true", "--cascade=foreground")
        wait_for("the gang to be admitted", lambda: admitted(local_stack, team_a, "gang"))
        pods = wait_for(
            "4 gang pods running",
            lambda: exactly_running(local_stack, team_a, "gang", 4),
        )
        nodes = {p["spec"]["nodeName"] for p in pods}
        assert len(nodes) == 4, f"8-GPU pods must take a node each: {nodes}"
        assert all(n.startswith("h100-node-") for n in nodes)

    def test_higher_workload_priority_preempts_lower(self, local_stack: LocalStack, cleanup: None) -> None:
        team_a, team_b = CFG.teams[0].namespace, CFG.teams[-1].namespace
        local_stack.apply(
            labelled(gpu_job("scavenger", team_b, parallelism=4, gpus=8, workload_priority="research-scavenger"))
        )
        wait_for("the scavenger job to be admitted", lambda: admitted(local_stack, team_b, "scavenger"))

        local_stack.apply(
            labelled(gpu_job("urgent", team_a, parallelism=2, gpus=8, workload_priority="research-urgent"))
        )
        wait_for("the urgent job to be admitted", lambda: admitted(local_stack, team_a, "urgent"), timeout=120)
        low = workload_of(local_stack, team_b, "scavenger")
        assert low is not None
        assert condition(low, "Admitted") != "True"
        assert condition(low, "Preempted") == "True" or condition(low, "Evicted") == "True", low.get("status")
        assert local_stack.get("job", "scavenger", "-n", team_b)["spec"]["suspend"] is True
        wait_for("2 urgent pods running", lambda: len(running(job_pods(local_stack, team_a, "urgent"))) == 2)

    def test_training_pods_preempt_inference_through_the_scheduler(
        self, local_stack: LocalStack, cleanup: None, check_answered_at_once: None
    ) -> None:
        """The fallback path: admitted at once, the training pods preempt by PriorityClass exactly what they need."""
        infer_ns = CFG.inference_namespaces[0]
        team = CFG.teams[0].namespace
        serve = labelled(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "serve", "namespace": infer_ns},
                "spec": {
                    "replicas": 4,
                    "selector": {"matchLabels": {"app": "serve"}},
                    "template": {
                        # as the stack's own inference pods: Kueue's TAS leaves them out of its accounting, so the
                        # training gang is assigned their nodes and the scheduler preempts them there
                        "metadata": {
                            "labels": {"app": "serve"},
                            "annotations": {PODSET_UNCONSTRAINED_TOPOLOGY: "true"},
                        },
                        "spec": {
                            "priorityClassName": CFG.priorities.pod.inference.name,
                            "containers": [
                                {
                                    "name": "serve",
                                    "image": "registry.invalid/serve:sim",
                                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                                }
                            ],
                        },
                    },
                },
            }
        )
        local_stack.apply(serve)

        def serving() -> list[dict[str, Any]]:
            return running(local_stack.items("pods", "-n", infer_ns, "-l", "app=serve"))

        wait_for("4 inference replicas on every GPU", lambda: len(serving()) == 4)

        local_stack.apply(
            labelled(gpu_job("pretrain", team, parallelism=2, gpus=8, workload_priority="research-default"))
        )
        wait_for("the training job to be admitted", lambda: admitted(local_stack, team, "pretrain"))
        pods = wait_for(
            "training pods running",
            lambda: exactly_running(local_stack, team, "pretrain", 2),
            timeout=120,
        )
        assert len(serving()) == 2, "the scheduler should have preempted exactly the inference replicas it needed"
        taken = {p["spec"]["nodeName"] for p in pods}
        assert not taken & {p["spec"]["nodeName"] for p in serving()}


# --- the engine --------------------------------------------------------------------------------------------------


def test_preview_after_up_shows_no_changes(local_stack: LocalStack) -> None:
    proc = local_stack.pulumi("preview", "--stack", "local", "--expect-no-changes", "--diff", check=False)
    assert proc.returncode == 0, f"preview found changes or failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"


def refused_unchanged(local_stack: LocalStack, tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> str:
    """``pulumi up`` of the local stack file as ``edit`` changes it: refused, the state as before; its output."""
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.local.yaml").read_text())
    edit(doc["config"])
    changed = tmp_path / "Pulumi.local.yaml"
    changed.write_text(yaml.safe_dump(doc))
    before = local_stack.pulumi("stack", "export", "--stack", "local").stdout

    proc = local_stack.pulumi("up", "--stack", "local", "--yes", "--config-file", str(changed), check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert "nothing was changed" in output
    resources = lambda export: sorted(r["urn"] for r in json.loads(export)["deployment"]["resources"])  # noqa: E731
    assert resources(local_stack.pulumi("stack", "export", "--stack", "local").stdout) == resources(before)
    return output


def test_invalid_stack_config_fails_before_anything_is_applied(local_stack: LocalStack, tmp_path: Path) -> None:
    def edit(config: dict[str, Any]) -> None:
        config["gpucluster:queues"]["training"]["quota"]["h100"] = 64  # more than the 32 declared
        config["gpucluster:teams"][0]["clusterQueue"] = "no-such-queue"

    output = refused_unchanged(local_stack, tmp_path, edit)
    assert "queues.training.quota.h100" in output
    assert "teams[0].clusterQueue" in output
    cq = local_stack.get(f"clusterqueues.{KUEUE}", "training")
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] == "32"


def test_a_stack_whose_csi_driver_the_cluster_lacks_is_refused(local_stack: LocalStack, tmp_path: Path) -> None:
    """The prerequisites check of the program (components/preflight.py) against the simulated cluster: the local
    stack passes (every up of make up), the same stack asking for a CSI driver the cluster lacks changes nothing."""

    def edit(config: dict[str, Any]) -> None:
        config["gpucluster:storage"]["provisioner"] = "lustre.csi.example.com"

    output = refused_unchanged(local_stack, tmp_path, edit)
    assert "the cluster has no CSIDriver lustre.csi.example.com (needed by gpucluster:storage)" in output
    assert local_stack.get("storageclass", "parallel-fs")["provisioner"] == "nfs.csi.k8s.io"


# --- the descheduler ---------------------------------------------------------------------------------------------


def test_descheduler_accepts_the_deployed_policy_in_a_dry_run(local_stack: LocalStack) -> None:
    proc = local_stack.run(str(ROOT / "sim" / "descheduler.sh"), check=False, timeout=180)
    assert proc.returncode == 0, proc.stderr
    assert "accepted" in proc.stdout


def test_descheduler_refuses_a_broken_policy(local_stack: LocalStack, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "descheduler/v1alpha2",
                "kind": "DeschedulerPolicy",
                "profiles": [{"name": "broken", "plugins": {"deschedule": {"enabled": ["NoSuchPlugin"]}}}],
            }
        )
    )
    proc = local_stack.run(str(ROOT / "sim" / "descheduler.sh"), str(policy), check=False, timeout=180)
    assert proc.returncode == 1
    assert "refused" in proc.stderr


# --- the guardrails ----------------------------------------------------------------------------------------------


PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
_OWNED_BY_A_JOB = {
    "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "00000000-0000-0000-0000-000000000001"}
        | {"controller": True}
    ]
}
_NFS = {"name": "other-team", "nfs": {"server": "fs.example.internal", "path": "/teams/vision"}}
#: An owner that does not exist: the garbage collector deletes what names it.
DANGLING_OWNER = {
    "metadata": {
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "00000000-0000-0000-0000-00000000dead"}
        ]
    }
}


def _refusal(stack: LocalStack, doc: dict[str, Any]) -> str | None:
    """What the API server says to ``doc`` sent as its admin (every admission step runs; nothing is stored)."""
    proc = stack.run(
        "kubectl", "create", "--dry-run=server", "-o", "name", "-f", "-", input=json.dumps(doc), check=False
    )
    return None if proc.returncode == 0 else proc.stderr.strip()


def _pod(namespace: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "registry.invalid/hostile:1.0", **spec.pop("container", {})}
    meta = {"name": "hostile", "namespace": namespace, **spec.pop("metadata", {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container], **spec}}


def _jobset(namespace: str, labels: dict[str, str], container: dict[str, Any] | None = None, **pod: Any) -> Any:
    """A one-pod JobSet as a team member would write it by hand (``gpucluster submit`` bypassed)."""
    template = {"metadata": pod.pop("metadata", {}), "spec": {"restartPolicy": "Never", **pod}}
    template["spec"]["containers"] = [{"name": "main", "image": "registry.invalid/t:1", **(container or {})}]
    return {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {"name": "by-hand", "namespace": namespace, "labels": labels},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {"template": template}}}]},
    }


def test_hostile_objects_sent_as_a_team_member_are_refused(local_stack: LocalStack) -> None:
    """A researcher of a team (its group, as the stack binds it) writing JobSets by hand, and what RBAC lets them
    touch at all: each class of the review's findings refused by the rule that owns it, a well-formed JobSet taken."""
    team = CFG.teams[0]
    other = next(t for t in CFG.teams if t.namespace != team.namespace)
    member = ["--as", "researcher@example.org", "--as-group", team.subject_group, "--as-group", "system:authenticated"]
    default = next(p for p in CFG.priorities.workload if p.teams is None)
    queued = {"kueue.x-k8s.io/queue-name": team.local_queue, PRIORITY_LABEL: default.name}
    reservation = {"key": RESERVATION_KEY, "operator": "Exists", "effect": "NoSchedule"}
    token = "hf_" + "k9" * 15
    hostile = {
        "a JobSet that names no research priority (Kueue would rank it by the training PriorityClass)": (
            _jobset(team.namespace, {"kueue.x-k8s.io/queue-name": team.local_queue}),
            f"{PRIORITY_LABEL}: no research priority named",
        ),
        "a JobSet holding a Hugging Face token in its env": (
            _jobset(team.namespace, queued, {"env": [{"name": "HF_TOKEN", "value": token}]}),
            "gpucluster-team-jobsets-carry-no-credentials",
        ),
        "a JobSet that names its node": (
            _jobset(team.namespace, queued, nodeName="anywhere"),
            "gpucluster-team-jobs-aim-at-no-node",
        ),
        "a JobSet tolerating another gang's reservation without Kueue placing it by topology": (
            _jobset(team.namespace, queued, tolerations=[reservation]),
            "gpucluster-team-jobs-aim-at-no-node",
        ),
    }
    for what, (doc, words) in hostile.items():
        proc = local_stack.run(
            "kubectl", "create", "--dry-run=server", "-o", "name", "-f", "-", *member,
            input=json.dumps(doc), check=False,
        )  # fmt: skip
        assert proc.returncode != 0, f"{what}: the API server would store it"
        assert words in proc.stderr, (what, proc.stderr)
        assert token not in proc.stderr
    placed = _jobset(team.namespace, queued, tolerations=[reservation])
    placed["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {
        "annotations": {PODSET_UNCONSTRAINED_TOPOLOGY: "true"}
    }
    for fine in (_jobset(team.namespace, queued), placed):
        proc = local_stack.run(
            "kubectl", "create", "--dry-run=server", "-o", "name", "-f", "-", *member,
            input=json.dumps(fine), check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    # What RBAC gives a member: JobSets and Secrets in the team's own namespace; no pod, Job or Workload written by
    # hand, nothing in another team's namespace.
    for verb, resource, namespace, answer in [
        ("create", "jobsets.jobset.x-k8s.io", team.namespace, "yes"),
        ("create", "secrets", team.namespace, "yes"),
        ("get", "secrets", other.namespace, "no"),
        ("create", "jobsets.jobset.x-k8s.io", other.namespace, "no"),
        ("create", "pods", team.namespace, "no"),
        ("create", "jobs.batch", team.namespace, "no"),
        ("create", "workloads.kueue.x-k8s.io", team.namespace, "no"),
        ("patch", "nodes", "", "no"),
    ]:
        where = ["-n", namespace] if namespace else []
        can = local_stack.run("kubectl", "auth", "can-i", verb, resource, *where, *member, check=False)
        assert can.stdout.strip() == answer, (verb, resource, namespace, can.stdout)


def test_hostile_writes_as_the_burst_provider_and_the_stall_detector_are_refused(local_stack: LocalStack) -> None:
    """A stolen token of the internet-facing burst provider, and of the stall detector: writes RBAC lets through
    (RBAC cannot narrow a pod patch to annotations, an EndpointSlice write to ours, a JobSet patch to one
    annotation), each refused by the rule bound to that identity; what the provider's RBAC gives it at all."""
    inputs = guardrail_inputs(CFG)
    provider, stall = inputs.burst_provider, inputs.user_of(STALL_DETECTOR.name)
    assert provider is not None, "the local stack bursts"
    assert stall is not None, "the local stack runs the stall detector"
    infer, team = CFG.inference_namespaces[0], CFG.teams[0]
    serving = local_stack.items("pods", "-n", infer)
    assert serving, f"the local stack serves from {infer}"
    # The provider may patch pods but not read them (kubectl patch reads first): a server-side apply, forced.
    pod_ref = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": serving[0]["metadata"]["name"], "namespace": infer},
    }
    apply = ["apply", "--server-side", "--force-conflicts", "--field-manager=burst-provider", "-f", "-"]
    kube_slices = local_stack.items(
        "endpointslices", "-n", infer, "-l", f"{ENDPOINT_SLICE_MANAGED_BY_LABEL}=endpointslice-controller.k8s.io"
    )
    assert kube_slices, f"the cluster keeps EndpointSlices for the Services of {infer}"
    kube_slice = kube_slices[0]["metadata"]["name"]
    hijack = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "hijack", "namespace": infer, "labels": {"kubernetes.io/service-name": "anything"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.0.2.1"]}],
    }
    default = next(p for p in CFG.priorities.workload if p.teams is None)
    queued = {"kueue.x-k8s.io/queue-name": team.local_queue, PRIORITY_LABEL: default.name}
    jobset = _jobset(team.namespace, queued)
    jobset["metadata"]["name"] = "stall-target"
    jobset["spec"]["suspend"] = True
    writes: dict[str, tuple[str, list[str], dict[str, Any] | None, str]] = {
        "the burst provider gives a serving pod a dangling owner (the garbage collector would delete it)": (
            provider,
            apply,
            {**pod_ref, "metadata": pod_ref["metadata"] | DANGLING_OWNER["metadata"]},
            "gpucluster-burst-provider-annotates-pods-only",
        ),
        "the burst provider relabels a serving pod out of its Service": (
            provider,
            apply,
            {**pod_ref, "metadata": pod_ref["metadata"] | {"labels": {"app": "elsewhere"}}},
            "gpucluster-burst-provider-annotates-pods-only",
        ),
        "the burst provider deletes the EndpointSlice the cluster keeps for in-cluster replicas": (
            provider,
            ["delete", "endpointslice", kube_slice, "-n", infer],
            None,
            "gpucluster-burst-provider-writes-only-its-endpoint-slices",
        ),
        "the burst provider writes an EndpointSlice that is not labelled as its own": (
            provider,
            ["create", "-f", "-"],
            hijack,
            "gpucluster-burst-provider-writes-only-its-endpoint-slices",
        ),
        "the stall detector gives a JobSet a dangling owner": (
            stall,
            ["patch", "jobset", "stall-target", "-n", team.namespace, "--type=merge", "-p", json.dumps(DANGLING_OWNER)],
            None,
            "gpucluster-stall-detector-writes-only-its-restart-record",
        ),
        "the stall detector gives a JobSet a finalizer (it could never be deleted)": (
            stall,
            ["patch", "jobset", "stall-target", "-n", team.namespace, "--type=merge", "-p",
             json.dumps({"metadata": {"finalizers": ["example.com/forever"]}})],
            None,
            "gpucluster-stall-detector-writes-only-its-restart-record",
        ),
    }  # fmt: skip
    local_stack.apply(jobset)
    try:
        for what, (user, args, body, rule) in writes.items():
            sent = None if body is None else json.dumps(body)
            proc = local_stack.run("kubectl", *args, "--dry-run=server", "--as", user, input=sent, check=False)
            assert proc.returncode != 0, f"{what}: the API server would take it"
            assert rule in proc.stderr, (what, proc.stderr)
        # Its own slice (labelled as ours) is taken: the rule bounds the provider, it does not stop it.
        ours = hijack | {
            "metadata": hijack["metadata"]
            | {
                "labels": {
                    "kubernetes.io/service-name": "anything",
                    ENDPOINT_SLICE_MANAGED_BY_LABEL: BURST_ENDPOINTS_MANAGER,
                }
            }
        }
        proc = local_stack.run(
            "kubectl", "create", "-f", "-", "--dry-run=server", "--as", provider, input=json.dumps(ours), check=False
        )
        assert proc.returncode == 0, proc.stderr
    finally:
        local_stack.kubectl(
            "delete", "jobset", "stall-target", "-n", team.namespace, "--ignore-not-found", "--wait=true"
        )
    # What the provider's RBAC gives it: nothing of nodes, of team namespaces or of pods' lives.
    for verb, resource, namespace, answer in [
        ("patch", "pods", infer, "yes"),
        ("delete", "pods", infer, "no"),
        ("create", "pods", infer, "no"),
        ("get", "secrets", team.namespace, "no"),
        ("patch", "nodes", "", "no"),
        ("patch", "jobsets.jobset.x-k8s.io", team.namespace, "no"),
    ]:
        where = ["-n", namespace] if namespace else []
        can = local_stack.run("kubectl", "auth", "can-i", verb, resource, *where, "--as", provider, check=False)
        assert can.stdout.strip() == answer, (verb, resource, namespace, can.stdout)


def test_hostile_objects_sent_as_the_admin_are_refused_or_never_run(local_stack: LocalStack) -> None:
    """Bypassing ``gpucluster submit`` and Pulumi: each class of the review's findings, straight to the API server."""
    team = CFG.teams[0].namespace
    infer = CFG.inference_namespaces[0]
    training = CFG.priorities.pod.training.name
    urgent = next(p for p in CFG.priorities.workload if p.teams is not None)
    shut_out = next(t for t in CFG.teams if not urgent.allows(t.name))
    default = next(p for p in CFG.priorities.workload if p.teams is None)
    hostile = {
        "privileged, hostPath /": (
            _pod(
                team,
                container={"securityContext": {"privileged": True}},
                volumes=[{"name": "r", "hostPath": {"path": "/"}}],
            ),
            "violates PodSecurity",
        ),
        "the training priority outside Kueue": (_pod(infer, priorityClassName=training), "preempts inference"),
        "a bare pod in a team namespace": (_pod(team), "no Job owns"),
        "a Job with the training priority and no queue": (
            gpu_job("bypass", team, parallelism=1, gpus=8)
            | {"metadata": {"name": "bypass", "namespace": team, "labels": {PRIORITY_LABEL: default.name}}},
            "kueue.x-k8s.io/queue-name",
        ),
        "a team's job that names no research priority (Kueue would rank it by the training PriorityClass)": (
            gpu_job("unranked", team, parallelism=1, gpus=8, workload_priority=None),
            f"{PRIORITY_LABEL}: no research priority named",
        ),
        "another team's research priority": (
            gpu_job("urgent", shut_out.namespace, parallelism=1, gpus=8, workload_priority=urgent.name),
            f"is not one team {shut_out.namespace} may name",
        ),
        "every GPU of the node": (
            _pod(infer, container={"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}),
            "NVIDIA_VISIBLE_DEVICES",
        ),
        "a team pod mounting the shared filesystem inline (NFS)": (
            _pod(team, metadata=_OWNED_BY_A_JOB, volumes=[_NFS]),
            "gpucluster-team-pods-mount-only-claims",
        ),
        "a team pod that names its node, skipping the scheduler": (
            _pod(team, metadata=_OWNED_BY_A_JOB, nodeName="anywhere"),
            "gpucluster-team-pods-name-no-node",
        ),
        "a team pod holding a Hugging Face token in its env": (
            _pod(team, metadata=_OWNED_BY_A_JOB, container={"env": [{"name": "HF_TOKEN", "value": "hf_" + "k" * 30}]}),
            "gpucluster-team-pods-carry-no-credentials",
        ),
        "AppArmor off": (
            _pod(
                infer, metadata={"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "unconfined"}}
            ),
            "container.apparmor.security.beta.kubernetes.io/main",  # Pod Security baseline refuses it first
        ),
    }
    for what, (doc, words) in hostile.items():
        said = _refusal(local_stack, doc)
        assert said is not None, f"{what}: the API server would store it"
        assert words in said, (what, said)

    # A compromised controller: the admin acting as each controller's ServiceAccount (--as) and writing beyond the
    # fields it owns. RBAC lets each of these through; the admission rule bound to that identity does not.
    inputs = guardrail_inputs(CFG)
    assert inputs.user_of(QUARANTINE.name) is not None, "the local stack runs quarantine"
    assert inputs.user_of(QUOTA_CONTROLLER.name) is not None, "the local stack runs the quota controller"
    assert inputs.make_before_break is not None, "the local stack runs make-before-break"
    assert inputs.virtual_node is not None, "the local stack bursts"
    assert inputs.user_of(INTERRUPTIONS.name) is not None, "the local stack counts interruptions"
    node = local_stack.items("nodes", "-l", "type!=virtual-kubelet")[0]["metadata"]["name"]
    queue = next(iter(CFG.queues))  # a GPU queue: the controller may not even read the queue of CPU-only work
    deployment = local_stack.items("deployments", "-n", infer)[0]["metadata"]["name"]
    evict_all = {"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}}
    # Each write is sent the way that controller sends its own (make-before-break has no GET on Deployments, so a
    # server-side apply, forced, as its field manager; the virtual node creates a Node from a manifest).
    scale_to_zero = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment, "namespace": infer},
        "spec": {"replicas": 0},
    }
    second_node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "intruder"}}
    as_controllers: dict[str, tuple[str, list[str], dict[str, Any] | None, str]] = {
        "quarantine taints a node NoExecute under another key": (
            inputs.controller_users[QUARANTINE.name],
            ["patch", "node", node, "--type=merge", "-p", json.dumps(evict_all)],
            None,
            "gpucluster-quarantine-writes-only-its-marks",
        ),
        "the quota controller moves a queue to another cohort": (
            inputs.controller_users[QUOTA_CONTROLLER.name],
            ["patch", "clusterqueue", queue, "--type=merge", "-p", '{"spec":{"cohortName":"elsewhere"}}'],
            None,
            "gpucluster-quota-controller-writes-only-quotas",
        ),
        "make-before-break scales a serving Deployment to zero": (
            inputs.make_before_break.user,
            ["apply", "--server-side", "--force-conflicts", f"--field-manager={MBB_FIELD_MANAGER}", "-f", "-"],
            scale_to_zero,
            "gpucluster-make-before-break-moves-only-by-annotations",
        ),
        "the quota controller gives a queue a dangling owner (the garbage collector would delete it)": (
            inputs.controller_users[QUOTA_CONTROLLER.name],
            ["patch", "clusterqueue", queue, "--type=merge", "-p", json.dumps(DANGLING_OWNER)],
            None,
            "gpucluster-quota-controller-writes-only-quotas",
        ),
        "make-before-break gives a serving Deployment a finalizer (it could never be deleted)": (
            inputs.make_before_break.user,
            ["apply", "--server-side", "--force-conflicts", f"--field-manager={MBB_FIELD_MANAGER}", "-f", "-"],
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": deployment, "namespace": infer, "finalizers": ["example.com/forever"]},
            },
            "gpucluster-make-before-break-moves-only-by-annotations",
        ),
        "the virtual node registers a second Node": (
            inputs.virtual_node[0],
            ["create", "-f", "-"],
            second_node,
            "gpucluster-virtual-node-registers-only-its-node",
        ),
    }
    forever = {"metadata": {"finalizers": ["example.com/forever"]}}
    as_controllers["quarantine gives a GPU node a finalizer (it could never be deleted)"] = (
        inputs.controller_users[QUARANTINE.name],
        ["patch", "node", node, "--type=merge", "-p", json.dumps(forever)],
        None,
        "gpucluster-quarantine-writes-only-its-marks",
    )
    assert inputs.taint_controller is not None, "the local stack runs the taint controller"
    as_controllers["the taint controller gives the virtual node an owner (the Node of every rented GPU)"] = (
        inputs.taint_controller[0],
        ["patch", "node", inputs.virtual_node[1], "--type=merge", "-p", json.dumps(DANGLING_OWNER)],
        None,
        "gpucluster-taint-controller-writes-only-its-taint",
    )
    # Quarantine marks only GPU nodes: the real node (no GPU) stands for the control plane and the system nodes.
    no_gpu = [n for n in local_stack.items("nodes") if "nvidia.com/gpu" not in n.get("status", {}).get("capacity", {})]
    assert no_gpu, "the simulated cluster has a node without GPUs (sim/node.py's real node)"
    system = no_gpu[0]["metadata"]["name"]
    # (without the patch's resourceVersion test: the real node's kubelet moves it every few seconds)
    ops = [
        op
        for op in quarantine_ops(node_from(no_gpu[0]), "gpu-temperature", "a stolen token", time.time())
        if op["op"] != "test"
    ]
    as_controllers["quarantine evicts a node without GPUs (the control plane, a system node)"] = (
        inputs.controller_users[QUARANTINE.name],
        ["patch", "node", system, "--type=json", "-p", json.dumps(ops)],
        None,
        "gpucluster-quarantine-writes-only-its-marks",
    )
    for what, (user, args, body, rule) in as_controllers.items():
        sent = None if body is None else json.dumps(body)
        proc = local_stack.run("kubectl", *args, "--dry-run=server", "--as", user, input=sent, check=False)
        assert proc.returncode != 0, f"{what}: the API server would take it"
        assert rule in proc.stderr, (what, proc.stderr)
    # The virtual node writes pods only in the inference namespaces: in a team namespace RBAC says no.
    # (kubectl reads "pods/status" as the pod named status: the subresource is its own flag)
    for verb in ("patch pods --subresource=status", "delete pods"):
        for namespace, answer in ((team, "no"), (infer, "yes")):
            can_i = ["auth", "can-i", *verb.split(), "-n", namespace, "--as", inputs.virtual_node[0]]
            can = local_stack.run("kubectl", *can_i, check=False)
            assert can.stdout.strip() == answer, (verb, namespace, can.stdout)

    # A Job without a queue label in a team namespace is Kueue's all the same: held suspended, no pod.
    unqueued = labelled(gpu_job("unqueued", team, parallelism=1, gpus=8, pod_priority=None))
    unqueued["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    local_stack.apply(unqueued)
    try:
        wl = wait_for("Kueue's Workload for the unqueued Job", lambda: workload_of(local_stack, team, "unqueued"))
        for _ in range(5):
            assert local_stack.get("job", "unqueued", "-n", team)["spec"]["suspend"] is True
            assert not job_pods(local_stack, team, "unqueued")
            time.sleep(1)
        # The interruption accounting daemon may only stop a Workload: moving one to another queue is refused.
        move = ["patch", f"workloads.{KUEUE}", wl["metadata"]["name"], "-n", team, "--type=merge"]
        move += [
            "-p",
            '{"spec":{"queueName":"elsewhere"}}',
            "--dry-run=server",
            "--as",
            inputs.controller_users[INTERRUPTIONS.name],
        ]
        proc = local_stack.run("kubectl", *move, check=False)
        assert proc.returncode != 0, "the interruptions daemon moved a Workload"
        assert "gpucluster-interruptions-only-stops-workloads" in proc.stderr, proc.stderr
    finally:
        local_stack.kubectl("delete", "job", "unqueued", "-n", team, "--ignore-not-found", "--wait=true")

    # A Job is only a template: one outside Kueue whose pods would see every GPU is stored, and never runs.
    job = labelled(gpu_job("sees-all", infer, parallelism=1, gpus=0, pod_priority=None, tolerate_reservations=None))
    job["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    job["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    local_stack.apply(job)
    try:

        def refused_event() -> str | None:
            for e in local_stack.items("events", "-n", infer, "--field-selector=involvedObject.name=sees-all"):
                if e.get("reason") == "FailedCreate" and "gpucluster-gpu-visibility-is-requested" in e.get(
                    "message", ""
                ):
                    return str(e["message"])
            return None

        message = wait_for("the Job's pod refused", refused_event, timeout=60)
        assert "NVIDIA_VISIBLE_DEVICES" in message
        assert not local_stack.items("pods", "-n", infer, "-l", "job-name=sees-all")
    finally:
        local_stack.kubectl("delete", "job", "sees-all", "-n", infer, "--ignore-not-found", "--wait=true")
