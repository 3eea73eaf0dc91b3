"""The fabric exporter's collectors in-process: sysfs parsing, units, saturation, NVML semantics, golden output."""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

import pynvml
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from daemons.fabric_exporter.collectors import FabricCollector, InfinibandCollector, NvlinkCollector
from daemons.fabric_exporter.families import Family, TextRenderer
from daemons.fabric_exporter.infiniband import (
    COUNTERS,
    InfinibandScraper,
    SysfsParseError,
    SysfsReader,
    families_from_snapshot,
    parse_rate,
    parse_state,
    read_infiniband,
    saturation_limit,
)
from daemons.fabric_exporter.nvml_api import FakeGpu, FakeLink, FakeNvml, read_link
from daemons.toolkit.logs import OnceLogger
from tests.support.telemetry import GOLDEN, NVML_FIXTURE, SYSFS_FIXTURE

IB = "gpucluster_fabric_infiniband"
NODE = {"node": "fixture-node"}


def scrape(*subs: object, once: OnceLogger | None = None) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(FabricCollector(list(subs), once or OnceLogger(logging.getLogger("t")), NODE))  # type: ignore[arg-type]
    out = {}
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    want = {**NODE, **labels}
    for (n, ls), v in samples.items():
        if n == name and dict(ls) == want:
            return v
    return None


def write(path: Path, text: str) -> None:
    path.write_text(text)


# --- parsing ----------------------------------------------------------------------------------------------------


def test_state_and_rate_parsing() -> None:
    assert parse_state("4: ACTIVE\n", "x") == (4, "ACTIVE")
    assert parse_state("5: LinkUp", "x") == (5, "LinkUp")
    assert parse_rate("400 Gb/sec (4X NDR)\n", "x") == 400e9 / 8
    assert parse_rate("2.5 Gb/sec (1X SDR)", "x") == 2.5e9 / 8
    with pytest.raises(SysfsParseError, match=r"/p/rate: expected '<n> Gb/sec"):
        parse_rate("fast", "/p/rate")
    with pytest.raises(SysfsParseError, match="/p/state"):
        parse_state("ACTIVE", "/p/state")


def test_fixture_tree_reads_every_device_and_reports_malformed_files() -> None:
    snap = read_infiniband(str(SYSFS_FIXTURE))
    assert [d.device for d in snap.devices] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    bad = sorted(Path(p.path).relative_to(SYSFS_FIXTURE / "class" / "infiniband").as_posix() for p in snap.problems)
    assert bad == [
        "mlx5_2/ports/1/hw_counters/out_of_buffer",
        "mlx5_3/ports/1/counters/port_rcv_errors",
        "mlx5_3/ports/1/rate",
    ]
    mlx3 = snap.devices[3].ports[0]
    assert "port_rcv_errors" not in mlx3.counters
    assert mlx3.counters["symbol_error"] == 3


def test_data_counters_are_bytes_and_errors_share_one_family(sysfs_copy: Path) -> None:
    s = scrape(InfinibandCollector(str(sysfs_copy), NODE))
    words = int((SYSFS_FIXTURE / "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data").read_text())
    assert sample(s, f"{IB}_port_transmit_data_bytes_total", device="mlx5_0", port="1") == words * 4
    assert sample(s, f"{IB}_port_errors_total", device="mlx5_0", port="1", type="symbol_error") == 3
    assert sample(s, f"{IB}_port_errors_total", device="mlx5_0", port="1", type="link_downed") == 1
    assert sample(s, f"{IB}_hw_counters_total", device="mlx5_0", port="1", counter="out_of_buffer") == 12
    assert sample(s, f"{IB}_port_state_id", device="mlx5_1", port="1") == 1  # the down port
    assert sample(s, f"{IB}_port_physical_state_id", device="mlx5_1", port="1") == 3
    assert sample(s, f"{IB}_port_rate_bytes_per_second", device="mlx5_0", port="1") == 5e10


@pytest.mark.parametrize(
    ("counter", "at_limit"),
    [
        ("port_xmit_data", True),
        ("port_xmit_data", False),
        ("link_downed", True),
        ("link_downed", False),
        ("local_link_integrity_errors", True),
        ("symbol_error", False),
    ],
)
def test_saturated_legacy_counter_is_flagged_and_withheld(sysfs_copy: Path, counter: str, at_limit: bool) -> None:
    limit = saturation_limit(COUNTERS[counter])
    assert limit is not None
    value = limit if at_limit else limit - 1
    write(sysfs_copy / f"class/infiniband/mlx5_0/ports/1/counters/{counter}", f"{value}\n")
    s = scrape(InfinibandCollector(str(sysfs_copy), NODE))
    flag = sample(s, f"{IB}_counter_saturated", device="mlx5_0", port="1", counter=counter)
    spec = COUNTERS[counter]
    if spec.label:
        exported = sample(s, f"{IB}_port_errors_total", device="mlx5_0", port="1", type=spec.label)
    else:
        exported = sample(s, f"{IB}_port_transmit_data_bytes_total", device="mlx5_0", port="1")
    if at_limit:
        assert flag == 1
        assert exported is None
    else:
        assert flag == 0
        assert exported == value * spec.scale


def test_64bit_extended_counters_above_32_bits_are_not_saturated(sysfs_copy: Path) -> None:
    write(sysfs_copy / "class/infiniband/mlx5_0/ports/1/counters/port_rcv_data", f"{2**32}\n")
    s = scrape(InfinibandCollector(str(sysfs_copy), NODE))
    assert sample(s, f"{IB}_counter_saturated", device="mlx5_0", port="1", counter="port_rcv_data") == 0
    assert sample(s, f"{IB}_port_receive_data_bytes_total", device="mlx5_0", port="1") == 2**32 * 4


def test_malformed_file_keeps_the_scrape_and_flags_the_collector(
    sysfs_copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    once = OnceLogger(logging.getLogger("fabric_test"))
    with caplog.at_level(logging.ERROR, logger="fabric_test"):
        s1 = scrape(InfinibandCollector(str(sysfs_copy), NODE), once=once)
        s2 = scrape(InfinibandCollector(str(sysfs_copy), NODE), once=once)
    assert sample(s1, "gpucluster_fabric_collector_success", collector="infiniband") == 0
    assert sample(s1, "gpucluster_fabric_collector_problems", collector="infiniband") == 3
    assert sample(s2, f"{IB}_port_errors_total", device="mlx5_3", port="1", type="symbol_error") == 3
    assert len([r for r in caplog.records if "port_rcv_errors" in r.getMessage()]) == 1  # logged once


def test_clean_tree_reports_success(tmp_path: Path) -> None:

    shutil.copytree(SYSFS_FIXTURE / "class/infiniband/mlx5_0", tmp_path / "class/infiniband/mlx5_0")
    s = scrape(InfinibandCollector(str(tmp_path), NODE))
    assert sample(s, "gpucluster_fabric_collector_success", collector="infiniband") == 1


def test_unreadable_file_is_a_problem_not_a_crash(sysfs_copy: Path) -> None:
    # a directory where a counter file should be: opens, but every read fails (EISDIR), even for root
    f = sysfs_copy / "class/infiniband/mlx5_0/ports/1/counters/symbol_error"
    f.unlink()
    f.mkdir()
    s = scrape(InfinibandCollector(str(sysfs_copy), NODE))
    assert sample(s, "gpucluster_fabric_collector_success", collector="infiniband") == 0
    assert sample(s, f"{IB}_port_errors_total", device="mlx5_0", port="1", type="symbol_error") is None
    assert sample(s, f"{IB}_port_errors_total", device="mlx5_0", port="1", type="link_downed") == 1


def test_unreadable_counter_directory_is_a_problem_not_a_crash(sysfs_copy: Path) -> None:
    d = sysfs_copy / "class/infiniband/mlx5_0/ports/1/counters"

    shutil.rmtree(d)
    d.write_text("not a directory")  # listing fails with ENOTDIR, as a broken driver entry would
    s = scrape(InfinibandCollector(str(sysfs_copy), NODE))
    assert sample(s, "gpucluster_fabric_collector_success", collector="infiniband") == 0
    assert sample(s, f"{IB}_hw_counters_total", device="mlx5_0", port="1", counter="out_of_buffer") == 12


def test_missing_infiniband_class_is_empty_and_successful(tmp_path: Path) -> None:
    (tmp_path / "class").mkdir()  # a sysfs without the InfiniBand driver loaded
    s = scrape(InfinibandCollector(str(tmp_path), NODE))
    assert sample(s, "gpucluster_fabric_collector_success", collector="infiniband") == 1
    assert not [k for k in s if k[0].startswith(IB)]


# --- NVLink -----------------------------------------------------------------------------------------------------


def fake() -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu("GPU-a", links=[FakeLink(errors={"crc_flit": 5, "replay": 2}), FakeLink(up=False)]),
            FakeGpu("GPU-b", nvlink_supported=False),
        ]
    )


def test_fake_nvml_has_nvml_error_semantics() -> None:
    nv = fake()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nv.device_count()
    nv.init()
    a, b = nv.device_handle(0), nv.device_handle(1)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvlink_state(b, 0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvlink_state(a, 2)
    assert nv.nvlink_state(a, 1) == pynvml.NVML_FEATURE_DISABLED
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvlink_error_counter(a, 1, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)
    assert nv.nvlink_error_counter(a, 0, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT) == 5
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        FakeNvml([], library_missing=True).init()


def test_nvlink_collector_exports_links_and_skips_unsupported() -> None:
    nv = fake()
    s = scrape(NvlinkCollector(nv, NODE))
    lk = {"gpu": "0", "uuid": "GPU-a"}
    assert sample(s, "gpucluster_fabric_nvlink_errors_total", **lk, link="0", type="crc_flit") == 5
    assert sample(s, "gpucluster_fabric_nvlink_errors_total", **lk, link="0", type="replay") == 2
    assert sample(s, "gpucluster_fabric_nvlink_errors_total", **lk, link="0", type="crc_data") == 0
    assert sample(s, "gpucluster_fabric_nvlink_link_up", **lk, link="1") == 0
    assert sample(s, "gpucluster_fabric_nvlink_errors_total", **lk, link="1", type="crc_flit") is None
    assert sample(s, "gpucluster_fabric_nvlink_link_speed_bytes_per_second", **lk, link="0") == 53125e6
    assert sample(s, "gpucluster_fabric_nvlink_supported", gpu="1", uuid="GPU-b") == 0
    assert sample(s, "gpucluster_fabric_collector_success", collector="nvlink") == 1
    nv.gpus[0].links[0].errors["crc_flit"] = 9  # counters advance between scrapes
    s2 = scrape(NvlinkCollector(nv, NODE))
    assert sample(s2, "gpucluster_fabric_nvlink_errors_total", **lk, link="0", type="crc_flit") == 9


def test_missing_nvml_library_fails_only_its_collector(sysfs_copy: Path, caplog: pytest.LogCaptureFixture) -> None:
    once = OnceLogger(logging.getLogger("fabric_nvml_test"))
    nvlink = NvlinkCollector(FakeNvml([], library_missing=True), NODE)
    with caplog.at_level(logging.ERROR, logger="fabric_nvml_test"):
        s = scrape(InfinibandCollector(str(sysfs_copy), NODE), nvlink, once=once)
        scrape(InfinibandCollector(str(sysfs_copy), NODE), nvlink, once=once)
    assert sample(s, "gpucluster_fabric_collector_success", collector="nvlink") == 0
    assert sample(s, f"{IB}_port_errors_total", device="mlx5_0", port="1", type="symbol_error") == 3
    assert len([r for r in caplog.records if "NVML Shared Library Not Found" in r.getMessage()]) == 1


# --- golden -----------------------------------------------------------------------------------------------------

_VOLATILE = re.compile(r"^gpucluster_fabric_collector_duration_seconds\{")


def collector_for(sysfs_root: Path, nvml: FakeNvml) -> FabricCollector:
    subs = [InfinibandCollector(str(sysfs_root), NODE), NvlinkCollector(nvml, NODE)]
    return FabricCollector(subs, OnceLogger(logging.getLogger("golden")), NODE)  # type: ignore[arg-type]


def stable(text: str) -> str:
    """Durations vary from run to run; absolute fixture paths never reach the output."""
    return "".join(line + "\n" for line in text.splitlines() if not _VOLATILE.match(line))


def parsed(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        # durations vary; the error counter grows by the same problems each scrape
        if fam.name not in ("gpucluster_fabric_collector_duration_seconds", "gpucluster_fabric_collector_errors")
    }


def test_golden_exposition(update_golden: bool) -> None:
    """What /metrics serves for the fixture tree and the fake NVML, byte for byte."""
    golden = GOLDEN / "fixture-sysfs-hgx-2gpu.prom"
    got = stable(collector_for(SYSFS_FIXTURE, FakeNvml.from_json(NVML_FIXTURE)).render().decode())
    if update_golden:
        golden.write_text(got)
    assert golden.exists(), f"{golden} missing: run pytest tests/telemetry --update-golden"
    assert got == golden.read_text(), "exposition changed: review, then regenerate with --update-golden"


def test_served_text_parses_to_what_generate_latest_writes() -> None:
    collector = collector_for(SYSFS_FIXTURE, FakeNvml.from_json(NVML_FIXTURE))
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    reference = generate_latest(reg).decode()
    first, second = collector.render().decode(), collector.render().decode()  # second from the series cache
    assert parsed(first) == parsed(reference)
    assert parsed(second) == parsed(reference)
    assert len(parsed(reference)) > 250
    # same families, HELP and TYPE lines, in the same order
    assert [ln for ln in first.splitlines() if ln.startswith("#")] == [
        ln for ln in reference.splitlines() if ln.startswith("#")
    ]


def test_held_descriptors_see_in_place_updates_and_removed_devices(sysfs_copy: Path) -> None:
    ib = InfinibandCollector(str(sysfs_copy), NODE)
    s1 = scrape(ib)
    assert ib.open_descriptors > 100
    f = sysfs_copy / "class/infiniband/mlx5_0/ports/1/counters/symbol_error"
    f.write_text("42\n")  # in place, as the kernel updates an attribute
    s2 = scrape(ib)
    assert sample(s1, f"{IB}_port_errors_total", device="mlx5_0", port="1", type="symbol_error") == 3
    assert sample(s2, f"{IB}_port_errors_total", device="mlx5_0", port="1", type="symbol_error") == 42
    before = ib.open_descriptors
    shutil.rmtree(sysfs_copy / "class/infiniband/mlx5_1")  # hot-removed HCA
    s3 = scrape(ib)
    assert sample(s3, f"{IB}_port_state_id", device="mlx5_1", port="1") is None
    assert ib.open_descriptors < before  # its descriptors were closed
    ib.close()
    assert ib.open_descriptors == 0


def test_renderer_escapes_label_values() -> None:
    fam = Family("x_info", "gauge", "h", ("b", "a"))
    fam.add(('q"uote', "back\\slash\nnl"), 1.0)
    assert TextRenderer().render([fam]).decode().splitlines()[-1] == r'x_info{a="back\\slash\nnl",b="q\"uote"} 1'


def test_scrape_path_matches_the_reference_reader(sysfs_copy: Path) -> None:
    """The planned scrape path and read_infiniband + families_from_snapshot give the same families."""
    scraper = InfinibandScraper(str(sysfs_copy), NODE, SysfsReader(keep_open=True))
    for round_ in range(3):
        if round_ == 2:  # a new counter file appears and one HCA goes away: plans are rebuilt
            hw = sysfs_copy / "class/infiniband/mlx5_0/ports/1/hw_counters"
            before = hw.stat().st_mtime_ns
            (hw / "roce_slow_restart").write_text("7\n")
            # the filesystem moves the directory's mtime on; its clock is coarse, so make sure it moved
            os.utime(hw, ns=(before + 10**9, before + 10**9))
            shutil.rmtree(sysfs_copy / "class/infiniband/mlx5_2")
        fams, problems = scraper.scrape()
        snap = read_infiniband(str(sysfs_copy))
        ref = families_from_snapshot(snap, NODE)
        assert [(f.name, f.labelnames, f.rows) for f in fams] == [(f.name, f.labelnames, f.rows) for f in ref]
        assert {p.path for p in problems} == {p.path for p in snap.problems}


def test_unchanged_counter_directories_are_listed_again_after_the_relist_period(sysfs_copy: Path) -> None:
    scraper = InfinibandScraper(str(sysfs_copy), NODE, SysfsReader(keep_open=True))
    hw = sysfs_copy / "class/infiniband/mlx5_0/ports/1/hw_counters"
    st = hw.stat()
    scraper.scrape()
    (hw / "roce_slow_restart").write_text("7\n")
    os.utime(hw, ns=(st.st_atime_ns, st.st_mtime_ns))  # a directory whose mtime did not move
    fams, _ = scraper.scrape()
    hw_rows = next(f for f in fams if f.name == f"{IB}_hw_counters").rows
    assert not [r for r in hw_rows if r[0][-1] == "roce_slow_restart"]  # cached listing
    scraper.relist_seconds = 0.0
    fams, _ = scraper.scrape()
    hw_rows = next(f for f in fams if f.name == f"{IB}_hw_counters").rows
    assert [r[1] for r in hw_rows if r[0][0] == "mlx5_0" and r[0][-1] == "roce_slow_restart"] == [7.0]


def test_fake_link_reading_matches_the_single_nvml_calls() -> None:
    """FakeNvml.nvlink_link is a shortcut; it must agree with read_link over the per-call API."""
    nv = FakeNvml.from_json(NVML_FIXTURE)
    nv.init()
    for index in range(nv.device_count()):
        handle = nv.device_handle(index)
        for link in range(6):
            try:
                expected = read_link(nv, handle, link)
            except pynvml.NVMLError as exc:
                with pytest.raises(type(exc)):
                    nv.nvlink_link(handle, link)
                continue
            assert nv.nvlink_link(handle, link) == expected
