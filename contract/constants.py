"""Names and limits the components write, the daemons act on and the policy pack reads: defined once, here.

Pure constants (no Pulumi import): the daemons and the policy pack import this module too, so a label the policy
pack checks can never drift from the label a component sets.
"""

from __future__ import annotations

import hashlib

#: The Pulumi project; stack config keys are ``gpucluster:<key>``.
PROJECT = "gpucluster"

# --- labels and annotations ---------------------------------------------------------------------------------

#: Every resource of a stack: which environment it belongs to.
ENVIRONMENT_LABEL = "gpucluster.io/environment"
#: A namespace's role: ``training`` (a team's) or ``inference``.
WORKLOAD_LABEL = "gpucluster.io/workload"
#: A PriorityClass's tier: ``training`` or ``inference`` (the policy pack checks training is above inference).
TIER_LABEL = "gpucluster.io/tier"
#: A ResourceFlavor's GPUs (nodes x GPUs per node): what the quota policy checks every ClusterQueue against.
DECLARED_GPUS_ANNOTATION = "gpucluster.io/declared-gpus"
#: A ResourceFlavor's fabric (``infiniband``, ``roce``, ``ethernet``) and the RDMA resource its pods request: what the
#: policy pack checks every training JobSet that may land on it against.
FABRIC_KIND_ANNOTATION = "gpucluster.io/fabric-kind"
RDMA_RESOURCE_ANNOTATION = "gpucluster.io/rdma-resource"
#: The parallel filesystem's StorageClass carries its driver; each claim says which claim it is.
STORAGE_DRIVER_LABEL = "gpucluster.io/storage-driver"
CLAIM_LABEL = "gpucluster.io/claim"
#: A daemon's settings ConfigMap: which daemon reads it (``burst-provider``, ``taint-controller``).
SETTINGS_LABEL = "gpucluster.io/settings"
#: On a daemon's pod template: the SHA-256 of the settings its ConfigMap holds. The daemons read their settings once,
#: at start, and the ConfigMap keeps its name, so a changed digest is what rolls the pods onto new settings.
SETTINGS_DIGEST_ANNOTATION = "gpucluster.io/settings-sha256"


def settings_digest(*documents: str) -> dict[str, str]:
    """The pod-template annotation naming the settings ``documents`` (in order) by their SHA-256."""
    digest = hashlib.sha256()
    for document in documents:
        digest.update(document.encode())
        digest.update(b"\0")
    return {SETTINGS_DIGEST_ANNOTATION: digest.hexdigest()}


#: The API server accepts Events about a cluster-scoped object (a Node, a ClusterQueue, an AdmissionCheck) only here.
CLUSTER_EVENTS_NAMESPACE = "default"
#: The GPU type a burst provider must rent for a pod (pod template annotation, read by the provider service).
GPU_TYPE_ANNOTATION = "burst.gpucluster.io/gpu-type"
#: A node that passed the Ansible acceptance roles (``ansible/roles/node_admission`` sets it to ``true``): GPU
#: flavors select it, and only accepted nodes count as capacity.
ACCEPTED_LABEL = "gpucluster.io/accepted"
ACCEPTED_VALUE = "true"
#: A quarantined node (the quarantine controller sets it with the taint; ``kubectl get nodes -l`` lists them).
QUARANTINED_LABEL = "gpucluster.io/quarantined"
#: Why and since when (RFC 3339, UTC) a node is quarantined: what goes to the hardware provider.
QUARANTINE_REASON_ANNOTATION = "gpucluster.io/quarantine-reason"
QUARANTINED_AT_ANNOTATION = "gpucluster.io/quarantined-at"
#: When a node was last released from quarantine (``node_admission`` or the documented kubectl step sets it): the
#: quarantine controller does not quarantine it again within its ``releaseGrace``.
RELEASED_AT_ANNOTATION = "gpucluster.io/quarantine-released-at"

# --- taints -------------------------------------------------------------------------------------------------

#: The NoSchedule taint the taint controller keeps on the virtual node while in-cluster GPUs are free (the stack's
#: ``burstTaintKey``; Pulumi.yaml declares the same default).
DEFAULT_BURST_TAINT_KEY = "gpucluster.io/in-cluster-capacity"
#: The burst taint's only effect: NoExecute would evict every external inference replica at once.
BURST_TAINT_EFFECT = "NoSchedule"
BURST_TAINT_VALUE = "true"
#: The virtual node's own taint (set by the node binary): only pods that tolerate it may burst.
VIRTUAL_NODE_TAINT_KEY = "virtual-kubelet.io/provider"
VIRTUAL_NODE_TAINT_VALUE = "gpucluster"
VIRTUAL_NODE_TAINT_EFFECT = "NoSchedule"
#: As the node binary's ``--taint`` flag takes it.
VIRTUAL_NODE_TAINT = f"{VIRTUAL_NODE_TAINT_KEY}={VIRTUAL_NODE_TAINT_VALUE}:{VIRTUAL_NODE_TAINT_EFFECT}"

#: The quarantine taint: a node with a hot or erroring GPU. NoExecute, so running training pods leave it (the
#: controller manager's taint-eviction controller evicts what does not tolerate it); inference tolerates it and
#: keeps serving there.
QUARANTINE_TAINT_KEY = "gpucluster.io/quarantine"
QUARANTINE_TAINT_EFFECT = "NoExecute"
#: The taint ``node_admission`` puts on a node that failed acceptance (NoSchedule).
ACCEPTANCE_FAILED_TAINT_KEY = "gpucluster.io/acceptance-failed"
#: Label and NoSchedule taint on a node make-before-break reserved for a waiting gang; the value is the Workload's uid.
RESERVATION_KEY = "gpucluster.io/reservation"

#: The extended resource GPUs are requested as.
GPU_RESOURCE = "nvidia.com/gpu"
#: The node labels fabric discovery sets (``ansible/roles/ib_topology``): a node's InfiniBand spine block (leaves
#: joined through the same spine switches) and its leaf domain (the rail leaves serving the same hosts). The
#: levels a stack's Kueue Topology is usually made of, above ``kubernetes.io/hostname``.
IB_BLOCK_LABEL = "gpucluster.io/ib-block"
IB_LEAF_LABEL = "gpucluster.io/ib-leaf"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: The label the API server puts on every namespace: its name (what a namespace selector picks one by).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
#: The interruption accounting daemon's record on a JobSet (daemons/interruptions/).
INTERRUPTIONS_LEDGER_ANNOTATION = "gpucluster.io/interruptions"
#: Kueue's API group and the version everything of ours reads and writes it in.
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_API = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
#: Kueue's pod-set topology annotations (kueue v1beta2 ``topology_types.go``), on a JobSet's pod templates.
PODSET_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PODSET_PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
#: Topology-aware placement with no level asked for (value ``"true"``). On a pod Kueue does not admit (inference),
#: this makes Kueue's topology-aware scheduling leave its usage out of a node's free capacity: training preempts
#: inference, so GPUs inference holds are free to a training gang, exactly as they are to its quota;
#: make-before-break moves the replicas off the nodes Kueue assigns.
PODSET_UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
#: The burst provider's annotations on a pod it runs on a rented instance (the instance's address, provider and id),
#: and the ``endpointslice.kubernetes.io/managed-by`` value of the EndpointSlices it keeps for rented replicas.
BURST_POD_ANNOTATIONS = (
    "burst.gpucluster.io/address",
    "burst.gpucluster.io/provider",
    "burst.gpucluster.io/instance-id",
)
BURST_ENDPOINTS_MANAGER = "burst.gpucluster.io"
ENDPOINT_SLICE_MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
#: The fabric exporter's DaemonSet, Service and ServiceMonitor: under the Prometheus operator, its scrape job.
FABRIC_EXPORTER_APP = "gpucluster-fabric-exporter"
#: NVIDIA's dcgm-exporter chart's ``fullnameOverride``: its Service, so its scrape job under the Prometheus operator.
DCGM_EXPORTER_APP = "dcgm-exporter"
#: The Prometheus our daemons ask by default (``prometheusUrl``): the operator's ``prometheus-operated`` Service.
PROMETHEUS_URL = "http://prometheus-operated.monitoring.svc:9090"

#: Field names that would hold a credential itself (an API key, a token, a kubeconfig): the policy pack refuses
#: them in ConfigMaps, and no settings message ever echoes their values.
CREDENTIAL_KEY_PATTERN = (
    r"(api[_-]?key|apikey|token|passw(or)?d|secret|credential|private[_-]?key|kubeconfig|client[_-]?key)"
)

# --- training jobs (let it crash) ---------------------------------------------------------------------------

#: Kueue's labels on a job: the LocalQueue it is submitted to, and the WorkloadPriorityClass it names.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: JobSet's label (and annotation) on each Job and pod: the restart attempt the gang is on (its ``status.restarts``).
JOBSET_RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
#: An Indexed Job's pod index (the Job controller sets it on every pod): a training pod's node rank.
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
#: A training JobSet and its pods: the job's name, and the team that submitted it.
TRAINING_JOB_LABEL = "gpucluster.io/training-job"
TEAM_LABEL = "gpucluster.io/team"
#: On the JobSet: the checkpoint interval it was given (seconds) and its restart bound per hour.
CHECKPOINT_INTERVAL_ANNOTATION = "gpucluster.io/checkpoint-interval-seconds"
MAX_RESTARTS_PER_HOUR_ANNOTATION = "gpucluster.io/max-restarts-per-hour"
#: On the JobSet: seconds one complete checkpoint takes to write (training stalls meanwhile).
CHECKPOINT_WRITE_ANNOTATION = "gpucluster.io/checkpoint-write-seconds"
#: The checkpoint report: a job annotates its team's ``checkpoints`` claim with
#: ``checkpoint.gpucluster.io/<jobset name>: <RFC 3339 time its last complete checkpoint finished>``.
CHECKPOINT_ANNOTATION_PREFIX = "checkpoint.gpucluster.io/"
#: The verifier's record beside the report, on the same claim:
#: ``verified.checkpoint.gpucluster.io/<jobset name>: {"verified": {...} | null, "last": {...}}`` (written by the
#: checkpoint verifier only: ``contract/checkpoint_record.py`` is its format). Only a checkpoint in
#: ``verified`` counts: the restart path, the interruption accounting and ``TrainingCheckpointStale`` read it.
VERIFIED_ANNOTATION_PREFIX = "verified.checkpoint.gpucluster.io/"
#: The measured reliability the next submission's checkpoint interval follows (written by the interruption
#: accounting daemon in its namespace): training node-seconds per interruption.
RELIABILITY_CONFIGMAP = "gpucluster-training-reliability"
#: The file system's measured write rate with every GPU node writing at once (written beside the reliability by
#: ``ansible/playbooks/storage_aggregate.yml``): data ``aggregateWriteBytesPerSecond``, ``hosts``, ``slowestHost``,
#: ``slowestWriteBytesPerSecond``, ``measuredAt``. ``gpucluster submit`` sizes a checkpoint's write time from it.
STORAGE_MEASURED_CONFIGMAP = "gpucluster-storage-measured"
TRAINING_NAMESPACE = "gpucluster-training"
#: The ServiceAccount a training job's pods run as in its team namespace: it may annotate the team's
#: ``checkpoints`` claim with the checkpoint report and nothing else.
TRAINER_SERVICE_ACCOUNT = "gpucluster-trainer"

# --- GPU health ---------------------------------------------------------------------------------------------

#: The GPU thermal ceiling (°C): a GPU above it is removed from training. The telemetry alert's ``gpuTempLimitC``
#: defaults to it and may only be lowered. Ansible cannot import it: ``ansible/roles/gpu_thermal_acceptance``
#: repeats it as a literal (defaults, argument_specs, the preflight assert), and
#: ``tests/ansible/test_thermal_ceiling.py`` fails when any of those differs from this value.
GPU_TEMP_CEILING_C = 78.0

# --- Stalls ----------------------------------------------------------------------------------------------------

#: The progress report (optional): a job annotates its team's ``checkpoints`` claim, beside its checkpoint report,
#: with ``progress.gpucluster.io/<jobset name>: {"step": <int>, "phase": "train|checkpoint|eval|data",
#: "at": <RFC 3339 time of the last step>}``. The stall detector reads it.
PROGRESS_ANNOTATION_PREFIX = "progress.gpucluster.io/"
#: On the JobSet: the job's own stallAfter (seconds), from its spec.
STALL_AFTER_ANNOTATION = "gpucluster.io/stall-after-seconds"
#: On the JobSet: the stall detector's restart of one attempt (JSON: attempt, at, evidence, suspects), written
#: before it evicts a pod of that attempt; the interruption accounting counts that attempt's end as a ``hang``.
STALL_RESTART_ANNOTATION = "gpucluster.io/stall-restart"
#: The fabric exporter's ``hw_counters`` (mlx5's names) that count transport retries and timeouts on a port: what
#: the InfiniBand transport alert and the stall detector's attribution read.
IB_TRANSPORT_ERRORS = (
    "local_ack_timeout_err",
    "rnr_nak_retry_err",
    "packet_seq_err",
    "implied_nak_seq_err",
    "out_of_sequence",
)

#: The user and group every image of ours runs as (nobody), and the pod security context our pods ask for with it.
NONROOT_UID = 65534


def nonroot_pod_security_context(**extra: object) -> dict[str, object]:
    """Non-root as :data:`NONROOT_UID`, the runtime's default seccomp profile; ``extra`` adds fields (``fsGroup``)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": NONROOT_UID,
        "runAsGroup": NONROOT_UID,
        **extra,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


#: The PersistentVolumeClaim of a team where its jobs write checkpoints and report them (an annotation on it).
CHECKPOINT_CLAIM = "checkpoints"
#: In each team namespace: the ConfigMap the checkpoint verifier keeps each job's latest verified checkpoint in (key
#: ``<job>.json``, ``contract.checkpoint_record.resume_entry``), which the job's pods mount read-only as their
#: ``GPUCLUSTER_RESUME_FILE`` (``contract.checkpoints.RESUME_FILE``). Pulumi creates it empty; only the verifier
#: writes its data.
RESUME_CONFIGMAP = "checkpoint-resume"
