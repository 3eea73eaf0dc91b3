"""InfiniBand leaf and block of every host, from ``ibnetdiscover`` output, for the ib_topology role.

:func:`ibnetdiscover_fabric` reads the default (topology file) format of ``ibnetdiscover`` (rdma-core
``infiniband-diags/ibnetdiscover.c``; also the ``-g`` grouped form and ``-f`` extras): one block per node, each
``vendid=``, ``devid=``, an optional ``sysimgguid=``, ``switchguid=``/``caguid=``/``rtguid=``, the node line and
one line per linked port. A CA belongs to a host when its node description has two words, ``"<host> <device>"``
(what rdma-ndd sets); SHARP ``Aggregation Node`` CAs and HCAs still carrying the vendor's default description
(``"MT4129 ConnectX7   Mellanox Technologies"``) have more and belong to no host. A switch's display name is
``<name>`` of a Mellanox ``MF0;<name>:<model>/U1`` description, else the whole description.

:func:`ibnetdiscover_topology` derives the Kueue topology levels:

* leaf switch: a switch with at least one host HCA.
* leaf domain: leaf switches that serve the same hosts, merged. Rail-optimised fabrics cable each host's HCAs
  to as many leaves (one per rail), so "the host's leaf" is the set of rail leaves of its scalable unit. Two
  leaves are merged when the hosts they share are at least ``min_shared`` (default half) of the smaller leaf's
  hosts, transitively: identical host sets merge, and so does a rail leaf that also serves a management server
  (the real NDR sample has a UFM server on two of its four rails), while one stray cable does not merge two
  scalable units.
* tier-1 switch: a switch that is not a leaf but links to one.
* block: a connected part of the graph of leaf and tier-1 switches (the switches above tier 1 left out, and the
  leaves of one domain always together): a 2-tier fabric is one block, a 3-tier fabric one block per pod.

A host whose HCAs hang off more than one leaf domain (miscabled) gets the domain holding most of its HCA links
(ties: the lowest label value) and a warning naming the host, its HCAs and their switches; a host whose HCAs have
no link to a switch is left out with a warning. Label values are Kubernetes label values derived from switch
names: the lowest switch name of the domain (of the block's tier-1 switches, or leaves in a 1-tier fabric),
with characters outside ``[A-Za-z0-9._-]`` replaced; a value over 63 characters keeps its first 52 and appends
10 hex digits of the SHA-1 of the name; names that two domains share get the domain's lowest switch GUID
appended. The values do not depend on the order of the output's blocks.

Errors are :class:`IbnetdiscoverError` (a ``ValueError``, which Ansible reports as the filter's failure with
this message), naming the line and what was expected there.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

_HEX = r"[0-9a-fA-F]+"
_GUID = r"[0-9a-fA-F]{1,16}"
_FULL_INFO = r"(?:\s+s=\d+\s+w=\d+\s+v=\d+)?"
_EXT = r"(?:\[ext \d+\])?"

_VENDID = re.compile(rf"^vendid=0x{_HEX}\s*$")
_DEVID = re.compile(rf"^devid=0x{_HEX}\s*$")
# -g appends "# Chassis <n> (<name>)" to sysimgguid= and "# <chassis type> <slot>" to switchguid=.
_SYSIMGGUID = re.compile(rf"^sysimgguid=0x{_HEX}(?:\s+#.*)?$")
_NODEGUID = re.compile(rf"^(switch|ca|rt)guid=0x({_GUID})(?:\((?:{_HEX})\))?(?:\s+#.*)?$")
_SWITCH = re.compile(
    rf'^Switch\s+(\d+)\s+"S-({_GUID})"\s+#\s+"(.*)"\s+(?:base|enhanced)\s+port\s+0\s+lid\s+\d+\s+lmc\s+\d+\s*$'
)
_CA = re.compile(rf'^(Ca|Rt)\s+(\d+)\s+"([HR])-({_GUID})"\s+#\s+"(.*)"(?:\s+\(scp\))?\s*$')
# Switch port: [p][ext n]  "X-<guid>"[rp][ext n](<rportguid>)   # "<remote desc>" lid <rlid> <width><speed>
_SWITCH_PORT = re.compile(
    rf'^\[(\d+)\]{_EXT}\s+"([SHR])-({_GUID})"\[(\d+)\]{_EXT}(?:\({_HEX}\))?\s+#\s+"(.*)"\s+lid\s+\d+\s+(\S+)'
    rf"{_FULL_INFO}(?:\s+slot\s+\d+|\s+\(scp\))?\s*$"
)
# CA port: [p](<portguid>)  "X-<guid>"[rp][ext n] (<rportguid>)  # lid <lid> lmc <lmc> "<remote desc>" lid <rlid> <rate>
_CA_PORT = re.compile(
    rf'^\[(\d+)\]\({_HEX}\)\s+"([SHR])-({_GUID})"\[(\d+)\]{_EXT}(?:\s*\({_HEX}\))?\s+#\s+lid\s+\d+\s+lmc\s+\d+\s+'
    rf'"(.*)"\s+lid\s+\d+\s+(\S+){_FULL_INFO}\s*$'
)
# Lines of the -g grouped output outside node blocks.
_GROUP_LINE = re.compile(rf"^(?:Chassis\s+\d+(?:\s+\(guid 0x{_HEX}\))?|Non-Chassis Nodes|Hostname:\s.*)\s*$")
_COMMENT = re.compile(r"^\s*#")
# Other outputs of ibnetdiscover and its siblings, recognised to say what was passed instead.
_OTHER_OUTPUTS = (
    (re.compile(r"^(?:CA|SW|RT)\s+\d+\s+\d+\s+0x[0-9a-f]+\s"), "the ports report of 'ibnetdiscover -p'"),
    (re.compile(r"^(?:Ca|Switch|Router)\s+:\s+0x[0-9a-f]+\s+ports\s"), "a node list ('ibnetdiscover -l/-H/-S/-R')"),
    (re.compile(r"^(?:Switch|CA):\s"), "iblinkinfo output"),
)
_MELLANOX_NAME = re.compile(r"^[^;:]+;([^;:]+):[^;:]+$")
_PLACEHOLDER_HOSTS = {"localhost", "localhost.localdomain", "(none)"}
_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")

_EXPECT = {
    "vendid": "'devid=0x<id>'",
    "devid": "'sysimgguid=0x<guid>' or 'switchguid=/caguid=/rtguid=0x<guid>'",
    "sysimgguid": "'switchguid=/caguid=/rtguid=0x<guid>'",
}
_NODE_LINE = {"switch": "Switch", "ca": "Ca", "rt": "Rt"}


class IbnetdiscoverError(ValueError):
    """Input that is not complete ibnetdiscover output (the message names the line), or a bad argument."""


def _show(line: str) -> str:
    text = line.strip()
    return repr(text if len(text) <= 100 else text[:100] + "...")


def _guid(text: str) -> str:
    return f"{int(text, 16):016x}"


def switch_name(description: str) -> str:
    """``<name>`` of a Mellanox ``MF0;<name>:<model>/U1`` description, else the description itself."""
    m = _MELLANOX_NAME.match(description)
    return m.group(1) if m else description


def host_of(description: str) -> tuple[str, str] | None:
    """(host, device) of a ``"<host> <device>"`` CA description; None for any other description."""
    words = description.split()
    return (words[0], words[1]) if len(words) == 2 else None


def ibnetdiscover_fabric(text: str) -> dict[str, Any]:
    """Nodes and links of ibnetdiscover's default output.

    Returns ``{"switches": {guid: {name, description, ports, line}}, "cas": {guid: {description, host, device,
    router, ports, line}}, "links": [{a, a_port, b, b_port}]}``: GUIDs as 16 hex digits, every link once
    (``(a, a_port) < (b, b_port)``, from the port lines of either end), ``host``/``device`` None for a CA that
    is not ``"<host> <device>"``. Raises :class:`IbnetdiscoverError` naming the line for anything else.
    """
    if not isinstance(text, str):
        raise IbnetdiscoverError(f"ibnetdiscover output must be text, got {type(text).__name__}")
    if not text.strip():
        raise IbnetdiscoverError(
            "ibnetdiscover output is empty: it printed nothing (did it run on a host with an HCA?)"
        )
    switches: dict[str, dict[str, Any]] = {}
    cas: dict[str, dict[str, Any]] = {}
    links: dict[tuple[tuple[str, int], tuple[str, int]], dict[str, Any]] = {}
    referenced: dict[str, tuple[str, int]] = {}  # remote node guid -> (type letter, first line naming it)
    state = "between"  # between blocks; or the last header line read; or "ports" after the node line
    block_start = 0
    guid_kind, guid_value = "", ""
    node: tuple[str, str] | None = None  # ("switch" | "ca", guid) whose port lines follow
    lines = text.splitlines()
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip()
        if not line.strip():
            if state in _EXPECT or state == "guid":
                raise IbnetdiscoverError(
                    f"ibnetdiscover output line {number}: the node block that starts at line {block_start} ends "
                    f"early: expected {_expected(state, guid_kind)}, got a blank line"
                )
            state, node = "between", None
            continue
        if _COMMENT.match(line):
            continue
        if _VENDID.match(line) and state in {"between", "ports"}:
            state, block_start, node = "vendid", number, None
            continue
        if state == "between":
            if _GROUP_LINE.match(line):
                continue
            hint = next((f" (this looks like {what})" for pattern, what in _OTHER_OUTPUTS if pattern.match(line)), "")
            raise IbnetdiscoverError(
                f"ibnetdiscover output line {number}: expected 'vendid=0x<id>' starting a node block, "
                f"got {_show(line)}{hint}; the role reads ibnetdiscover's default topology output"
            )
        if state == "vendid":
            if not _DEVID.match(line):
                raise IbnetdiscoverError(_unexpected(number, state, guid_kind, line, block_start))
            state = "devid"
            continue
        if state in {"devid", "sysimgguid"}:
            if state == "devid" and _SYSIMGGUID.match(line):
                state = "sysimgguid"
                continue
            m = _NODEGUID.match(line)
            if not m:
                raise IbnetdiscoverError(_unexpected(number, state, guid_kind, line, block_start))
            state, guid_kind, guid_value = "guid", m.group(1), _guid(m.group(2))
            continue
        if state == "guid":
            node = _node_line(number, line, (guid_kind, guid_value, block_start), switches=switches, cas=cas)
            state = "ports"
            continue
        # state == "ports"
        assert node is not None
        kind, guid = node
        m = (_SWITCH_PORT if kind == "switch" else _CA_PORT).match(line)
        if not m:
            where = f"the {_NODE_LINE[kind]} block that starts at line {block_start}"
            form = (
                '\'[<port>] "<S|H|R>-<guid>"[<port>] # "<description>" lid <lid> <width><speed>\''
                if kind == "switch"
                else '\'[<port>](<port guid>) "<S|H|R>-<guid>"[<port>] # lid <lid> lmc <lmc> "<description>" lid ..\''
            )
            raise IbnetdiscoverError(
                f"ibnetdiscover output line {number}: expected a port line {form} in {where}, got {_show(line)}"
            )
        port, letter, remote, remote_port, _desc, _rate = m.groups()
        remote = _guid(remote)
        here, there = (guid, int(port)), (remote, int(remote_port))
        key = (here, there) if here <= there else (there, here)
        if key not in links:
            links[key] = {"a": key[0][0], "a_port": key[0][1], "b": key[1][0], "b_port": key[1][1]}
        referenced.setdefault(remote, (letter, number))
    if state in _EXPECT or state == "guid":
        raise IbnetdiscoverError(
            f"ibnetdiscover output line {len(lines)}: the output ends inside the node block that starts at line "
            f"{block_start}: expected {_expected(state, guid_kind)} (truncated output?)"
        )
    if not switches and not cas:
        raise IbnetdiscoverError("ibnetdiscover output has no node blocks, only comments")
    for remote, (letter, number) in sorted(referenced.items(), key=lambda item: item[1][1]):
        known = switches if letter == "S" else cas
        if remote not in known:
            raise IbnetdiscoverError(
                f'ibnetdiscover output line {number}: links to "{letter}-{remote}", which has no node block in the '
                "output (truncated output?)"
            )
    return {
        "switches": switches,
        "cas": cas,
        "links": [links[key] for key in sorted(links)],
    }


def _expected(state: str, guid_kind: str) -> str:
    if state == "guid":
        return f"the '{_NODE_LINE[guid_kind]}' line of the node"
    return _EXPECT[state]


def _unexpected(number: int, state: str, guid_kind: str, line: str, block_start: int) -> str:
    return (
        f"ibnetdiscover output line {number}: expected {_expected(state, guid_kind)} in the node block that "
        f"starts at line {block_start}, got {_show(line)}"
    )


def _node_line(
    number: int,
    line: str,
    header: tuple[str, str, int],
    *,
    switches: dict[str, dict[str, Any]],
    cas: dict[str, dict[str, Any]],
) -> tuple[str, str]:
    """Record the node of a Switch/Ca/Rt line after its block's header (guid kind, guid, first line); returns
    ("switch" | "ca", guid)."""
    guid_kind, guid_value, block_start = header
    if guid_kind == "switch":
        m = _SWITCH.match(line)
        fields = (m.group(1), "S", m.group(2), m.group(3)) if m else None
    else:
        m = _CA.match(line)
        fields = (m.group(2), m.group(3), m.group(4), m.group(5)) if m and m.group(1).lower() == guid_kind else None
    if fields is None:
        raise IbnetdiscoverError(_unexpected(number, "guid", guid_kind, line, block_start))
    ports, _letter, raw_guid, description = fields
    guid = _guid(raw_guid)
    if guid != guid_value:
        raise IbnetdiscoverError(
            f"ibnetdiscover output line {number}: the node GUID {guid} differs from the {guid_kind}guid=0x"
            f"{guid_value.lstrip('0') or '0'} of its block (line {block_start})"
        )
    earlier = switches.get(guid) or cas.get(guid)
    if earlier:
        raise IbnetdiscoverError(
            f"ibnetdiscover output line {number}: node {guid} has a second block (the first is at line "
            f"{earlier['line']}): two outputs pasted together?"
        )
    if guid_kind == "switch":
        switches[guid] = {
            "name": switch_name(description),
            "description": description,
            "ports": int(ports),
            "line": number,
        }
        return "switch", guid
    owner = host_of(description)
    cas[guid] = {
        "description": description,
        "host": owner[0] if owner and guid_kind == "ca" else None,
        "device": owner[1] if owner and guid_kind == "ca" else None,
        "router": guid_kind == "rt",
        "ports": int(ports),
        "line": number,
    }
    return "ca", guid


def is_label_value(value: str) -> bool:
    """Whether ``value`` is a valid Kubernetes label value (empty included)."""
    return len(value) <= 63 and bool(_LABEL_VALUE.match(value))


def label_value(name: str) -> str:
    """A non-empty Kubernetes label value for ``name``: itself when valid, else sanitised, hashed when too long."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", name)
    value = re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)
    if value and len(value) <= 63:
        return value
    digest = hashlib.sha1(name.encode("utf-8"), usedforsecurity=False).hexdigest()[:10]
    head = re.sub(r"[^A-Za-z0-9]+$", "", value[:52])
    return f"{head}-{digest}" if head else f"ib-{digest}"


class _Sets:
    """Union-find over switch GUIDs."""

    def __init__(self, items: Iterable[str]) -> None:
        self.parent = {item: item for item in items}

    def find(self, item: str) -> str:
        root = item
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[item] != root:
            self.parent[item], item = root, self.parent[item]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> list[list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for item in self.parent:
            out[self.find(item)].append(item)
        return [sorted(members) for members in out.values()]


def _values(groups: list[list[str]], head: dict[int, str], switches: dict[str, dict[str, Any]]) -> list[str]:
    """Label value of each group from the switch ``head[i]`` of group i (its lowest by name, then GUID)."""
    base = [label_value(switches[head[i]]["name"]) for i in range(len(groups))]
    taken = Counter(base)
    return [
        value if taken[value] == 1 else label_value(f"{switches[head[i]]['name']}-{head[i]}")
        for i, value in enumerate(base)
    ]


def _lowest(guids: Iterable[str], switches: dict[str, dict[str, Any]]) -> str:
    return min(guids, key=lambda g: (switches[g]["name"], g))


def ibnetdiscover_topology(text: str, host_pattern: str = "", min_shared: float = 0.5) -> dict[str, Any]:
    """Every host's ``{"leaf": <value>, "block": <value>}`` from ibnetdiscover output, and what it rests on.

    ``host_pattern``: a regular expression (``re.search``) a host name must match for its HCAs to count (e.g.
    to keep a management server cabled to a spine from making the spine a leaf); empty for every host.
    ``min_shared``: the share of the smaller leaf's hosts two leaves must share to be one leaf domain.

    Returns ``{"hosts": {host: {leaf, block}}, "warnings": [str], "left_out": {host: reason},
    "leaf_domains": {leaf value: {block, switches, hosts}}, "blocks": {block value: {leaf_domains, tier1}},
    "host_hcas": {host: ["<device> (<guid>) -> <switch> port <n>"]}, "counts": {...}}``.
    """
    if not 0 < min_shared <= 1:
        raise IbnetdiscoverError(f"min_shared must be in (0, 1], got {min_shared!r}")
    try:
        wanted = re.compile(host_pattern) if host_pattern else None
    except re.error as exc:
        raise IbnetdiscoverError(f"host_pattern {host_pattern!r} is not a regular expression: {exc}") from None
    fabric = ibnetdiscover_fabric(text)
    switches: dict[str, dict[str, Any]] = fabric["switches"]
    cas: dict[str, dict[str, Any]] = fabric["cas"]
    warnings: list[str] = []

    neighbours: dict[str, set[str]] = {guid: set() for guid in switches}
    ca_links: dict[str, set[tuple[str, int, int]]] = defaultdict(set)  # ca -> {(switch, switch port, ca port)}
    for link in fabric["links"]:
        a, b = link["a"], link["b"]
        if a in switches and b in switches:
            if a != b:
                neighbours[a].add(b)
                neighbours[b].add(a)
        elif a in switches:
            ca_links[b].add((a, link["a_port"], link["b_port"]))
        elif b in switches:
            ca_links[a].add((b, link["b_port"], link["a_port"]))

    host_cas: dict[str, list[str]] = defaultdict(list)
    by_description: dict[tuple[str, str], list[str]] = defaultdict(list)
    for guid, ca in sorted(cas.items()):
        if ca["host"] is None or (wanted and not wanted.search(ca["host"])):
            continue
        host_cas[ca["host"]].append(guid)
        by_description[(ca["host"], ca["device"])].append(guid)
    # HCAs nobody named: their hosts stay unknown (SHARP aggregation nodes and routers are expected to be unnamed).
    unnamed = [
        guid
        for guid, ca in sorted(cas.items(), key=lambda item: item[1]["line"])
        if ca["host"] is None and not ca["router"] and "Aggregation Node" not in ca["description"]
    ]
    if unnamed:
        examples = ", ".join(f"{g} {cas[g]['description']!r} (line {cas[g]['line']})" for g in unnamed[:3])
        warnings.append(
            f"{len(unnamed)} CAs have no '<host> <device>' node description, so their hosts are labelled from "
            f"their other HCAs or not at all: {examples}{', ...' if len(unnamed) > 3 else ''}"
        )
    for host in sorted(h for h in host_cas if h.lower() in _PLACEHOLDER_HOSTS):
        warnings.append(
            f"{host}: {len(host_cas[host])} HCAs name this host '{host}': its host name was not set when their node "
            "descriptions were written (rdma-ndd), so no inventory host matches them"
        )
    for (host, device), guids in sorted(by_description.items()):
        if len(guids) > 1:
            warnings.append(
                f"{host}: {len(guids)} CAs describe themselves as '{host} {device}' ({', '.join(guids)}): two "
                "machines may share this host name; their HCAs are counted as one host's"
            )

    # Each host's HCA links to switches: (device, ca guid, switch, switch port).
    host_links: dict[str, list[tuple[str, str, str, int]]] = {}
    left_out: dict[str, str] = {}
    for host, guids in sorted(host_cas.items()):
        found = sorted((cas[g]["device"], g, sw, port) for g in guids for sw, port, _ in ca_links.get(g, ()))
        if found:
            host_links[host] = found
            continue
        hcas = ", ".join(f"{cas[g]['device']} ({g})" for g in guids)
        left_out[host] = f"no HCA of {host} has a link to a switch in the ibnetdiscover output ({hcas} unlinked)"
        warnings.append(f"{host} left out: {left_out[host]}")

    if not host_cas:
        matching = f" naming a host that matches host_pattern {host_pattern!r}" if host_pattern else ""
        warnings.append(
            f"no host in the fabric: none of its {len(cas)} CAs has a '<host> <device>' node description{matching}"
        )
    leaf_hosts: dict[str, set[str]] = defaultdict(set)
    for host, found in host_links.items():
        for _, _, sw, _ in found:
            leaf_hosts[sw].add(host)
    leaves = sorted(leaf_hosts)

    # Leaf domains: leaves merged when they share enough of their hosts.
    domains = _Sets(leaves)
    candidates = {
        (a, b)
        for found in host_links.values()
        for a in {sw for *_, sw, _ in found}
        for b in {sw for *_, sw, _ in found}
        if a < b
    }
    for a, b in sorted(candidates):
        shared = len(leaf_hosts[a] & leaf_hosts[b])
        if shared >= min_shared * min(len(leaf_hosts[a]), len(leaf_hosts[b])):
            domains.union(a, b)
    domain_groups = sorted(domains.groups(), key=lambda g: (switches[_lowest(g, switches)]["name"], g))
    domain_values = _values(domain_groups, {i: _lowest(g, switches) for i, g in enumerate(domain_groups)}, switches)
    domain_of = {sw: i for i, group in enumerate(domain_groups) for sw in group}

    # Blocks: leaves and tier-1 switches, connected; the leaves of a domain together.
    leaf_set = set(leaves)
    tier1 = sorted({n for leaf in leaves for n in neighbours[leaf]} - leaf_set)
    blocks = _Sets([*leaves, *tier1])
    for sw in blocks.parent:
        for other in neighbours[sw]:
            if other in blocks.parent:
                blocks.union(sw, other)
    for group in domain_groups:
        for sw in group[1:]:
            blocks.union(group[0], sw)
    tier1_set = set(tier1)
    block_groups = blocks.groups()
    block_heads = {i: _lowest([s for s in g if s in tier1_set] or g, switches) for i, g in enumerate(block_groups)}
    order = sorted(range(len(block_groups)), key=lambda i: (switches[block_heads[i]]["name"], block_heads[i]))
    block_groups = [block_groups[i] for i in order]
    block_heads = {new: block_heads[old] for new, old in enumerate(order)}
    block_values = _values(block_groups, block_heads, switches)
    block_of_switch = {sw: block_values[i] for i, group in enumerate(block_groups) for sw in group}
    block_of_domain = {
        value: block_of_switch[group[0]] for value, group in zip(domain_values, domain_groups, strict=True)
    }

    hosts: dict[str, dict[str, str]] = {}
    host_hcas: dict[str, list[str]] = {}
    for host, found in sorted(host_links.items()):
        host_hcas[host] = [f"{dev} ({g}) -> {switches[sw]['name']} port {port}" for dev, g, sw, port in found]
        counts = Counter(domain_values[domain_of[sw]] for *_, sw, _ in found)
        leaf = min(counts, key=lambda value: (-counts[value], value))
        hosts[host] = {"leaf": leaf, "block": block_of_domain[leaf]}
        if len(counts) > 1:
            stray = [
                f"{dev} ({g}) on {switches[sw]['name']} port {port} in leaf domain {domain_values[domain_of[sw]]}"
                for dev, g, sw, port in found
                if domain_values[domain_of[sw]] != leaf
            ]
            warnings.append(
                f"{host} looks miscabled: its HCAs hang off {len(counts)} leaf domains; labelled with leaf domain "
                f"{leaf}, which holds {counts[leaf]} of its {len(found)} HCA links; elsewhere: {'; '.join(stray)}"
            )

    served = Counter(host["leaf"] for host in hosts.values())
    leaf_domains = {
        value: {
            "block": block_of_domain[value],
            "switches": sorted(switches[sw]["name"] for sw in group),
            "hosts": served.get(value, 0),
        }
        for value, group in zip(domain_values, domain_groups, strict=True)
    }
    block_info = {
        value: {
            "leaf_domains": sorted(v for v, d in leaf_domains.items() if d["block"] == value),
            "tier1": sorted(switches[sw]["name"] for sw in group if sw in tier1_set),
        }
        for value, group in zip(block_values, block_groups, strict=True)
    }
    return {
        "hosts": hosts,
        "warnings": warnings,
        "left_out": left_out,
        "leaf_domains": leaf_domains,
        "blocks": block_info,
        "host_hcas": host_hcas,
        "counts": {
            "switches": len(switches),
            "cas": len(cas),
            "hosts": len(hosts),
            "leaf_switches": len(leaves),
            "tier1_switches": len(tier1),
            "leaf_domains": len(leaf_domains),
            "blocks": len(block_info),
        },
    }


def ib_topology_report(topology: dict[str, Any], run_id: str, play_hosts: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's report: every play host's labels (or why it has none), and the topology they come from.

    ``play_hosts``: ``[{"host": inventory name, "fabric_host": name in the fabric, "node": Kubernetes node}]``.
    """
    fabric_hosts = topology.get("hosts", {})
    hosts: dict[str, Any] = {}
    missing: list[str] = []
    for entry in sorted(play_hosts, key=lambda e: str(e["host"])):
        name = str(entry["fabric_host"])
        found = fabric_hosts.get(name)
        hosts[str(entry["host"])] = {
            "fabric_host": name,
            "node": entry.get("node"),
            "leaf": found["leaf"] if found else None,
            "block": found["block"] if found else None,
            "hcas": topology.get("host_hcas", {}).get(name, []),
        }
        if not found:
            missing.append(str(entry["host"]))
            hosts[str(entry["host"])]["reason"] = missing_reason(topology, name)
    in_play = {str(e["fabric_host"]) for e in play_hosts}
    return {
        "run_id": run_id,
        "hosts": hosts,
        "missing": missing,
        "fabric_hosts_not_in_play": sorted(set(fabric_hosts) - in_play),
        "warnings": topology.get("warnings", []),
        "leaf_domains": topology.get("leaf_domains", {}),
        "blocks": topology.get("blocks", {}),
        "counts": topology.get("counts", {}),
    }


def missing_reason(topology: dict[str, Any], fabric_host: str) -> str:
    """Why ``fabric_host`` has no labels: the topology's reason, or that no HCA describes itself as that host."""
    reason = topology.get("left_out", {}).get(fabric_host)
    if reason:
        return str(reason)
    return (
        f"no HCA in the ibnetdiscover output describes itself as '{fabric_host} <device>' (check its node "
        "description, e.g. /sys/class/infiniband/<hca>/node_desc, and ib_topology_fabric_host)"
    )


class FilterModule:
    """ib_topology filters."""

    def filters(self) -> dict[str, Any]:
        return {
            "ibnetdiscover_fabric": ibnetdiscover_fabric,
            "ibnetdiscover_topology": ibnetdiscover_topology,
            "ib_topology_report": ib_topology_report,
            "ib_topology_missing_reason": missing_reason,
            "ib_topology_is_label_value": is_label_value,
        }
