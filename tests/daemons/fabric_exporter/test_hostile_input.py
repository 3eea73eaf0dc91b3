"""Hostile sysfs and NVML input: every impossible value is a counted, once-logged collector problem, never a sample.

Each class comes both ways: the impossible value is refused (no sample, success 0, the kind counted) and a
possible value at the same place is served. The hostile tree is written from ``HOSTILE`` into a copy of one clean
HCA; its exposition is compared with ``golden/hostile-sysfs.prom`` (regenerate with ``--update-golden``).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemons.fabric_exporter.collectors import FabricCollector, InfinibandCollector, NvlinkCollector
from daemons.fabric_exporter.infiniband import MAX_COUNTER
from daemons.fabric_exporter.nvml_api import FakeGpu, FakeLink, FakeNvml
from daemons.toolkit.logs import OnceLogger
from tests.daemons.fabric_exporter.test_collectors import NODE, sample, scrape, stable
from tests.support.telemetry import GOLDEN, SYSFS_FIXTURE

IB = "gpucluster_fabric_infiniband"
PORT = "class/infiniband/mlx5_0/ports/1"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

#: file below the HCA's port (or the HCA) -> what a broken driver, a bad disk or an attacker could leave there
HOSTILE: dict[str, bytes] = {
    f"{PORT}/counters/symbol_error": b"-5\n",  # negative
    f"{PORT}/counters/link_downed": b"nan\n",  # not an integer
    f"{PORT}/counters/port_xmit_discards": b"18446744073709551616\n",  # 2^64: beyond a 64-bit counter
    f"{PORT}/counters/VL15_dropped": b"\xff\xfe\x00\x01",  # garbage bytes
    f"{PORT}/counters/port_rcv_errors": b"1.5\n",  # a fraction
    f"{PORT}/counters/port_xmit_wait": b"+7\n",  # a sign the kernel never writes
    f"{PORT}/hw_counters/out_of_buffer": b"9" * 4096,  # a 4096-digit number
    f"{PORT}/rate": b"200000 Gb/sec (4X XDR)\n",  # faster than any link
    f"{PORT}/state": b"99: ACTIVE\n",  # no such port state
    "class/infiniband/mlx5_0/fw_ver": b"2" * 4000,  # absurdly long identity text: cut, not a problem
}
#: (metric, labels) that each hostile file must not produce
WITHHELD = [
    (f"{IB}_port_errors_total", {"type": "symbol_error"}),
    (f"{IB}_port_errors_total", {"type": "link_downed"}),
    (f"{IB}_port_errors_total", {"type": "port_xmit_discards"}),
    (f"{IB}_port_errors_total", {"type": "VL15_dropped"}),
    (f"{IB}_port_errors_total", {"type": "port_rcv_errors"}),
    (f"{IB}_port_transmit_wait_total", {}),
    (f"{IB}_hw_counters_total", {"counter": "out_of_buffer"}),
    (f"{IB}_port_rate_bytes_per_second", {}),
    (f"{IB}_port_state_id", {}),
]


def hostile_tree(root: Path) -> Path:
    shutil.copytree(SYSFS_FIXTURE / "class/infiniband/mlx5_0", root / "class/infiniband/mlx5_0")
    for rel, content in HOSTILE.items():
        (root / rel).write_bytes(content)
    return root


def errors(s: Samples, collector: str, kind: str) -> float | None:
    return sample(s, "gpucluster_fabric_collector_errors_total", collector=collector, kind=kind)


def test_hostile_counters_are_problems_of_their_kind_never_samples(tmp_path: Path) -> None:
    s = scrape(InfinibandCollector(str(hostile_tree(tmp_path)), NODE))
    for name, labels in WITHHELD:
        assert sample(s, name, device="mlx5_0", port="1", **labels) is None, (name, labels)
    assert sample(s, "gpucluster_fabric_collector_success", collector="infiniband") == 0
    assert sample(s, "gpucluster_fabric_collector_problems", collector="infiniband") == 9
    assert errors(s, "infiniband", "malformed") == 4  # nan, garbage, 1.5, +7
    assert errors(s, "infiniband", "out_of_range") == 5  # -5, 2^64, 4096 digits, the rate, the state
    # what is possible is still served, next to the refusals
    assert sample(s, f"{IB}_port_errors_total", device="mlx5_0", port="1", type="link_error_recovery") is not None
    info = [k for k in s if k[0] == f"{IB}_device_info"]
    assert len(info) == 1
    assert len(dict(info[0][1])["fw_ver"]) == 128


def test_possible_values_at_the_same_places_are_served(tmp_path: Path) -> None:
    root = hostile_tree(tmp_path)
    port = root / PORT
    (port / "counters/symbol_error").write_text("5\n")
    (port / "counters/port_xmit_discards").write_text(f"{MAX_COUNTER}\n")  # 2^64-1 is a 64-bit counter's maximum
    (port / "counters/port_xmit_wait").write_text("7\n")
    (port / "hw_counters/out_of_buffer").write_text("9" * 19 + "\n")
    (port / "rate").write_text("1600 Gb/sec (4X XDR)\n")
    (port / "state").write_text("4: ACTIVE\n")
    s = scrape(InfinibandCollector(str(root), NODE))
    assert sample(s, f"{IB}_port_errors_total", device="mlx5_0", port="1", type="symbol_error") == 5
    assert sample(s, f"{IB}_port_errors_total", device="mlx5_0", port="1", type="port_xmit_discards") == float(
        MAX_COUNTER
    )
    assert sample(s, f"{IB}_port_transmit_wait_total", device="mlx5_0", port="1") == 7
    assert sample(s, f"{IB}_hw_counters_total", device="mlx5_0", port="1", counter="out_of_buffer") == float("9" * 19)
    assert sample(s, f"{IB}_port_rate_bytes_per_second", device="mlx5_0", port="1") == 1600e9 / 8
    assert sample(s, f"{IB}_port_state_id", device="mlx5_0", port="1") == 4
    assert errors(s, "infiniband", "out_of_range") == 0
    assert errors(s, "infiniband", "malformed") == 3  # nan, garbage, 1.5 are still there


def test_hostile_golden(tmp_path: Path, update_golden: bool) -> None:
    root = hostile_tree(tmp_path / "sys")
    collector = FabricCollector([InfinibandCollector(str(root), NODE)], OnceLogger(logging.getLogger("g")), NODE)
    got = stable(collector.render().decode())
    golden = GOLDEN / "hostile-sysfs.prom"
    if update_golden:
        golden.write_text(got)
    assert golden.exists(), f"{golden} missing: run pytest tests/daemons/fabric_exporter --update-golden"
    assert got == golden.read_text(), "exposition changed: review, then regenerate with --update-golden"
    assert str(tmp_path) not in got  # absolute paths never reach the output


def scraper(*subs: InfinibandCollector | NvlinkCollector) -> Callable[[], Samples]:
    """Scrapes through one FabricCollector, so its error counter accumulates as the exporter's does."""
    collector = FabricCollector(list(subs), OnceLogger(logging.getLogger("t")), NODE)

    def run() -> Samples:
        text = collector.render().decode()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
        }

    return run


def test_a_counter_that_goes_backwards_is_withheld_once_then_followed(sysfs_copy: Path) -> None:
    ib = InfinibandCollector(str(sysfs_copy), NODE)
    run = scraper(ib)
    f = sysfs_copy / f"{PORT}/counters/symbol_error"
    f.write_text("10\n")
    first = run()
    f.write_text("4\n")  # in place, as the kernel writes: a reset (perfquery -R) or a bad read
    second = run()
    f.write_text("6\n")
    third = run()
    labels = {"device": "mlx5_0", "port": "1", "type": "symbol_error"}
    assert sample(first, f"{IB}_port_errors_total", **labels) == 10
    assert sample(second, f"{IB}_port_errors_total", **labels) is None  # no dip for rate() to read as a reset
    assert errors(second, "infiniband", "went_backwards") == 1
    assert sample(third, f"{IB}_port_errors_total", **labels) == 6  # counting on from the new value
    assert errors(third, "infiniband", "went_backwards") == 1  # counted once, not again
    assert sample(third, "gpucluster_fabric_collector_success", collector="infiniband") == 0  # the fixture's files
    ib.close()


def test_a_counter_that_only_rises_is_never_flagged(sysfs_copy: Path) -> None:
    ib = InfinibandCollector(str(sysfs_copy), NODE)
    run = scraper(ib)
    f = sysfs_copy / f"{PORT}/counters/symbol_error"
    for value in (10, 10, 11, 500):
        f.write_text(f"{value}\n")
        s = run()
    assert errors(s, "infiniband", "went_backwards") == 0
    ib.close()


def test_each_cause_is_logged_once_whatever_its_value(sysfs_copy: Path, caplog: pytest.LogCaptureFixture) -> None:
    once = OnceLogger(logging.getLogger("hostile"))
    ib = InfinibandCollector(str(sysfs_copy), NODE)
    f = sysfs_copy / f"{PORT}/counters/symbol_error"
    with caplog.at_level(logging.ERROR, logger="hostile"):
        for junk in ("abc\n", "xyz\n", "q\n"):
            f.write_text(junk)
            scrape(ib, once=once)
    lines = [r for r in caplog.records if "symbol_error" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].kind == "malformed"  # type: ignore[attr-defined]
    ib.close()


# --- devices the node should have ----------------------------------------------------------------------------------


def test_fewer_hcas_than_expected_fails_and_shows_in_the_gauges(sysfs_copy: Path) -> None:
    s = scrape(InfinibandCollector(str(sysfs_copy), NODE, expected_devices=5))
    assert sample(s, "gpucluster_fabric_devices", collector="infiniband") == 4
    assert sample(s, "gpucluster_fabric_devices_expected", collector="infiniband") == 5
    assert errors(s, "infiniband", "devices_missing") == 1


def test_as_many_hcas_as_expected_is_no_problem(tmp_path: Path) -> None:
    shutil.copytree(SYSFS_FIXTURE / "class/infiniband/mlx5_0", tmp_path / "class/infiniband/mlx5_0")
    s = scrape(InfinibandCollector(str(tmp_path), NODE, expected_devices=1))
    assert sample(s, "gpucluster_fabric_collector_success", collector="infiniband") == 1
    assert errors(s, "infiniband", "devices_missing") == 0


@pytest.mark.parametrize("layout", ["missing", "empty", "no-infiniband"])
def test_missing_or_empty_sysfs_on_a_node_with_hcas_fails(tmp_path: Path, layout: str) -> None:
    root = tmp_path / "sys"
    if layout != "missing":
        root.mkdir()
    if layout == "no-infiniband":
        (root / "class").mkdir()
    s = scrape(InfinibandCollector(str(root), NODE, expected_devices=4))
    assert sample(s, "gpucluster_fabric_collector_success", collector="infiniband") == 0
    assert sample(s, "gpucluster_fabric_devices", collector="infiniband") == 0
    assert errors(s, "infiniband", "devices_missing") == 1


@pytest.mark.parametrize("layout", ["missing", "empty"])
def test_a_sysfs_root_that_is_not_a_sysfs_fails_even_without_an_expectation(tmp_path: Path, layout: str) -> None:
    root = tmp_path / "sys"
    if layout == "empty":
        root.mkdir()
    s = scrape(InfinibandCollector(str(root), NODE))
    assert sample(s, "gpucluster_fabric_collector_success", collector="infiniband") == 0
    assert errors(s, "infiniband", "devices_missing") == 1


# --- NVLink ---------------------------------------------------------------------------------------------------------


def nvml(**errors_: int) -> FakeNvml:
    return FakeNvml([FakeGpu("GPU-a", links=[FakeLink(errors=dict(errors_))])])


def test_impossible_nvlink_values_are_refused() -> None:
    api = nvml(crc_flit=-1, replay=2**64)
    api.gpus[0].links[0].speed_mbytes = 10**12
    s = scrape(NvlinkCollector(api, NODE))
    lk = {"gpu": "0", "uuid": "GPU-a", "link": "0"}
    assert sample(s, "gpucluster_fabric_nvlink_errors_total", **lk, type="crc_flit") is None
    assert sample(s, "gpucluster_fabric_nvlink_errors_total", **lk, type="replay") is None
    assert sample(s, "gpucluster_fabric_nvlink_link_speed_bytes_per_second", **lk) is None
    assert sample(s, "gpucluster_fabric_nvlink_errors_total", **lk, type="crc_data") == 0  # possible: served
    assert sample(s, "gpucluster_fabric_collector_success", collector="nvlink") == 0
    assert errors(s, "nvlink", "out_of_range") == 3


def test_possible_nvlink_values_are_served() -> None:
    api = nvml(crc_flit=0, replay=MAX_COUNTER)
    s = scrape(NvlinkCollector(api, NODE))
    lk = {"gpu": "0", "uuid": "GPU-a", "link": "0"}
    assert sample(s, "gpucluster_fabric_nvlink_errors_total", **lk, type="replay") == float(MAX_COUNTER)
    assert sample(s, "gpucluster_fabric_collector_success", collector="nvlink") == 1


def test_an_nvlink_counter_that_goes_backwards_is_withheld() -> None:
    api = nvml(crc_flit=9)
    run = scraper(NvlinkCollector(api, NODE))
    first = run()
    api.gpus[0].links[0].errors["crc_flit"] = 3
    second = run()
    lk = {"gpu": "0", "uuid": "GPU-a", "link": "0", "type": "crc_flit"}
    assert sample(first, "gpucluster_fabric_nvlink_errors_total", **lk) == 9
    assert sample(second, "gpucluster_fabric_nvlink_errors_total", **lk) is None
    assert errors(second, "nvlink", "went_backwards") == 1


class _LyingNvml(FakeNvml):
    def device_count(self) -> int:
        return 10**9


def test_an_impossible_gpu_count_fails_the_collector_not_the_scrape(sysfs_copy: Path) -> None:
    s = scrape(InfinibandCollector(str(sysfs_copy), NODE), NvlinkCollector(_LyingNvml([]), NODE, expected_devices=8))
    assert sample(s, "gpucluster_fabric_collector_success", collector="nvlink") == 0
    assert errors(s, "nvlink", "failed") == 1
    assert errors(s, "nvlink", "devices_missing") == 1  # a failed collector found none of the 8
    assert sample(s, "gpucluster_fabric_devices", collector="nvlink") == 0
    assert sample(s, f"{IB}_port_errors_total", device="mlx5_0", port="1", type="symbol_error") == 3


def test_fewer_gpus_than_expected_fails_and_as_many_does_not() -> None:
    two = FakeNvml([FakeGpu("GPU-a"), FakeGpu("GPU-b")])
    short = scrape(NvlinkCollector(two, NODE, expected_devices=8))
    assert sample(short, "gpucluster_fabric_collector_success", collector="nvlink") == 0
    assert errors(short, "nvlink", "devices_missing") == 1
    enough = scrape(NvlinkCollector(FakeNvml([FakeGpu("GPU-a"), FakeGpu("GPU-b")]), NODE, expected_devices=2))
    assert sample(enough, "gpucluster_fabric_collector_success", collector="nvlink") == 1
    assert sample(enough, "gpucluster_fabric_devices", collector="nvlink") == 2
