"""Chart sources: each kind resolves to `helm.v4.Chart` arguments, and a bad source says what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from components.charts import (
    ChartResolutionError,
    ChartSource,
    escape_module_path,
    offline_equivalent,
    resolve_chart,
)
from contract.queues_settings import KUEUE_CHART_VERSION


def test_oci_and_repo_pass_through_with_the_pinned_version() -> None:
    oci = resolve_chart(ChartSource(oci="oci://registry.k8s.io/kueue/charts/kueue"), KUEUE_CHART_VERSION)
    assert (oci.chart, oci.version, oci.repo) == ("oci://registry.k8s.io/kueue/charts/kueue", KUEUE_CHART_VERSION, None)
    repo = resolve_chart(ChartSource(repo="https://charts.example/", name="descheduler"), "0.36.0")
    assert (repo.chart, repo.version, repo.repo) == ("descheduler", "0.36.0", "https://charts.example/")


def test_local_path_must_be_a_chart(tmp_path: Path) -> None:
    (tmp_path / "Chart.yaml").write_text("apiVersion: v2\nname: x\nversion: 1.0.0\n")
    resolved = resolve_chart(ChartSource(path=str(tmp_path)), "1.0.0")
    assert resolved.chart == str(tmp_path)
    assert resolved.version is None
    with pytest.raises(ChartResolutionError, match=r"no Chart\.yaml"):
        resolve_chart(ChartSource(path=str(tmp_path / "missing")), "1.0.0")


def test_go_module_chart_is_read_from_the_module_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chart_dir = tmp_path / "github.com" / "!n!v!i!d!i!a" / "dcgm-exporter@v4.1.0" / "deployment"
    chart_dir.mkdir(parents=True)
    (chart_dir / "Chart.yaml").write_text("apiVersion: v2\nname: dcgm-exporter\nversion: 4.1.0\n")
    monkeypatch.setenv("GOMODCACHE", str(tmp_path))
    source = ChartSource.model_validate(
        {"goModule": {"module": "github.com/NVIDIA/dcgm-exporter", "version": "v4.1.0", "path": "deployment"}}
    )
    assert resolve_chart(source, "4.1.0").chart == str(chart_dir)


def test_go_module_that_cannot_be_downloaded_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOMODCACHE", str(tmp_path))
    monkeypatch.setenv("GOFLAGS", "-mod=mod")
    monkeypatch.setenv("GOPROXY", "off")
    source = ChartSource.model_validate(
        {"goModule": {"module": "example.invalid/nothing", "version": "v0.0.1", "path": "chart"}}
    )
    with pytest.raises(ChartResolutionError, match=r"go mod download example.invalid/nothing@v0.0.1 failed"):
        resolve_chart(source, "0.0.1")


def test_module_path_escaping() -> None:
    assert escape_module_path("github.com/NVIDIA/dcgm-exporter") == "github.com/!n!v!i!d!i!a/dcgm-exporter"
    assert escape_module_path("sigs.k8s.io/kueue") == "sigs.k8s.io/kueue"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, r"exactly one of oci, repo, path, goModule \(got none\)"),
        ({"oci": "oci://a/b", "path": "/x"}, "got oci, path"),
        ({"repo": "https://x/"}, "needs the chart name"),
        ({"path": "/x", "name": "y"}, "only goes with a repo"),
        ({"goModule": {"module": "sigs.k8s.io/kueue", "version": "v1.0.0", "path": "../etc"}}, "stay inside"),
        ({"goModule": {"module": "sigs.k8s.io/kueue", "version": "latest", "path": "charts/kueue"}}, "pattern"),
    ],
)
def test_bad_sources_are_refused(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        ChartSource.model_validate(data)


def test_offline_mode_reads_registry_charts_from_their_go_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCLUSTER_OFFLINE_CHARTS", "1")
    resolved = resolve_chart(ChartSource(oci="oci://registry.k8s.io/kueue/charts/kueue"), KUEUE_CHART_VERSION)
    assert resolved.chart.endswith(f"sigs.k8s.io/kueue@v{KUEUE_CHART_VERSION}/charts/kueue")
    assert resolved.version is None
    repo = offline_equivalent(
        ChartSource(repo="https://kubernetes-sigs.github.io/descheduler/", name="descheduler"), "0.36.0"
    )
    assert repo is not None
    assert repo.go_module is not None
    assert (repo.go_module.module, repo.go_module.version) == ("sigs.k8s.io/descheduler", "v0.36.0")
    with pytest.raises(ChartResolutionError, match="offline mode: no Go module is known to carry chart"):
        resolve_chart(ChartSource(oci="oci://example.invalid/charts/other"), "1.0.0")
