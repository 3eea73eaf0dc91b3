"""The guardrails against a real kube-apiserver: the ValidatingAdmissionPolicies ``guardrails_policies`` renders and
the Pod Security labels ``GuardrailsSettings.labels`` gives, applied as they are, then objects sent straight to the
API server as its admin (``kubectl create --dry-run=server``: every admission step runs, nothing is stored). Each
rule lets a good object through and refuses the hostile one, naming what is wrong.

Skipped, saying why, when the pinned tools are absent.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components import virtual_node
from components.controller import metrics_ingress
from components.guardrails_policies import (
    GuardrailInputs,
    MakeBeforeBreakMarks,
    manifests,
    policies,
    reliability_reader,
    team_role,
)
from contract.checkpoint_verifier_settings import CheckpointVerifierSettings, TeamQueue
from contract.constants import (
    CHECKPOINT_ANNOTATION_PREFIX,
    INTERRUPTIONS_LEDGER_ANNOTATION,
    PODSET_PREFERRED_TOPOLOGY,
    QUARANTINE_TAINT_KEY,
    RELIABILITY_CONFIGMAP,
    STALL_RESTART_ANNOTATION,
    STORAGE_MEASURED_CONFIGMAP,
    VERIFIED_ANNOTATION_PREFIX,
)
from contract.constants import RELEASED_AT_ANNOTATION as QUARANTINE_RELEASED
from contract.guardrails_settings import GuardrailsSettings
from contract.jobset_settings import JOBSET_API, JOBSET_CHART_VERSION
from contract.queues_settings import KUEUE_CHART_VERSION, CpuQueue
from contract.registry import CHECKPOINT_VERIFIER, INTERRUPTIONS, QUARANTINE, STALL_DETECTOR
from daemons.checkpoint_verifier.job import check_job, drill_job
from daemons.quarantine.kube import node_from, quarantine_ops
from tests.support.apiserver import ApiServer, running_apiserver, wait_for
from tests.support.require import missing
from tests.support.sim import tools_bin

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:Unverified HTTPS request")]

TEAM, OTHER_TEAM, SERVING, TELEMETRY, CONTROLLERS = (
    "team-a",
    "team-b",
    "serving",
    "gpu-telemetry",
    "gpucluster-capacity",
)
TRAINING = "gpucluster-training"
QUARANTINE_USER = f"system:serviceaccount:{CONTROLLERS}:gpucluster-quarantine"
STALL_USER = "system:serviceaccount:gpucluster-training:gpucluster-stall-detector"
INTERRUPTIONS_USER = "system:serviceaccount:gpucluster-training:gpucluster-interruptions"
VERIFIER_USER = "system:serviceaccount:gpucluster-training:gpucluster-checkpoint-verifier"
VERIFIER_IMAGE = "registry.invalid/gpucluster-daemons:1"
RESERVATION_KEY = "gpucluster.io/reservation"
TAINT_CONTROLLER_USER = "system:serviceaccount:gpucluster-burst:gpucluster-taint-controller"
BURST_TAINT_KEY = "gpucluster.io/in-cluster-capacity"
MODULES = Path.home() / "go/pkg/mod/sigs.k8s.io"
JOBSET_CRD = MODULES / f"jobset@v{JOBSET_CHART_VERSION}/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
WORKLOAD_CRD = MODULES / f"kueue@v{KUEUE_CHART_VERSION}/config/components/crd/bases/kueue.x-k8s.io_workloads.yaml"


def install_crd(kubectl: Kubectl, path: Path, plural: str) -> None:
    """An upstream CRD from the Go module cache, served once the API server lists its kind."""
    if not path.exists():
        missing(f"{path.name} is not in the Go module cache ({path})")
    proc = kubectl("apply", "--server-side", "-f", str(path))
    assert proc.returncode == 0, proc.stderr
    wait_for(f"the {plural} CRD established", lambda: kubectl("get", plural, "-n", TEAM).returncode == 0, timeout=60)


INPUTS = GuardrailInputs(
    training_namespaces=(TEAM, OTHER_TEAM),
    priorities_by_namespace={TEAM: ("research-default", "research-urgent"), OTHER_TEAM: ("research-default",)},
    workload_priority_values={"research-default": 100, "research-urgent": 1000},
    training_priority_class=TRAINING,
    exempt_namespaces=(TELEMETRY, "kube-system"),
    ipc_lock=True,
    gpu_resources=("nvidia.com/gpu",),
    taint_controller=(TAINT_CONTROLLER_USER, BURST_TAINT_KEY),
    controller_users={
        QUARANTINE.name: QUARANTINE_USER,
        STALL_DETECTOR.name: STALL_USER,
        INTERRUPTIONS.name: INTERRUPTIONS_USER,
        CHECKPOINT_VERIFIER.name: VERIFIER_USER,
    },
    checkpoint_verifier_image=VERIFIER_IMAGE,
    virtual_node=("system:serviceaccount:gpucluster-burst:gpucluster-virtual-node", "gpu-burst"),
    burst_provider="system:serviceaccount:gpucluster-burst:gpucluster-virtual-node-provider",
    make_before_break=MakeBeforeBreakMarks(
        user="system:serviceaccount:gpucluster-burst:gpucluster-make-before-break",
        reservation_key=RESERVATION_KEY,
        check_name="gpucluster-make-before-break",
        deployment_annotations=("gpucluster.io/flip",),
        template_annotations=("gpucluster.io/placement",),
        pod_annotation="controller.kubernetes.io/pod-deletion-cost",
    ),
)
SETTINGS = GuardrailsSettings()
ROLES = {
    TEAM: "training",
    OTHER_TEAM: "training",
    SERVING: "inference",
    TELEMETRY: "telemetry",
    CONTROLLERS: "capacity",
}


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, doc: dict[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(tools_bin() / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=json.dumps(doc) if doc is not None else None,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )

    def refusal(self, doc: dict[str, Any]) -> str | None:
        """None when the API server would store ``doc``; else what it said."""
        proc = self("create", "--dry-run=server", "-o", "name", "-f", "-", doc=doc)
        return None if proc.returncode == 0 else proc.stderr.strip()


def refused(kubectl: Kubectl, doc: dict[str, Any], *words: str) -> str:
    """What the API server said refusing ``doc``; it must say every one of ``words``."""
    said = kubectl.refusal(doc)
    assert said is not None, f"the API server would store {json.dumps(doc)}"
    for word in words:
        assert word in said, (doc, said)
    return said


def pod(namespace: str, *, bare: bool = False, **spec: Any) -> dict[str, Any]:
    """A pod; in a team namespace a Job's (so one rule at a time is under test) unless ``bare``."""
    container = {"name": "main", "image": "registry.invalid/app:1.0"}
    container.update(spec.pop("container", {}))
    meta = {"name": "p", "namespace": namespace, **spec.pop("metadata", {})}
    if namespace in INPUTS.training_namespaces and not bare:
        meta.setdefault("ownerReferences", copy.deepcopy(OWNED_BY_JOB["ownerReferences"]))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [container], **spec}}


def restricted_pod(namespace: str, **spec: Any) -> dict[str, Any]:
    doc = pod(
        namespace,
        securityContext={"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
        container={
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            **spec.pop("container", {}),
        },
        **spec,
    )
    return doc


def job(namespace: str, *, labels: dict[str, str] | None = None, priority: str | None = TRAINING) -> dict[str, Any]:
    template: dict[str, Any] = {
        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "registry.invalid/t:1"}]}
    }
    if priority:
        template["spec"]["priorityClassName"] = priority
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": namespace, "labels": labels or {}},
        "spec": {"suspend": True, "template": template},
    }


OWNED_BY_JOB = {
    "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "00000000-0000-0000-0000-000000000001"}
        | {"controller": True}
    ]
}


@pytest.fixture(scope="module")
def kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    with running_apiserver(tmp_path_factory.mktemp("guardrails-apiserver"), allow_privileged=True) as server:
        yield _prepared(server)


def _prepared(server: ApiServer) -> Kubectl:
    k = Kubectl(server.kubeconfig)
    for ns, role in ROLES.items():
        labels = SETTINGS.labels(role, ipc_lock=INPUTS.ipc_lock)
        doc = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}
        assert k("create", "-f", "-", doc=doc).returncode == 0
    for name, value in ((TRAINING, 1000), ("gpucluster-inference", 100)):
        pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
        assert k("create", "-f", "-", doc=pc).returncode == 0
    for policy in policies(INPUTS):
        for doc in manifests(policy):
            proc = k("create", "-f", "-", doc=doc)
            assert proc.returncode == 0, proc.stderr
    # The policies are in force once the API server has compiled them: the first bad pod refused.
    probe = pod(SERVING, container={"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})
    wait_for("the policies in force", lambda: k.refusal(probe) is not None, timeout=60)
    return k


def test_every_policy_compiles_without_a_type_warning(kubectl: Kubectl) -> None:
    out = json.loads(kubectl("get", "validatingadmissionpolicies", "-o", "json").stdout)
    names = {p["metadata"]["name"] for p in out["items"]}
    assert names == {manifests(p)[0]["metadata"]["name"] for p in policies(INPUTS)}
    for item in out["items"]:
        status = item.get("status", {})
        assert not status.get("typeChecking", {}).get("expressionWarnings"), (item["metadata"]["name"], status)


@pytest.mark.parametrize("name", ["NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES"])
def test_gpu_visibility_env_is_refused_outside_telemetry(kubectl: Kubectl, name: str) -> None:
    env = {"env": [{"name": name, "value": "all"}]}
    refused(kubectl, pod(SERVING, container=env), "container main sets", "nvidia.com/gpu")
    init = pod(TEAM, initContainers=[{"name": "prep", "image": "registry.invalid/p:1", **env}])
    refused(kubectl, init, "container prep sets")
    assert kubectl.refusal(pod(TELEMETRY, container=env)) is None
    assert kubectl.refusal(pod(SERVING, container={"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]})) is None


def test_confinement_opt_outs_are_refused_by_annotation_and_by_field(kubectl: Kubectl) -> None:
    annotated = pod(
        SERVING, metadata={"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "Unconfined"}}
    )
    refused(kubectl, annotated, "container.apparmor.security.beta.kubernetes.io/main")
    by_field = pod(TEAM, container={"securityContext": {"seccompProfile": {"type": "Unconfined"}}})
    refused(kubectl, by_field, "container main sets a seccomp or AppArmor profile of type Unconfined")
    pod_level = pod(TEAM, securityContext={"appArmorProfile": {"type": "Unconfined"}})
    assert kubectl.refusal(pod_level) is not None
    kept = pod(
        SERVING, metadata={"annotations": {"container.apparmor.security.beta.kubernetes.io/main": "runtime/default"}}
    )
    assert kubectl.refusal(kept) is None
    assert kubectl.refusal(pod(TELEMETRY, securityContext={"seccompProfile": {"type": "Unconfined"}})) is None


def test_every_pod_in_a_team_namespace_is_a_jobs(kubectl: Kubectl) -> None:
    refused(kubectl, pod(TEAM, bare=True), "no Job owns")
    assert kubectl.refusal(pod(TEAM, metadata=copy.deepcopy(OWNED_BY_JOB))) is None
    assert kubectl.refusal(pod(SERVING)) is None


def test_a_workload_sent_straight_names_only_its_teams_research_priorities(kubectl: Kubectl) -> None:
    install_crd(kubectl, WORKLOAD_CRD, "workloads.kueue.x-k8s.io")

    def workload(namespace: str, kind: str, name: str, priority: int = 1000) -> dict[str, Any]:
        group = "kueue.x-k8s.io" if kind == "WorkloadPriorityClass" else "scheduling.k8s.io"
        pod_template = {"spec": {"containers": [{"name": "t", "image": "registry.invalid/t:1"}]}}
        return {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Workload",
            "metadata": {"name": "w", "namespace": namespace},
            "spec": {
                "queueName": "training",
                "priorityClassRef": {"group": group, "kind": kind, "name": name},
                "priority": priority,
                "podSets": [{"name": "main", "count": 1, "template": pod_template}],
            },
        }

    assert kubectl.refusal(workload(TEAM, "WorkloadPriorityClass", "research-urgent")) is None
    refused(
        kubectl,
        workload(OTHER_TEAM, "WorkloadPriorityClass", "research-urgent"),
        "research-urgent is not one team team-b may name (research-default)",
    )
    # Kueue's fallback for a job that names no research priority: its pods' PriorityClass, above every team's
    refused(
        kubectl,
        workload(OTHER_TEAM, "PriorityClass", TRAINING, priority=1000),
        "no research priority named",
        f"its pods' PriorityClass ({TRAINING})",
        "(research-default)",
    )
    # a hand-set number above the class it names
    refused(
        kubectl,
        workload(TEAM, "WorkloadPriorityClass", "research-urgent", priority=100_000),
        "spec.priority 100000 is not the value of WorkloadPriorityClass research-urgent (1000)",
    )
    assert kubectl.refusal(workload(OTHER_TEAM, "WorkloadPriorityClass", "research-default", priority=100)) is None


def test_the_training_priority_is_only_for_a_jobs_pods_in_a_team_namespace(kubectl: Kubectl) -> None:
    refused(kubectl, pod(TEAM, bare=True, priorityClassName=TRAINING))  # by the first rule that sees it
    refused(
        kubectl, pod(SERVING, priorityClassName=TRAINING, metadata=copy.deepcopy(OWNED_BY_JOB)), "preempts inference"
    )
    assert kubectl.refusal(pod(TEAM, priorityClassName=TRAINING, metadata=copy.deepcopy(OWNED_BY_JOB))) is None
    assert kubectl.refusal(pod(SERVING, priorityClassName="gpucluster-inference")) is None


def test_the_training_priority_is_only_for_queued_jobs(kubectl: Kubectl) -> None:
    queued = {"kueue.x-k8s.io/queue-name": "training", "kueue.x-k8s.io/priority-class": "research-default"}
    refused(
        kubectl, job(TEAM, labels={"kueue.x-k8s.io/priority-class": "research-default"}), "kueue.x-k8s.io/queue-name"
    )
    assert kubectl.refusal(job(SERVING, labels=queued)) is not None
    assert kubectl.refusal(job(TEAM, labels=queued)) is None
    assert kubectl.refusal(job(SERVING, priority=None)) is None


def test_research_priorities_are_the_teams_own(kubectl: Kubectl) -> None:
    def labelled(namespace: str, priority: str) -> dict[str, Any]:
        return job(
            namespace, labels={"kueue.x-k8s.io/queue-name": "training", "kueue.x-k8s.io/priority-class": priority}
        )

    refused(
        kubectl,
        labelled(OTHER_TEAM, "research-urgent"),
        "research-urgent is not one team team-b may name (research-default)",
    )
    assert kubectl.refusal(labelled(TEAM, "research-urgent")) is None
    assert kubectl.refusal(labelled(OTHER_TEAM, "research-default")) is None


def test_a_teams_job_that_names_no_research_priority_is_refused(kubectl: Kubectl) -> None:
    """Left off, Kueue would rank the job by its pods' PriorityClass: the training one, above every team's."""
    unnamed = job(TEAM, labels={"kueue.x-k8s.io/queue-name": "training"})
    refused(
        kubectl,
        unnamed,
        "kueue.x-k8s.io/priority-class: no research priority named",
        f"its pods' PriorityClass ({TRAINING})",
        "name one team team-a may name (research-default, research-urgent)",
    )
    # A JobSet's own Job carries no label of its own: Kueue manages the JobSet, whose label the rule holds.
    jobsets = job(TEAM, labels={})
    jobsets["metadata"]["ownerReferences"] = [
        {"apiVersion": JOBSET_API, "kind": "JobSet", "name": "llm", "uid": "00000000-0000-0000-0000-000000000002"}
        | {"controller": True}
    ]
    assert kubectl.refusal(jobsets) is None
    # Outside the team namespaces there is no research priority to name.
    assert kubectl.refusal(job(SERVING, priority=None)) is None


def test_training_pods_hold_baseline_but_may_lock_memory_for_rdma(kubectl: Kubectl) -> None:
    owned = copy.deepcopy(OWNED_BY_JOB)
    ib = pod(TEAM, metadata=owned, container={"securityContext": {"capabilities": {"add": ["IPC_LOCK"]}}})
    assert kubectl.refusal(ib) is None
    hostile = [
        ({"container": {"securityContext": {"privileged": True}}}, "may not be privileged"),
        ({"hostNetwork": True}, "network, PID or IPC"),
        ({"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}, "hostPath"),
        ({"container": {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}}, "capabilities"),
        ({"container": {"ports": [{"containerPort": 22, "hostPort": 22}]}}, "host port"),
    ]
    for spec, words in hostile:
        refused(kubectl, pod(TEAM, metadata=copy.deepcopy(owned), **copy.deepcopy(spec)), words)


def test_pod_security_levels_follow_the_namespace_role(kubectl: Kubectl) -> None:
    hostpath = {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}
    # inference: baseline enforced (no hostPath, no privileged)
    refused(kubectl, pod(SERVING, **copy.deepcopy(hostpath)), "violates PodSecurity", "hostPath")
    assert kubectl.refusal(pod(SERVING)) is None
    # controllers: restricted enforced
    refused(kubectl, pod(CONTROLLERS), 'violates PodSecurity "restricted:latest"')
    assert kubectl.refusal(restricted_pod(CONTROLLERS)) is None
    # telemetry: the exporters read the host's /sys
    assert kubectl.refusal(pod(TELEMETRY, **copy.deepcopy(hostpath))) is None


def test_a_team_pod_mounts_only_its_claims(kubectl: Kubectl) -> None:
    claim = {"name": "ckpt", "persistentVolumeClaim": {"claimName": "checkpoints"}}
    scratch = {"name": "shm", "emptyDir": {"medium": "Memory"}}
    assert kubectl.refusal(pod(TEAM, volumes=[claim, scratch])) is None
    hostile = {
        "nfs": {"name": "other-team", "nfs": {"server": "fs.example.internal", "path": "/teams/vision"}},
        "csi": {"name": "inline", "csi": {"driver": "lustre.csi.example.com", "volumeAttributes": {"path": "/"}}},
        "iscsi": {
            "name": "block",
            "iscsi": {"targetPortal": "10.0.0.9:3260", "iqn": "iqn.2001-04.com.example:storage", "lun": 0},
        },
    }
    for what, volume in hostile.items():
        said = refused(kubectl, pod(TEAM, volumes=[claim, volume]), "gpucluster-team-pods-mount-only-claims")
        assert f"volume {volume['name']} names storage by address" in said, (what, said)
    assert kubectl.refusal(pod(SERVING, volumes=[hostile["nfs"]])) is None  # the rule is the team namespaces'


RESERVED = {"matchExpressions": [{"key": RESERVATION_KEY, "operator": "In", "values": ["team-b-llm"]}]}
#: Pod specs that aim at nodes make-before-break holds for another gang.
AIMED_AT_RESERVED: list[dict[str, Any]] = [
    {"nodeSelector": {RESERVATION_KEY: "team-b-llm"}},
    {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [RESERVED]}}
        }
    },
    {
        "affinity": {
            "nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": RESERVED}]
            }
        }
    },
]


def test_a_team_pod_goes_through_the_scheduler_and_its_jobs_aim_at_no_reserved_node(kubectl: Kubectl) -> None:
    refused(kubectl, pod(TEAM, nodeName="gpu-node-3"), "gpucluster-team-pods-name-no-node", "spec.nodeName")
    assert kubectl.refusal(pod(SERVING, nodeName="gpu-node-3")) is None
    queued = {"kueue.x-k8s.io/queue-name": "training", "kueue.x-k8s.io/priority-class": "research-default"}
    for spec in [{"nodeName": "gpu-node-3"}, *AIMED_AT_RESERVED]:
        hostile = job(TEAM, labels=queued)
        hostile["spec"]["template"]["spec"].update(copy.deepcopy(spec))
        refused(kubectl, hostile, "gpucluster-team-jobs-aim-at-no-node")
    # What gpucluster submit's jobs carry when Kueue places them by topology: the reservation tolerated, not
    # selected. The gang's own pods do select its reservation (make-before-break's pod set update, through Kueue),
    # so pods are not held to it.
    toleration = {"key": RESERVATION_KEY, "operator": "Exists", "effect": "NoSchedule"}
    submitted = job(TEAM, labels=queued)
    submitted["spec"]["template"]["metadata"] = {"annotations": {PODSET_PREFERRED_TOPOLOGY: "kubernetes.io/hostname"}}
    submitted["spec"]["template"]["spec"]["tolerations"] = [toleration]
    assert kubectl.refusal(submitted) is None
    # Not placed by topology, the scheduler would be free to use another gang's reserved nodes: no toleration of the
    # reservation, by its key or by tolerating every taint.
    for tolerates in (toleration, {"operator": "Exists"}):
        unplaced = job(TEAM, labels=queued)
        unplaced["spec"]["template"]["spec"]["tolerations"] = [tolerates]
        refused(kubectl, unplaced, "gpucluster-team-jobs-aim-at-no-node", "unless Kueue places it by topology")
    other_taint = job(TEAM, labels=queued)
    other_taint["spec"]["template"]["spec"]["tolerations"] = [{"key": "example.com/other", "operator": "Exists"}]
    assert kubectl.refusal(other_taint) is None
    assert kubectl.refusal(pod(TEAM, **copy.deepcopy(AIMED_AT_RESERVED[0]), tolerations=[toleration])) is None
    # A JobSet's own Job, created again on a restart with the reservation Kueue put into the JobSet's template: the
    # JobSet's, held when it was submitted (refusing it would leave the restarted gang without its Job).
    restarted = job(TEAM, labels=queued)
    restarted["spec"]["template"]["spec"].update(copy.deepcopy(AIMED_AT_RESERVED[0]))
    restarted["metadata"]["ownerReferences"] = [
        {"apiVersion": JOBSET_API, "kind": "JobSet", "name": "llm", "uid": "00000000-0000-0000-0000-000000000003"}
        | {"controller": True}
    ]
    assert kubectl.refusal(restarted) is None


def test_a_team_pod_carries_no_credential_in_its_env(kubectl: Kubectl) -> None:
    token = "hf_" + "a1B2c3D4e5" * 3
    hostile = pod(TEAM, container={"env": [{"name": "HF_TOKEN", "value": token}, {"name": "EPOCHS", "value": "3"}]})
    said = refused(kubectl, hostile, "gpucluster-team-pods-carry-no-credentials", "container main env HF_TOKEN")
    assert token not in said  # named, never echoed
    by_name = pod(TEAM, container={"env": [{"name": "WANDB_API_KEY", "value": "0123456789abcdef" * 2}]})
    refused(kubectl, by_name, "container main env WANDB_API_KEY", "Secret")
    # The shapes the policy pack knows, anywhere in the value: a password in a URL, a bearer token.
    for name, value in [
        ("DATABASE_URL", "postgres://trainer:hunter2hunter2@db:5432/runs"),
        ("AUTH", "Bearer abc123DEF456"),
    ]:
        said = refused(kubectl, pod(TEAM, container={"env": [{"name": name, "value": value}]}), f"env {name}")
        assert value not in said
    fine = [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
        {"name": "TOKENIZERS_PARALLELISM", "value": "false"},
        {"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": "/var/run/secrets/gpucluster/gcp/key.json"},
    ]
    assert kubectl.refusal(pod(TEAM, container={"env": fine})) is None
    assert kubectl.refusal(pod(SERVING, container={"env": [{"name": "HF_TOKEN", "value": token}]})) is None


# --- what a controller of ours may write --------------------------------------------------------------------------


def test_the_quarantine_controller_changes_a_node_only_by_its_own_marks(kubectl: Kubectl) -> None:
    name = "gpu-node-q"
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "gpucluster.io/ib-leaf": "leaf-1"},
            "annotations": {QUARANTINE_RELEASED: "2026-12-01T00:00:00Z"},
        },
        "spec": {"taints": [{"key": "gpucluster.io/reservation", "value": "llm", "effect": "NoSchedule"}]},
        # a Node may be created with its status (a kubelet registers so)
        "status": {"capacity": {"cpu": "96", "nvidia.com/gpu": "8"}},
    }
    proc = kubectl("create", "-o", "json", "-f", "-", doc=node)
    assert proc.returncode == 0, proc.stderr
    view = node_from(json.loads(proc.stdout))

    def patched(ops: list[dict[str, Any]], *, user: str | None = QUARANTINE_USER) -> str | None:
        who = ["--as", user] if user else []
        args = ["patch", "node", name, "--type=json", "-p", json.dumps(ops), "--dry-run=server", *who]
        proc = kubectl(*args)
        return None if proc.returncode == 0 else proc.stderr.strip()

    # the controller's own patch: taint, label, both annotations, the old release annotation dropped
    assert patched(quarantine_ops(view, "gpu-temperature", "GpuTemperatureHigh on GPU 3", 1_800_000_000.0)) is None
    hostile = {
        "another NoExecute taint": (
            [{"op": "add", "path": "/spec/taints/-", "value": {"key": "evil", "effect": "NoExecute"}}],
            "only its own taint",
        ),
        "a reservation lifted": ([{"op": "remove", "path": "/spec/taints/0"}], "only its own taint"),
        "its taint without eviction": (
            [{"op": "add", "path": "/spec/taints/-", "value": {"key": QUARANTINE_TAINT_KEY, "effect": "NoSchedule"}}],
            "only its own taint",
        ),
        "a leaf relabelled": (
            [{"op": "replace", "path": "/metadata/labels/gpucluster.io~1ib-leaf", "value": "leaf-9"}],
            "may set only its label",
        ),
        "another annotation": (
            [{"op": "add", "path": "/metadata/annotations/x", "value": "y"}],
            "may set only its annotations",
        ),
        "a cordon": ([{"op": "add", "path": "/spec/unschedulable", "value": True}], "may not change a Node's spec"),
    }
    for what, (ops, words) in hostile.items():
        said = patched(ops)
        assert said is not None, f"{what}: the API server would apply it"
        assert words in said, (what, said)
        assert "gpucluster-quarantine-writes-only-its-marks" in said, (what, said)
    # the rule is the controller's alone: the admin (and node_admission) may still cordon
    assert patched(hostile["a cordon"][0], user=None) is None

    # a node without GPUs (the control plane, a system node) is never the quarantine controller's to evict
    system = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "control-plane-1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
        "status": {"capacity": {"cpu": "16"}},
    }
    proc = kubectl("create", "-o", "json", "-f", "-", doc=system)
    assert proc.returncode == 0, proc.stderr
    ops = quarantine_ops(node_from(json.loads(proc.stdout)), "gpu-temperature", "stolen token", 1_800_000_000.0)
    args = ["patch", "node", "control-plane-1", "--type=json", "-p", json.dumps(ops), "--dry-run=server"]
    said = kubectl(*args, "--as", QUARANTINE_USER).stderr
    assert "gpucluster-quarantine-writes-only-its-marks" in said, said
    assert "Node control-plane-1 has none: it is no GPU node" in said, said


# --- what a team's group may do, with RBAC on --------------------------------------------------------------------


@pytest.fixture(scope="module")
def rbac_kubectl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kubectl]:
    with running_apiserver(tmp_path_factory.mktemp("team-rbac-apiserver"), authorization_mode="RBAC") as server:
        k = Kubectl(server.kubeconfig)
        for ns in (TEAM, OTHER_TEAM, "gpucluster-training"):
            assert k("create", "namespace", ns).returncode == 0
        docs = [team_role(TEAM, "ml-foundation"), team_role(OTHER_TEAM, "ml-vision")]
        docs.append(reliability_reader("gpucluster-training", RELIABILITY_CONFIGMAP, ["ml-foundation", "ml-vision"]))
        for role, binding in docs:
            for kind, doc in (("Role", role), ("RoleBinding", binding)):
                body = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, **doc}
                proc = k("create", "-f", "-", doc=body)
                assert proc.returncode == 0, proc.stderr
        yield k


def can(k: Kubectl, group: str, verb: str, resource: str, namespace: str, *, user: str = "alice") -> bool:
    """The API server's RBAC answer for ``user``, a member of ``group`` (a SubjectAccessReview, asked as the
    admin)."""
    resource, _, name = resource.partition("/")
    resource, subresource = (resource, "") if resource not in ("pods",) or not name else (resource, name)
    if subresource:
        name = ""
    plural, _, api_group = resource.partition(".")
    attributes = {"verb": verb, "resource": plural, "group": api_group, "namespace": namespace}
    if subresource:
        attributes["subresource"] = subresource
    if name:
        attributes["name"] = name
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": [group, "system:authenticated"], "resourceAttributes": attributes},
    }
    proc = k("create", "-o", "json", "-f", "-", doc=review)
    assert proc.returncode == 0, proc.stderr
    return bool(json.loads(proc.stdout)["status"].get("allowed"))


def test_a_team_submits_and_reads_its_own_jobs_and_nothing_else(rbac_kubectl: Kubectl) -> None:
    k = rbac_kubectl
    for verb, resource in [
        ("create", "jobsets.jobset.x-k8s.io"),
        ("delete", "jobsets.jobset.x-k8s.io"),
        ("list", "workloads.kueue.x-k8s.io"),
        ("get", "pods/log"),
        ("watch", "pods"),
        ("create", "secrets"),  # its own keys, which its job specs name
        ("get", "secrets"),
    ]:
        assert can(k, "ml-foundation", verb, resource, TEAM), (verb, resource)
    assert can(k, "ml-foundation", "get", f"configmaps/{RELIABILITY_CONFIGMAP}", "gpucluster-training")
    assert can(k, "ml-foundation", "get", f"configmaps/{STORAGE_MEASURED_CONFIGMAP}", "gpucluster-training")
    for verb, resource, namespace in [
        ("create", "jobsets.jobset.x-k8s.io", OTHER_TEAM),  # another team's namespace
        ("create", "pods", TEAM),  # around Kueue
        ("create", "jobs.batch", TEAM),
        ("create", "pods/exec", TEAM),
        ("patch", "workloads.kueue.x-k8s.io", TEAM),
        ("update", "localqueues.kueue.x-k8s.io", TEAM),
        ("get", "configmaps/other", "gpucluster-training"),
        ("create", "priorityclasses.scheduling.k8s.io", ""),
        ("get", "secrets", OTHER_TEAM),
    ]:
        assert not can(k, "ml-foundation", verb, resource, namespace or "default"), (verb, resource, namespace)
    assert not can(k, "someone-else", "list", "pods", TEAM)


VIRTUAL_NODE_USER = "system:serviceaccount:gpucluster-burst:gpucluster-virtual-node"
PROVIDER_USER = "system:serviceaccount:gpucluster-burst:gpucluster-virtual-node-provider"
DANGLING_OWNER = {
    "metadata": {
        "ownerReferences": [
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "00000000-0000-0000-0000-00000000dead"}
        ]
    }
}


def test_the_daemons_that_annotate_jobsets_change_only_their_own_annotation(kubectl: Kubectl) -> None:
    install_crd(kubectl, JOBSET_CRD, "jobsets")
    template = {
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "t:1"}]}}}
    }
    jobset = {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": "llm",
            "namespace": TEAM,
            "labels": {"kueue.x-k8s.io/queue-name": "training", "kueue.x-k8s.io/priority-class": "research-default"},
        },
        "spec": {"suspend": True, "replicatedJobs": [{"name": "node", "replicas": 1, "template": template}]},
    }
    unnamed = copy.deepcopy(jobset)
    del unnamed["metadata"]["labels"]["kueue.x-k8s.io/priority-class"]
    refused(kubectl, unnamed, "no research priority named")
    leaky = copy.deepcopy(jobset)
    leaky["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "OPENAI_KEY", "value": "sk-" + "x1" * 12}
    ]
    said = refused(kubectl, leaky, "gpucluster-team-jobsets-carry-no-credentials", "replicatedJob node env OPENAI_KEY")
    assert "x1x1x1" not in said
    # The training PriorityClass only on a JobSet Kueue manages in a team namespace.
    training = copy.deepcopy(jobset)
    training["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["priorityClassName"] = TRAINING
    assert kubectl.refusal(training) is None
    unqueued = copy.deepcopy(training)
    del unqueued["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    refused(kubectl, unqueued, "gpucluster-training-priority-jobsets-are-queued")
    elsewhere = copy.deepcopy(training)
    elsewhere["metadata"]["namespace"] = SERVING
    refused(kubectl, elsewhere, "gpucluster-training-priority-jobsets-are-queued")
    aimed = copy.deepcopy(jobset)
    aimed["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"].update(AIMED_AT_RESERVED[0])
    refused(kubectl, aimed, "gpucluster-team-jobs-aim-at-no-node", f"select nodes by {RESERVATION_KEY}")
    proc = kubectl("create", "-f", "-", doc=jobset)
    assert proc.returncode == 0, proc.stderr

    def patched_as(user: str, body: dict[str, Any]) -> str | None:
        args = ["patch", "jobset", "llm", "-n", TEAM, "--type=merge", "-p", json.dumps(body), "--dry-run=server"]
        proc = kubectl(*args, "--as", user)
        return None if proc.returncode == 0 else proc.stderr.strip()

    def annotation(key: str) -> dict[str, Any]:
        return {"metadata": {"annotations": {key: "{}"}}}

    assert patched_as(STALL_USER, annotation(STALL_RESTART_ANNOTATION)) is None
    assert patched_as(INTERRUPTIONS_USER, annotation(INTERRUPTIONS_LEDGER_ANNOTATION)) is None
    for user, rule, body in [
        (STALL_USER, "stall-detector-writes-only-its-restart-record", annotation(INTERRUPTIONS_LEDGER_ANNOTATION)),
        (STALL_USER, "stall-detector-writes-only-its-restart-record", {"spec": {"suspend": False}}),
        (INTERRUPTIONS_USER, "interruptions-writes-only-its-ledger", annotation(STALL_RESTART_ANNOTATION)),
        (INTERRUPTIONS_USER, "interruptions-writes-only-its-ledger", {"metadata": {"labels": {"x": "y"}}}),
        # a dangling owner: the garbage collector would delete the job; a finalizer: it could never be deleted
        (STALL_USER, "stall-detector-writes-only-its-restart-record", DANGLING_OWNER),
        (INTERRUPTIONS_USER, "interruptions-writes-only-its-ledger", {"metadata": {"finalizers": ["example.com/x"]}}),
    ]:
        said = patched_as(user, body)
        assert said is not None, (user, body)
        assert rule in said, (user, body, said)


def test_the_virtual_node_and_its_provider_each_write_only_what_their_clients_use(rbac_kubectl: Kubectl) -> None:
    """Two identities in one pod: the node (the virtual kubelet) writes pod statuses and deletes pods; the provider
    (internet-facing) reads the Secrets and ConfigMaps burst pods reference and annotates pods. Neither holds the
    other's rights, and neither reaches a team namespace."""
    k = rbac_kubectl
    assert k("create", "namespace", SERVING).returncode == 0
    identities = {
        VIRTUAL_NODE_USER: [
            ("ClusterRole", "", virtual_node.cluster_rules("gpu-burst")),
            ("Role", "kube-node-lease", virtual_node.lease_rules("gpu-burst")),
            ("Role", SERVING, virtual_node.inference_namespace_rules()),
        ],
        PROVIDER_USER: [
            ("ClusterRole", "", virtual_node.provider_cluster_rules()),
            ("Role", SERVING, virtual_node.provider_inference_namespace_rules()),
        ],
    }
    for user, grants in identities.items():
        name = user.rsplit(":", 1)[-1]
        subject = [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]
        for kind, namespace, rules in grants:
            meta = {"name": name, **({"namespace": namespace} if namespace else {})}
            role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "rules": rules}
            binding = {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": f"{kind}Binding",
                "metadata": meta,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
                "subjects": subject,
            }
            for doc in (role, binding):
                proc = k("create", "-f", "-", doc=doc)
                assert proc.returncode == 0, proc.stderr

    def may(user: str, verb: str, resource: str, namespace: str) -> bool:
        return can(k, "system:serviceaccounts", verb, resource, namespace, user=user)

    assert may(VIRTUAL_NODE_USER, "watch", "pods", TEAM)  # it sees the pods bound to it, wherever they come from
    node_writes = [("patch", "pods/status"), ("delete", "pods")]
    provider_writes = [
        ("patch", "pods"),
        ("get", "secrets"),
        ("get", "configmaps"),
        ("create", "endpointslices.discovery.k8s.io"),
    ]
    for user, own, others in [
        (VIRTUAL_NODE_USER, node_writes, provider_writes),
        (PROVIDER_USER, provider_writes, node_writes),
    ]:
        for verb, resource in own:
            assert may(user, verb, resource, SERVING), (user, verb, resource)
            assert not may(user, verb, resource, TEAM), (user, verb, resource)  # a training pod is not its business
        for verb, resource in others:
            assert not may(user, verb, resource, SERVING), (user, verb, resource)


def test_the_taint_controller_changes_the_virtual_node_only_by_its_taint(kubectl: Kubectl) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-burst-tc", "labels": {"type": "virtual-kubelet"}},
    }
    assert kubectl("create", "-f", "-", doc=node).returncode == 0

    def patched(ops: list[dict[str, Any]]) -> str | None:
        args = ["patch", "node", "gpu-burst-tc", "--type=json", "-p", json.dumps(ops), "--dry-run=server"]
        proc = kubectl(*args, "--as", TAINT_CONTROLLER_USER)
        return None if proc.returncode == 0 else proc.stderr.strip()

    burst = {"key": BURST_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
    # (the API server gave the new Node its not-ready taint: appended to, not replaced)
    assert patched([{"op": "add", "path": "/spec/taints/-", "value": burst}]) is None
    for ops in (
        [{"op": "add", "path": "/metadata/ownerReferences", "value": DANGLING_OWNER["metadata"]["ownerReferences"]}],
        [{"op": "add", "path": "/metadata/finalizers", "value": ["example.com/forever"]}],
        [{"op": "add", "path": "/metadata/labels/x", "value": "y"}],
        [{"op": "add", "path": "/spec/taints/-", "value": {**burst, "effect": "NoExecute"}}],
        [{"op": "remove", "path": "/spec/taints/0"}],  # the node's own not-ready taint
    ):
        said = patched(ops)
        assert said is not None, ops
        assert "gpucluster-taint-controller-writes-only-its-taint" in said, (ops, said)


def test_the_virtual_node_registers_only_its_own_node(kubectl: Kubectl) -> None:
    def node(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}

    def created_as_virtual_node(name: str) -> str | None:
        proc = kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", "--as", VIRTUAL_NODE_USER, doc=node(name))
        return None if proc.returncode == 0 else proc.stderr.strip()

    assert created_as_virtual_node("gpu-burst") is None
    said = created_as_virtual_node("gpu-node-7")
    assert said is not None, "the virtual node could register another Node"
    assert "gpucluster-virtual-node-registers-only-its-node" in said, said
    assert kubectl.refusal(node("gpu-node-7")) is None  # the admin (and a kubelet) still may


def test_the_burst_provider_changes_a_pod_only_by_its_annotations(kubectl: Kubectl) -> None:
    serving = pod(SERVING) | {"metadata": {"name": "rented", "namespace": SERVING, "labels": {"app": "web"}}}
    assert kubectl("create", "-f", "-", doc=serving).returncode == 0

    def patched(patch: dict[str, Any]) -> str | None:
        args = ["patch", "pod", "rented", "-n", SERVING, "--type=merge", "-p", json.dumps(patch), "--dry-run=server"]
        proc = kubectl(*args, "--as", PROVIDER_USER)
        return None if proc.returncode == 0 else proc.stderr.strip()

    assert patched({"metadata": {"annotations": {"burst.gpucluster.io/address": "203.0.113.7"}}}) is None
    for hostile in (
        DANGLING_OWNER,
        {"metadata": {"finalizers": ["example.com/forever"]}},
        {"metadata": {"labels": {"app": "elsewhere"}}},
        {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "-1000"}}},
    ):
        said = patched(hostile)
        assert said is not None, hostile
        assert "gpucluster-burst-provider-annotates-pods-only" in said, said
    # the admin (and any other controller) is not held to it
    assert kubectl("patch", "pod", "rented", "-n", SERVING, "--type=merge", "--dry-run=server", "-p",
                   json.dumps({"metadata": {"labels": {"app": "elsewhere"}}})).returncode == 0  # fmt: skip


def test_the_burst_provider_writes_only_the_endpoint_slices_it_manages(kubectl: Kubectl) -> None:
    def endpoint_slice(name: str, manager: str) -> dict[str, Any]:
        labels = {"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": manager}
        return {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": name, "namespace": SERVING, "labels": labels},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["203.0.113.7"]}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }

    kubes = endpoint_slice("web-kube", "endpointslice-controller.k8s.io")
    assert kubectl("create", "-f", "-", doc=kubes).returncode == 0

    def as_provider(*args: str, doc: dict[str, Any] | None = None) -> str | None:
        proc = kubectl(*args, "--dry-run=server", "--as", PROVIDER_USER, doc=doc)
        return None if proc.returncode == 0 else proc.stderr.strip()

    assert as_provider("create", "-f", "-", doc=endpoint_slice("web-burst", "burst.gpucluster.io")) is None
    for what, said in [
        ("a slice of the cluster's own", as_provider("create", "-f", "-", doc=endpoint_slice("web-x", "kube"))),
        ("the cluster's slice deleted", as_provider("delete", "endpointslice", "web-kube", "-n", SERVING)),
        (
            "the cluster's slice taken over",
            as_provider(
                "apply",
                "--server-side",
                "--force-conflicts",
                "-f",
                "-",
                doc=endpoint_slice("web-kube", "burst.gpucluster.io"),
            ),
        ),
    ]:
        assert said is not None, what
        assert "gpucluster-burst-provider-writes-only-its-endpoint-slices" in said, (what, said)


def test_a_controllers_network_policy_is_one_the_api_server_takes(kubectl: Kubectl) -> None:
    def policy(scrapers: tuple[str, ...]) -> dict[str, Any]:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "gpucluster-quota-controller", "namespace": CONTROLLERS},
            "spec": metrics_ingress("gpucluster-quota-controller", 9111, scrapers),
        }

    assert kubectl.refusal(policy(("monitoring",))) is None
    assert kubectl.refusal(policy(())) is None  # no ingress rule: nothing may connect
    broken = policy(("monitoring",))
    broken["spec"]["ingress"][0]["ports"][0]["port"] = 70000
    refused(kubectl, broken, "spec.ingress[0].ports[0].port")


def test_only_the_verifier_writes_checkpoint_records_and_it_writes_only_records_and_check_jobs(
    kubectl: Kubectl,
) -> None:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "checkpoints", "namespace": TEAM},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    vouched = copy.deepcopy(claim)
    vouched["metadata"]["annotations"] = {f"{VERIFIED_ANNOTATION_PREFIX}llm": "{}"}
    refused(kubectl, vouched, "verified-checkpoint-records-are-the-verifiers", "does not vouch")
    proc = kubectl("create", "-f", "-", doc=claim)
    assert proc.returncode == 0, proc.stderr
    trainer = f"system:serviceaccount:{TEAM}:gpucluster-trainer"

    def patched_as(user: str, wanted: dict[str, Any], **meta: Any) -> str | None:
        body = {"metadata": {"annotations": wanted, **meta}}
        args = ["patch", "pvc", "checkpoints", "-n", TEAM, "--type=merge", "-p", json.dumps(body), "--dry-run=server"]
        proc = kubectl(*args, "--as", user)
        return None if proc.returncode == 0 else proc.stderr.strip()

    report, record = f"{CHECKPOINT_ANNOTATION_PREFIX}llm", f"{VERIFIED_ANNOTATION_PREFIX}llm"
    assert patched_as(trainer, {report: "2027-01-15T08:00:00Z"}) is None
    said = patched_as(trainer, {record: '{"verified": {"step": 1}}'})
    assert said is not None
    assert "verified-checkpoint-records-are-the-verifiers" in said
    assert patched_as(VERIFIER_USER, {record: "{}"}) is None
    # an operator may take a record away (nothing then counts as verified), never write one
    proc = kubectl("annotate", "pvc", "checkpoints", "-n", TEAM, f"{record}={{}}", "--as", VERIFIER_USER)
    assert proc.returncode == 0, proc.stderr
    assert patched_as(trainer, {record: None}) is None
    said = patched_as(trainer, {record: '{"verified": {"step": 2}}'})
    assert said is not None
    assert "verified-checkpoint-records-are-the-verifiers" in said
    for wanted, meta in [
        ({report: "2099-01-01T00:00:00Z"}, {}),
        ({}, {"labels": {"x": "y"}}),
        ({}, DANGLING_OWNER["metadata"]),
    ]:
        said = patched_as(VERIFIER_USER, wanted, **meta)
        assert said is not None, (wanted, meta)
        assert "checkpoint-verifier-changes-claims-only-by-its-records" in said, said
    # its check Job, as the controller builds it, is taken; anything else its token sends is refused
    settings = CheckpointVerifierSettings(image=VERIFIER_IMAGE)
    team = TeamQueue(namespace=TEAM, local_queue=CpuQueue().name, priority="research-default")
    good = check_job(
        settings, team, name="checkpoint-check-x-0", job="llm", report="2027-01-15T08:00:00Z", last_verified_step=100
    )

    def created_as_verifier(doc: dict[str, Any]) -> str | None:
        proc = kubectl("create", "--dry-run=server", "-o", "name", "-f", "-", "--as", VERIFIER_USER, doc=doc)
        return None if proc.returncode == 0 else proc.stderr.strip()

    assert created_as_verifier(good) is None
    spec = ["spec", "template", "spec"]

    def changed(path: list[str | int], value: Any) -> dict[str, Any]:
        doc = copy.deepcopy(good)
        at: Any = doc
        for key in path[:-1]:
            at = at[key]
        at[path[-1]] = value
        return doc

    container: list[str | int] = [*spec, "containers", 0]
    for bad, words in [
        (changed([*container, "image"], "registry.invalid/miner:1"), "may create only its check and drill Jobs"),
        (changed([*container, "command"], ["sh", "-c", "curl evil"]), "may create only its check and drill Jobs"),
        (changed([*container, "args"], ["--oops"]), "may create only its check and drill Jobs"),
        (changed([*container, "resources", "limits", "nvidia.com/gpu"], "8"), "takes no GPU"),
        (changed([*spec, "volumes", 0, "persistentVolumeClaim", "readOnly"], False), "read-only"),
        (changed([*spec, "volumes", 0, "persistentVolumeClaim", "claimName"], "datasets"), "read-only"),
        (changed([*spec, "automountServiceAccountToken"], True), "no service-account token"),
        (changed([*spec, "hostNetwork"], True), "nothing of its node"),
    ]:
        said = created_as_verifier(bad)
        assert said is not None, bad
        assert "checkpoint-verifier-creates-only-check-jobs" in said, said
        assert words in said, said
    # the entries a restart resumes from are the verifier's alone: created empty, changed by nobody else
    resume = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "checkpoint-resume", "namespace": TEAM}}
    refused(kubectl, {**resume, "data": {"llm.json": '{"step": 1}'}}, "checkpoint-resume-entries-are-the-verifiers")
    proc = kubectl("create", "-f", "-", doc=resume)
    assert proc.returncode == 0, proc.stderr
    entry = json.dumps({"data": {"llm.json": '{"step": 900}'}})
    as_admin = kubectl("patch", "configmap", "checkpoint-resume", "-n", TEAM, "--type=merge", "-p", entry)
    assert as_admin.returncode != 0
    assert "checkpoint-resume-entries-are-the-verifiers" in as_admin.stderr, as_admin.stderr
    as_verifier = kubectl(
        "patch", "configmap", "checkpoint-resume", "-n", TEAM, "--type=merge", "-p", entry, "--as", VERIFIER_USER
    )
    assert as_verifier.returncode == 0, as_verifier.stderr
    labelled = kubectl("label", "configmap", "checkpoint-resume", "-n", TEAM, "team=a")
    assert labelled.returncode == 0, labelled.stderr  # anything but its entries is anyone's to change
    # it deletes its own Jobs (one Kueue never admitted), never a team's
    proc = kubectl("create", "-f", "-", doc=good)
    assert proc.returncode == 0, proc.stderr
    theirs = copy.deepcopy(good)
    kept = {k: v for k, v in good["metadata"]["labels"].items() if k.startswith("kueue.x-k8s.io/")}
    theirs["metadata"] = {"name": "training-step", "namespace": TEAM, "labels": kept}
    theirs["spec"]["template"]["metadata"] = {}
    proc = kubectl("create", "-f", "-", doc=theirs)
    assert proc.returncode == 0, proc.stderr
    deleted = kubectl("delete", "job", "training-step", "-n", TEAM, "--dry-run=server", "--as", VERIFIER_USER)
    assert deleted.returncode != 0
    assert "checkpoint-verifier-deletes-only-its-jobs" in deleted.stderr, deleted.stderr
    ours = kubectl("delete", "job", good["metadata"]["name"], "-n", TEAM, "--dry-run=server", "--as", VERIFIER_USER)
    assert ours.returncode == 0, ours.stderr
    # its restore drill Job is taken too, but not one reading outside the checkpoints volume
    drill = drill_job(settings, team, name="restore-drill-x-0", job="llm", directory="step-100", after="none")
    assert created_as_verifier(drill) is None
    drill_command = drill["spec"]["template"]["spec"]["containers"][0]["command"]
    for path in ("/etc/shadow", "/checkpoints/../etc", "/checkpoints/llm/.."):
        stray = copy.deepcopy(drill)
        stray["spec"]["template"]["spec"]["containers"][0]["command"] = [*drill_command[:3], path, *drill_command[4:]]
        said = created_as_verifier(stray)
        assert said is not None, path
        assert "may create only its check and drill Jobs" in said, said
    # a step directory whose name holds two dots is still a checkpoint (step_of reads its digits) and is drilled
    dotted = copy.deepcopy(drill)
    dotted["spec"]["template"]["spec"]["containers"][0]["command"][3] = "/checkpoints/llm/run..step-100"
    assert created_as_verifier(dotted) is None
