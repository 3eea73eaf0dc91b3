"""no-secrets-in-clear: Secrets as secret outputs, no credentials in ConfigMaps or literal env."""

from __future__ import annotations

from policies.secrets import no_secrets_in_clear
from tests.policies.support import (
    CM,
    DEPLOY,
    app_deployment,
    check_resource,
)


def test_no_secrets_in_clear() -> None:
    secret = {"metadata": {"name": "provider-keys"}, "stringData": {"runpod": "k"}}
    assert check_resource(no_secrets_in_clear, "kubernetes:core/v1:Secret", secret, secret_outputs=["stringData"]) == []
    (violation,) = check_resource(no_secrets_in_clear, "kubernetes:core/v1:Secret", secret)
    assert "stringData is not declared a secret output" in violation
    (violation,) = check_resource(no_secrets_in_clear, CM, {"metadata": {"name": "c"}, "data": {"API_KEY": "abc"}})
    assert "key API_KEY looks like a credential" in violation
    assert check_resource(no_secrets_in_clear, CM, {"data": {"interval": "5m"}}) == []
    literal = app_deployment(env=[{"name": "RUNPOD_API_KEY", "value": "abc"}])
    (violation,) = check_resource(no_secrets_in_clear, DEPLOY, literal)
    assert "env RUNPOD_API_KEY carries a literal value" in violation
    ref = app_deployment(
        env=[{"name": "RUNPOD_API_KEY", "valueFrom": {"secretKeyRef": {"name": "k", "key": "runpod"}}}]
    )
    assert check_resource(no_secrets_in_clear, DEPLOY, ref) == []
