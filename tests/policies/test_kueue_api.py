"""kueue-objects-are-v1beta2: a Kueue object at v1beta2 passes, one at v1beta1 is refused naming it."""

from __future__ import annotations

from policies.kueue_api import kueue_objects_are_v1beta2
from tests.policies.support import NA, check_resource

CQ = {"metadata": {"name": "pretraining"}, "spec": {"cohortName": "research"}}
LQ = {"metadata": {"name": "training", "namespace": "team-a"}, "spec": {"clusterQueue": "pretraining"}}


def test_a_cluster_queue_at_v1beta2_passes_and_at_v1beta1_is_refused() -> None:
    assert check_resource(kueue_objects_are_v1beta2, "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue", CQ) == []
    (violation,) = check_resource(kueue_objects_are_v1beta2, "kubernetes:kueue.x-k8s.io/v1beta1:ClusterQueue", CQ)
    assert violation.startswith("ClusterQueue pretraining is written at kueue.x-k8s.io/v1beta1")
    assert "write it at kueue.x-k8s.io/v1beta2" in violation


def test_a_namespaced_object_is_named_with_its_namespace() -> None:
    (violation,) = check_resource(kueue_objects_are_v1beta2, "kubernetes:kueue.x-k8s.io/v1beta1:LocalQueue", LQ)
    assert violation.startswith("LocalQueue team-a/training is written at kueue.x-k8s.io/v1beta1")


def test_a_generic_custom_resource_is_read_by_its_api_version() -> None:
    generic = "kubernetes:apiextensions.k8s.io:CustomResource"
    old = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "h100"}}
    (violation,) = check_resource(kueue_objects_are_v1beta2, generic, old)
    assert violation.startswith("ResourceFlavor h100 is written at kueue.x-k8s.io/v1beta1")
    assert check_resource(kueue_objects_are_v1beta2, generic, {**old, "apiVersion": "kueue.x-k8s.io/v1beta2"}) == []


def test_other_objects_are_not_its_business() -> None:
    assert check_resource(kueue_objects_are_v1beta2, "kubernetes:core/v1:ConfigMap", {"data": {}}) == NA
    jobset = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
    assert check_resource(kueue_objects_are_v1beta2, jobset, {"metadata": {"name": "llm"}}) == NA
