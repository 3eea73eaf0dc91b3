"""Parsers and verdict for the ib_acceptance role.

Port state comes from ``ibstat``; error counters from
``<sysfs_root>/class/infiniband/<hca>/ports/<port>/counters/<counter>`` read with ``grep -H``;
optional bandwidth from ``ib_write_bw --report_gbits`` loopback.

Across nodes (``tasks_from: pairs``): every host of the run gets partners on other leaves first, one per round
(:func:`ib_pair_plan`), runs ``ib_write_bw`` to each partner's HCA of the same index, and
:func:`ib_pairs_verdict` decides from every host's results whose fault a slow or broken pair is: a host that fails
with every partner is the one at fault; a pair that fails while both hosts pass with others names both, each with
its partner. Then groups of hosts (:func:`ib_collective_groups`) run nccl-tests' ``all_reduce_perf`` under
``mpirun``; :func:`ib_collective_verdict` holds the bus bandwidth at the largest size to a floor and puts a slow
group on the members its pairs already blamed, or on every member when they blamed none.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_CA = re.compile(r"^CA\s+'([^']+)'\s*$")
_PORT = re.compile(r"^\s+Port\s+(\d+):\s*$")
_KV = re.compile(r"^\s+([A-Za-z][A-Za-z ]*?):\s*(.*?)\s*$")
_BW_HEADER = re.compile(r"BW average\[(Gb/sec|MB/sec)\]")


def parse_ibstat(stdout: str) -> dict[str, dict[int, dict[str, str]]]:
    """{hca: {port: {"State": ..., "Physical state": ..., "Rate": ..., ...}}}."""
    cas: dict[str, dict[int, dict[str, str]]] = {}
    ca: str | None = None
    port: dict[str, str] | None = None
    port_indent = 0
    for raw in (stdout or "").splitlines():
        line = raw.expandtabs(8)
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        m = _CA.match(line)
        if m:
            ca, port = m.group(1), None
            cas[ca] = {}
            continue
        m = _PORT.match(line)
        if m and ca is not None:
            port, port_indent = {}, indent
            cas[ca][int(m.group(1))] = port
            continue
        m = _KV.match(line)
        if m and ca is not None:
            if port is not None and indent > port_indent:
                port[m.group(1)] = m.group(2)
            continue
        raise ValueError(f"unexpected line in ibstat output: {line.strip()!r}")
    if not cas:
        raise ValueError("ibstat listed no CAs")
    return cas


def parse_sysfs_counters(stdout: str) -> dict[str, int]:
    """``grep -H . <files>`` output ("<path>:<value>") to {"<hca> port <p> <counter>": value}."""
    counters: dict[str, int] = {}
    for line in (stdout or "").splitlines():
        if not line.strip():
            continue
        path, sep, value = line.rpartition(":")
        m = re.search(r"/infiniband/([^/]+)/ports/(\d+)/counters/([^/]+)$", path)
        if not sep or not m:
            raise ValueError(f"unexpected counter line: {line!r}")
        try:
            counters[f"{m.group(1)} port {m.group(2)} {m.group(3)}"] = int(value.strip())
        except ValueError:
            raise ValueError(f"counter {path} holds {value.strip()!r}, not a number") from None
    return counters


def parse_ib_write_bw(stdout: str) -> float:
    """Average bandwidth in GB/s (bytes) from the result row under the BW header."""
    lines = (stdout or "").splitlines()
    for i, line in enumerate(lines):
        m = _BW_HEADER.search(line)
        if not m:
            continue
        for row in lines[i + 1 :]:
            fields = row.split()
            if len(fields) >= 4 and all(re.fullmatch(r"[0-9.]+", f) for f in fields[:4]):
                avg = float(fields[3])
                # Gb/sec is decimal gigabits; perftest's MB/sec is 2^20 bytes.
                return avg / 8.0 if m.group(1) == "Gb/sec" else avg * 1048576 / 1e9
        break
    raise ValueError("no bandwidth result row in ib_write_bw output")


def _err(what: str, res: dict[str, Any]) -> str | None:
    if res.get("rc", 0) == 0:
        return None
    text = (res.get("stderr") or res.get("msg") or "").strip()
    return f"{what} exited rc={res.get('rc')}: {text}"


def _judge_write_bw(
    runs: list[tuple[str, dict[str, Any]]], floor_gbs: float, label: Callable[[str], str]
) -> tuple[dict[str, float], list[str]]:
    """(GB/s per HCA, problems) of ib_write_bw client results, each problem starting with ``label(hca)``."""
    gbs: dict[str, float] = {}
    problems: list[str] = []
    for hca, res in runs:
        if res.get("rc") != 0:
            text = " ".join(str(res.get("stderr") or res.get("msg") or "").split()) or "no output"
            problems.append(f"{label(hca)} exited rc={res.get('rc')}: {text}")
            continue
        try:
            value = parse_ib_write_bw(str(res.get("stdout", "")))
        except ValueError as exc:
            problems.append(f"{label(hca)}: {exc}")
            continue
        gbs[hca] = round(value, 3)
        if value < floor_gbs:
            problems.append(f"{label(hca)}: {value:.2f} GB/s, below floor {floor_gbs:g} GB/s")
    return gbs, problems


def ib_verdict(
    ibstat: dict[str, Any],
    before: dict[str, Any],
    after: dict[str, Any],
    bw_results: list[dict[str, Any]],
    hcas: list[str],
    port: int,
    rate_gbps: int,
    bw_floor_gbs: float,
) -> dict[str, Any]:
    """Every expected HCA port Active/LinkUp at rate, no counter growth, bandwidth above floor."""
    details: dict[str, Any] = {"expected_rate_gbps": rate_gbps, "hcas": hcas, "port": port}
    if ibstat.get("skipped"):
        return {"status": "skipped", "reasons": ["not run (check mode)"], "details": details}
    reasons: list[str] = []
    err = _err("ibstat", ibstat)
    if err:
        reasons.append(err)
    else:
        try:
            cas = parse_ibstat(ibstat.get("stdout", ""))
        except ValueError as exc:
            cas = {}
            reasons.append(f"ibstat: {exc}")
        ports = {}
        for hca in hcas:
            info = cas.get(hca, {}).get(port)
            name = f"{hca} port {port}"
            if cas and info is None:
                reasons.append(f"{name}: not listed by ibstat")
                continue
            if info is None:
                continue
            ports[name] = info
            if info.get("State") != "Active":
                reasons.append(f"{name}: State {info.get('State')}, expected Active")
            if info.get("Physical state") != "LinkUp":
                reasons.append(f"{name}: Physical state {info.get('Physical state')}, expected LinkUp")
            rate = info.get("Rate", "")
            if rate != str(rate_gbps):
                reasons.append(f"{name}: Rate {rate} Gb/s, expected {rate_gbps} Gb/s")
        details["ports"] = ports
    reads = []
    for label, res in (("before", before), ("after", after)):
        if res.get("skipped"):
            continue
        e = _err(f"reading IB counters ({label} traffic)", res)
        if e:
            reasons.append(e)
            continue
        try:
            reads.append(parse_sysfs_counters(res.get("stdout", "")))
        except ValueError as exc:
            reasons.append(f"IB counters ({label} traffic): {exc}")
    if len(reads) == 2:
        first, second = reads
        details["counters_after"] = second
        for key, value in sorted(second.items()):
            if key in first and value > first[key]:
                reasons.append(f"{key} grew from {first[key]} to {value} during traffic")
    runs = [(str(r.get("item", "?")), r) for r in bw_results if not r.get("skipped")]
    bws, problems = _judge_write_bw(runs, bw_floor_gbs, lambda hca: f"ib_write_bw loopback on {hca}")
    reasons += problems
    details["write_bw_gbs"] = bws
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "details": details}


# ----------------------------------------------------------------------------------------------- pairs
def _interleave_by_leaf(hosts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hosts in an order where neighbours sit on different leaves wherever the fleet allows it."""
    leaves: dict[str, list[dict[str, Any]]] = {}
    for host in sorted(hosts, key=lambda h: h["name"]):
        leaves.setdefault(str(host["leaf"]), []).append(host)
    queues = [leaves[leaf] for leaf in sorted(leaves, key=lambda leaf: (-len(leaves[leaf]), leaf))]
    order: list[dict[str, Any]] = []
    while any(queues):
        for queue in queues:
            if queue:
                order.append(queue.pop(0))
    return order


def ib_pair_plan(hosts: list[dict[str, Any]]) -> dict[str, Any]:
    """Rounds of ib_write_bw pairs over the run's hosts (each ``{"name", "leaf", "address", "hcas"}``).

    In round 0 neighbours of the leaf-interleaved order pair up (0-1, 2-3, ...), in round 1 the next neighbours
    (1-2, 3-4, ..., last-first), so each host meets two different partners, on other leaves when the fleet has
    them; with an odd count, the two hosts left out get a third round together. The first of each pair serves,
    the second connects, HCA n to HCA n over the HCAs both have. Returns ``{"rounds": n, "hosts": {name: [{"role",
    "partner", "partner_address", "partner_leaf", "hcas"} or {"role": "idle"} per round]}}``.
    """
    seen_names: set[str] = set()
    seen_addresses: dict[str, str] = {}
    for i, host in enumerate(hosts):
        if not isinstance(host, dict) or not all(host.get(k) for k in ("name", "leaf", "address")):
            raise ValueError(f"hosts[{i}] needs a name, a leaf and an address, got {host!r}")
        if host["name"] in seen_names:
            raise ValueError(f"host {host['name']} is listed twice")
        if host["address"] in seen_addresses:
            raise ValueError(
                f"hosts {seen_addresses[host['address']]} and {host['name']} share the address {host['address']}"
            )
        seen_names.add(host["name"])
        seen_addresses[host["address"]] = host["name"]
    order = _interleave_by_leaf(hosts)
    n = len(order)
    rounds: list[list[tuple[int, int]]] = []
    if n >= 2:
        rounds.append([(i, i + 1) for i in range(0, n - 1, 2)])
    if n >= 3:
        second = [(i, (i + 1) % n) for i in range(1, n, 2)]
        rounds.append([(a, b) for a, b in second if a != b])
        if n % 2:
            rounds.append([(0, n - 1)])
    rounds = [r for r in rounds if r]
    plan: dict[str, list[dict[str, Any]]] = {h["name"]: [{"role": "idle"} for _ in rounds] for h in order}
    for r, pairs in enumerate(rounds):
        for a, b in pairs:
            # HCA n to HCA n over the HCAs both hosts have (a ninth, storage HCA on one of them is not compared).
            theirs = set(order[b].get("hcas") or [])
            common = [h for h in order[a].get("hcas") or [] if h in theirs]
            for me, other, role in ((order[a], order[b], "server"), (order[b], order[a], "client")):
                plan[me["name"]][r] = {
                    "role": role,
                    "partner": other["name"],
                    "partner_address": other["address"],
                    "partner_leaf": other["leaf"],
                    "hcas": common,
                }
    return {"rounds": len(rounds), "hosts": plan}


def ib_pair_results(clients: list[dict[str, Any]], me: str, step: dict[str, Any]) -> list[Any]:
    """This round's client results, slimmed to what the verdict reads (one entry per HCA of the pair)."""
    if step.get("role") != "client":
        return []
    by_hca = {str(r.get("item")): r for r in clients if isinstance(r, dict)}
    out = []
    for hca in step.get("hcas") or []:
        res = by_hca.get(hca, {"rc": None, "msg": "the client did not run"})
        out.append(
            {
                "server": step["partner"],
                "server_leaf": step["partner_leaf"],
                "client": me,
                "hca": hca,
                "rc": res.get("rc"),
                "skipped": bool(res.get("skipped")),
                "stdout": str(res.get("stdout", ""))[-4000:],
                "stderr": str(res.get("stderr") or res.get("msg") or "")[-1000:],
            }
        )
    return out


def _pair_outcome(results: list[dict[str, Any]], floor_gbs: float) -> tuple[dict[str, float], list[str]]:
    """(GB/s per HCA, problems) of one pair's client results."""
    return _judge_write_bw([(str(r["hca"]), r) for r in results], floor_gbs, lambda hca: hca)


def ib_pairs_verdict(
    host: str, plan: dict[str, Any], results: list[list[dict[str, Any]]], floor_gbs: float
) -> dict[str, Any]:
    """This host's verdict from every host's pair results (:func:`ib_pair_results`, gathered over the run).

    A pair fails when any HCA's ib_write_bw failed, printed no result or ran below ``floor_gbs``. A host fails when
    it fails with every partner (at least two) while one of them passes with another host: the fault is its own.
    A failing pair whose other host is at fault in that sense is excused. Any other failing pair fails this host too, naming the partner and the leaves
    between them: the link or path between the two is suspect, and which side needs a third partner to tell.
    """
    details: dict[str, Any] = {"floor_gbs": floor_gbs, "pairs": {}}
    steps = [s for s in plan.get("hosts", {}).get(host, []) if s.get("role") in ("server", "client")]
    if not steps:
        return {
            "status": "skipped",
            "reasons": ["no partner in this run: accept nodes at least two at a time"],
            "details": details,
        }
    flat = [r for per_host in results for r in (per_host or []) if isinstance(r, dict)]
    if flat and all(r.get("skipped") for r in flat):
        return {"status": "skipped", "reasons": ["not run (check mode)"], "details": details}
    by_pair: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for res in flat:
        by_pair.setdefault((res["server"], res["client"]), []).append(res)
    outcome: dict[frozenset[str], tuple[dict[str, float], list[str]]] = {}
    for name, host_steps in plan.get("hosts", {}).items():
        for step in host_steps:
            if step.get("role") != "client":
                continue
            got = by_pair.get((step["partner"], name))
            if not got:
                hcas = step.get("hcas") or ["(no HCA in common)"]
                got = [{"hca": hca, "rc": None, "stderr": f"{name} reported no result"} for hca in hcas]
            outcome[frozenset((name, step["partner"]))] = _pair_outcome(got, floor_gbs)

    def partners(of: str) -> list[str]:
        return [s["partner"] for s in plan["hosts"].get(of, []) if s.get("role") in ("server", "client")]

    def failing(of: str) -> list[str]:
        return [p for p in partners(of) if outcome.get(frozenset((of, p)), ({}, ["no result"]))[1]]

    def passes_somewhere(of: str) -> bool:
        return len(failing(of)) < len(partners(of))

    def at_fault(of: str) -> bool:
        # Failing with every partner puts the fault on this host only if some partner passes with another host:
        # a healthy host whose partners are all broken fails with every partner too.
        mine = partners(of)
        return len(mine) >= 2 and not passes_somewhere(of) and any(passes_somewhere(p) for p in mine)

    leaf_of = {s["partner"]: s["partner_leaf"] for steps_ in plan["hosts"].values() for s in steps_ if "partner" in s}
    for step in steps:
        gbs, problems = outcome.get(frozenset((host, step["partner"])), ({}, ["no result"]))
        details["pairs"][step["partner"]] = {
            "role": step["role"],
            "leaf": step["partner_leaf"],
            "gbs": gbs,
            "problems": problems,
        }
    reasons: list[str] = []
    mine_failing = failing(host)
    if at_fault(host):
        worst = "; ".join(f"{p}: {', '.join(outcome[frozenset((host, p))][1])}" for p in mine_failing)
        reasons.append(f"fails ib_write_bw with every partner ({', '.join(mine_failing)}): {worst}")
    else:
        passing = [p for p in partners(host) if p not in mine_failing]
        for partner in mine_failing:
            if at_fault(partner):
                details["pairs"][partner]["excused"] = f"{partner} fails with every partner"
                continue
            problems = ", ".join(outcome[frozenset((host, partner))][1])
            path = f"leaf {leaf_of.get(host, '?')} -> leaf {leaf_of.get(partner, '?')}"
            if passing:
                reasons.append(
                    f"fails ib_write_bw only with partner {partner} ({path}): {problems}; passes with "
                    f"{', '.join(passing)}"
                )
            elif len(partners(host)) == 1:
                reasons.append(
                    f"fails ib_write_bw with its only partner {partner} ({path}): {problems}; which side is at "
                    "fault needs another partner"
                )
            else:
                reasons.append(
                    f"fails ib_write_bw with partner {partner} ({path}): {problems}; it passes with no partner and "
                    "its partners with no one else, so the fault may be on either side"
                )
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "details": details}


# ----------------------------------------------------------------------------------------------- collective
_MPI_TAG = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:")
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")
_NUMBER = re.compile(r"^[0-9]+(\.[0-9]+)?$")


def parse_all_reduce_perf(stdout: str) -> dict[str, Any]:
    """nccl-tests' result table: ``{"rows": [{"bytes", "busbw", "wrong"}], "avg_busbw", "out_of_bounds"}``.

    Reads the output as ``mpirun --tag-output`` leaves it too (``[1,0]<stdout>:`` before each line, NCCL INFO lines
    in between). ``busbw`` is the better of out-of-place and in-place (GB/s); ``wrong`` their sum (``N/A`` when the
    run did not check, counted 0). Raises ValueError when there is no result row.
    """
    rows: list[dict[str, Any]] = []
    avg: float | None = None
    out_of_bounds: int | None = None
    for raw in (stdout or "").splitlines():
        line = _MPI_TAG.sub("", raw).strip()
        if m := _AVG_BUSBW.match(line):
            avg = float(m.group(1))
            continue
        if m := _OUT_OF_BOUNDS.match(line):
            out_of_bounds = int(m.group(1))
            continue
        fields = line.split()
        # size count type redop root | time algbw busbw #wrong (out-of-place) [| time algbw busbw #wrong (in-place)]
        if len(fields) not in (9, 13) or not (fields[0].isdigit() and fields[1].isdigit()):
            continue
        if not all(_NUMBER.match(f) for f in (fields[6], fields[7])):
            continue
        busbw = [float(fields[7])]
        wrong = [fields[8]]
        if len(fields) == 13 and _NUMBER.match(fields[11]):
            busbw.append(float(fields[11]))
            wrong.append(fields[12])
        rows.append({"bytes": int(fields[0]), "busbw": max(busbw), "wrong": sum(int(w) for w in wrong if w.isdigit())})
    if not rows:
        raise ValueError("no result row in all_reduce_perf output")
    return {"rows": rows, "avg_busbw": avg, "out_of_bounds": out_of_bounds}


def ib_collective_groups(hosts: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    """The run's hosts in groups of ``size`` across leaves (the pair plan's order); a last host alone joins the
    group before it. Each group's first host runs mpirun."""
    if size < 2:
        raise ValueError(f"a collective group needs at least 2 hosts, got {size}")
    order = _interleave_by_leaf(hosts)
    groups = [order[i : i + size] for i in range(0, len(order), size)]
    if len(groups) > 1 and len(groups[-1]) == 1:
        groups[-2].extend(groups.pop())
    return [g for g in groups if len(g) >= 2]


def ib_collective_my_group(groups: list[list[dict[str, Any]]], host: str) -> list[dict[str, Any]]:
    """The group ``host`` is in, or an empty list."""
    return next((g for g in groups if any(h["name"] == host for h in g)), [])


def ib_collective_verdict(
    host: str,
    groups: list[list[dict[str, Any]]],
    results: dict[str, Any],
    pair_verdicts: dict[str, Any],
    floor_gbs: float,
) -> dict[str, Any]:
    """This host's verdict from its group's all_reduce_perf run (``results[leader]``, the registered mpirun result).

    The group fails when mpirun failed, the output has no result, any value was wrong, or the bus bandwidth at the
    largest size is below ``floor_gbs``. A failing group is put on its members whose pair check failed; when none
    did, every member fails, named with the group.
    """
    mine = next((g for g in groups if any(h["name"] == host for h in g)), None)
    details: dict[str, Any] = {"floor_gbs": floor_gbs}
    if mine is None:
        return {
            "status": "skipped",
            "reasons": ["no group in this run: accept nodes at least two at a time"],
            "details": details,
        }
    members = [h["name"] for h in mine]
    leader = members[0]
    details.update({"group": members, "leader": leader})
    res = results.get(leader) or {}
    if res.get("skipped") or not res:
        return {
            "status": "skipped",
            "reasons": [f"{leader} ran no all_reduce_perf (check mode or disabled)"],
            "details": details,
        }
    problems: list[str] = []
    if res.get("rc") != 0:
        text = " ".join(str(res.get("stderr") or res.get("msg") or "").split())[-300:]
        problems.append(f"mpirun exited rc={res.get('rc')}: {text or 'no output'}")
    else:
        try:
            parsed = parse_all_reduce_perf(str(res.get("stdout", "")))
        except ValueError as exc:
            problems.append(str(exc))
        else:
            largest = max(parsed["rows"], key=lambda r: r["bytes"])
            details.update({"busbw_gbs": largest["busbw"], "bytes": largest["bytes"], "avg_busbw": parsed["avg_busbw"]})
            wrong = sum(r["wrong"] for r in parsed["rows"]) + (parsed["out_of_bounds"] or 0)
            if wrong:
                problems.append(f"{wrong} wrong values in the all-reduce results")
            if largest["busbw"] < floor_gbs:
                problems.append(
                    f"bus bandwidth {largest['busbw']:.2f} GB/s at {largest['bytes']} B, below {floor_gbs:g} GB/s"
                )
    details["problems"] = problems
    if not problems:
        return {"status": "pass", "reasons": [], "details": details}
    blamed = [m for m in members if (pair_verdicts.get(m) or {}).get("status") == "fail"]
    what = f"all_reduce_perf over {len(members)} hosts ({', '.join(members)}): {'; '.join(problems)}"
    if blamed:
        details["attributed_to"] = blamed
        if host not in blamed:
            return {"status": "pass", "reasons": [], "details": details}
        return {"status": "fail", "reasons": [f"{what}; this host failed its pairs too"], "details": details}
    return {
        "status": "fail",
        "reasons": [f"{what}; no member failed its pairs, so each is suspect"],
        "details": details,
    }


class FilterModule:
    """ib_acceptance filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "ib_verdict": ib_verdict,
            "ib_pair_plan": ib_pair_plan,
            "ib_pair_results": ib_pair_results,
            "ib_pairs_verdict": ib_pairs_verdict,
            "ib_collective_groups": ib_collective_groups,
            "ib_collective_my_group": ib_collective_my_group,
            "ib_collective_verdict": ib_collective_verdict,
        }
