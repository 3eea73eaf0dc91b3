"""Components under Pulumi's mocks: the resource graph (types, names, parents, dependencies) and the fields that
matter (quotas, preemption, taint keys, eviction bounds, access modes)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from components.cluster import GpuCluster, GpuClusterArgs
from components.config import StackConfig, load_stack_file, parse_stack_config, read_stack_file
from components.descheduler import DeschedulerArgs
from components.queues import QueuesArgs, kueue_chart_values, kueue_manager_config
from components.storage import Storage, StorageArgs, checkpoint_cadence_minutes
from contract.constants import ENVIRONMENT_LABEL
from contract.queues_settings import KUEUE_CHART_VERSION
from contract.storage_settings import StorageSettings
from policies.common import WORKLOAD_TYPES
from policies.images import prod_images_by_digest
from tests.policies.support import check_resource
from tests.support.pulumi_harness import Graph, deploy, secrets_of

ROOT = Path(__file__).resolve().parents[2]
KUEUE = "kubernetes:kueue.x-k8s.io/v1beta2"
CHART = "kubernetes:helm.sh/v4:Chart"


@pytest.fixture(scope="module")
def local_cfg() -> StackConfig:
    return load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")


@pytest.fixture(scope="module")
def prod_cfg() -> StackConfig:
    # prod's charts come from registries; the unit tests must not reach them, and need not: resolve_chart
    # passes OCI/repo references through untouched.
    return load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")


@pytest.fixture(scope="module")
def local(local_cfg: StackConfig) -> Graph:
    return deploy(lambda: GpuCluster("sim", GpuClusterArgs(config=local_cfg, secrets=secrets_of(local_cfg))))


@pytest.fixture(scope="module")
def prod(prod_cfg: StackConfig) -> Graph:
    return deploy(lambda: GpuCluster("prod", GpuClusterArgs(config=prod_cfg)))


# --- the graph ------------------------------------------------------------------------------------------------


def test_component_tokens_and_parents(local: Graph) -> None:
    root = local.one("gpucluster:cluster:GpuCluster", "sim")
    children = {c.type for c in local.children_of(root)}
    assert {
        "gpucluster:queues:Queues",
        "gpucluster:storage:Storage",
        "gpucluster:descheduler:Descheduler",
        "gpucluster:telemetry:Telemetry",
    } <= children
    for r in local.resources:
        if r is root:
            continue
        assert r.parent, f"{r.type} {r.name} has no parent"
        assert local.by_urn(r.parent).type.startswith("gpucluster:"), f"{r.name} is not inside a component"


def test_every_kueue_object_depends_on_the_chart(local: Graph) -> None:
    chart = local.one(CHART, "sim-queues-kueue")
    kueue_objects = [r for r in local.resources if r.type.startswith(KUEUE)]
    # topology, flavor, cluster queue, local queues, workload priorities, the make-before-break AdmissionCheck, and
    # the CPU-only queue: its flavor, its ClusterQueue and its LocalQueue in each of the two team namespaces
    assert len(kueue_objects) == 1 + 1 + 1 + 2 + 3 + 1 + (1 + 1 + 2)
    for r in kueue_objects:
        assert local.depends_on(r, chart), f"{r.name} does not wait for the Kueue chart"
    cq = local.one(f"{KUEUE}:ClusterQueue", "sim-queues-cq-training")
    flavor = local.one(f"{KUEUE}:ResourceFlavor", "sim-queues-flavor-h100")
    assert local.depends_on(cq, flavor)
    assert local.depends_on(flavor, local.one(f"{KUEUE}:Topology", "sim-queues-topology-ib-fabric"))


def test_local_queues_wait_for_their_namespace(local: Graph) -> None:
    lq = local.one(f"{KUEUE}:LocalQueue", "sim-queues-lq-team-vision-training")
    assert local.depends_on(lq, local.one("kubernetes:core/v1:Namespace", "sim-ns-team-vision"))
    assert lq.inputs["metadata"]["namespace"] == "team-vision"
    assert lq.inputs["spec"] == {"clusterQueue": "training"}
    cpu = local.one(f"{KUEUE}:LocalQueue", "sim-queues-lq-team-vision-cpu-only")
    assert local.depends_on(cpu, local.one("kubernetes:core/v1:Namespace", "sim-ns-team-vision"))
    assert cpu.inputs["spec"] == {"clusterQueue": "cpu-only"}


def test_cpu_only_work_has_a_queue_of_its_own_that_counts_pods_not_gpus(local: Graph) -> None:
    cq = local.one(f"{KUEUE}:ClusterQueue", "sim-queues-cq-cpu-only")
    spec = cq.inputs["spec"]
    # Outside the cohort, no AdmissionCheck (make-before-break is on in this stack: the GPU queues list it).
    assert "cohortName" not in spec
    assert "admissionChecksStrategy" not in spec
    assert spec["resourceGroups"] == [
        {
            "coveredResources": ["pods"],
            "flavors": [{"name": "cpu-only", "resources": [{"name": "pods", "nominalQuota": "16"}]}],
        }
    ]
    assert spec["namespaceSelector"]["matchExpressions"][0]["values"] == ["team-foundation", "team-vision"]
    flavor = local.one(f"{KUEUE}:ResourceFlavor", "sim-queues-flavor-cpu-only")
    # It selects no node and declares no GPU: the quota policy counts nothing against it.
    assert flavor.inputs["spec"] == {}
    assert flavor.inputs["metadata"]["annotations"] == {"gpucluster.io/declared-gpus": "0"}
    assert local.depends_on(cq, flavor)


# --- queues -----------------------------------------------------------------------------------------------------


def test_kueue_chart_is_pinned_and_gangs_wait_for_pods_ready(local: Graph, prod: Graph) -> None:
    local_chart = local.one(CHART, "sim-queues-kueue")
    assert local_chart.inputs["chart"].endswith(f"sigs.k8s.io/kueue@v{KUEUE_CHART_VERSION}/charts/kueue")
    prod_chart = prod.one(CHART, "prod-queues-kueue")
    assert prod_chart.inputs["chart"] == "oci://registry.k8s.io/kueue/charts/kueue"
    assert prod_chart.inputs["version"] == KUEUE_CHART_VERSION
    manager = yaml.safe_load(prod_chart.inputs["values"]["managerConfig"]["controllerManagerConfigYaml"])
    assert manager["waitForPodsReady"]["timeout"] == "15m"
    assert manager["waitForPodsReady"]["blockAdmission"] is True
    assert "nvidia.com/gpu" not in manager["resources"]["excludeResourcePrefixes"]


def test_kueue_runs_upstreams_image_at_the_charts_release_with_its_own_certificates(local: Graph, prod: Graph) -> None:
    """The module's chart names a staging image at a branch tag, pulled Always (``k8s-staging-images/kueue/kueue:
    release-0.17``): every stack names the release instead, and Kueue's internal certificate management stays on
    (the API server calls the webhooks through the chart's Service)."""
    for chart in (local.one(CHART, "sim-queues-kueue"), prod.one(CHART, "prod-queues-kueue")):
        values = chart.inputs["values"]
        assert values["controllerManager"]["manager"]["image"] == {
            "repository": "registry.k8s.io/kueue/kueue",
            "tag": f"v{KUEUE_CHART_VERSION}",
            "pullPolicy": "IfNotPresent",
        }
        assert "internalCertManagement" not in yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    # Only the simulated cluster places it: on its real node, with the chart's own requests.
    local_values = local.one(CHART, "sim-queues-kueue").inputs["values"]["controllerManager"]
    assert local_values["nodeSelector"] == {"sim.gpucluster.io/real-node": "true"}
    assert "resources" not in local_values["manager"]
    assert "nodeSelector" not in prod.one(CHART, "prod-queues-kueue").inputs["values"]["controllerManager"]


def test_wait_for_pods_ready_can_be_switched_off_by_the_feature_gate_and_is_then_absent(local_cfg: StackConfig) -> None:
    """Kueue 0.19 fills waitForPodsReady in where the Configuration leaves it out: off takes its feature gate."""
    settings = local_cfg.kueue.model_copy(
        update={"wait_for_pods_ready": local_cfg.kueue.wait_for_pods_ready.model_copy(update={"enable": False})}
    )
    assert "waitForPodsReady" not in kueue_manager_config(settings)
    off = {"name": "DisableWaitForPodsReady", "enabled": True}
    assert kueue_chart_values(settings)["controllerManager"]["featureGates"] == [off]
    assert "waitForPodsReady" in kueue_manager_config(local_cfg.kueue)
    assert "featureGates" not in kueue_chart_values(local_cfg.kueue)["controllerManager"]


def test_cluster_queues_quota_cohort_and_preemption(prod: Graph) -> None:
    cq = prod.one(f"{KUEUE}:ClusterQueue", "prod-queues-cq-pretraining")
    spec = cq.inputs["spec"]
    assert spec["cohortName"] == "research"
    assert spec["preemption"]["withinClusterQueue"] == "LowerPriority"
    assert spec["preemption"]["reclaimWithinCohort"] == "Any"
    (group,) = spec["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu"]
    quotas = {f["name"]: f["resources"][0] for f in group["flavors"]}
    assert quotas["h100"] == {"name": "nvidia.com/gpu", "nominalQuota": "448", "borrowingLimit": "64"}
    assert quotas["l40s"] == {"name": "nvidia.com/gpu", "nominalQuota": "64"}
    selector = spec["namespaceSelector"]["matchExpressions"][0]
    assert selector["values"] == ["team-foundation", "team-video"]
    evaluation = prod.one(f"{KUEUE}:ClusterQueue", "prod-queues-cq-evaluation")
    assert evaluation.inputs["spec"]["queueingStrategy"] == "StrictFIFO"


def test_resource_flavors_carry_node_labels_and_tolerations(prod: Graph) -> None:
    rf = prod.one(f"{KUEUE}:ResourceFlavor", "prod-queues-flavor-h100")
    assert rf.inputs["metadata"]["name"] == "h100"
    # prod's h100 flavor declares an InfiniBand fabric: the fabric policy reads it here
    assert rf.inputs["metadata"]["annotations"] == {
        "gpucluster.io/declared-gpus": "512",
        "gpucluster.io/fabric-kind": "infiniband",
        "gpucluster.io/rdma-resource": "rdma/ib",
    }
    assert rf.inputs["spec"]["nodeLabels"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert rf.inputs["spec"]["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def test_priority_tiers(local: Graph) -> None:
    wpcs = {r.inputs["metadata"]["name"]: r.inputs["value"] for r in local.of_type(f"{KUEUE}:WorkloadPriorityClass")}
    assert wpcs == {"research-urgent": 1000, "research-default": 100, "research-scavenger": 10}
    pcs = {
        r.inputs["metadata"]["name"]: r.inputs for r in local.of_type("kubernetes:scheduling.k8s.io/v1:PriorityClass")
    }
    assert pcs["gpucluster-training"]["value"] > pcs["gpucluster-inference"]["value"]
    assert pcs["gpucluster-training"]["globalDefault"] is False
    assert pcs["gpucluster-training"]["metadata"]["labels"]["gpucluster.io/tier"] == "training"
    assert pcs["gpucluster-inference"]["metadata"]["labels"]["gpucluster.io/tier"] == "inference"


def test_queues_args_refuse_inconsistent_input(local_cfg: StackConfig) -> None:
    good = QueuesArgs(
        kueue=local_cfg.kueue,
        cohort="c",
        flavors=local_cfg.flavors,
        queues=local_cfg.queues,
        teams=local_cfg.teams,
        priorities=local_cfg.priorities,
        topologies=local_cfg.topologies,
    )
    with pytest.raises(ValueError, match=r"QueuesArgs.queues.training.quota: unknown flavor"):
        dataclasses.replace(good, flavors=[local_cfg.flavors[0].model_copy(update={"name": "a100"})])
    with pytest.raises(ValueError, match=r"QueuesArgs\.flavors"):
        dataclasses.replace(good, flavors=[])
    with pytest.raises(ValueError, match="unknown queue"):
        dataclasses.replace(good, queues={})


# --- storage ----------------------------------------------------------------------------------------------------


def test_dynamic_storage_class_and_rwx_claims(local: Graph) -> None:
    sc = local.one("kubernetes:storage.k8s.io/v1:StorageClass", "sim-storage-class")
    assert sc.inputs["provisioner"] == "nfs.csi.k8s.io"
    assert sc.inputs["reclaimPolicy"] == "Retain"
    assert sc.inputs["mountOptions"] == ["nfsvers=4.1", "hard"]
    assert sc.inputs["parameters"]["server"] == "nfs.local.invalid"
    claims = local.of_type("kubernetes:core/v1:PersistentVolumeClaim")
    assert sorted((c.inputs["metadata"]["namespace"], c.inputs["metadata"]["name"]) for c in claims) == [
        ("team-foundation", "checkpoints"),
        ("team-foundation", "datasets"),
        ("team-vision", "checkpoints"),
        ("team-vision", "datasets"),
    ]
    for c in claims:
        assert c.inputs["spec"]["accessModes"] == ["ReadWriteMany"]
        assert c.inputs["spec"]["storageClassName"] == "parallel-fs"
        assert local.depends_on(c, sc)
    assert not local.of_type("kubernetes:core/v1:PersistentVolume")


def test_training_pods_may_write_the_checkpoint_report_on_their_claim_only(local: Graph) -> None:
    for ns in ("team-foundation", "team-vision"):
        sa = local.one("kubernetes:core/v1:ServiceAccount", f"sim-storage-trainer-{ns}")
        assert sa.inputs["metadata"] == {**sa.inputs["metadata"], "name": "gpucluster-trainer", "namespace": ns}
        role = local.one("kubernetes:rbac.authorization.k8s.io/v1:Role", f"sim-storage-checkpoint-report-{ns}")
        (rule,) = role.inputs["rules"]
        assert rule == {
            "apiGroups": [""],
            "resources": ["persistentvolumeclaims"],
            "resourceNames": ["checkpoints"],
            "verbs": ["get", "patch"],
        }
        binding = local.one(
            "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding", f"sim-storage-checkpoint-report-binding-{ns}"
        )
        assert binding.inputs["subjects"] == [{"kind": "ServiceAccount", "name": "gpucluster-trainer", "namespace": ns}]


def test_each_team_gets_an_empty_resume_configmap_whose_entries_pulumi_leaves_to_the_verifier(local: Graph) -> None:
    for ns in ("team-foundation", "team-vision"):
        resume = local.one("kubernetes:core/v1:ConfigMap", f"sim-storage-resume-{ns}")
        assert (resume.inputs["metadata"]["name"], resume.inputs["metadata"]["namespace"]) == ("checkpoint-resume", ns)
        assert "data" not in resume.inputs
        assert resume.ignore_changes == ["data"]  # an update of the stack never takes the verifier's entries back


def test_static_storage_binds_each_claim_to_its_own_retained_pv(prod: Graph) -> None:
    pvs = prod.of_type("kubernetes:core/v1:PersistentVolume")
    assert len(pvs) == 4 * 2
    pv = prod.one("kubernetes:core/v1:PersistentVolume", "prod-storage-pv-team-video-checkpoints")
    spec = pv.inputs["spec"]
    assert spec["persistentVolumeReclaimPolicy"] == "Retain"
    assert spec["accessModes"] == ["ReadWriteMany"]
    assert spec["csi"]["driver"] == "exa.csi.ddn.com"
    assert spec["csi"]["volumeHandle"] == "exa-prod/10.40.0.10@o2ib:/exafs/team-video/checkpoints"
    assert spec["claimRef"] == {"namespace": "team-video", "name": "checkpoints"}
    datasets = prod.one("kubernetes:core/v1:PersistentVolume", "prod-storage-pv-team-video-datasets")
    assert datasets.inputs["spec"]["csi"]["readOnly"] is True
    pvc = prod.one("kubernetes:core/v1:PersistentVolumeClaim", "prod-storage-pvc-team-video-checkpoints")
    assert pvc.inputs["spec"]["volumeName"] == pv.inputs["metadata"]["name"]
    assert prod.depends_on(pvc, pv)


_CEPH = {
    "driver": "cephfs",
    "provisioner": "rook-ceph.cephfs.csi.ceph.com",
    "ceph": {
        "clusterID": "rook-ceph",
        "fsName": "ckpt",
        "provisionerSecret": {"name": "rook-csi-cephfs-provisioner", "namespace": "rook-ceph"},
        "nodeSecret": {"name": "rook-csi-cephfs-node", "namespace": "rook-ceph"},
    },
}


def test_cephfs_storage_class_and_static_volumes_carry_what_ceph_csi_reads() -> None:
    dynamic = deploy(lambda: Storage("ceph", StorageArgs(StorageSettings.model_validate(_CEPH), ["team-a"])))
    params = dynamic.one("kubernetes:storage.k8s.io/v1:StorageClass", "ceph-class").inputs["parameters"]
    assert params["clusterID"] == "rook-ceph"
    assert params["fsName"] == "ckpt"
    assert params["csi.storage.k8s.io/node-stage-secret-name"] == "rook-csi-cephfs-node"
    assert params["csi.storage.k8s.io/controller-expand-secret-name"] == "rook-csi-cephfs-provisioner"
    static_settings = StorageSettings.model_validate({**_CEPH, "mode": "static", "volumeHandlePrefix": "/volumes/gpu"})
    static = deploy(lambda: Storage("ceph", StorageArgs(static_settings, ["team-a"])))
    csi = static.one("kubernetes:core/v1:PersistentVolume", "ceph-pv-team-a-checkpoints").inputs["spec"]["csi"]
    assert csi["volumeHandle"] == "/volumes/gpu/team-a/checkpoints"
    assert csi["volumeAttributes"] == {
        "clusterID": "rook-ceph",
        "fsName": "ckpt",
        "staticVolume": "true",
        "rootPath": "/volumes/gpu/team-a/checkpoints",
    }
    assert csi["nodeStageSecretRef"] == {"name": "rook-csi-cephfs-node", "namespace": "rook-ceph"}


def test_checkpoint_cadence_is_exported(prod_cfg: StackConfig, local: Graph) -> None:
    assert 20 <= checkpoint_cadence_minutes(prod_cfg.storage) <= 30
    storage = local.one("gpucluster:storage:Storage", "sim-storage")
    assert storage.outputs["checkpointIntervalMinutes"] == pytest.approx(21.9, abs=0.05)
    # 1 TB in 30 s: the bandwidth the parallel filesystem must give one checkpoint.
    assert storage.outputs["checkpointWriteGBps"] == pytest.approx(33.3)
    cluster = local.one("gpucluster:cluster:GpuCluster", "sim")
    assert cluster.outputs["checkpointIntervalMinutes"] == storage.outputs["checkpointIntervalMinutes"]
    assert cluster.outputs["gpus"] == {"h100": 32}


def test_storage_args_refuse_bad_input(local_cfg: StackConfig) -> None:
    with pytest.raises(ValueError, match=r"StorageArgs\.namespaces: at least one"):
        StorageArgs(settings=local_cfg.storage, namespaces=[])
    with pytest.raises(ValueError, match="duplicates"):
        StorageArgs(settings=local_cfg.storage, namespaces=["a", "a"])


# --- descheduler ------------------------------------------------------------------------------------------------


def _policy(graph: Graph, name: str) -> dict[str, object]:
    values = graph.one(CHART, name).inputs["values"]
    assert values["deschedulerPolicyAPIVersion"] == "descheduler/v1alpha2"
    return values["deschedulerPolicy"]  # type: ignore[no-any-return]


def test_descheduler_policy_is_bounded_and_only_acts_on_the_burst_taint(prod: Graph) -> None:
    policy = _policy(prod, "prod-descheduler-chart")
    assert policy["maxNoOfPodsToEvictPerNode"] == 2
    assert policy["maxNoOfPodsToEvictTotal"] == 6
    assert policy["maxNoOfPodsToEvictPerNamespace"] == 4
    # No node selector: the descheduler must see the in-cluster nodes to find room for what it evicts.
    assert "nodeSelector" not in policy
    (profile,) = policy["profiles"]  # type: ignore[misc]
    assert profile["plugins"] == {"deschedule": {"enabled": ["RemovePodsViolatingNodeTaints"]}}
    taints = next(p for p in profile["pluginConfig"] if p["name"] == "RemovePodsViolatingNodeTaints")
    assert taints["args"]["includedTaints"] == ["gpucluster.io/in-cluster-capacity"]
    assert taints["args"]["namespaces"] == {"include": ["inference", "inference-canary"]}
    evictor = next(p for p in profile["pluginConfig"] if p["name"] == "DefaultEvictor")
    assert evictor["args"]["nodeFit"] is True
    chart = prod.one(CHART, "prod-descheduler-chart")
    assert chart.inputs["values"]["deschedulingInterval"] == "2m"
    assert chart.inputs["version"] == "0.36.0"
    assert chart.inputs["repositoryOpts"] == {"repo": "https://kubernetes-sigs.github.io/descheduler/"}


def test_descheduler_follows_a_custom_taint_key(local_cfg: StackConfig) -> None:
    cfg = dataclasses.replace(local_cfg, burst_taint_key="example.com/burst")
    graph = deploy(lambda: GpuCluster("t", GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    profile = _policy(graph, "t-descheduler-chart")["profiles"][0]  # type: ignore[index]
    assert profile["pluginConfig"][1]["args"]["includedTaints"] == ["example.com/burst"]


def test_descheduler_can_be_disabled(local_cfg: StackConfig) -> None:
    cfg = dataclasses.replace(local_cfg, descheduler=local_cfg.descheduler.model_copy(update={"enabled": False}))
    graph = deploy(lambda: GpuCluster("t", GpuClusterArgs(config=cfg, secrets=secrets_of(cfg))))
    assert not graph.of_type("gpucluster:descheduler:Descheduler")


def test_descheduler_args_refuse_missing_namespaces(local_cfg: StackConfig) -> None:
    with pytest.raises(ValueError, match="never deschedule everything"):
        DeschedulerArgs(settings=local_cfg.descheduler, burst_taint_key="k", inference_namespaces=[])
    with pytest.raises(ValueError, match=r"burst_taint_key"):
        DeschedulerArgs(settings=local_cfg.descheduler, burst_taint_key="", inference_namespaces=["inference"])


def test_cluster_args_refuse_shared_namespaces(local_cfg: StackConfig) -> None:
    cfg = dataclasses.replace(local_cfg, inference_namespaces=("team-vision",))
    with pytest.raises(ValueError, match="both training and inference"):
        GpuClusterArgs(config=cfg)


def test_local_telemetry_applies_the_counters_but_not_nvidias_chart(local: Graph, prod: Graph) -> None:
    local_dcgm = local.one("gpucluster:telemetry:DcgmExporter", "sim-telemetry-dcgm")
    assert [c.type for c in local.children_of(local_dcgm)] == ["kubernetes:core/v1:ConfigMap"]
    prod_dcgm = prod.one("gpucluster:telemetry:DcgmExporter", "prod-telemetry-dcgm")
    assert CHART in {c.type for c in prod.children_of(prod_dcgm)}


def test_offline_preview_leaves_out_a_chart_no_go_module_carries(
    prod_cfg: StackConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUCLUSTER_OFFLINE_CHARTS", "1")
    graph = deploy(lambda: GpuCluster("prod", GpuClusterArgs(config=prod_cfg)))
    dcgm = graph.one("gpucluster:telemetry:DcgmExporter", "prod-telemetry-dcgm")
    assert [c.type for c in graph.children_of(dcgm)] == ["kubernetes:core/v1:ConfigMap"]
    assert (
        graph.one(CHART, "prod-queues-kueue")
        .inputs["chart"]
        .endswith(f"sigs.k8s.io/kueue@v{KUEUE_CHART_VERSION}/charts/kueue")
    )


# --- images ---------------------------------------------------------------------------------------------------


def test_prod_workloads_carry_the_environment_and_run_images_by_digest(prod: Graph) -> None:
    """Every workload of ours labels itself with the stack's environment (prod-images-by-digest reads it there), and
    in prod each names its image by digest: ours from gpucluster:images, the inference services' from their teams."""
    workloads = [r for r in prod.resources if r.type in WORKLOAD_TYPES]
    kinds = {r.type.rsplit(":", 1)[1] for r in workloads}
    assert {"Deployment", "DaemonSet"} <= kinds
    names = {r.inputs["metadata"]["name"] for r in workloads}
    assert {"gpucluster-fabric-exporter", "gpucluster-quarantine", "llm-serve"} <= names
    for r in workloads:
        assert r.inputs["metadata"]["labels"][ENVIRONMENT_LABEL] == "prod", r.name
        assert check_resource(prod_images_by_digest, r.type, r.inputs) == [], r.name


def test_prod_without_its_digests_is_refused_by_the_policy() -> None:
    raw = read_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    del raw["images"]["digests"]
    cfg = parse_stack_config(raw, "prod without digests")
    graph = deploy(lambda: GpuCluster("prod", GpuClusterArgs(config=cfg)))
    refused = {
        r.inputs["metadata"]["name"]
        for r in graph.resources
        if r.type in WORKLOAD_TYPES and check_resource(prod_images_by_digest, r.type, r.inputs)
    }
    # Ours run by tag now; the inference service keeps its team's digest.
    assert {"gpucluster-fabric-exporter", "gpucluster-quarantine"} <= refused
    assert "llm-serve" not in refused
