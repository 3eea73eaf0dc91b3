"""no-privileged-or-host-path outside the node agents."""

from __future__ import annotations

from policies.security import no_privileged_or_host_path
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
