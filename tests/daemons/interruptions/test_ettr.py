from __future__ import annotations

import pytest

from daemons.interruptions.classify import Cause
from daemons.interruptions.ettr import JobTime, cluster_time, job_time
from daemons.interruptions.ledger import Interruption, Record

T0 = 0.0


def test_a_job_that_never_stopped_has_ettr_one_less_checkpoint_writes() -> None:
    r = Record("u", first_admitted=T0, first_running=T0)
    t = job_time(r, 3600.0, created_at=T0, nodes=2, interval_s=1800.0, write_s=30.0, interruptions=0)
    assert t.training_s == 3600.0
    assert t.checkpoint_write_s == 60.0
    assert t.ettr == pytest.approx(3540 / 3600)


def test_downtime_and_work_lost_come_off() -> None:
    items = (Interruption(1000.0, Cause.PROGRAM, True, recovered_at=1100.0, work_lost_s=200.0),)
    r = Record("u", first_admitted=T0, first_running=100.0, items=items)
    t = job_time(r, 2000.0, created_at=T0, nodes=1, interval_s=None, write_s=30.0, interruptions=1)
    # wall 2000; down 0-100 and 1000-1100; lost 200
    assert t.training_s == 1800.0
    assert t.productive_s == 1600.0
    assert t.ettr == pytest.approx(0.8)


def test_an_open_interruption_counts_until_now_and_overlaps_once() -> None:
    items = (
        Interruption(1000.0, Cause.NODE, True, recovered_at=None),
        Interruption(1200.0, Cause.PROGRAM, True, recovered_at=None),
    )
    r = Record("u", first_admitted=T0, first_running=T0, items=items)
    t = job_time(r, 2000.0, created_at=T0, nodes=1, interval_s=None, write_s=0.0, interruptions=2)
    assert t.training_s == 1000.0


def test_never_admitted_counts_from_creation_and_before_running_is_not_training() -> None:
    r = Record("u")
    t = job_time(r, 500.0, created_at=100.0, nodes=1, interval_s=None, write_s=0.0, interruptions=0)
    assert t.wall_s == 400.0
    assert t.training_s == 0.0
    assert t.ettr == 0.0
    assert job_time(r, 100.0, created_at=100.0, nodes=1, interval_s=None, write_s=0, interruptions=0).ettr is None


def test_cluster_ettr_is_node_weighted_and_mtbi_is_node_seconds_per_interruption() -> None:
    big = JobTime(wall_s=100.0, training_s=100.0, checkpoint_write_s=0.0, work_lost_s=0.0, nodes=3, interruptions=1)
    small = JobTime(wall_s=100.0, training_s=0.0, checkpoint_write_s=0.0, work_lost_s=0.0, nodes=1, interruptions=1)
    c = cluster_time([big, small])
    assert c.ettr == pytest.approx(0.75)
    assert c.node_seconds == 300.0
    assert c.node_mtbi_s == 150.0
    quiet = cluster_time([JobTime(100.0, 100.0, 0.0, 0.0, 2, 0)])
    assert quiet.node_mtbi_s is None
    assert quiet.ettr == 1.0
    assert cluster_time([]).ettr is None
