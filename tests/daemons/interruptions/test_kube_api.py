"""The interruption accounting daemon against a real kube-apiserver (RBAC on) with the pinned JobSet and Kueue
CRDs, as the least-privilege ServiceAccount of :mod:`contract.controllers.interruptions`, running as its own process
(``python -m daemons.interruptions``): it is killed with SIGKILL after recording a restart, restarts and evictions
happen while it is down (their Events gone for one of them), and the next process accounts for every one of them from
the objects and its record, stops the job at its restart bound and exports the counts.

Nothing else runs (no JobSet or Kueue controller): the test plays them by writing the objects' status itself.
Skipped, saying why, when the pinned tools or the module caches are absent.
"""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from components.guardrails_policies.controllers import (
    bound_policy,
    interruptions_only_stops_workloads,
)
from contract.constants import KUEUE_API
from contract.interruptions_settings import InterruptionsSettings
from contract.registry import INTERRUPTIONS
from daemons.interruptions.client import KubeApi
from daemons.interruptions.model import JOBSET_API, LEDGER_ANNOTATION
from daemons.toolkit.kube import load_kube_config
from daemons.toolkit.kube_api import MERGE_PATCH
from tests.support.admission import controller_inputs, install_rule, patch_as
from tests.support.apiserver import (
    ApiServer,
    admin_request,
    free_port,
    jobset_crds,
    kueue_crds,
    running_apiserver,
    scrape,
    stamp,
    start_controller,
    wait_for,
)
from tests.support.apiserver import service_account_kubeconfig as support_kubeconfig

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:Unverified HTTPS request")]

SYSTEM = "gpucluster-training"
TEAM = "team-a"
SETTINGS = InterruptionsSettings.model_validate(
    {"interval": "1s", "leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"}
)


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    work = tmp_path_factory.mktemp("interruptions-apiserver")
    crds = [*jobset_crds(), *kueue_crds("workloads")]
    with running_apiserver(work, authorization_mode="RBAC", crds=crds, namespaces=(SYSTEM, TEAM)) as server:
        yield server


raw = admin_request


def service_account_kubeconfig(server: ApiServer, tmp: Path) -> Path:
    """Authenticated as the daemon's ServiceAccount, bound to exactly the grants of its spec."""
    grants = INTERRUPTIONS.grants(SETTINGS, {})
    return support_kubeconfig(server, SETTINGS.namespace, "interruptions", grants, tmp)


POD = {"spec": {"restartPolicy": "Never", "containers": [{"name": "trainer", "image": "trainer:1"}]}}


def create_job(server: ApiServer) -> tuple[str, str]:
    body = {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": "llm",
            "labels": {"gpucluster.io/training-job": "llm", "gpucluster.io/team": TEAM},
            "annotations": {
                "gpucluster.io/max-restarts-per-hour": "2",
                "gpucluster.io/checkpoint-interval-seconds": "600",
            },
        },
        "spec": {
            "replicatedJobs": [
                {
                    "name": "node",
                    "replicas": 1,
                    "template": {"spec": {"parallelism": 1, "completions": 1, "template": POD}},
                }
            ],
        },
    }
    js = raw(server, "POST", f"/apis/{JOBSET_API}/namespaces/{TEAM}/jobsets", body)
    uid = js["metadata"]["uid"]
    wl = {
        "apiVersion": KUEUE_API,
        "kind": "Workload",
        "metadata": {
            "name": "jobset-llm",
            "ownerReferences": [{"apiVersion": JOBSET_API, "kind": "JobSet", "name": "llm", "uid": uid}],
        },
        "spec": {"queueName": "team-a", "podSets": [{"name": "node", "count": 1, "template": POD}]},
    }
    raw(server, "POST", f"/apis/{KUEUE_API}/namespaces/{TEAM}/workloads", wl)
    admitted = {
        "type": "Admitted",
        "status": "True",
        "reason": "Admitted",
        "message": "admitted",
        "lastTransitionTime": stamp(600),
    }
    set_workload_status(server, {"conditions": [admitted]})
    return uid, "jobset-llm"


JOBSET_PATH = f"/apis/{JOBSET_API}/namespaces/{TEAM}/jobsets/llm"
WORKLOAD_PATH = f"/apis/{KUEUE_API}/namespaces/{TEAM}/workloads/jobset-llm"
LEDGER_RULE = "gpucluster-interruptions-writes-only-its-ledger"
STOP_RULE = "gpucluster-interruptions-only-stops-workloads"


def hold_to_its_fields(server: ApiServer, sa: KubeApi) -> None:
    """The stack's admission rules for the daemon's ServiceAccount, in force before it runs."""
    user = f"system:serviceaccount:{SYSTEM}:interruptions"
    inputs = controller_inputs(TEAM, controller_users={INTERRUPTIONS.name: user})

    def post(path: str, body: dict[str, Any]) -> Any:
        return raw(server, "POST", path, body)

    relabel = {"metadata": {"labels": {"x": "y"}}}
    install_rule(post, bound_policy(INTERRUPTIONS.bounds[0], user, ()), lambda: patch_as(sa, JOBSET_PATH, relabel))
    install_rule(post, interruptions_only_stops_workloads(inputs), lambda: patch_as(sa, WORKLOAD_PATH, relabel))


def set_workload_status(server: ApiServer, status: dict[str, Any]) -> None:
    path = f"/apis/{KUEUE_API}/namespaces/{TEAM}/workloads/jobset-llm/status"
    raw(server, "PATCH", path, {"status": status}, MERGE_PATCH)


def set_restarts(server: ApiServer, restarts: int, towards: int) -> None:
    path = f"/apis/{JOBSET_API}/namespaces/{TEAM}/jobsets/llm/status"
    raw(server, "PATCH", path, {"status": {"restarts": restarts, "restartsCountTowardsMax": towards}}, MERGE_PATCH)


def restart_event(server: ApiServer, uid: str, reason: str, seconds_ago: float) -> str:
    body = {
        "metadata": {"generateName": "llm."},
        "involvedObject": {"apiVersion": JOBSET_API, "kind": "JobSet", "name": "llm", "namespace": TEAM, "uid": uid},
        "reason": reason,
        "message": "jobset restarted",
        "type": "Warning",
        "firstTimestamp": stamp(seconds_ago),
        "lastTimestamp": stamp(seconds_ago),
        "count": 1,
    }
    return str(raw(server, "POST", f"/api/v1/namespaces/{TEAM}/events", body)["metadata"]["name"])


def record(server: ApiServer) -> dict[str, Any]:
    js = raw(server, "GET", f"/apis/{JOBSET_API}/namespaces/{TEAM}/jobsets/llm")
    text = (js["metadata"].get("annotations") or {}).get(LEDGER_ANNOTATION)
    return json.loads(text) if text else {}


def start_daemon(settings: Path, kubeconfig: Path, port: int, identity: str, log: Path) -> subprocess.Popen[str]:
    flags = ("--listen", f"127.0.0.1:{port}", "--identity", identity, "--log-level", "debug")
    return start_controller("daemons.interruptions", settings, kubeconfig, *flags, stderr=log.open("w"))


def test_a_kill_9_loses_no_interruption_and_the_bound_stops_the_job(kube: ApiServer, tmp_path: Path) -> None:
    server = kube
    kubeconfig = service_account_kubeconfig(server, tmp_path)
    settings = tmp_path / "settings.json"
    settings.write_text(SETTINGS.to_json())
    uid, workload = create_job(server)
    sa = KubeApi(load_kube_config(str(kubeconfig)))
    hold_to_its_fields(server, sa)

    port = free_port()
    first = start_daemon(settings, kubeconfig, port, "first", tmp_path / "first.log")
    try:
        set_restarts(server, 1, 1)
        restart_event(server, uid, "RestartJobSetFailurePolicyAction", 30)
        wait_for("the first restart recorded", lambda: len(record(server).get("items", [])) == 1, timeout=60)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    (item,) = record(server)["items"]
    assert item["cause"] == "program"
    assert "timeEstimated" not in item

    # While it is down: a node restart whose Event is kept, a program restart whose Event is gone, a preemption.
    set_restarts(server, 3, 2)
    restart_event(server, uid, "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction", 5)
    evicted = {
        "type": "Evicted",
        "status": "True",
        "reason": "Preempted",
        "message": "preempted",
        "lastTransitionTime": stamp(2),
    }
    set_workload_status(
        server,
        {
            "schedulingStats": {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]},
            "conditions": [evicted],
        },
    )

    # The gang runs again (attempt 3): training time the reliability figures count.
    pod_labels = {"gpucluster.io/training-job": "llm", "jobset.sigs.k8s.io/restart-attempt": "3"}
    pod = {"metadata": {"name": "llm-node-0-0", "labels": pod_labels}, "spec": {"nodeName": "n1", **POD["spec"]}}
    raw(server, "POST", f"/api/v1/namespaces/{TEAM}/pods", pod)
    running = {"status": {"phase": "Running", "startTime": stamp(1)}}
    raw(server, "PATCH", f"/api/v1/namespaces/{TEAM}/pods/llm-node-0-0/status", running, MERGE_PATCH)

    port = free_port()
    second = start_daemon(settings, kubeconfig, port, "second", tmp_path / "second.log")
    try:
        # The killed leader's Lease runs out (4 s) before the new process may write.
        wait_for("every interruption recorded", lambda: len(record(server).get("items", [])) == 4, timeout=90)
        rec = record(server)
        assert (rec["uid"], rec["restarts"], rec["towardsMax"], rec["evictions"]) == (uid, 3, 2, {"Preempted": 1})
        causes = sorted((i["cause"], bool(i.get("timeEstimated"))) for i in rec["items"])
        assert causes == [("node", False), ("preemption", False), ("program", False), ("program", True)]

        # Three restarts within the hour, bound 2: stopped, once, saying how to resume.
        wl_path = f"/apis/{KUEUE_API}/namespaces/{TEAM}/workloads/{workload}"
        wait_for(
            "the workload deactivated", lambda: raw(server, "GET", wl_path)["spec"].get("active") is False, timeout=30
        )
        events = raw(server, "GET", f"/api/v1/namespaces/{TEAM}/events")["items"]
        (bound,) = [e for e in events if e["reason"] == "RestartBoundReached"]
        assert bound["type"] == "Warning"
        assert bound["involvedObject"]["name"] == "llm"
        assert "3 restarts in the last hour" in bound["message"]
        assert "kubectl -n team-a patch workload jobset-llm --type merge" in bound["message"]

        wait_for("the counts exported", lambda: 'cause="preemption"' in scrape(port), timeout=30)
        text = scrape(port)
        for cause, n in (("program", 2), ("node", 1), ("preemption", 1), ("requeue", 0)):
            labels = f'cause="{cause}",job="llm",namespace="team-a",team="team-a"'
            assert f"gpucluster_training_interruptions_total{{{labels}}} {n}.0" in text
        assert "gpucluster_interruptions_is_leader 1.0" in text
        cm = raw(server, "GET", f"/api/v1/namespaces/{SYSTEM}/configmaps/{SETTINGS.reliability_config_map}")
        assert cm["data"]["interruptions"] == "4"
        assert float(cm["data"]["nodeMtbiSeconds"]) > 0
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(30) == 0

    # Its writes went through the admission rules; anything beyond them is refused by name.
    hostile: dict[str, tuple[str, dict[str, Any], str]] = {
        "a JobSet relabelled": (JOBSET_PATH, {"metadata": {"labels": {"gpucluster.io/team": "team-b"}}}, LEDGER_RULE),
        "a JobSet suspended": (JOBSET_PATH, {"spec": {"suspend": True}}, LEDGER_RULE),
        "another annotation": (JOBSET_PATH, {"metadata": {"annotations": {"x": "y"}}}, LEDGER_RULE),
        "a job resumed": (WORKLOAD_PATH, {"spec": {"active": True}}, STOP_RULE),
        "a job moved to another queue": (WORKLOAD_PATH, {"spec": {"queueName": "team-b"}}, STOP_RULE),
    }
    for what, (path, body, rule) in hostile.items():
        said = patch_as(sa, path, body)
        assert said is not None, f"{what}: the API server would take it"
        assert rule in said, (what, said)
