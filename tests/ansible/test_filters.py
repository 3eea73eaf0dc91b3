"""The roles' parsers and verdicts, fed with shim output and with tests/fixtures/ansible/outputs.

SOURCES.md beside those outputs says which are captured from the real tools and which are samples.

Every threshold has a passing and a failing case.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.ansible.harness import SHIMS, filter_plugin
from tests.support.apiserver import free_port

# The simulated hosts' ib_write_bw servers listen on fixed ports of their addresses; each xdist worker's hosts have
# addresses of their own (harness.host_address), so the Ansible tests of two workers run side by side.

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "ansible" / "outputs"


burn = filter_plugin("gpu_burn_in")
thermal = filter_plugin("gpu_thermal_acceptance")
nvlink = filter_plugin("nvlink_acceptance")
ib = filter_plugin("ib_acceptance")
storage = filter_plugin("storage_acceptance")
admission = filter_plugin("node_admission")


def shim(tool: str, *args: str, knobs: dict[str, Any] | None = None, tmp: Path | None = None) -> dict[str, Any]:
    """Run a shim like the role's command task would, returning a registered-result dict."""
    env = dict(os.environ)
    if knobs is not None:
        assert tmp is not None
        path = tmp / "knobs.json"
        path.write_text(json.dumps(knobs))
        env["GPUCLUSTER_SHIM_KNOBS"] = str(path)
    else:
        env.pop("GPUCLUSTER_SHIM_KNOBS", None)
    res = subprocess.run([str(SHIMS / tool), *args], capture_output=True, text=True, env=env, check=False, cwd=tmp)
    return {"rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr}


THERMAL_ARGS = (
    "--query-gpu=index,uuid,temperature.gpu,clocks_event_reasons.active",
    "--format=csv,noheader,nounits",
)
FAIL_EVENTS = ["hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"]


def _thermal(knobs: dict[str, Any], tmp: Path, limit: float = 78, outlier: float = 8) -> dict[str, Any]:
    samples = [shim("nvidia-smi", *THERMAL_ARGS, knobs=knobs, tmp=tmp) for _ in range(2)]
    verdict: dict[str, Any] = thermal.gpu_thermal_verdict(samples, limit, outlier, 8, FAIL_EVENTS)
    return verdict


# ----------------------------------------------------------------------------------------------- thermal
def test_thermal_at_limit_passes_and_one_degree_over_fails(tmp_path: Path) -> None:
    at = _thermal({"temp_c": 70, "hot_gpu": {"index": 3, "temp_c": 78}}, tmp_path)
    assert at["status"] == "pass", at["reasons"]
    over = _thermal({"temp_c": 70, "hot_gpu": {"index": 3, "temp_c": 79}}, tmp_path)
    assert over["status"] == "fail"
    assert over["reasons"] == [
        "GPU 3 (GPU-00000003-5a1e-4c0d-9f00-000000000003) reached 79 C, above thermal_limit_c 78 C"
    ]


def test_thermal_outlier_at_margin_passes_and_beyond_fails(tmp_path: Path) -> None:
    at = _thermal({"temp_c": 60, "warm_gpu": {"index": 5, "delta_c": 8}}, tmp_path)
    assert at["status"] == "pass", at["reasons"]
    beyond = _thermal({"temp_c": 60, "warm_gpu": {"index": 5, "delta_c": 9}}, tmp_path)
    assert beyond["status"] == "fail"
    assert len(beyond["reasons"]) == 1
    assert beyond["reasons"][0].startswith("GPU 5 (")
    assert "9 C above the node median 61 C" in beyond["reasons"][0]


def test_thermal_clock_event_fails_only_when_listed(tmp_path: Path) -> None:
    knobs = {"clock_events": {"4": "0x0000000000000040", "2": "0x0000000000000004"}}
    verdict = _thermal(knobs, tmp_path)
    assert verdict["reasons"] == [
        "GPU 4 (GPU-00000004-5a1e-4c0d-9f00-000000000004) clocks slowed by hw_thermal_slowdown"
    ]
    # sw_power_cap on GPU 2 is recorded but not failing.
    gpu2 = next(g for g in verdict["details"]["gpus"] if g["index"] == 2)
    assert gpu2["clock_events"] == ["sw_power_cap"]


def test_thermal_unreadable_or_missing_gpu_fails_with_its_name(tmp_path: Path) -> None:
    bad = {"rc": 0, "stdout": "0, GPU-a, 61, 0x0\n1, GPU-b, [N/A], 0x0\n"}
    verdict = thermal.gpu_thermal_verdict([bad], 78, 8, 2, FAIL_EVENTS)
    assert verdict["reasons"] == ["nvidia-smi sample 1: GPU 1 (GPU-b): temperature '[N/A]' is not a number"]
    seven = _thermal({"gpus": 7}, tmp_path)
    assert seven["reasons"] == ["nvidia-smi reports 7 GPUs, expected 8"]
    err = thermal.gpu_thermal_verdict([{"rc": 9, "stderr": "NVML: GPU is lost"}], 78, 8, 8, FAIL_EVENTS)
    assert err["reasons"][0] == "nvidia-smi sample 1 exited rc=9: NVML: GPU is lost"


def test_thermal_check_mode_skips(tmp_path: Path) -> None:
    verdict = thermal.gpu_thermal_verdict([{"skipped": True}], 78, 8, 8, FAIL_EVENTS)
    assert verdict["status"] == "skipped"


# ----------------------------------------------------------------------------------------------- burn-in
def test_dcgm_diag_pass_and_named_failure(tmp_path: Path) -> None:
    ok = shim("dcgmi", "diag", "-r", "3", "-j", knobs={}, tmp=tmp_path)
    load = {"rc": 0, "stdout": "Tested 8 GPUs:\n\tGPU 0: OK\n" + "".join(f"\tGPU {g}: OK\n" for g in range(1, 8))}
    assert burn.gpu_burn_in_verdict(ok, load, 3, 8)["status"] == "pass"
    knobs = {"diag_fail": [{"test": "targeted_stress", "gpu": 1, "info": "GPU 1 missed its target"}]}
    bad = shim("dcgmi", "diag", "-r", "3", "-j", knobs=knobs, tmp=tmp_path)
    assert bad["rc"] != 0
    verdict = burn.gpu_burn_in_verdict(bad, load, 3, 8)
    assert verdict["reasons"] == ["dcgmi diag test 'targeted_stress' failed on GPU 1: GPU 1 missed its target"]
    # A node still on DCGM 3.x: the same failure in the older document.
    old = dict(knobs, dcgm_layout="3", diag_fail=[{"test": "Targeted Stress", "gpu": 1, "info": "GPU 1 missed"}])
    verdict = burn.gpu_burn_in_verdict(shim("dcgmi", "diag", "-r", "3", "-j", knobs=old, tmp=tmp_path), load, 3, 8)
    assert verdict["reasons"] == ["dcgmi diag test 'Targeted Stress' failed on GPU 1: GPU 1 missed"]


def test_dcgm_warn_fails_only_when_configured(tmp_path: Path) -> None:
    knobs = {"diag_warn": [{"test": "memory_bandwidth", "gpu": 0, "info": "Clocks are being throttled"}]}
    res = shim("dcgmi", "diag", "-r", "3", "-j", knobs=knobs, tmp=tmp_path)
    assert burn.gpu_burn_in_verdict(res, None, 3, 8, False, True)["status"] == "fail"
    assert burn.gpu_burn_in_verdict(res, None, 3, 8, False, False)["status"] == "pass"


def test_dcgm_3x_sample_with_null_placeholders_parses() -> None:
    text = (SAMPLES / "dcgmi_diag_r1_warning_prefix.txt").read_text()
    rows = burn.dcgm_diag_tests(text)
    assert [r["test"] for r in rows] == ["Denylist", "NVML Library", "PCIe", "PCIe"]
    verdict = burn.gpu_burn_in_verdict({"rc": 226, "stdout": text}, None, 1, 2, False)
    assert verdict["reasons"] == ["dcgmi diag test 'PCIe' failed on GPU 1: PCIe replay count 310 exceeds 250"]


def test_dcgm_4x_real_document_is_read_and_its_failure_named() -> None:
    # `dcgmi diag -r 1 -j` on a GB10 (DCGM 4.2.3): tests under "DCGM Diagnostic", results per entity,
    # warnings as objects. The former parser found no results in it and failed every DCGM 4 node as unreadable.
    text = (SAMPLES / "dcgmi_diag_4.2.3_gb10_r1_fail.json").read_text()
    rows = burn.dcgm_diag_tests(text)
    assert [(r["category"], r["test"], r["entity"], r["status"]) for r in rows] == [
        ("Deployment", "software", "GPU 0", "Fail")
    ]
    verdict = burn.gpu_burn_in_verdict({"rc": 226, "stdout": text}, None, 1, 1, False)
    assert verdict["status"] == "fail"
    assert verdict["reasons"] == [
        "dcgmi diag test 'software' failed on GPU 0: Persistence Mode: Persistence mode for GPU 0 is disabled. "
        'Enable persistence mode by running "nvidia-smi -i <gpuId> -pm 1 " as root.'
    ]


def _dcgm4(*tests: dict[str, Any]) -> str:
    return json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": list(tests)}]}})


def test_dcgm_4x_real_passing_test_passes_and_a_summary_only_failure_is_kept() -> None:
    # One test object exactly as DCGM 4.x wrote it for `dcgmi diag -r 3 -j` on eight GPUs (NVIDIA/DCGM#215),
    # placed in the document that carries it.
    test = json.loads((SAMPLES / "dcgmi_diag_4.x_r3_diagnostic_test.json.fragment").read_text())
    rows = burn.dcgm_diag_tests(_dcgm4(test))
    assert [r["entity"] for r in rows] == [f"GPU {g}" for g in range(8)]
    assert {r["status"] for r in rows} == {"Pass"}
    assert "859.08 gigaflops" in rows[0]["detail"]
    assert burn.gpu_burn_in_verdict({"rc": 0, "stdout": _dcgm4(test)}, None, 3, 8, False)["status"] == "pass"
    # The same test whose summary fails while every entity passed (an error DCGM tied to no GPU) fails the node.
    broken = dict(test, test_summary={"status": "Fail", "warnings": [{"warning": "plugin aborted"}]})
    verdict = burn.gpu_burn_in_verdict({"rc": 226, "stdout": _dcgm4(broken)}, None, 3, 8, False)
    assert verdict["reasons"] == ["dcgmi diag test 'diagnostic' failed on GPU all: plugin aborted"]


def test_dcgm_refuses_documents_it_cannot_judge() -> None:
    with pytest.raises(ValueError, match="neither 'DCGM Diagnostic'"):
        burn.dcgm_diag_tests('{"tests": []}')
    with pytest.raises(ValueError, match="runtime error: The DCGM diagnostic"):
        burn.dcgm_diag_tests('{"DCGM Diagnostic": {"runtime_error": "The DCGM diagnostic was stopped"}}')
    with pytest.raises(ValueError, match=r"test_categories\[0\] > tests is str, not a list"):
        burn.dcgm_diag_tests('{"DCGM Diagnostic": {"test_categories": [{"tests": "x"}]}}')
    with pytest.raises(ValueError, match="not valid JSON"):
        burn.dcgm_diag_tests('{"DCGM Diagnostic": {"x": } }')


def test_burn_faulty_gpu_and_truncated_run_fail() -> None:
    lines = "".join(f"\tGPU {g}: {'FAULTY' if g == 6 else 'OK'}\n" for g in range(8))
    diag = {
        "rc": 0,
        "stdout": json.dumps(
            {
                "DCGM GPU Diagnostic": {
                    "test_categories": [
                        {
                            "category": "Deployment",
                            "tests": [{"name": "Denylist", "results": [{"gpu_ids": "0", "status": "Pass"}]}],
                        }
                    ]
                }
            }
        ),
    }
    faulty = burn.gpu_burn_in_verdict(diag, {"rc": 0, "stdout": f"Tested 8 GPUs:\n{lines}"}, 3, 8)
    assert faulty["reasons"] == ["gpu_burn reported GPU 6 FAULTY (computation errors under load)"]
    cut = burn.gpu_burn_in_verdict(diag, {"rc": -9, "stdout": "Burning for 600 seconds.\n", "stderr": "Killed"}, 3, 8)
    assert cut["status"] == "fail"
    assert "Tested N GPUs" in cut["reasons"][0]
    assert "rc=-9" in cut["reasons"][0]
    garbage = burn.gpu_burn_in_verdict(
        {"rc": 255, "stdout": "", "stderr": "Error: unable to connect to host engine"}, None, 3, 8, False
    )
    assert garbage["reasons"][0] == "dcgmi diag -r 3 exited rc=255: Error: unable to connect to host engine"


# ----------------------------------------------------------------------------------------------- nvlink
def _nvlink(knobs: dict[str, Any], tmp: Path, min_speed: float = 26.0) -> dict[str, Any]:
    status = shim("nvidia-smi", "nvlink", "--status", knobs=knobs, tmp=tmp)
    topo = shim("nvidia-smi", "topo", "-m", knobs=knobs, tmp=tmp)
    before = shim("nvidia-smi", "nvlink", "-e", knobs=knobs, tmp=tmp)
    after = shim("nvidia-smi", "nvlink", "-e", knobs=knobs, tmp=tmp)
    topology = nvlink.nvlink_topology_verdict(status, topo, 8, 18, min_speed, 18)
    result: dict[str, Any] = nvlink.nvlink_verdict(topology, nvlink.nvlink_counters_verdict(before, after))
    return result


def test_nvlink_healthy_passes(tmp_path: Path) -> None:
    verdict = _nvlink({}, tmp_path)
    assert verdict["status"] == "pass", verdict["reasons"]
    assert verdict["details"]["gpus"]["0"]["active_links"] == 18


def test_nvlink_inactive_link_and_topology_fail(tmp_path: Path) -> None:
    verdict = _nvlink({"nvlink_inactive": [[1, 4]], "topo_override": {"2,7": "SYS"}}, tmp_path)
    assert verdict["reasons"] == [
        "GPU 1: 17 active NVLinks, expected 18 (inactive: link 4)",
        "topo -m: GPU2 to GPU7 is SYS, expected NV18 or more",
    ]


def test_nvlink_speed_floor(tmp_path: Path) -> None:
    knobs = {"nvlink_slow": [[2, 9, 13.281]]}
    assert _nvlink(knobs, tmp_path, min_speed=13.0)["status"] == "pass"
    assert _nvlink(knobs, tmp_path, min_speed=26.0)["reasons"] == ["GPU 2 link 9: 13.281 GB/s, below 26 GB/s"]


def test_nvlink_counter_growth_fails_and_steady_passes(tmp_path: Path) -> None:
    grow = _nvlink({"nvlink_growth": {"gpu": 6, "link": 3, "counter": "Replay Errors", "step": 4}}, tmp_path)
    assert grow["reasons"] == ["GPU 6 link 3 Replay Errors grew from 0 to 4 during the load"]
    (tmp_path / "knobs.json.state.json").unlink()
    assert (
        _nvlink({"nvlink_growth": {"gpu": 6, "link": 3, "counter": "Replay Errors", "step": 0}}, tmp_path)["status"]
        == "pass"
    )


def test_topo_sample_from_a_real_dgx_layout_parses() -> None:
    cells = nvlink.parse_topo_matrix((SAMPLES / "topo_m_dgx_h100.txt").read_text())
    assert cells[(0, 1)] == "NV18"
    assert cells[(3, 7)] == "NV18"
    assert cells[(0, 0)] == "X"


# ----------------------------------------------------------------------------------------------- infiniband
def _counters(tmp: Path, values: dict[str, int]) -> dict[str, Any]:
    lines = [f"{tmp}/class/infiniband/{k.split()[0]}/ports/1/counters/{k.split()[-1]}:{v}" for k, v in values.items()]
    return {"rc": 0, "stdout": "\n".join(lines)}


def _shim_env(knobs: dict[str, Any], tmp: Path, host: str, address: str) -> dict[str, str]:
    (tmp / host).mkdir(exist_ok=True)
    path = tmp / host / "knobs.json"
    # Written whole and renamed into place: the HCAs' shims of one host start in parallel threads, and a shim that
    # read the file while another thread rewrote it in place found it empty and died (a flaky "Couldn't connect").
    staged = path.with_name(f"knobs.{threading.get_ident()}.json")
    staged.write_text(json.dumps(knobs))
    os.replace(staged, path)
    return {
        **os.environ,
        "GPUCLUSTER_SHIM_KNOBS": str(path),
        "GPUCLUSTER_SHIM_HOST": host,
        "GPUCLUSTER_SHIM_ADDRESS": address,
    }


def write_bw(
    tmp: Path,
    hca: str,
    server: tuple[str, str, dict[str, Any]],
    client: tuple[str, str, dict[str, Any]],
    port: int = 18515,
) -> dict[str, Any]:
    """ib_write_bw as the role runs it: the server shim started first on (host, address, knobs), then the client
    shim connecting to it (``localhost`` when both are one host). Returns the client's registered result."""
    (s_host, s_addr, s_knobs), (c_host, c_addr, c_knobs) = server, client
    argv = [str(SHIMS / "ib_write_bw"), "-d", hca, "-i", "1", "-p", str(port), "-D", "1", "--report_gbits"]
    srv = subprocess.Popen(
        argv, env=_shim_env(s_knobs, tmp, s_host, s_addr), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        peer = "localhost" if s_host == c_host else s_addr
        deadline = time.monotonic() + 20
        while True:  # as the role's retries: the server may still be starting
            res = subprocess.run(
                [*argv, peer], env=_shim_env(c_knobs, tmp, c_host, c_addr), capture_output=True, text=True, check=False
            )
            if res.returncode == 0 or srv.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        return {"rc": res.returncode, "stdout": res.stdout, "stderr": res.stderr, "item": hca}
    finally:
        srv.kill()
        srv.wait()


def _ib(knobs: dict[str, Any], tmp: Path, floor: float = 40.0, after: dict[str, int] | None = None) -> dict[str, Any]:
    stat = shim("ibstat", knobs=knobs, tmp=tmp)
    hcas = [f"mlx5_{i}" for i in range(8)]
    me = ("node", "127.0.0.1", knobs)
    # A port of its own for each pair, never the previous call's: a server bound where the last one just stopped
    # was sometimes refused (Address already in use), and the test saw "Couldn't connect".
    ports = [free_port() for _ in hcas]
    with ThreadPoolExecutor(len(hcas)) as pool:  # one HCA after another would take -D seconds each
        bws = list(pool.map(lambda i: write_bw(tmp, hcas[i], me, me, ports[i]), range(len(hcas))))
    base = {"mlx5_0 port 1 symbol_error": 0, "mlx5_2 port 1 link_downed": 1}
    verdict: dict[str, Any] = ib.ib_verdict(
        stat, _counters(tmp, base), _counters(tmp, after or base), bws, hcas, 1, 400, floor
    )
    return verdict


def test_ib_healthy_passes_and_records_bandwidth(tmp_path: Path) -> None:
    verdict = _ib({}, tmp_path)
    assert verdict["status"] == "pass", verdict["reasons"]
    assert verdict["details"]["write_bw_gbs"]["mlx5_0"] == pytest.approx(48.75)


def test_ib_port_down_and_half_rate_are_named(tmp_path: Path) -> None:
    verdict = _ib({"ib_down": ["mlx5_3"], "ib_half_rate": ["mlx5_1"]}, tmp_path, floor=20.0)
    assert verdict["reasons"] == [
        "mlx5_1 port 1: Rate 200 Gb/s, expected 400 Gb/s",
        "mlx5_3 port 1: State Down, expected Active",
        "mlx5_3 port 1: Physical state Polling, expected LinkUp",
        "mlx5_3 port 1: Rate 10 Gb/s, expected 400 Gb/s",
        "ib_write_bw loopback on mlx5_3 exited rc=1: Couldn't connect to the remote side: port is not active",
    ]


def test_ib_bandwidth_floor(tmp_path: Path) -> None:
    at_floor = _ib({"ib_bw_gbps": 320}, tmp_path, floor=40.0)
    assert at_floor["status"] == "pass", at_floor["reasons"]
    low = _ib({"ib_bw_gbps": 319}, tmp_path, floor=40.0)
    assert low["reasons"][0] == "ib_write_bw loopback on mlx5_0: 39.88 GB/s, below floor 40 GB/s"


def test_ib_counter_growth_fails(tmp_path: Path) -> None:
    grown = {"mlx5_0 port 1 symbol_error": 5, "mlx5_2 port 1 link_downed": 1}
    assert _ib({}, tmp_path, after=grown)["reasons"] == ["mlx5_0 port 1 symbol_error grew from 0 to 5 during traffic"]


def test_ib_missing_hca_and_missing_counter_file(tmp_path: Path) -> None:
    stat = shim("ibstat", knobs={"ib_hcas": ["mlx5_0"]}, tmp=tmp_path)
    missing = {
        "rc": 2,
        "stdout": "",
        "stderr": "grep: /sys/class/infiniband/mlx5_1/ports/1/counters/symbol_error: No such file",
    }
    verdict = ib.ib_verdict(stat, missing, missing, [], ["mlx5_0", "mlx5_1"], 1, 400, 40.0)
    assert verdict["reasons"][0] == "mlx5_1 port 1: not listed by ibstat"
    assert (
        "reading IB counters (before traffic) exited rc=2: grep: /sys/class/infiniband/mlx5_1" in verdict["reasons"][1]
    )


def test_ibstat_sample_parses() -> None:
    cas = ib.parse_ibstat((SAMPLES / "ibstat_two_cas.txt").read_text())
    assert cas["mlx5_0"][1]["State"] == "Active"
    assert cas["mlx5_0"][1]["Rate"] == "400"
    assert cas["mlx5_1"][1]["Physical state"] == "Disabled"
    assert "CA type" not in cas["mlx5_0"][1]


# ----------------------------------------------------------------------------------------------- ib pairs
def _fleet(size: int, per_leaf: int = 3, hcas: tuple[str, ...] = ("mlx5_0", "mlx5_1")) -> list[dict[str, Any]]:
    return [
        {"name": f"n{i}", "leaf": f"leaf-{i // per_leaf}", "address": f"10.0.0.{i + 1}", "hcas": list(hcas)}
        for i in range(size)
    ]


def _perftest(gbits: float) -> str:
    return (
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
        f" 65536      700000          {gbits * 1.01:.2f}             {gbits:.2f}\t\t   0.724552\n"
    )


def _pair_run(plan: dict[str, Any], gbits: Any = lambda server, client, hca: 390.0) -> list[list[dict[str, Any]]]:
    """Every host's gathered results, as the role's set_fact leaves them; ``gbits`` None means connect refused."""
    per_host = []
    for name, steps in plan["hosts"].items():
        mine: list[dict[str, Any]] = []
        for step in steps:
            clients = []
            for hca in step.get("hcas", []):
                rate = gbits(step.get("partner"), name, hca)
                if rate is None:
                    clients.append({"item": hca, "rc": 1, "stdout": "", "stderr": "Couldn't connect to x:1"})
                else:
                    clients.append({"item": hca, "rc": 0, "stdout": _perftest(rate), "stderr": ""})
            mine += ib.ib_pair_results(clients, name, step)
        per_host.append(mine)
    return per_host


def test_pair_plan_gives_every_host_two_partners_on_other_leaves() -> None:
    for size in (2, 3, 4, 7, 12, 64):
        plan = ib.ib_pair_plan(_fleet(size))
        leaf = {h["name"]: h["leaf"] for h in _fleet(size)}
        for name, steps in plan["hosts"].items():
            partners = [s["partner"] for s in steps if s["role"] != "idle"]
            assert len(partners) == len(set(partners)) == (1 if size == 2 else 2), (size, name, steps)
            if size >= 6:  # enough leaves that no pair needs to share one
                assert all(leaf[p] != leaf[name] for p in partners), (size, name, partners)
        for r in range(plan["rounds"]):  # a round is a matching: each host serves or connects once
            roles = [steps[r]["role"] for steps in plan["hosts"].values()]
            assert roles.count("server") == roles.count("client")
    assert ib.ib_pair_plan(_fleet(1)) == {"rounds": 0, "hosts": {"n0": []}}


def test_pair_plan_refuses_hosts_it_cannot_tell_apart() -> None:
    twins = _fleet(3)
    twins[2]["address"] = twins[0]["address"]
    with pytest.raises(ValueError, match=r"hosts n0 and n2 share the address 10\.0\.0\.1"):
        ib.ib_pair_plan(twins)
    with pytest.raises(ValueError, match=r"hosts\[1\] needs a name, a leaf and an address"):
        ib.ib_pair_plan([_fleet(1)[0], {"name": "n1", "leaf": "", "address": "10.0.0.9"}])


def test_healthy_pairs_pass_and_a_lone_host_is_skipped() -> None:
    plan = ib.ib_pair_plan(_fleet(6))
    results = _pair_run(plan)
    for host in plan["hosts"]:
        verdict = ib.ib_pairs_verdict(host, plan, results, 40.0)
        assert verdict["status"] == "pass", verdict
        assert {p["gbs"]["mlx5_0"] for p in verdict["details"]["pairs"].values()} == {48.75}
    lone = ib.ib_pair_plan(_fleet(1))
    assert ib.ib_pairs_verdict("n0", lone, [[]], 40.0)["status"] == "skipped"


def test_a_host_slow_with_every_partner_is_at_fault_and_its_partners_pass() -> None:
    plan = ib.ib_pair_plan(_fleet(6))
    results = _pair_run(plan, lambda s, c, hca: 195.0 if "n4" in (s, c) and hca == "mlx5_1" else 390.0)
    verdicts = {h: ib.ib_pairs_verdict(h, plan, results, 40.0) for h in plan["hosts"]}
    partners = sorted(verdicts["n4"]["details"]["pairs"])
    assert verdicts["n4"]["reasons"] == [
        f"fails ib_write_bw with every partner ({', '.join(p for p in verdicts['n4']['details']['pairs'])}): "
        + "; ".join(f"{p}: mlx5_1: 24.38 GB/s, below floor 40 GB/s" for p in verdicts["n4"]["details"]["pairs"])
    ]
    assert sorted(h for h, v in verdicts.items() if v["status"] == "fail") == ["n4"]
    assert all(verdicts[p]["details"]["pairs"]["n4"]["excused"] == "n4 fails with every partner" for p in partners)


def test_a_bad_path_names_both_hosts_each_with_its_partner() -> None:
    plan = ib.ib_pair_plan(_fleet(6, hcas=("mlx5_0",)))
    a = "n0"
    b = plan["hosts"][a][0]["partner"]
    results = _pair_run(plan, lambda s, c, hca: 100.0 if {s, c} == {a, b} else 390.0)
    verdicts = {h: ib.ib_pairs_verdict(h, plan, results, 40.0) for h in plan["hosts"]}
    assert sorted(h for h, v in verdicts.items() if v["status"] == "fail") == sorted([a, b])
    other = plan["hosts"][a][1]["partner"]
    assert verdicts[a]["reasons"] == [
        f"fails ib_write_bw only with partner {b} (leaf leaf-0 -> leaf {plan['hosts'][a][0]['partner_leaf']}): "
        f"mlx5_0: 12.50 GB/s, below floor 40 GB/s; passes with {other}"
    ]
    assert verdicts[b]["reasons"][0].startswith(f"fails ib_write_bw only with partner {a} (leaf ")
    # At the floor the same pair passes.
    results = _pair_run(plan, lambda s, c, hca: 320.0 if {s, c} == {a, b} else 390.0)
    assert ib.ib_pairs_verdict(a, plan, results, 40.0)["status"] == "pass"


def test_a_healthy_host_between_two_broken_ones_passes() -> None:
    plan = ib.ib_pair_plan(_fleet(12, hcas=("mlx5_0",)))
    host = "n0"
    broken = {s["partner"] for s in plan["hosts"][host]}
    results = _pair_run(plan, lambda s, c, hca: None if broken & {s, c} else 390.0)
    verdicts = {h: ib.ib_pairs_verdict(h, plan, results, 40.0) for h in plan["hosts"]}
    assert verdicts[host]["status"] == "pass", verdicts[host]
    assert sorted(h for h, v in verdicts.items() if v["status"] == "fail") == sorted(broken)
    assert "mlx5_0 exited rc=1: Couldn't connect to x:1" in verdicts[sorted(broken)[0]]["reasons"][0]


def test_pairs_compare_the_hcas_both_hosts_have() -> None:
    # A chassis with a ninth HCA (storage network) meets hosts with eight: mlx5_8 is not paired, so not failed.
    fleet = _fleet(4, hcas=tuple(f"mlx5_{i}" for i in range(8)))
    fleet[0]["hcas"] = [*fleet[0]["hcas"], "mlx5_8"]
    plan = ib.ib_pair_plan(fleet)
    assert all(step["hcas"] == fleet[1]["hcas"] for step in plan["hosts"]["n0"])
    results = _pair_run(plan)
    assert ib.ib_pairs_verdict("n0", plan, results, 40.0)["status"] == "pass"


def test_two_hosts_alone_cannot_say_which_side() -> None:
    plan = ib.ib_pair_plan(_fleet(2, hcas=("mlx5_0",)))
    results = _pair_run(plan, lambda s, c, hca: 100.0)
    verdict = ib.ib_pairs_verdict("n0", plan, results, 40.0)
    assert verdict["reasons"] == [
        "fails ib_write_bw with its only partner n1 (leaf leaf-0 -> leaf leaf-0): mlx5_0: 12.50 GB/s, "
        "below floor 40 GB/s; which side is at fault needs another partner"
    ]


# ----------------------------------------------------------------------------------------------- collective
def test_all_reduce_perf_real_mpirun_output_parses() -> None:
    # Two nodes over EFA, as mpirun --tag-output printed it, NCCL INFO lines between the rows.
    parsed = ib.parse_all_reduce_perf((SAMPLES / "all_reduce_perf_2node_efa_mpirun.txt").read_text())
    assert len(parsed["rows"]) == 31
    assert parsed["rows"][-1] == {"bytes": 1073741824, "busbw": 3.12, "wrong": 0}
    assert (parsed["avg_busbw"], parsed["out_of_bounds"]) == (1.15327, 0)
    with pytest.raises(ValueError, match="no result row"):
        ib.parse_all_reduce_perf("# nThread 1 nGpus 1\nTest NCCL failure common.cu:1038 'unhandled system error'\n")


def _group_run(stdout: str, rc: int = 0, stderr: str = "") -> dict[str, Any]:
    return {"rc": rc, "stdout": stdout, "stderr": stderr}


def test_collective_floor_passes_at_and_fails_below_with_attribution() -> None:
    text = (SAMPLES / "all_reduce_perf_2node_efa_mpirun.txt").read_text()
    groups = ib.ib_collective_groups(_fleet(2), 8)
    assert [[h["name"] for h in g] for g in groups] == [["n0", "n1"]]
    at = ib.ib_collective_verdict("n1", groups, {"n0": _group_run(text)}, {}, 3.12)
    assert at["status"] == "pass"
    assert at["details"]["busbw_gbs"] == 3.12
    below = ib.ib_collective_verdict("n1", groups, {"n0": _group_run(text)}, {}, 3.13)
    assert below["reasons"] == [
        "all_reduce_perf over 2 hosts (n0, n1): bus bandwidth 3.12 GB/s at 1073741824 B, below 3.13 GB/s; "
        "no member failed its pairs, so each is suspect"
    ]
    # A member that failed its pairs carries the group's failure; the others pass.
    blamed = {"n0": {"status": "fail"}, "n1": {"status": "pass"}}
    assert ib.ib_collective_verdict("n1", groups, {"n0": _group_run(text)}, blamed, 3.13)["status"] == "pass"
    on_n0 = ib.ib_collective_verdict("n0", groups, {"n0": _group_run(text)}, blamed, 3.13)
    assert on_n0["reasons"][0].endswith("; this host failed its pairs too")


def test_collective_failed_run_wrong_values_and_lone_host() -> None:
    groups = ib.ib_collective_groups(_fleet(3), 2)  # a last host alone joins the group before it
    assert [len(g) for g in groups] == [3]
    failed = _group_run("", 1, "ssh: connect to host 10.0.0.3 port 22: No route to host")
    verdict = ib.ib_collective_verdict("n2", groups, {groups[0][0]["name"]: failed}, {}, 1.0)
    assert verdict["reasons"][0].startswith("all_reduce_perf over 3 hosts")
    assert "mpirun exited rc=1: ssh: connect to host 10.0.0.3 port 22: No route to host" in verdict["reasons"][0]
    wrong = "    1048576  262144  float  sum  -1  583.4  1.80  1.80  2  579.6  1.81  1.81  0\n"
    verdict = ib.ib_collective_verdict("n2", groups, {groups[0][0]["name"]: _group_run(wrong)}, {}, 1.0)
    assert "2 wrong values in the all-reduce results" in verdict["reasons"][0]
    assert ib.ib_collective_verdict("n0", [], {}, {}, 1.0)["status"] == "skipped"
    with pytest.raises(ValueError, match="at least 2 hosts"):
        ib.ib_collective_groups(_fleet(4), 1)


def test_mpirun_shim_runs_the_group_and_refuses_an_unknown_host(tmp_path: Path) -> None:
    fabric = tmp_path / "fabric"
    fabric.mkdir()
    for i, knobs in enumerate(({}, {"ib_half_rate": ["mlx5_1"]})):
        (tmp_path / f"k{i}.json").write_text(json.dumps(knobs))
        (fabric / f"10.0.0.{i + 1}.json").write_text(
            json.dumps({"host": f"n{i}", "knob_file": str(tmp_path / f"k{i}.json")})
        )
    env = {**os.environ, "GPUCLUSTER_SHIM_FABRIC": str(fabric), "PATH": f"{SHIMS}:{os.environ['PATH']}"}
    argv = [
        str(SHIMS / "mpirun"),
        "--tag-output",
        "-np",
        "16",
        "-H",
        "10.0.0.1:8,10.0.0.2:8",
        "-x",
        "NCCL_IB_HCA=mlx5_0,mlx5_1",
        "all_reduce_perf",
        "-b",
        "64M",
        "-e",
        "256M",
        "-f",
        "2",
        "-g",
        "1",
    ]
    res = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    parsed = ib.parse_all_reduce_perf(res.stdout)
    assert res.returncode == 0
    assert parsed["rows"][-1]["bytes"] == 256 * 1024**2
    assert parsed["rows"][-1]["busbw"] == pytest.approx(0.9 * 2 * 24.375 * 256 / (256 + 8), abs=0.01)
    lost = [*argv[:5], "10.0.0.1:8,10.0.0.9:8", *argv[6:]]
    res = subprocess.run(lost, env=env, capture_output=True, text=True, check=False)
    assert res.returncode == 1
    assert "ssh: connect to host 10.0.0.9 port 22: No route to host" in res.stderr


# ----------------------------------------------------------------------------------------------- storage
MOUNTS = "sysfs /sys sysfs rw 0 0\n10.0.0.1@o2ib:/fs /lustre lustre rw,flock,lazystatfs 0 0\n"


def _fio(gbs: float, direction: str) -> dict[str, Any]:
    job = {"jobname": "j", "error": 0, direction: {"bw_bytes": int(gbs * 1e9)}}
    return {"rc": 0, "stdout": json.dumps({"jobs": [job]})}


def _storage(write_gbs: float, read_gbs: float = 5.0, mounts: str = MOUNTS, writers: int = 64) -> dict[str, Any]:
    slurp = {"content": base64.b64encode(mounts.encode()).decode()}
    verdict: dict[str, Any] = storage.storage_verdict(
        slurp,
        _fio(write_gbs, "write"),
        _fio(read_gbs, "read"),
        "/lustre",
        "lustre",
        ["rw", "flock"],
        1e12,
        30.0,
        writers,
        43200.0,
    )
    return verdict


def test_storage_floor_is_one_tb_in_30s_across_writers() -> None:
    # 1e12 B / 30 s / 64 writers = 0.5208 GB/s per node.
    assert _storage(0.53)["status"] == "pass"
    slow = _storage(0.52)
    assert slow["reasons"] == [
        "direct write on /lustre: 0.520 GB/s, below the per-node floor 0.521 GB/s "
        "(1 checkpoint of 1 TB in 30 s across 64 writers)"
    ]


def test_storage_recommends_young_interval() -> None:
    plan = _storage(1.0)["details"]["checkpoint"]
    # aggregate 64 GB/s -> 15.625 s per checkpoint; sqrt(2 * 15.625 * 43200) = 1161.9 s.
    assert plan == {"aggregate_write_gbs": 64.0, "checkpoint_write_s": 15.62, "recommended_interval_s": 1161.9}


def test_storage_mount_type_options_and_absence() -> None:
    wrong = _storage(1.0, mounts=MOUNTS.replace(" lustre rw,flock", " nfs4 rw"))
    assert wrong["reasons"] == ["/lustre is nfs4, expected lustre", "/lustre lacks mount option(s) flock"]
    gone = _storage(1.0, mounts="sysfs /sys sysfs rw 0 0\n")
    assert gone["reasons"] == ["/lustre is not mounted"]
    unreadable = storage.storage_verdict(
        {"failed": True, "msg": "file not found: /proc/mounts"},
        {"skipped": True},
        {"skipped": True},
        "/lustre",
        "lustre",
        [],
        1e12,
        30.0,
        64,
        43200.0,
    )
    assert unreadable["reasons"] == ["cannot read mounts file: file not found: /proc/mounts"]


def test_storage_reads_a_mount_point_the_kernel_escaped() -> None:
    # /proc/mounts as the kernel wrote it for tmpfs mounts at paths holding a tab, a space, a backslash and a
    # newline (proc(5): octal escapes). The former parser undid only the space, so these were never found.
    content = (SAMPLES / "proc_mounts_escaped.txt").read_text()
    points = {m["mountpoint"]: m for m in storage.parse_mounts(content)}
    for path in ("/tmp/acc\tmnt", "/tmp/acc mnt", "/tmp/acc\\mnt", "/tmp/acc\nmnt"):
        assert points[path]["fstype"] == "tmpfs", path
    assert points["/tmp/acc mnt"]["device"] == "acc dev"
    slurp = {"content": base64.b64encode(content.encode()).decode()}
    found = storage.storage_verdict(
        slurp, _fio(1.0, "write"), _fio(1.0, "read"), "/tmp/acc\tmnt", "tmpfs", ["rw"], 1e12, 30.0, 64, 43200.0
    )
    assert found["status"] == "pass"
    missing = storage.storage_verdict(
        slurp, _fio(1.0, "write"), _fio(1.0, "read"), "/tmp/acc\\011mnt", "tmpfs", ["rw"], 1e12, 30.0, 64, 43200.0
    )
    assert missing["reasons"] == ["/tmp/acc\\011mnt is not mounted"]


def test_fio_bandwidth_from_real_outputs_of_two_versions() -> None:
    # fio 3.33, captured: bw_bytes (B/s) beside bw (KiB/s); bw_bytes is the figure.
    write = (SAMPLES / "fio_3.33_direct_write.json").read_text()
    assert storage.fio_bandwidth(write, "write") == 1903797560.0
    read = (SAMPLES / "fio_3.33_direct_read.json").read_text()
    assert storage.fio_bandwidth(read, "read") == 1147160068.0
    with pytest.raises(ValueError, match="no read bandwidth"):
        storage.fio_bandwidth(write, "read")
    # fio 2.17 (PerfKitBenchmarker's test data): no bw_bytes at all, only bw in KiB/s, one job per direction.
    old = (SAMPLES / "fio_2.17_randrw.json").read_text()
    assert storage.fio_bandwidth(old, "read") == 129386 * 1024.0
    assert storage.fio_bandwidth(old, "write") == 39312 * 1024.0


def test_fio_refuses_output_it_cannot_judge() -> None:
    with pytest.raises(ValueError, match="not valid JSON"):
        storage.fio_bandwidth('note: both iodepth >= 1 and synchronous I/O engine\n{"jobs": [', "write")
    with pytest.raises(ValueError, match=r"jobs\[0\] > write > bw is 'fast', not a bandwidth"):
        storage.fio_bandwidth('{"jobs": [{"jobname": "j", "write": {"bw": "fast"}}]}', "write")
    with pytest.raises(ValueError, match="reported error 5"):
        storage.fio_bandwidth('{"jobs": [{"jobname": "j", "error": 5}]}', "write")


# Two fio servers on this machine (127.0.0.2 and 127.0.0.3), written to by one `fio --client=... --client=...` with
# the aggregate job's options: real fio 3.33 output (SOURCES.md).
ADDRESSES = {"gpu-a": "127.0.0.2", "gpu-b": "127.0.0.3"}


def _aggregate(stdout: str, target_s: float = 30.0, **client: Any) -> dict[str, Any]:
    verdict: dict[str, Any] = storage.aggregate_verdict(
        {"rc": 0, "stdout": stdout, **client}, ADDRESSES, 1e12, target_s, 43200.0
    )
    return verdict


def test_the_aggregate_of_every_host_writing_at_once_from_real_client_server_output() -> None:
    captured = (SAMPLES / "fio_3.33_client_server_2hosts_write.json").read_text()
    hosts, total = storage.fio_client_bandwidths(captured)
    assert hosts == {"127.0.0.2": 1036430332.0, "127.0.0.3": 962134250.0}
    assert total == 1924268501.0  # fio's "All clients": both hosts' bytes over the longest run, not the sum
    passed = _aggregate(captured, target_s=600.0)
    assert passed["status"] == "pass", passed
    details = passed["details"]
    assert (details["aggregate_write_gbs"], details["slowest_host"], details["slowest_gbs"]) == (1.924, "gpu-b", 0.962)
    assert details["checkpoint_write_s"] == 519.68  # 1 TB at 1.924 GB/s
    assert details["per_host_gbs"] == {"gpu-a": 1.036, "gpu-b": 0.962}
    slow = _aggregate(captured)
    assert slow["reasons"] == [
        "2 hosts writing at once: 1.924 GB/s, so 1 TB would take 520 s, above the 30 s target "
        "(slowest: gpu-b, 0.962 GB/s)"
    ]


def test_an_aggregate_run_missing_a_host_or_refused_names_it() -> None:
    captured = json.loads((SAMPLES / "fio_3.33_client_server_2hosts_write.json").read_text())
    one = {**captured, "client_stats": [s for s in captured["client_stats"] if s["hostname"] == "127.0.0.2"][:1]}
    lone = _aggregate(json.dumps(one), target_s=1200.0)
    assert lone["reasons"] == ["no write reported by gpu-b"]
    assert lone["details"]["aggregate_write_gbs"] == 1.036  # one host: its own figure
    refused = storage.aggregate_verdict(
        {"rc": 1, "stderr": "fio: connect: Connection refused\nfio: failed to connect to 127.0.0.3:8765\n"},
        ADDRESSES,
        1e12,
        30.0,
        43200.0,
    )
    assert refused["reasons"] == [
        "fio client exited rc=1: fio: connect: Connection refused fio: failed to connect to 127.0.0.3:8765"
    ]
    with pytest.raises(ValueError, match="no client_stats"):
        storage.fio_client_bandwidths((SAMPLES / "fio_3.33_direct_write.json").read_text())
    with pytest.raises(ValueError, match="names no hostname"):
        storage.fio_client_bandwidths('{"client_stats": [{"jobname": "j", "write": {"bw_bytes": 1}}]}')
    assert storage.aggregate_verdict({"skipped": True}, ADDRESSES, 1e12, 30.0, 43200.0)["status"] == "skipped"


# ----------------------------------------------------------------------------------------------- admission
def test_admission_report_taint_and_summary() -> None:
    ok = {"status": "pass", "reasons": [], "details": {}}
    bad = {"status": "fail", "reasons": ["GPU 3 hot"], "details": {}}
    roles = ["gpu_burn_in", "gpu_thermal_acceptance", "nvlink_acceptance"]
    verdicts = {"gpu_burn_in": ok, "gpu_thermal_acceptance": bad, "nvlink_acceptance": None}
    report = admission.admission_report("n1", "r", verdicts, roles)
    assert report["status"] == "fail"
    assert report["failed_checks"] == ["gpu_thermal_acceptance", "nvlink_acceptance"]
    assert report["reasons"] == [
        "gpu_thermal_acceptance: GPU 3 hot",
        "nvlink_acceptance: nvlink_acceptance did not run or left no verdict",
    ]
    assert admission.taint_reason(report) == "thermal.nvlink"
    good = admission.admission_report("n2", "r", dict.fromkeys(roles, ok), roles)
    summary = admission.admission_summary("r", [report, good], ["n1", "n2", "n3"])
    assert summary["passed"] == ["n2"]
    assert sorted(summary["failed"]) == ["n1", "n3"]
    assert summary["failed"]["n3"] == ["no report: the host failed or was unreachable before admission"]


# ----------------------------------------------------------------------------------------------- shims
@pytest.mark.parametrize(
    ("tool", "args", "stderr"),
    [
        ("nvidia-smi", ["--query-gpu=index,temp.gpu", "--format=csv"], 'Field "temp.gpu" is not a valid field'),
        ("nvidia-smi", ["--query-gpu=index"], "Missing --format"),
        ("nvidia-smi", ["nvlink", "--bogus"], "Invalid combination"),
        ("nvidia-smi", ["topo"], "Invalid combination"),
        ("dcgmi", ["diag", "-r", "7", "-j"], "Invalid value '7'"),
        ("dcgmi", ["diag", "-j"], "Must specify a diagnostic"),
        ("gpu_burn", ["-x", "10"], "Syntax error near `-x'"),
        ("ibstat", ["-z"], "invalid option"),
        ("ibstat", ["mlx5_9"], "'mlx5_9' failed"),
        ("ib_write_bw", ["-d", "mlx5_0", "--bogus"], "unrecognized option"),
        ("fio", ["--name=x", "--rw=write", "--size=1G"], "no filename"),
        ("fio", ["--name=x", "--rw=sideways", "--size=1G", "--filename=/tmp/x"], "failed parsing rw"),
        ("kubectl", ["label", "node", "n1"], "unknown command"),
        ("kubectl", ["taint", "node", "n1", "k=v:Sometimes"], "invalid taint spec"),
    ],
)
def test_shims_reject_what_the_real_tool_rejects(tool: str, args: list[str], stderr: str, tmp_path: Path) -> None:
    res = shim(tool, *args, knobs={}, tmp=tmp_path)
    assert res["rc"] != 0
    assert stderr in res["stderr"]


def test_gpu_burn_shim_needs_compare_ptx(tmp_path: Path) -> None:
    res = shim("gpu_burn", "-tc", "1", knobs={}, tmp=tmp_path)
    assert res["rc"] != 0
    assert "compare.ptx" in res["stderr"]
    (tmp_path / "compare.ptx").write_text("")
    res = shim("gpu_burn", "-tc", "1", knobs={"burn_sleep_cap_s": 0}, tmp=tmp_path)
    assert res["rc"] == 0
    assert "Tested 8 GPUs:" in res["stdout"]
