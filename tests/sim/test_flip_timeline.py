"""The flip's figures, CSV and chart from hand-made timelines (no cluster)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from tests.support.sim import load_sim_module

tl_mod = load_sim_module("timeline")
Sample, Timeline = tl_mod.Sample, tl_mod.Timeline


def _cycle(effect: str) -> object:
    """8 replicas in-cluster; preempted at t=10; external by t=25 (boot 10 s); training done at t=40;
    back in-cluster two at a time (NoSchedule) or all at once after a gap (NoExecute) by t=60."""
    tl = Timeline(desired_replicas=8, boot_seconds=10.0, taint_effect=effect)
    for t in range(0, 71):
        taint = "NoSchedule"
        if 12 <= t < 42:
            taint = ""
        elif t >= 42:
            taint = effect
        if t < 10:
            s = Sample(t, 8, 0, 0, 0, taint, 0, 0)
        elif t < 25:
            s = Sample(t, 0, 0, 8, 4, taint, 8 if t >= 15 else 0, 8 if t >= 15 else 0)
        elif t < 40:
            s = Sample(t, 0, 8, 0, 4, taint, 8, 8)
        elif t < 60:
            if effect == "NoSchedule":
                back = min(8, 2 * ((t - 40) // 5))
                s = Sample(
                    t, back, 8 - back - (1 if back < 8 else 0), 1 if back < 8 else 0, 0, taint, 8 - back, 8 - back
                )
            else:
                s = Sample(t, 0 if t < 55 else 8, 0, 8 if t < 55 else 0, 0, taint, 0, 0)
        else:
            s = Sample(t, 8, 0, 0, 0, taint, 0, 0)
        tl.samples.append(s)
    tl.mark(10, "preempted")
    tl.mark(12, "taint_removed")
    tl.mark(25, "flipped_out")
    tl.mark(40, "training_done")
    tl.mark(60, "returned")
    return tl


def test_figures_of_a_gradual_return() -> None:
    f = tl_mod.figures(_cycle("NoSchedule"))
    assert f.flip_out_seconds == pytest.approx(15.0)
    assert f.flip_out_overhead_seconds == pytest.approx(5.0)
    assert f.taint_removal_seconds == pytest.approx(2.0)
    assert f.placement_overhead_seconds == pytest.approx(3.0)
    assert f.flip_back_seconds == pytest.approx(20.0)
    assert f.min_ready == 0  # preemption takes every replica before the flip-out
    assert f.min_ready_during_return == 7
    assert f.taint_changes == 2
    assert f.taint_flaps == 0
    # 8 GPUs for 5 s, then 6, 4, 2 for 5 s each (t=40..60)
    assert f.external_gpu_seconds_after_return == pytest.approx(5 * (8 + 6 + 4 + 2))


def test_noexecute_baseline_drops_every_replica_during_the_return() -> None:
    f = tl_mod.figures(_cycle("NoExecute"))
    assert f.min_ready_during_return == 0
    assert f.external_gpu_seconds_after_return == 0


def test_flaps_count_changes_beyond_the_two_a_cycle_needs() -> None:
    tl = Timeline(desired_replicas=1, boot_seconds=0, taint_effect="NoSchedule")
    for t, taint in enumerate(["NoSchedule", "", "NoSchedule", "", "NoSchedule"]):
        tl.samples.append(Sample(t, 1, 0, 0, 0, taint, 0, 0))
    assert tl_mod.figures(tl).taint_flaps == 2


def test_empty_timeline_is_an_error() -> None:
    with pytest.raises(ValueError, match="no samples"):
        tl_mod.figures(Timeline(desired_replicas=1, boot_seconds=0, taint_effect="NoSchedule"))


def test_csv_and_chart_are_written(tmp_path: Path) -> None:
    tl = _cycle("NoSchedule")
    out = tl_mod.write_csv(tl, tmp_path / "flip.csv")
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 71
    assert rows[10]["marks"] == "preempted"
    assert rows[30]["ready_external"] == "8"
    png = tl_mod.chart(tl, tmp_path / "flip.png", "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_side_by_side_has_one_column_per_run() -> None:
    text = tl_mod.side_by_side([tl_mod.figures(_cycle("NoSchedule")), tl_mod.figures(_cycle("NoExecute"))])
    assert "NoSchedule flip-back" in text
    assert "NoExecute flip-back" in text
    assert "minimum Ready inference replicas, during the return" in text


def _make_before_break() -> object:
    """8 replicas in-cluster; quota reserved at t=10; replacements Ready externally by t=30 (boot 10 s), the
    in-cluster ones gone; admitted at t=31, training Running at t=33; done at t=60; home by t=90, each external
    replica leaving once its in-cluster replacement is Ready."""
    tl = Timeline(desired_replicas=8, boot_seconds=10.0, taint_effect="NoSchedule", path="make-before-break")
    for t in range(0, 101):
        if t < 10:
            s = Sample(t, 8, 0, 0, 0, "NoSchedule", 0, 0, "")
        elif t < 30:
            ext = 8 if t >= 20 else 0
            s = Sample(t, 8, ext, 0, 0, "NoSchedule", 8, 8, "reserved")
        elif t < 60:
            s = Sample(t, 0, 8, 0, 4 if t >= 33 else 0, "NoSchedule", 8, 8, "admitted" if t >= 31 else "reserved")
        elif t < 90:
            back = min(8, (t - 60) // 3)
            s = Sample(t, back, 8 - back, 0, 0, "NoSchedule", 8 - back, 8 - back, "finished")
        else:
            s = Sample(t, 8, 0, 0, 0, "NoSchedule", 0, 0, "finished")
        tl.samples.append(s)
    for t, name in [(10, "quota_reserved"), (31, "admitted"), (31, "flipped_out"), (33, "training_running")]:
        tl.mark(t, name)
    tl.mark(60, "training_done")
    tl.mark(90, "returned")
    tl.inference_preemptions = 0
    return tl


def test_figures_of_make_before_break() -> None:
    f = tl_mod.figures(_make_before_break())
    assert f.path == "make-before-break"
    assert f.min_ready == 8  # the replacements were Ready before any replica went
    assert f.seconds_below_desired == 0
    assert f.flip_out_seconds == pytest.approx(21.0)  # quota reserved -> admitted
    assert f.flip_out_overhead_seconds == pytest.approx(11.0)
    assert f.training_admission_seconds == pytest.approx(21.0)
    assert f.training_running_seconds == pytest.approx(23.0)
    assert f.taint_removal_seconds is None
    assert f.inference_preemptions == 0
    assert f.taint_changes == 0
    # 8 GPUs billed from the creates at t=10 (booting included) to t=60, then one fewer every 3 s until t=84
    assert f.external_gpu_seconds == pytest.approx(8 * 50 + 3 * sum(range(1, 9)))
    assert f.external_gpu_seconds_after_return == pytest.approx(3 * sum(range(1, 9)))


def test_preemptions_and_the_path_reach_the_table() -> None:
    mbb = _make_before_break()
    old = _cycle("NoSchedule")
    old.path, old.inference_preemptions = "preempt-then-burst", 8
    text = tl_mod.side_by_side([tl_mod.figures(mbb), tl_mod.figures(old)])
    header, *rows = text.splitlines()
    assert header.split() == ["make-before-break", "preempt-then-burst"]
    (preempted,) = [r for r in rows if r.startswith("inference pods preempted")]
    assert preempted.split()[-2:] == ["0", "8"]


def test_marks_that_fall_together_get_rows_of_their_own() -> None:
    # flipped_out, admitted and training_running within a second: three rows; a mark far after goes back to row 0
    assert tl_mod.mark_levels([10.0, 10.4, 10.9, 11.2, 40.0], min_gap=2.0) == [0, 1, 2, 3, 0]
    assert tl_mod.mark_levels([0.0, 5.0, 10.0], min_gap=2.0) == [0, 0, 0]
    assert tl_mod.mark_levels([], min_gap=2.0) == []


def test_the_chart_draws_the_requests_panel_when_the_cycle_had_a_load(tmp_path: Path) -> None:
    load = load_sim_module("load")
    tl = _cycle("NoSchedule")
    tl.requests = [load.Second(float(t), 20, 3 if 30 <= t < 33 else 0, 45.0) for t in range(70)]
    png = tl_mod.chart(tl, tmp_path / "flip.png", "test")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    without = tl_mod.chart(_cycle("NoSchedule"), tmp_path / "plain.png", "test")
    assert png.stat().st_size != without.stat().st_size  # a third panel, not the same picture


def _load_step_cycle() -> object:
    """Make-before-break with 8 replicas rented; a load step at t=30 makes the HPA ask for 11 at t=36, Ready on
    rented GPUs at t=52; the load falls at t=60 and the count is back to 8 at t=95."""
    tl = tl_mod.Timeline(desired_replicas=8, boot_seconds=5.0, taint_effect="NoSchedule", path="make-before-break")
    tl.load_step_rate = 24
    for t in range(100):
        desired = 11 if 36 <= t < 95 else 8
        external = 11 if 52 <= t < 95 else 8
        tl.samples.append(tl_mod.Sample(float(t), 0, external, 0, 4, "NoSchedule", external, external, desired=desired))
    tl.mark(30.0, "load_step", "+24/s")
    tl.mark(60.0, "load_fell")
    return tl


def test_the_hpa_figures_of_a_load_step() -> None:
    f = tl_mod.hpa_figures(_load_step_cycle())
    assert f is not None
    assert (f.step_rate, f.base, f.max_desired, f.max_ready_external) == (24, 8, 11, 11)
    assert (f.scale_out_seconds, f.all_ready_seconds, f.scale_back_seconds) == (6.0, 22.0, 35.0)
    rows = dict(f.rows())
    assert rows["HPA: load step (+24 req/s), replicas desired"] == "8 -> 11"
    # An HPA that never scaled: nothing raised, nothing Ready, said as such rather than as 0 s.
    flat = _load_step_cycle()
    flat.samples = [tl_mod.Sample(x.t, 0, 8, 0, 4, "NoSchedule", 8, 8, desired=8) for x in flat.samples]
    g = tl_mod.hpa_figures(flat)
    assert g is not None
    assert (g.max_desired, g.scale_out_seconds, g.all_ready_seconds) == (8, None, None)
    assert tl_mod.hpa_figures(_make_before_break()) is None  # no step, no rows


def test_a_row_only_one_run_has_is_empty_in_the_others() -> None:
    with_step = tl_mod.figures(_load_step_cycle())
    without = tl_mod.figures(_make_before_break())
    table = tl_mod.side_by_side([with_step, without])
    (line,) = [x for x in table.splitlines() if x.startswith("HPA: load step (+24 req/s)")]
    assert line.split()[-1] == "11"  # "8 -> 11" in the first column, nothing in the second
