"""The local stack's Kueue webhooks: the chart's objects rewritten to call a controller on loopback."""

from __future__ import annotations

import base64
import json
import runpy
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml

from components.config import load_stack_file
from components.queues import kueue_chart_values
from components.queues_settings import KueueSettings, LocalWebhooks
from sim.local_webhooks import LocalWebhooksError, local_webhooks_props, local_webhooks_transform, read_ca_bundle

ROOT = Path(__file__).resolve().parents[2]
MUTATING = "kubernetes:admissionregistration.k8s.io/v1:MutatingWebhookConfiguration"
VALIDATING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingWebhookConfiguration"
CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
URL = "https://127.0.0.1:19443"


def _webhook_config(*paths: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "kueue-mutating-webhook-configuration"},
        "webhooks": [
            {
                "name": f"hook{i}.kb.io",
                "clientConfig": {"service": {"name": "kueue-webhook-service", "namespace": "kueue-system", "path": p}},
                "failurePolicy": "Fail",
            }
            for i, p in enumerate(paths)
        ],
    }


def _crd(conversion: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {"group": "kueue.x-k8s.io", "names": {"kind": "Workload"}}
    if conversion:
        spec["conversion"] = {
            "strategy": "Webhook",
            "webhook": {
                "clientConfig": {"service": {"name": "kueue-webhook-service", "path": "/convert"}},
                "conversionReviewVersions": ["v1"],
            },
        }
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "spec": spec}


@pytest.fixture
def ca_file(tmp_path: Path) -> Path:
    path = tmp_path / "ca.crt"
    path.write_bytes(PEM)
    return path


def test_webhook_configurations_point_at_the_local_url_with_the_service_path() -> None:
    props = _webhook_config("/mutate-batch-v1-job", "/mutate-kueue-x-k8s-io-v1beta2-clusterqueue")
    out = local_webhooks_props(MUTATING, props, URL, "Q0E=")
    assert out is not None
    assert [h["clientConfig"] for h in out["webhooks"]] == [
        {"url": f"{URL}/mutate-batch-v1-job", "caBundle": "Q0E="},
        {"url": f"{URL}/mutate-kueue-x-k8s-io-v1beta2-clusterqueue", "caBundle": "Q0E="},
    ]
    # Everything else is left as the chart rendered it, and the input is not modified in place.
    assert out["webhooks"][0]["failurePolicy"] == "Fail"
    assert "service" in props["webhooks"][0]["clientConfig"]


def test_validating_configurations_are_rewritten_too() -> None:
    out = local_webhooks_props(VALIDATING, _webhook_config("/validate-batch-v1-job"), URL, "Q0E=")
    assert out is not None
    assert out["webhooks"][0]["clientConfig"]["url"] == f"{URL}/validate-batch-v1-job"


def test_crd_conversion_webhook_is_rewritten_and_plain_crds_are_left_alone() -> None:
    out = local_webhooks_props(CRD, _crd(conversion=True), URL, "Q0E=")
    assert out is not None
    assert out["spec"]["conversion"]["webhook"]["clientConfig"] == {"url": f"{URL}/convert", "caBundle": "Q0E="}
    assert out["spec"]["conversion"]["webhook"]["conversionReviewVersions"] == ["v1"]
    assert local_webhooks_props(CRD, _crd(conversion=False), URL, "Q0E=") is None


def test_other_objects_are_not_touched() -> None:
    assert local_webhooks_props("kubernetes:core/v1:Service", {"spec": {"ports": []}}, URL, "Q0E=") is None


def test_ca_bundle_is_the_base64_of_the_pem_file(ca_file: Path) -> None:
    local = LocalWebhooks(url=URL, ca_bundle_file=str(ca_file))
    assert base64.b64decode(read_ca_bundle(local)) == PEM


def test_relative_ca_file_is_taken_from_the_given_root(ca_file: Path) -> None:
    local = LocalWebhooks(url=URL, ca_bundle_file="ca.crt")
    assert base64.b64decode(read_ca_bundle(local, root=ca_file.parent)) == PEM


def test_missing_ca_file_names_the_setting_and_the_remedy(tmp_path: Path) -> None:
    local = LocalWebhooks(url=URL, ca_bundle_file=str(tmp_path / "absent.crt"))
    with pytest.raises(LocalWebhooksError, match=r"localWebhooks\.caBundleFile: cannot read .*absent\.crt.*make up"):
        read_ca_bundle(local)


def test_a_file_without_a_certificate_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "key.pem"
    path.write_text("-----BEGIN PRIVATE KEY-----\n")
    with pytest.raises(LocalWebhooksError, match="holds no PEM certificate"):
        read_ca_bundle(LocalWebhooks(url=URL, ca_bundle_file=str(path)))


def test_transform_rewrites_webhooks_and_passes_other_objects(ca_file: Path) -> None:
    transform = local_webhooks_transform(LocalWebhooks(url=URL, ca_bundle_file=str(ca_file)))
    opts = pulumi.ResourceOptions()
    result = transform(pulumi.ResourceTransformArgs(True, MUTATING, "m", _webhook_config("/convert"), opts))
    assert result is not None
    assert result.props["webhooks"][0]["clientConfig"]["url"] == f"{URL}/convert"
    assert base64.b64decode(result.props["webhooks"][0]["clientConfig"]["caBundle"]) == PEM
    assert transform(pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:ConfigMap", "c", {}, opts)) is None


def test_transform_reads_nothing_until_a_webhook_object_comes(tmp_path: Path) -> None:
    transform = local_webhooks_transform(LocalWebhooks(url=URL, ca_bundle_file=str(tmp_path / "absent.crt")))
    opts = pulumi.ResourceOptions()
    assert transform(pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:Service", "s", {}, opts)) is None
    with pytest.raises(LocalWebhooksError):
        transform(pulumi.ResourceTransformArgs(True, VALIDATING, "v", _webhook_config("/x"), opts))


def _manager_config(settings: KueueSettings) -> dict[str, Any]:
    values = kueue_chart_values(settings)
    loaded = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    assert isinstance(loaded, dict)
    return loaded


def test_local_webhooks_turn_kueue_internal_cert_management_off() -> None:
    local = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
    assert local.kueue.local_webhooks is not None
    assert _manager_config(local.kueue)["internalCertManagement"] == {"enable": False}


def test_without_local_webhooks_the_chart_keeps_its_certificate_management() -> None:
    prod = load_stack_file(ROOT / "stacks" / "Pulumi.prod.yaml")
    assert prod.kueue.local_webhooks is None
    assert "internalCertManagement" not in _manager_config(prod.kueue)


# --- the program registers the transform for the local stack only -------------------------------------------------


class _Recorder(pulumi.runtime.Mocks):
    """Pulumi mocks that keep the stack transforms the program registers."""

    def __init__(self) -> None:
        self.stack_transforms: list[Any] = []
        self.types: list[str] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        self.types.append(args.typ)
        return (f"{args.name}-id" if args.custom else None), dict(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], None]:
        return {}, None

    def register_transform(self, transform: Any) -> None:
        self.stack_transforms.append(transform)


def _engine_config(stack: str, ca_file: Path) -> dict[str, str]:
    """The stack file's gpucluster settings as the engine passes them (structured values as JSON text)."""
    doc = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    config = {k: v if isinstance(v, str) else json.dumps(v) for k, v in doc["config"].items()}
    if "gpucluster:kueue" in config:
        kueue = json.loads(config["gpucluster:kueue"])
        if "localWebhooks" in kueue:
            kueue["localWebhooks"]["caBundleFile"] = str(ca_file)
        config["gpucluster:kueue"] = json.dumps(kueue)
    return config


def _run_program(stack: str, ca_file: Path, monkeypatch: pytest.MonkeyPatch) -> _Recorder:
    config = _engine_config(stack, ca_file)
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps(config))
    monkeypatch.setenv("PULUMI_CONFIG_SECRET_KEYS", "[]")
    monkeypatch.chdir(ROOT)
    mocks = _Recorder()
    pulumi.runtime.set_mocks(mocks, project="gpucluster", stack=stack, preview=False)

    @pulumi.runtime.test
    def program() -> None:
        runpy.run_path(str(ROOT / "__main__.py"), run_name="__main__")

    program()
    return mocks


def test_the_local_stack_registers_one_transform_that_rewrites_the_webhooks(
    ca_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mocks = _run_program("local", ca_file, monkeypatch)
    assert "kubernetes:helm.sh/v4:Chart" in mocks.types
    (transform,) = mocks.stack_transforms
    opts = pulumi.ResourceOptions()
    result = transform(pulumi.ResourceTransformArgs(True, VALIDATING, "v", _webhook_config("/validate"), opts))
    assert result is not None
    assert result.props["webhooks"][0]["clientConfig"]["url"] == f"{URL}/validate"
    assert transform(pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:ConfigMap", "c", {}, opts)) is None


def test_production_stacks_register_no_transform(ca_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mocks = _run_program("prod", ca_file, monkeypatch)
    assert "kubernetes:helm.sh/v4:Chart" in mocks.types
    assert mocks.stack_transforms == []


def test_a_chart_s_webhooks_go_to_the_controller_that_serves_its_service_namespace(ca_file: Path) -> None:
    jobset = LocalWebhooks(url="https://127.0.0.1:19444", ca_bundle_file=str(ca_file))
    transform = local_webhooks_transform(
        LocalWebhooks(url=URL, ca_bundle_file=str(ca_file)), others={"jobset-system": jobset}
    )
    opts = pulumi.ResourceOptions()
    props = _webhook_config("/mutate--v1-pod")
    props["webhooks"][0]["clientConfig"]["service"]["namespace"] = "jobset-system"
    to_jobset = transform(pulumi.ResourceTransformArgs(True, MUTATING, "j", props, opts))
    assert to_jobset is not None
    assert to_jobset.props["webhooks"][0]["clientConfig"]["url"] == "https://127.0.0.1:19444/mutate--v1-pod"
    to_kueue = transform(pulumi.ResourceTransformArgs(True, MUTATING, "k", _webhook_config("/mutate"), opts))
    assert to_kueue is not None
    assert to_kueue.props["webhooks"][0]["clientConfig"]["url"] == f"{URL}/mutate"
