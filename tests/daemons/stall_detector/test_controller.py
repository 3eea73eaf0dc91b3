"""One cycle of the stall detector against an in-memory API server and Prometheus: a hung gang restarted in place
once, with its record, eviction and Event; the progress report, fabric traffic and quiet phases that keep it alone;
fail-static inputs; leadership and dry run; the restart budget; a kill -9 between the two writes; suspects named
once per attempt and handed on after the repeat rule."""

from __future__ import annotations

import json
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contract.constants import PROGRESS_ANNOTATION_PREFIX, STALL_AFTER_ANNOTATION
from contract.stall_detector_settings import StallDetectorSettings
from daemons.stall_detector.controller import REASON_STALLED, REASON_SUSPECT, Controller, summary
from daemons.stall_detector.decide import Verdict
from daemons.stall_detector.metrics import Metrics
from daemons.stall_detector.suspects import THROTTLED_SHARE
from tests.daemons.stall_detector.fakes import START, FakeApi, FakeQuerier, Killed, rfc3339

NS = "team-a"
NODES = ["n0", "n1"]
RUNNING_FOR = 3600.0


def settings(**change: Any) -> StallDetectorSettings:
    base: dict[str, Any] = {
        "workloadNamespaces": [NS],
        "dcgmScrapeJob": "dcgm-exporter",
        "fabricScrapeJob": "gpucluster-fabric-exporter",
        "stallAfter": "5m",
        "startupGrace": "10m",
    }
    return StallDetectorSettings.model_validate({**base, **change})


class Rig:
    def __init__(self, *, api: FakeApi | None = None, prom: FakeQuerier | None = None, **change: Any) -> None:
        self.now = START
        self.api = api or FakeApi()
        self.prom = prom or FakeQuerier()
        self.leader = True
        self.metrics = Metrics()
        self.settings = settings(**change)
        self.controller = self.fresh()

    def fresh(self, *, dry_run: bool = False) -> Controller:
        """A new replica (a restarted process) over the same cluster."""
        self.metrics = Metrics()
        return Controller(
            self.settings,
            self.prom,
            self.api,
            self.metrics,
            is_leader=lambda: self.leader,
            identity="test",
            dry_run=dry_run,
            wall=lambda: self.now,
            monotonic=lambda: 0.0,
        )

    def hung_gang(self, name: str = "llm", nodes: list[str] = NODES) -> list[str]:
        """A gang running for an hour whose every GPU idles and whose nodes move only a trickle."""
        self.api.add_gang(NS, name, nodes, started=self.now - RUNNING_FOR)
        pods = [f"{name}-node-0-{i}-a0" for i in range(len(nodes))]
        self.prom.gang(NS, pods, 0.0)
        for node in nodes:
            self.prom.fabric[node] = 8192.0
        return pods

    def metric(self, name: str, **labels: str) -> float | None:
        for family in text_string_to_metric_families(self.metrics.render().decode()):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return float(s.value)
        return None


def test_a_hung_gang_is_recorded_then_evicted_once_with_the_evidence_in_an_event() -> None:
    rig = Rig()
    pods = rig.hung_gang()
    result = rig.controller.cycle()
    (gang,) = result.gangs
    assert (gang.verdict, gang.action) == (Verdict.STALLED, "restarted")
    record = rig.api.record(NS, "llm")
    assert record is not None
    assert (record["attempt"], record["at"]) == (0, START)
    assert "all 16 GPUs below tensor activity 0.05" in record["evidence"]
    assert rig.api.evictions == [(NS, pods[0])]  # one pod: JobSet recreates the whole gang
    (event,) = [e for e in rig.api.events if e["reason"] == REASON_STALLED]
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "JobSet"
    assert event["message"].startswith("restarting attempt 0 in place: stalled for 300s")
    assert rig.metric("gpucluster_stall_detector_restarts_total", namespace=NS, job="llm") == 1
    # the next cycle sees the eviction under way and does nothing more
    again = rig.controller.cycle()
    assert again.gangs[0].action == ""
    assert len(rig.api.evictions) == 1
    assert len(rig.api.records) == 1


@pytest.mark.parametrize(
    ("change", "verdict"),
    [
        ("tensor at the floor", Verdict.BUSY),
        ("one node moves traffic", Verdict.BUSY),
        ("a step within stallAfter", Verdict.PROGRESSING),
        ("a checkpoint write", Verdict.QUIET),
        ("within the startup grace", Verdict.STARTING),
        ("its own stallAfter is longer", Verdict.STARTING),
    ],
)
def test_what_keeps_a_gang_from_being_restarted(change: str, verdict: Verdict) -> None:
    rig = Rig()
    pods = rig.hung_gang()
    report = None
    if change == "tensor at the floor":
        rig.prom.tensor[(NS, pods[1], "7")] = 0.05
    elif change == "one node moves traffic":
        rig.prom.fabric["n1"] = float(1 << 20)
    elif change == "a step within stallAfter":
        report = {"step": 1200, "phase": "train", "at": rfc3339(START - 299)}
    elif change == "a checkpoint write":
        report = {"step": 1200, "phase": "checkpoint", "at": rfc3339(START - 900), "phaseSince": rfc3339(START - 60)}
    elif change == "within the startup grace":
        rig.api.jobsets.clear()
        rig.api.pods.clear()
        rig.api.add_gang(NS, "llm", NODES, started=START - 599)
    else:
        meta = rig.api.jobsets[(NS, "llm")]["metadata"]
        meta["annotations"][STALL_AFTER_ANNOTATION] = str(RUNNING_FOR + 1)
    if report is not None:
        rig.api.claims[NS] = {f"{PROGRESS_ANNOTATION_PREFIX}llm": json.dumps(report)}
    (gang,) = rig.controller.cycle().gangs
    assert gang.verdict is verdict, gang.detail
    assert not rig.api.evictions
    assert not rig.api.records


def test_a_stale_progress_report_is_no_excuse_and_a_bad_one_is_counted_not_trusted() -> None:
    rig = Rig()
    rig.hung_gang()
    rig.api.claims[NS] = {f"{PROGRESS_ANNOTATION_PREFIX}llm": '{"step": "many"}'}
    (gang,) = rig.controller.cycle().gangs
    assert gang.verdict is Verdict.STALLED
    assert rig.metric("gpucluster_stall_detector_report_problems_total") == 1


@pytest.mark.parametrize("fault", ["prometheus down", "api down", "fabric series missing", "a GPU series missing"])
def test_what_the_detector_cannot_see_it_does_not_restart(fault: str) -> None:
    rig = Rig()
    pods = rig.hung_gang()
    if fault == "prometheus down":
        rig.prom.down = True
    elif fault == "api down":
        rig.api.failing.add("list_pods")
    elif fault == "fabric series missing":
        del rig.prom.fabric["n1"]
    else:
        del rig.prom.tensor[(NS, pods[0], "3")]
    result = rig.controller.cycle()
    assert not rig.api.evictions
    assert not rig.api.records
    if fault == "api down":
        assert result.gangs == []
        assert "gangs" in result.unknown
    else:
        assert result.gangs[0].verdict is Verdict.UNKNOWN


def test_only_the_leader_writes_and_a_dry_run_writes_nothing() -> None:
    rig = Rig()
    rig.hung_gang()
    rig.leader = False
    assert rig.controller.cycle().gangs[0].action == "would-restart"
    rig.leader = True
    dry = rig.fresh(dry_run=True)
    assert dry.cycle().gangs[0].action == "would-restart"
    assert not rig.api.evictions
    assert not rig.api.records
    assert not rig.api.events


def test_a_cluster_wide_silence_restarts_at_most_max_restarts_per_cycle() -> None:
    rig = Rig(maxRestartsPerCycle=1)
    rig.hung_gang("a", ["n0"])
    rig.hung_gang("b", ["n1"])
    actions = sorted(g.action for g in rig.controller.cycle().gangs)
    assert actions == ["held", "restarted"]
    assert len(rig.api.evictions) == 1
    assert rig.metric("gpucluster_stall_detector_restarts_held_total") == 1


def test_killed_between_the_record_and_the_eviction_the_next_replica_finishes_without_a_second_record() -> None:
    rig = Rig()
    pods = rig.hung_gang()
    rig.api.die_at = "evict"
    with pytest.raises(Killed):
        rig.controller.cycle()
    assert len(rig.api.records) == 1
    assert not rig.api.evictions
    # a new replica (the standby, or the same one restarted) reads the record and evicts
    rig.now += 30
    result = rig.fresh().cycle()
    assert result.gangs[0].action == "resumed"
    assert rig.api.evictions == [(NS, pods[0])]
    assert len(rig.api.records) == 1  # not recorded again
    assert rig.api.record(NS, "llm")["at"] == START  # type: ignore[index]
    assert rig.api.reasons().count(REASON_STALLED) == 1
    # JobSet restarts the gang: the record is of an older attempt, the new one is in its startup grace
    rig.api.restart(NS, "llm", NODES, started=rig.now)
    rig.prom.gang(NS, [f"llm-node-0-{i}-a1" for i in range(len(NODES))], 0.0)
    (gang,) = rig.fresh().cycle().gangs
    assert (gang.attempt, gang.verdict, gang.action) == (1, Verdict.STARTING, "")
    assert len(rig.api.evictions) == 1


def test_killed_before_the_record_nothing_was_written_and_the_next_replica_restarts_it_once() -> None:
    rig = Rig()
    rig.hung_gang()
    rig.api.die_at = "write_restart"
    with pytest.raises(Killed):
        rig.controller.cycle()
    assert not rig.api.records
    assert rig.fresh().cycle().gangs[0].action == "restarted"
    assert len(rig.api.records) == 1
    assert len(rig.api.evictions) == 1


def test_a_record_written_by_a_replica_that_read_a_stale_jobset_is_refused() -> None:
    rig = Rig()
    rig.hung_gang()
    real = rig.api.list_jobsets

    def stale(namespace: str) -> list[Any]:
        out = real(namespace)
        rig.api.jobsets[(NS, "llm")]["metadata"]["resourceVersion"] = "changed-since"
        return out

    rig.api.list_jobsets = stale  # type: ignore[method-assign]
    assert rig.controller.cycle().gangs[0].action == ""
    assert not rig.api.evictions


def test_a_node_with_nic_timeouts_is_named_in_the_restart_and_a_straggler_while_the_gang_runs() -> None:
    rig = Rig()
    rig.hung_gang()
    rig.prom.transport["n1"] = 40.0
    rig.controller.cycle()
    assert rig.api.record(NS, "llm")["suspects"] == {"n1": ["transport-errors"]}  # type: ignore[index]
    stalled = next(e for e in rig.api.events if e["reason"] == REASON_STALLED)
    assert stalled["message"].endswith("suspect n1: transport-errors")

    other = Rig()
    pods = [f"fast-node-0-{i}-a0" for i in range(3)]
    other.api.add_gang(NS, "fast", ["n0", "n1", "n2"], started=START - RUNNING_FOR)
    other.prom.gang(NS, pods, 0.45)
    other.prom.gang(NS, [pods[2]], 0.30)  # n2 at two thirds of its peers' pace
    for n in ("n0", "n1", "n2"):
        other.prom.fabric[n] = 9e9
    (gang,) = other.controller.cycle().gangs
    assert gang.verdict is Verdict.BUSY
    assert gang.suspects == {"n2": ("straggler",)}
    assert other.api.reasons() == [REASON_SUSPECT]
    assert other.metric("gpucluster_stall_detector_suspect", node="n2", reasons="straggler") == 1
    other.controller.cycle()
    assert other.api.reasons() == [REASON_SUSPECT]  # named once per attempt, not once per cycle
    assert not other.api.evictions


def test_a_hardware_xid_or_a_gpu_throttled_half_the_window_names_its_node_and_less_does_not() -> None:
    rig = Rig()
    rig.hung_gang("llm", ["n0", "n1", "n2"])
    rig.prom.xids["n0"] = 1.0  # the query counts only the card's XIDs
    rig.prom.throttled["n1"] = THROTTLED_SHARE
    rig.prom.throttled["n2"] = THROTTLED_SHARE - 0.05
    (gang,) = rig.controller.cycle().gangs
    assert gang.suspects == {"n0": ("xid",), "n1": ("throttled",)}


def _straggle_three_times(rig: Rig, teams: list[str], *, transport: float = 0.0) -> tuple[str, ...]:
    """Three attempts, one after the other, each a gang of ``teams[attempt]`` whose node n2 straggles (``transport``:
    its InfiniBand transport errors too); the repeat offenders after each."""
    offenders: tuple[str, ...] = ()
    for attempt, team in enumerate(teams):
        rig.api.jobsets.clear()
        rig.api.pods.clear()
        pods = [f"llm-node-0-{i}-a{attempt}" for i in range(3)]
        rig.api.add_gang(team, "llm", ["n0", "n1", "n2"], started=rig.now - RUNNING_FOR, attempt=attempt)
        rig.prom.tensor.clear()
        rig.prom.transport.clear()
        rig.prom.gang(team, pods, 0.45)
        rig.prom.gang(team, [pods[2]], 0.2)
        rig.prom.transport["n2"] = transport
        for n in ("n0", "n1", "n2"):
            rig.prom.fabric[n] = 9e9
        result = rig.fresh().cycle()  # a new replica each time: the memory is in the ConfigMap
        assert "n2" in result.gangs[0].suspects, result.gangs[0]
        offenders = result.repeat_offenders
        rig.now += 600
        if attempt < len(teams) - 1:
            assert offenders == ()
    return offenders


def test_a_node_that_straggles_for_three_teams_is_a_repeat_offender_and_for_two_it_is_not() -> None:
    teams = [NS, "team-b", "team-c"]
    rig = Rig(repeatCount=3, workloadNamespaces=teams)
    assert _straggle_three_times(rig, teams) == ("n2",)
    assert rig.metric("gpucluster_stall_detector_repeat_offender", node="n2", reasons="straggler") == 1


def test_one_team_idling_a_rank_cannot_get_a_node_quarantined() -> None:
    """Straggling is evidence a job's own code produces: one team's three restarts count once. With hardware
    evidence (transport errors) beside it, each naming counts."""
    rig = Rig(repeatCount=3)
    assert _straggle_three_times(rig, [NS, NS, NS]) == ()
    assert rig.metric("gpucluster_stall_detector_repeat_offender", node="n2", reasons="straggler") is None
    rig = Rig(repeatCount=3)
    assert _straggle_three_times(rig, [NS, NS, NS], transport=40.0) == ("n2",)


def test_the_suspects_memory_unreadable_names_no_one_but_still_restarts() -> None:
    rig = Rig()
    rig.hung_gang()
    rig.prom.transport["n1"] = 40.0
    rig.api.failing.add("get_suspects")
    result = rig.controller.cycle()
    assert result.gangs[0].action == "restarted"
    assert "suspects" in result.unknown
    assert REASON_SUSPECT not in rig.api.reasons()


def test_a_gang_writing_its_checkpoint_is_left_alone_and_one_that_stops_writing_is_restarted() -> None:
    """The filesystem collector's write bytes, per node, read once a cycle for every gang."""
    rig = Rig()
    rig.hung_gang()
    rig.prom.writes[NODES[0]] = 200.0 * 1024 * 1024
    (gang,) = rig.controller.cycle().gangs
    assert (gang.verdict, gang.action) == (Verdict.BUSY, "")
    assert rig.api.record(NS, "llm") is None
    rig.prom.writes[NODES[0]] = 0.0
    (gang,) = rig.controller.cycle().gangs
    assert (gang.verdict, gang.action) == (Verdict.STALLED, "restarted")


def test_one_cycle_sends_eight_queries_whatever_the_number_of_gangs_and_once_prints_them() -> None:
    rig = Rig()
    for i in range(20):
        rig.hung_gang(f"job{i}", [f"n{i}"])
    result = rig.controller.cycle()
    assert len(rig.prom.sent) == 8
    assert all('job="dcgm-exporter"' in q or 'job="gpucluster-fabric-exporter"' in q for q in rig.prom.sent)
    out = summary(result)
    assert len(out["gangs"]) == 20  # type: ignore[arg-type]
    json.dumps(out)
