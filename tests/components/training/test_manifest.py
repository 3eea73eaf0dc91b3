"""The JobSet a spec becomes follows the shared contract field by field, and the interval follows the measured
reliability only when there is enough of it."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import pytest

from components.config import StackConfig, parse_stack_config
from components.training.manifest import (
    MIN_TRUSTED_INTERRUPTIONS,
    JobContext,
    Reliability,
    ReliabilityError,
    checkpoint_interval,
    job_context,
    jobset_manifest,
    parse_reliability,
)
from components.training.spec import JobSpec, SpecError, parse_spec
from contract.constants import (
    CHECKPOINT_INTERVAL_ANNOTATION,
    CHECKPOINT_WRITE_ANNOTATION,
    MAX_RESTARTS_PER_HOUR_ANNOTATION,
    QUARANTINE_TAINT_KEY,
    TEAM_LABEL,
    TRAINER_SERVICE_ACCOUNT,
    TRAINING_JOB_LABEL,
)
from contract.storage_settings import checkpoint_interval_seconds
from tests.components.training.conftest import local_raw, spec_doc

UPDATED = "2026-12-01T10:00:00Z"


def manifest_of(stack: StackConfig, **change: Any) -> dict[str, Any]:
    spec = parse_spec(spec_doc(**change))
    return jobset_manifest(spec, job_context(spec, stack, checkpoint_interval(spec, stack, None)))


def job_of(m: dict[str, Any]) -> dict[str, Any]:
    (rj,) = m["spec"]["replicatedJobs"]
    return dict(rj["template"]["spec"])


def trainer_of(m: dict[str, Any]) -> dict[str, Any]:
    (c,) = job_of(m)["template"]["spec"]["containers"]
    return dict(c)


def test_metadata_queues_the_job_on_the_team_queue_with_its_priority(stack: StackConfig) -> None:
    m = manifest_of(stack)
    assert (m["apiVersion"], m["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert m["metadata"]["name"] == "llm-pretrain"
    assert m["metadata"]["namespace"] == "team-foundation"
    assert m["metadata"]["labels"] == {
        "kueue.x-k8s.io/queue-name": "training",
        "kueue.x-k8s.io/priority-class": "research-default",
        TRAINING_JOB_LABEL: "llm-pretrain",
        TEAM_LABEL: "foundation",
    }
    assert m["metadata"]["annotations"] == {
        CHECKPOINT_INTERVAL_ANNOTATION: "930",
        CHECKPOINT_WRITE_ANNOTATION: "30",
        MAX_RESTARTS_PER_HOUR_ANNOTATION: "6",
    }


def test_the_jobset_is_one_suspended_gang_kueue_admits(stack: StackConfig) -> None:
    spec = manifest_of(stack)["spec"]
    assert spec["suspend"] is True
    assert spec["network"]["enableDNSHostnames"] is True
    assert spec["successPolicy"] == {"operator": "All"}
    assert spec["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    (rj,) = spec["replicatedJobs"]
    assert (rj["name"], rj["replicas"]) == ("node", 1)


def test_the_job_fails_at_once_and_says_whose_fault(stack: StackConfig) -> None:
    job = job_of(manifest_of(stack, nodes=3))
    assert (job["parallelism"], job["completions"], job["completionMode"]) == (3, 3, "Indexed")
    assert job["backoffLimit"] == 0
    assert job["podFailurePolicy"]["rules"] == [
        {"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [0]}},
    ]
    assert job["template"]["spec"]["restartPolicy"] == "Never"


def test_the_gang_restarts_in_place_and_only_the_program_faults_count(stack: StackConfig) -> None:
    policy = manifest_of(stack)["spec"]["failurePolicy"]
    assert policy["maxRestarts"] == 100
    assert policy["restartStrategy"] == "Recreate"
    assert policy["rules"] == [
        {
            "name": "NodeFault",
            "action": "RestartJobSetAndIgnoreMaxRestarts",
            "onJobFailureReasons": ["PodFailurePolicy"],
            "onJobFailureMessagePatterns": ["has condition DisruptionTarget"],
        },
        {
            "name": "ProgramFault",
            "action": "RestartJobSet",
            "onJobFailureReasons": ["PodFailurePolicy", "BackoffLimitExceeded"],
        },
    ]


def test_the_node_fault_rule_matches_only_the_job_controller_message_for_a_disruption(stack: StackConfig) -> None:
    # JobSet matches onJobFailureMessagePatterns as regular expressions against the Job's failure message; the
    # Job controller writes "Pod %s/%s has condition %v matching %v rule at index %d" for onPodConditions and
    # "Container %s for pod %s/%s failed with exit code %v matching %v rule at index %d" for onExitCodes.
    node_rule, program_rule = manifest_of(stack)["spec"]["failurePolicy"]["rules"]
    (pattern,) = node_rule["onJobFailureMessagePatterns"]
    pod = "team-foundation/llm-pretrain-node-0-1-x7k"
    disrupted = f"Pod {pod} has condition DisruptionTarget matching FailJob rule at index 0"
    crashed = f"Container trainer for pod {pod} failed with exit code 1 matching FailJob rule at index 1"
    assert re.search(pattern, disrupted)
    assert not re.search(pattern, crashed)
    assert "onJobFailureMessagePatterns" not in program_rule


def test_the_restart_bounds_come_from_the_spec_else_the_stack() -> None:
    raw = local_raw()
    raw["training"] = {"maxRestartsPerHour": 3, "maxRestarts": 7}
    stack = parse_stack_config(raw)
    m = manifest_of(stack)
    assert m["metadata"]["annotations"][MAX_RESTARTS_PER_HOUR_ANNOTATION] == "3"
    assert m["spec"]["failurePolicy"]["maxRestarts"] == 7
    m = manifest_of(stack, maxRestartsPerHour=2, maxRestarts=0)
    assert m["metadata"]["annotations"][MAX_RESTARTS_PER_HOUR_ANNOTATION] == "2"
    assert m["spec"]["failurePolicy"]["maxRestarts"] == 0


def test_the_pod_runs_at_training_priority_with_the_claims_and_gpus(stack: StackConfig) -> None:
    job = job_of(manifest_of(stack, gpusPerNode=4))
    pod = job["template"]
    assert pod["metadata"]["labels"] == {TRAINING_JOB_LABEL: "llm-pretrain", TEAM_LABEL: "foundation"}
    assert pod["spec"]["priorityClassName"] == "gpucluster-training"
    assert pod["spec"]["volumes"] == [
        {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "checkpoints"}},
        {"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
        # its entry of the team's checkpoint-resume ConfigMap, kept by the checkpoint verifier: where a restart
        # resumes (optional: no entry until a checkpoint is verified)
        {
            "name": "gpucluster-resume",
            "configMap": {
                "name": "checkpoint-resume",
                "optional": True,
                "items": [{"key": "llm-pretrain.json", "path": "resume.json"}],
            },
        },
    ]
    trainer = pod["spec"]["containers"][0]
    assert trainer["name"] == "trainer"
    assert trainer["resources"] == {"requests": {"nvidia.com/gpu": "4"}, "limits": {"nvidia.com/gpu": "4"}}
    assert trainer["volumeMounts"] == [
        {"name": "checkpoints", "mountPath": "/checkpoints"},
        {"name": "datasets", "mountPath": "/datasets", "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "gpucluster-resume", "mountPath": "/run/gpucluster", "readOnly": True},
    ]
    # no fabric on the local stack's flavor: no RDMA device and no capability beyond the default
    assert "securityContext" not in trainer
    assert (trainer["image"], trainer["command"], trainer["args"]) == (
        "ghcr.io/example/trainer:1.0.0",
        ["torchrun"],
        ["train.py"],
    )


def test_no_node_selector_and_only_a_lost_node_tolerated_for_seconds(stack: StackConfig) -> None:
    pod = job_of(manifest_of(stack))["template"]["spec"]
    assert "nodeSelector" not in pod
    assert QUARANTINE_TAINT_KEY not in str(pod)
    # not the API server's default 300 s: the gang leaves a lost node after the stack's 30 s; and, placed by
    # topology with make-before-break on, the reservation taint of the nodes Kueue pins it to
    assert pod["tolerations"] == [
        *(
            {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}
            for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
        ),
        {"key": "gpucluster.io/reservation", "operator": "Exists", "effect": "NoSchedule"},
    ]
    raw = local_raw()
    raw["flavors"][0].pop("topology")
    pod = job_of(manifest_of(parse_stack_config(raw)))["template"]["spec"]
    assert "gpucluster.io/reservation" not in str(pod["tolerations"])


def with_training(**section: Any) -> StackConfig:
    raw = local_raw()
    raw["training"] = section
    return parse_stack_config(raw)


def test_the_lost_node_toleration_follows_the_stack() -> None:
    pod = job_of(manifest_of(with_training(nodeLostToleration="2m")))["template"]["spec"]
    assert {t.get("tolerationSeconds") for t in pod["tolerations"] if t["effect"] == "NoExecute"} == {120}
    with pytest.raises(ValueError, match="node_lost_toleration_seconds"):
        JobContext("ns", "q", "p", 1, 1, 0, node_lost_toleration_seconds=0)


PYTORCH_DEFAULTS = [
    {"name": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "value": "3"},
    {"name": "TORCH_NCCL_ENABLE_MONITORING", "value": "1"},
    {"name": "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "value": "300"},
    {"name": "TORCH_NCCL_TRACE_BUFFER_SIZE", "value": "2000"},
    {"name": "TORCH_FR_BUFFER_SIZE", "value": "2000"},
    {"name": "TORCH_NCCL_DUMP_ON_TIMEOUT", "value": "1"},
    {
        "name": "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
        "value": "/checkpoints/llm-pretrain.flight-recorder.attempt-$(GPUCLUSTER_RESTART_ATTEMPT).rank-",
    },
    {
        "name": "TORCH_FR_DUMP_TEMP_FILE",
        "value": "/checkpoints/llm-pretrain.flight-recorder.attempt-$(GPUCLUSTER_RESTART_ATTEMPT).rank-",
    },
]


#: What torchrun reads (its options' PET_ form) to form a 2-node gang of 8 processes each.
LAUNCHER = [
    {"name": "PET_NNODES", "value": "2"},
    {"name": "PET_NPROC_PER_NODE", "value": "8"},
    {
        "name": "PET_NODE_RANK",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}},
    },
    {"name": "PET_RDZV_BACKEND", "value": "static"},
    {"name": "PET_RDZV_ENDPOINT", "value": "llm-pretrain-node-0-0.llm-pretrain:29500"},
    {"name": "PET_MAX_RESTARTS", "value": "0"},
    {"name": "MASTER_ADDR", "value": "llm-pretrain-node-0-0.llm-pretrain"},
    {"name": "MASTER_PORT", "value": "29500"},
]


def test_the_job_env_names_its_checkpoints_and_its_master(stack: StackConfig) -> None:
    env = trainer_of(manifest_of(stack, env={"WANDB_PROJECT": "p", "A_FIRST": "1"}))["env"]
    assert env == [
        {"name": "GPUCLUSTER_JOB_NAME", "value": "llm-pretrain"},
        {"name": "GPUCLUSTER_CHECKPOINT_DIR", "value": "/checkpoints/llm-pretrain"},
        {"name": "GPUCLUSTER_DATASETS_DIR", "value": "/datasets"},
        {"name": "GPUCLUSTER_CHECKPOINT_INTERVAL_SECONDS", "value": "930"},
        {"name": "GPUCLUSTER_CHECKPOINT_ANNOTATION", "value": "checkpoint.gpucluster.io/llm-pretrain"},
        {"name": "GPUCLUSTER_VERIFIED_ANNOTATION", "value": "verified.checkpoint.gpucluster.io/llm-pretrain"},
        {"name": "GPUCLUSTER_RESUME_FILE", "value": "/run/gpucluster/resume.json"},
        {"name": "GPUCLUSTER_PROGRESS_ANNOTATION", "value": "progress.gpucluster.io/llm-pretrain"},
        {"name": "GPUCLUSTER_NODES", "value": "2"},
        {"name": "GPUCLUSTER_GPUS_PER_NODE", "value": "8"},
        *LAUNCHER,
        {
            "name": "GPUCLUSTER_RESTART_ATTEMPT",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/restart-attempt']"}},
        },
        *PYTORCH_DEFAULTS,
        {"name": "A_FIRST", "value": "1"},
        {"name": "WANDB_PROJECT", "value": "p"},
    ]


def test_the_spec_overrides_a_pytorch_default_and_the_stack_can_turn_the_flight_recorder_off(
    stack: StackConfig,
) -> None:
    env = trainer_of(manifest_of(stack, env={"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "900"}))["env"]
    timeouts = [e for e in env if e["name"] == "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"]
    assert timeouts == [{"name": "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "value": "900"}]  # the spec's, once
    env = trainer_of(manifest_of(with_training(flightRecorderEntries=0, ncclHeartbeatTimeout="10m")))["env"]
    names = {e["name"]: e.get("value") for e in env}
    assert names["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"] == "600"
    assert not {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_FR_DUMP_TEMP_FILE"} & set(names)


def test_the_manifest_is_pure(stack: StackConfig) -> None:
    assert manifest_of(stack) == manifest_of(stack)


# --- the interval ---------------------------------------------------------------------------------------------


def spec(**change: Any) -> JobSpec:
    return parse_spec(spec_doc(**change))


def reliability(interruptions: int, mtbi: float = 8 * 3600.0) -> Reliability:
    return Reliability(node_mtbi_seconds=mtbi, interruptions=interruptions, node_seconds=1e6, updated_at=UPDATED)


def test_the_prior_gives_krea_range(stack: StackConfig) -> None:
    # The local stack states its 8 h prior per node (mtbfJobNodes 1): a 1-node job gets Krea's 21.9 min.
    interval = checkpoint_interval(spec(nodes=1), stack, None)
    assert interval.source == "stack"
    assert interval.seconds == round(math.sqrt(2 * 30 * 8 * 3600))
    assert 20 * 60 <= interval.seconds <= 30 * 60
    assert "no measured reliability" in interval.reason


def test_the_prior_is_per_node_and_scaled_to_the_job(stack: StackConfig) -> None:
    # A 64-node job is interrupted 64 times as often as a 1-node one: its MTBF is 1/64, its interval 1/8.
    one = checkpoint_interval(spec(nodes=1), stack, None)
    big = checkpoint_interval(spec(nodes=64), stack, None)
    assert big.mtbf_seconds == one.mtbf_seconds / 64
    assert big.seconds == round(math.sqrt(2 * 30 * 8 * 3600 / 64))
    assert "/ 64 nodes" in big.reason
    # A prior stated for a 256-node job (8 h there) is 2048 node-hours: a 64-node job gets 32 h.
    prior = stack.storage.checkpointing.model_copy(update={"mtbf_job_nodes": 256})
    sized = dataclasses.replace(stack, storage=stack.storage.model_copy(update={"checkpointing": prior}))
    assert checkpoint_interval(spec(nodes=64), sized, None).mtbf_seconds == 32 * 3600.0
    assert checkpoint_interval(spec(nodes=256), sized, None).mtbf_seconds == 8 * 3600.0


def test_the_third_interruption_does_not_move_an_interval_the_prior_predicted(stack: StackConfig) -> None:
    # The cluster measures exactly the prior's 8 node-hours per interruption: two interruptions (prior) and three
    # (measured) give a 64-node job the same interval. Unscaled, the prior gave it 8x the measured one.
    before = checkpoint_interval(spec(nodes=64), stack, reliability(MIN_TRUSTED_INTERRUPTIONS - 1, 8 * 3600.0))
    after = checkpoint_interval(spec(nodes=64), stack, reliability(MIN_TRUSTED_INTERRUPTIONS, 8 * 3600.0))
    assert (before.source, after.source) == ("stack", "measured")
    assert before.seconds == after.seconds
    # Measured worse than the prior: the interval shrinks by the square root of the ratio.
    worse = checkpoint_interval(spec(nodes=64), stack, reliability(MIN_TRUSTED_INTERRUPTIONS, 2 * 3600.0))
    assert worse.seconds == pytest.approx(before.seconds / 2, abs=1)


def test_the_write_time_comes_from_the_spec_else_the_stack(stack: StackConfig) -> None:
    assert checkpoint_interval(spec(checkpointWriteSeconds=120), stack, None).write_seconds == 120
    assert checkpoint_interval(spec(), stack, None).write_seconds == stack.storage.checkpointing.write_seconds


def test_measured_reliability_is_trusted_from_three_interruptions(stack: StackConfig) -> None:
    # 2 nodes, 10 h of node-time per interruption: the job's MTBF is 5 h.
    trusted = checkpoint_interval(spec(), stack, reliability(MIN_TRUSTED_INTERRUPTIONS, 10 * 3600.0))
    assert trusted.source == "measured"
    assert trusted.mtbf_seconds == 5 * 3600.0
    assert trusted.seconds == round(checkpoint_interval_seconds(30, 5 * 3600.0))
    assert "3 interruptions" in trusted.reason
    untrusted = checkpoint_interval(spec(), stack, reliability(MIN_TRUSTED_INTERRUPTIONS - 1, 10 * 3600.0))
    assert untrusted.source == "stack"
    assert untrusted.mtbf_seconds == 8 * 3600.0 / 2  # the per-node prior over the spec's 2 nodes
    assert "only 2 interruptions measured" in untrusted.reason


def test_a_bigger_gang_checkpoints_more_often_on_measured_reliability(stack: StackConfig) -> None:
    small = checkpoint_interval(spec(nodes=1), stack, reliability(10))
    big = checkpoint_interval(spec(nodes=4), stack, reliability(10))
    assert big.seconds == pytest.approx(small.seconds / 2, abs=1)


def test_parse_reliability_reads_the_configmap() -> None:
    r = parse_reliability(
        {"nodeMtbiSeconds": "36000.5", "interruptions": "4", "nodeSeconds": "144002", "updatedAt": UPDATED}
    )
    assert r == Reliability(36000.5, 4, 144002.0, UPDATED)
    assert r.trusted


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"nodeMtbiSeconds": "lots"}, "nodeMtbiSeconds: 'lots' is not a number"),
        ({"nodeMtbiSeconds": "nan"}, "nodeMtbiSeconds: must be finite"),
        ({"nodeMtbiSeconds": "0"}, "nodeMtbiSeconds: must be positive once there are interruptions"),
        ({"interruptions": "2.5"}, "interruptions: '2.5' is not an integer"),
        ({"interruptions": "-1"}, "interruptions: must not be negative"),
        ({"nodeSeconds": None}, "nodeSeconds: missing"),
        ({"updatedAt": "yesterday"}, "updatedAt: 'yesterday' is not an RFC 3339 time"),
    ],
)
def test_a_bad_configmap_is_refused_naming_the_key(change: dict[str, Any], expected: str) -> None:
    data = {"nodeMtbiSeconds": "36000", "interruptions": "4", "nodeSeconds": "144000", "updatedAt": UPDATED}
    data.update(change)
    with pytest.raises(ReliabilityError, match=f"^{expected}"):
        parse_reliability({k: v for k, v in data.items() if v is not None})


def test_a_context_refuses_bounds_that_cannot_hold() -> None:
    with pytest.raises(ValueError, match="checkpoint_interval_seconds"):
        JobContext("ns", "q", "p", checkpoint_interval_seconds=0, max_restarts_per_hour=1, max_restarts=0)
    with pytest.raises(ValueError, match="max_restarts_per_hour"):
        JobContext("ns", "q", "p", checkpoint_interval_seconds=1, max_restarts_per_hour=0, max_restarts=0)


def test_the_pods_run_as_the_trainer_account_that_may_write_the_checkpoint_report(stack: StackConfig) -> None:
    pod = job_of(manifest_of(stack))["template"]["spec"]
    assert pod["serviceAccountName"] == TRAINER_SERVICE_ACCOUNT == "gpucluster-trainer"


def test_pod_annotations_go_on_every_pod_and_are_absent_when_none() -> None:
    raw = local_raw()
    raw["flavors"][0].pop("topology")  # else Kueue's topology annotation is there too (test_topology.py)
    stack = parse_stack_config(raw)
    meta = job_of(manifest_of(stack, podAnnotations={"profiler.example.com/every": "100"}))["template"]["metadata"]
    assert meta["annotations"] == {"profiler.example.com/every": "100"}
    assert "annotations" not in job_of(manifest_of(stack))["template"]["metadata"]


def test_a_pod_annotation_key_that_is_not_a_qualified_name_is_refused() -> None:
    with pytest.raises(SpecError, match=r"spec\.podAnnotations.*annotation key"):
        parse_spec(spec_doc(podAnnotations={"not a key": "x"}))


def test_a_jobs_own_stall_after_is_annotated_in_seconds_and_none_is_left_to_the_stack(stack: StackConfig) -> None:
    from contract.constants import STALL_AFTER_ANNOTATION  # noqa: PLC0415

    assert STALL_AFTER_ANNOTATION not in manifest_of(stack)["metadata"]["annotations"]
    assert manifest_of(stack, stallAfter="15m")["metadata"]["annotations"][STALL_AFTER_ANNOTATION] == "900"


def test_a_secret_is_referenced_from_the_teams_namespace_and_mounted_read_only(stack: StackConfig) -> None:
    m = manifest_of(stack, secretEnv={"HF_TOKEN": {"secret": "hf", "key": "token"}}, secretFiles=["gcp"])
    trainer = trainer_of(m)
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in trainer["env"]
    assert {"name": "secret-0", "mountPath": "/var/run/secrets/gpucluster/gcp", "readOnly": True} in trainer[
        "volumeMounts"
    ]
    volumes = job_of(m)["template"]["spec"]["volumes"]
    assert {"name": "secret-0", "secret": {"secretName": "gcp", "defaultMode": 0o400}} in volumes
