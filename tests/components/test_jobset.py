"""The JobSet controller: its pinned chart (the version the pinned Kueue requires), offline from its Go module, in every
stack, from upstream's image at the chart's release (never the staging image the module's chart names)."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest

from components.charts import ChartSource, GoModuleChart, resolve_chart
from components.config import load_stack_file
from components.jobset import JobSet, JobSetArgs, jobset_chart_values, webhook_secret_transform
from contract.jobset_settings import JOBSET_CHART_VERSION, JobSetSettings
from tests.support.pulumi_harness import deploy

ROOT = Path(__file__).resolve().parents[2]


def test_the_pinned_version_is_the_one_kueue_requires() -> None:
    go_mod = (ROOT / "tools" / "kueue" / "go.sum").read_text()
    assert f"sigs.k8s.io/jobset v{JOBSET_CHART_VERSION} " in go_mod
    assert f"sigs.k8s.io/jobset v{JOBSET_CHART_VERSION}" in (ROOT / "tools" / "jobset" / "go.mod").read_text()


def test_offline_mode_reads_the_chart_from_its_go_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCLUSTER_OFFLINE_CHARTS", "1")
    resolved = resolve_chart(JobSetSettings().chart, JOBSET_CHART_VERSION)
    assert resolved.chart.endswith(f"sigs.k8s.io/jobset@v{JOBSET_CHART_VERSION}/charts/jobset")
    assert (Path(resolved.chart) / "crds" / "jobset.x-k8s.io_jobsets.yaml").is_file()


def test_two_replicas_with_leader_election_and_the_stack_s_extras_merged() -> None:
    values = jobset_chart_values(JobSetSettings(extra_values={"controller": {"replicas": 3}, "prometheus": {}}))
    assert values["controller"] == {"replicas": 3, "leaderElection": {"enable": True}}
    assert values["prometheus"] == {}


def test_the_image_is_upstreams_at_the_charts_release_and_never_pulled_again() -> None:
    """The module's chart names ``us-central1-docker.pkg.dev/k8s-staging-images/jobset/jobset:main``, pulled Always:
    a floating staging build. The values always name the release."""
    assert jobset_chart_values(JobSetSettings())["image"] == {
        "repository": "registry.k8s.io/jobset/jobset",
        "tag": f"v{JOBSET_CHART_VERSION}",
        "pullPolicy": "IfNotPresent",
    }
    mirrored = JobSetSettings(image=f"mirror.example/jobset:v{JOBSET_CHART_VERSION}@sha256:" + "b" * 64)
    assert jobset_chart_values(mirrored)["image"]["tag"] == f"v{JOBSET_CHART_VERSION}@sha256:" + "b" * 64


def test_the_controller_pods_go_where_the_stack_places_them() -> None:
    settings = JobSetSettings.model_validate(
        {"podNodeSelector": {"node-role/system": "true"}, "podTolerations": [{"key": "system", "operator": "Exists"}]}
    )
    controller = jobset_chart_values(settings)["controller"]
    assert controller["nodeSelector"] == {"node-role/system": "true"}
    assert controller["tolerations"] == [{"key": "system", "operator": "Exists"}]
    assert "nodeSelector" not in jobset_chart_values(JobSetSettings())["controller"]


def test_the_component_installs_the_chart_in_its_namespace() -> None:
    source = GoModuleChart(module="sigs.k8s.io/jobset", version=f"v{JOBSET_CHART_VERSION}", path="charts/jobset")
    settings = JobSetSettings(chart=ChartSource(go_module=source))
    graph = deploy(lambda: JobSet("js", JobSetArgs(settings=settings, labels={"gpucluster.io/environment": "t"})))
    (ns,) = graph.of_type("kubernetes:core/v1:Namespace")
    assert ns.inputs["metadata"]["name"] == "jobset-system"
    (chart,) = graph.of_type("kubernetes:helm.sh/v4:Chart")
    assert chart.inputs["namespace"] == "jobset-system"
    assert chart.inputs["chart"].endswith(f"sigs.k8s.io/jobset@v{JOBSET_CHART_VERSION}/charts/jobset")


def test_a_disabled_controller_is_not_a_component() -> None:
    with pytest.raises(ValueError, match=r"jobset\.enabled is false"):
        JobSetArgs(settings=JobSetSettings(enabled=False))


@pytest.mark.parametrize("stack", ["local", "dev", "staging", "prod"])
def test_every_stack_runs_jobset(stack: str) -> None:
    cfg = load_stack_file(ROOT / "stacks" / f"Pulumi.{stack}.yaml")
    assert cfg.jobset.enabled
    assert cfg.jobset.controller_image == f"registry.k8s.io/jobset/jobset:v{cfg.jobset.chart_version}"


def test_the_webhook_certificate_secret_is_left_to_the_controller_and_kept_secret() -> None:
    opts = pulumi.ResourceOptions()
    secret = {"metadata": {"name": "js-chart-webhook-server-cert"}, "data": {"tls.crt": ""}}
    result = webhook_secret_transform(
        pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:Secret", "s", secret, opts)
    )
    assert result is not None
    assert result.opts.additional_secret_outputs == ["data"]
    assert result.opts.ignore_changes == ["data"]
    other = {"metadata": {"name": "something-else"}, "data": {"k": ""}}
    assert (
        webhook_secret_transform(pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:Secret", "o", other, opts))
        is None
    )
    assert (
        webhook_secret_transform(pulumi.ResourceTransformArgs(True, "kubernetes:core/v1:ConfigMap", "c", secret, opts))
        is None
    )
