"""no-privileged-or-host-path and gpus-requested-and-confinement-on outside the node agents."""

from __future__ import annotations

from policies.security import gpus_requested_and_confinement_on, no_privileged_or_host_path
from tests.policies.support import (
    DEPLOY,
    app_deployment,
    check_resource,
)


def test_no_privileged_or_host_path_outside_node_agents() -> None:
    priv = app_deployment(securityContext={"privileged": True})
    assert check_resource(no_privileged_or_host_path, DEPLOY, app_deployment()) == []
    (violation,) = check_resource(no_privileged_or_host_path, DEPLOY, priv)
    assert "privileged container" in violation
    host = app_deployment()
    host["spec"]["template"]["spec"]["volumes"] = [{"name": "sys", "hostPath": {"path": "/sys"}}]
    (violation,) = check_resource(no_privileged_or_host_path, DEPLOY, host)
    assert "mounts host path /sys" in violation
    host["metadata"]["namespace"] = "gpu-telemetry"
    assert check_resource(no_privileged_or_host_path, DEPLOY, host) == []


def test_gpus_requested_and_confinement_on_outside_node_agents() -> None:
    policy = gpus_requested_and_confinement_on
    assert check_resource(policy, DEPLOY, app_deployment(env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}])) == []
    sees_all = app_deployment(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    (violation,) = check_resource(policy, DEPLOY, sees_all)
    assert "containers/app: sets NVIDIA_VISIBLE_DEVICES" in violation
    unconfined = app_deployment(securityContext={"seccompProfile": {"type": "Unconfined"}})
    (violation,) = check_resource(policy, DEPLOY, unconfined)
    assert "seccompProfile.type Unconfined turns confinement off" in violation
    annotated = app_deployment()
    annotated["spec"]["template"]["metadata"] = {
        "annotations": {"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}
    }
    (violation,) = check_resource(policy, DEPLOY, annotated)
    assert "pod annotation container.apparmor.security.beta.kubernetes.io/app turns confinement off" in violation
    sees_all["metadata"]["namespace"] = "gpu-telemetry"  # dcgm-exporter must see every GPU
    assert check_resource(policy, DEPLOY, sees_all) == []
