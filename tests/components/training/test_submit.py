"""``gpucluster submit``: the example dry-runs without a cluster; a refused spec exits 1 naming the field; a
usage error exits 2; an existing JobSet is refused and nothing is created; a submission reads the measured
reliability and prints how to watch it."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.training import submit as cli
from contract.constants import CHECKPOINT_INTERVAL_ANNOTATION, RELIABILITY_CONFIGMAP, TRAINING_NAMESPACE
from tests.components.training.conftest import EXAMPLE, LOCAL_STACK, ROOT, spec_doc

MEASURED = {
    "nodeMtbiSeconds": "7200",
    "interruptions": "5",
    "nodeSeconds": "36000",
    "updatedAt": "2026-12-01T10:00:00Z",
}


class FakeCluster:
    def __init__(
        self,
        reliability: Mapping[str, str] | None = None,
        existing: set[str] | None = None,
        measured: Mapping[str, str] | None = None,
    ) -> None:
        self.data = reliability
        self.measured = measured
        self.existing = existing or set()
        self.created: list[tuple[str, Mapping[str, Any]]] = []
        self.read_from: list[str] = []

    def reliability(self, namespace: str) -> Mapping[str, str] | None:
        self.read_from.append(namespace)
        return self.data

    def storage_measured(self, namespace: str) -> Mapping[str, str] | None:
        return self.measured

    def jobset_exists(self, namespace: str, name: str) -> bool:
        return f"{namespace}/{name}" in self.existing

    def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> None:
        self.created.append((namespace, body))


class Run:
    def __init__(self) -> None:
        self.out: list[str] = []
        self.err: list[str] = []
        self.clusters: list[FakeCluster] = []

    def __call__(self, spec: Path | str, *, dry_run: bool = False, cluster: FakeCluster | None = None) -> int:
        def factory() -> FakeCluster:
            c = cluster or FakeCluster()
            self.clusters.append(c)
            return c

        return cli.submit(
            str(spec),
            str(LOCAL_STACK),
            dry_run=dry_run,
            cluster_factory=factory,
            out=self.out.append,
            err=self.err.append,
        )


def write_spec(tmp_path: Path, **change: Any) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec_doc(**change)))
    return path


def test_the_example_dry_runs_without_a_cluster() -> None:
    run = Run()
    assert run(EXAMPLE, dry_run=True) == cli.EXIT_OK
    assert run.clusters == []
    text = "\n".join(run.out)
    manifest = yaml.safe_load(text)
    assert manifest["kind"] == "JobSet"
    assert manifest["metadata"]["namespace"] == "team-foundation"
    assert manifest["metadata"]["annotations"][CHECKPOINT_INTERVAL_ANNOTATION] == "930"
    assert "# checkpoint interval: 930 s (15.5 min), source stack" in text
    assert "write time 30 s, typed in the job's checkpointWriteSeconds, not measured" in text


def test_the_dry_run_says_the_write_time_is_typed_and_what_it_assumes_of_the_filesystem(tmp_path: Path) -> None:
    run = Run()
    assert run(write_spec(tmp_path), dry_run=True) == cli.EXIT_OK
    assert (
        "write time 30 s, typed in the stack's storage.checkpointing.writeSeconds, not measured: 1 TB in 30 s is "
        "33.3 GB/s from the filesystem" in "\n".join(run.out)
    )


def test_the_console_script_dry_runs_the_example() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "components.training", "submit", "examples/training/job.yaml", "--stack",
         "stacks/Pulumi.local.yaml", "--dry-run"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["metadata"]["name"] == "llm-pretrain"


def test_a_refused_spec_exits_1_naming_the_field(tmp_path: Path) -> None:
    run = Run()
    assert run(write_spec(tmp_path, nodes=0), dry_run=True) == cli.EXIT_REFUSED
    assert "spec.nodes: must be at least 1" in "\n".join(run.err)
    assert run.out == []


def test_a_spec_the_stack_refuses_exits_1(tmp_path: Path) -> None:
    run = Run()
    assert run(write_spec(tmp_path, team="robotics", nodes=9)) == cli.EXIT_REFUSED
    err = "\n".join(run.err)
    assert "spec.team: no team 'robotics'" in err
    assert run.clusters == []


def test_a_stack_that_does_not_load_exits_1(tmp_path: Path) -> None:
    out: list[str] = []
    code = cli.submit(
        str(EXAMPLE), str(tmp_path / "Pulumi.none.yaml"), dry_run=True, cluster_factory=FakeCluster, out=out.append,
        err=out.append,
    )  # fmt: skip
    assert code == cli.EXIT_REFUSED
    assert "Pulumi.none.yaml" in "\n".join(out)


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["submit"]) == cli.EXIT_USAGE
    assert cli.main(["submit", "job.yaml", "--bogus"]) == cli.EXIT_USAGE
    assert cli.main([]) == cli.EXIT_USAGE
    assert "usage:" in capsys.readouterr().err


def test_help_documents_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["submit", "--help"]) == 0
    text = capsys.readouterr().out
    for flag in ("job.yaml", "--stack", "--dry-run", "--kubeconfig"):
        assert flag in text
    subparsers = next(a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction))
    sub = subparsers.choices["submit"]
    for action in sub._actions:
        assert action.help, action.dest


def test_a_submission_creates_the_jobset_and_says_how_to_watch_it() -> None:
    run = Run()
    cluster = FakeCluster()
    assert run(EXAMPLE, cluster=cluster) == cli.EXIT_OK
    ((namespace, body),) = cluster.created
    assert namespace == "team-foundation"
    assert body["metadata"]["name"] == "llm-pretrain"
    assert cluster.read_from == [TRAINING_NAMESPACE]
    text = "\n".join(run.out)
    assert "kubectl get jobset -n team-foundation llm-pretrain" in text
    assert "kubectl get workloads -n team-foundation" in text
    assert "source stack" in text


def test_the_measured_reliability_sets_the_interval() -> None:
    run = Run()
    cluster = FakeCluster(reliability=MEASURED)
    assert run(EXAMPLE, cluster=cluster) == cli.EXIT_OK
    ((_, body),) = cluster.created
    # 7200 node-seconds per interruption over 2 nodes: MTBF 3600 s, sqrt(2 x 30 x 3600) = 465 s.
    assert body["metadata"]["annotations"][CHECKPOINT_INTERVAL_ANNOTATION] == "465"
    assert "source measured" in "\n".join(run.out)


def test_too_few_measured_interruptions_keep_the_prior() -> None:
    run = Run()
    cluster = FakeCluster(reliability={**MEASURED, "interruptions": "2"})
    assert run(EXAMPLE, cluster=cluster) == cli.EXIT_OK
    assert cluster.created[0][1]["metadata"]["annotations"][CHECKPOINT_INTERVAL_ANNOTATION] == "930"


def test_an_unreadable_configmap_warns_and_keeps_the_prior() -> None:
    run = Run()
    cluster = FakeCluster(reliability={**MEASURED, "interruptions": "many"})
    assert run(EXAMPLE, cluster=cluster) == cli.EXIT_OK
    assert f"{TRAINING_NAMESPACE}/{RELIABILITY_CONFIGMAP} is unreadable (interruptions:" in "\n".join(run.err)
    assert cluster.created[0][1]["metadata"]["annotations"][CHECKPOINT_INTERVAL_ANNOTATION] == "930"


#: The storage_aggregate play's ConfigMap: 64 nodes wrote at 25 GB/s together.
WRITE_RATE = {
    "aggregateWriteBytesPerSecond": "25000000000",
    "hosts": "64",
    "slowestHost": "gpu-h100-017",
    "slowestWriteBytesPerSecond": "310000000",
    "measuredAt": "2026-12-07T10:00:00Z",
}


def test_the_measured_write_rate_sets_the_write_time_and_says_so(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)  # no checkpointWriteSeconds of its own
    assert "checkpointWriteSeconds" not in spec.read_text()
    run = Run()
    cluster = FakeCluster(measured=WRITE_RATE)
    assert run(spec, cluster=cluster) == cli.EXIT_OK
    annotations = cluster.created[0][1]["metadata"]["annotations"]
    # the local stack's 1 TB at 25 GB/s: 40 s, not the typed 30 s; sqrt(2 x 40 x 14400) = 1073 s with the prior
    assert annotations["gpucluster.io/checkpoint-write-seconds"] == "40"
    text = "\n".join(run.out)
    assert "measured: 25.00 GB/s with 64 nodes writing at once" in text
    assert "so 1 TB would take 40 s" in text
    # a job that types its own write time keeps it (it knows its checkpoint's size); an unreadable measurement
    # warns and leaves the stack's typed figure, labelled as typed
    run = Run()
    assert run(EXAMPLE, cluster=FakeCluster(measured=WRITE_RATE)) == cli.EXIT_OK
    assert "typed in the job's checkpointWriteSeconds" in "\n".join(run.out)
    run = Run()
    cluster = FakeCluster(measured={**WRITE_RATE, "aggregateWriteBytesPerSecond": "0"})
    assert run(spec, cluster=cluster) == cli.EXIT_OK
    assert "gpucluster-storage-measured is unreadable (aggregateWriteBytesPerSecond: must be positive)" in "\n".join(
        run.err
    )
    assert "typed in the stack's storage.checkpointing.writeSeconds, not measured" in "\n".join(run.out)


def test_an_existing_jobset_is_refused_and_nothing_is_created() -> None:
    run = Run()
    cluster = FakeCluster(existing={"team-foundation/llm-pretrain"})
    assert run(EXAMPLE, cluster=cluster) == cli.EXIT_REFUSED
    assert cluster.created == []
    assert "refused: JobSet team-foundation/llm-pretrain already exists; nothing was changed" in run.err


def test_a_jobset_created_in_between_is_refused_too() -> None:
    class Racing(FakeCluster):
        def create_jobset(self, namespace: str, body: Mapping[str, Any]) -> None:
            raise cli.JobSetExistsError(f"JobSet {namespace}/{body['metadata']['name']} already exists")

    run = Run()
    assert run(EXAMPLE, cluster=Racing()) == cli.EXIT_REFUSED
    assert "refused: JobSet team-foundation/llm-pretrain already exists; nothing was changed" in run.err


def test_an_unreachable_cluster_exits_1_without_a_trace() -> None:
    class Down(FakeCluster):
        def reliability(self, namespace: str) -> Mapping[str, str] | None:
            raise cli.ClusterError("reading the reliability ConfigMap: the cluster is not reachable (MaxRetryError)")

    run = Run()
    assert run(EXAMPLE, cluster=Down()) == cli.EXIT_REFUSED
    assert run.err == ["error: reading the reliability ConfigMap: the cluster is not reachable (MaxRetryError)"]


def test_a_kubeconfig_that_does_not_load_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "kubeconfig"
    missing.write_text("not: a kubeconfig\n")
    with pytest.raises(cli.ClusterError, match="cannot load a kubeconfig"):
        cli.KubeCluster(str(missing))
