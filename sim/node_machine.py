"""What the real node (``sim/node.py``) changes on this machine, written down before it starts and put back after.

The simulated cluster shares the machine with the tests, and CI runs on it after a session, so a kubelet, a
kube-proxy and a containerd must leave nothing behind. Seen on this machine (``docs/design/real-node.md``):

- sysctls: the kubelet sets ``kernel.panic``, ``kernel.panic_on_oops`` and ``vm.overcommit_memory``; the pod
  bridge needs ``net.ipv4.ip_forward``; kube-proxy sets ``net.ipv4.conf.all.route_localnet``;
- iptables and ip6tables: the kubelet's ``KUBE-FIREWALL`` (it drops traffic to 127.0.0.0/8 from other sources,
  which would cut the rented replicas' loopback-routed 198.18.0.0/15) and kube-proxy's chains;
- paths outside the node's state directory that the parts create whatever their settings say
  (``/var/lib/kubelet``, ``/run/containerd``, ``/var/lib/cni``), ``kubepods`` cgroups in every v1 hierarchy, and
  mounts under the kubelet's root directory (its own bind mount, each pod's token and Secret volumes).

:func:`snapshot` reads all of it once (a snapshot already on disk is kept: a second ``up`` must not record the
node's own changes as the machine's); :func:`restore` puts it back and says what it did.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: The sysctls the node's parts change, as /proc/sys paths.
SYSCTLS = (
    "kernel/panic",
    "kernel/panic_on_oops",
    "vm/overcommit_memory",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
)
#: Paths the parts create outside the node's state directory, whatever their settings say.
FOREIGN_PATHS = ("/var/lib/kubelet", "/run/containerd", "/var/lib/cni")
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: The kubelet's cgroup of every pod (cgroupfs driver), in each v1 hierarchy.
KUBEPODS = "kubepods"
#: iptables-save and ip6tables-save with the tables each restores.
FIREWALLS = (("iptables-save", "iptables-restore"), ("ip6tables-save", "ip6tables-restore"))


class MachineError(RuntimeError):
    """The machine's state could not be read or put back; the message names what."""


@dataclass
class Snapshot:
    """The machine as it was before the node started."""

    sysctls: dict[str, str] = field(default_factory=dict)
    firewalls: dict[str, str] = field(default_factory=dict)
    absent_paths: list[str] = field(default_factory=list)
    absent_cgroups: list[str] = field(default_factory=list)

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".partial")
        tmp.write_text(json.dumps(asdict(self), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Snapshot:
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
            return cls(
                sysctls=dict(value["sysctls"]),
                firewalls=dict(value["firewalls"]),
                absent_paths=list(value["absent_paths"]),
                absent_cgroups=list(value["absent_cgroups"]),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise MachineError(f"{path}: not a snapshot of this machine ({type(exc).__name__}: {exc})") from None


def _run(argv: list[str], stdin: str | None = None) -> str:
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MachineError(f"{argv[0]}: {exc}") from None
    if done.returncode != 0:
        raise MachineError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[:300]}")
    return done.stdout


def rules(saved: str) -> str:
    """A firewall dump as a comparison sees it: no comment lines (they carry the time of the dump), no counters."""
    return "\n".join(re.sub(r"\[\d+:\d+\]", "[0:0]", line) for line in saved.splitlines() if not line.startswith("#"))


def cgroup_hierarchies() -> list[Path]:
    """Every mounted v1 hierarchy (a directory of /sys/fs/cgroup holding cgroup.procs), in name order."""
    if not CGROUP_ROOT.is_dir():
        return []
    return sorted(
        p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink() and (p / "cgroup.procs").exists()
    )


def snapshot() -> Snapshot:
    """The machine now."""
    snap = Snapshot()
    for key in SYSCTLS:
        f = Path("/proc/sys") / key
        if f.exists():
            snap.sysctls[key] = f.read_text(encoding="utf-8").strip()
    for save, _ in FIREWALLS:
        if shutil.which(save):
            snap.firewalls[save] = _run([save])
    snap.absent_paths = [p for p in FOREIGN_PATHS if not Path(p).exists()]
    snap.absent_cgroups = [str(h / KUBEPODS) for h in cgroup_hierarchies() if not (h / KUBEPODS).exists()]
    return snap


def mounts_under(root: Path) -> list[str]:
    """Mount points at or under ``root``, deepest first (the order to unmount them in)."""
    try:
        lines = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    prefix = str(root.resolve())
    points = []
    for line in lines:
        parts = line.split()
        if len(parts) > 1:
            point = parts[1].replace("\\040", " ")
            if point == prefix or point.startswith(prefix + "/"):
                points.append(point)
    return sorted(set(points), key=lambda p: (-p.count("/"), p))


def unmount_all(root: Path) -> list[str]:
    """Unmount everything at or under ``root``; the mount points that would not go (each tried twice, then lazily)."""
    stuck = []
    for point in mounts_under(root):
        for argv in (["umount", point], ["umount", "-l", point]):
            if subprocess.run(argv, capture_output=True, check=False).returncode == 0:
                break
        else:
            stuck.append(point)
    return stuck


def _remove_cgroup(path: Path) -> None:
    """A v1 cgroup and every child, deepest first (rmdir is how cgroups are removed; files inside cannot be)."""
    for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        child.rmdir()
    path.rmdir()


def restore(snap: Snapshot) -> list[str]:
    """Put the machine back as ``snap`` found it; what was done, one line each. Raises MachineError naming each
    part that could not be put back (after trying all of them)."""
    done: list[str] = []
    failed: list[str] = []
    for key, value in snap.sysctls.items():
        f = Path("/proc/sys") / key
        try:
            if f.read_text(encoding="utf-8").strip() != value:
                f.write_text(value + "\n", encoding="utf-8")
                done.append(f"sysctl {key.replace('/', '.')} = {value}")
        except OSError as exc:
            failed.append(f"sysctl {key}: {exc}")
    for save, restore_cmd in FIREWALLS:
        if save not in snap.firewalls:
            continue
        try:
            if rules(_run([save])) != rules(snap.firewalls[save]):
                _run([restore_cmd], stdin=snap.firewalls[save])
                done.append(f"{restore_cmd} (the rules from before the node)")
        except MachineError as exc:
            failed.append(str(exc))
    for cgroup in snap.absent_cgroups:
        path = Path(cgroup)
        if path.exists():
            try:
                _remove_cgroup(path)
                done.append(f"removed cgroup {cgroup}")
            except OSError as exc:
                failed.append(f"cgroup {cgroup}: {exc} (a process of a pod may still be in it)")
    for p in snap.absent_paths:
        path = Path(p)
        if path.exists():
            stuck = unmount_all(path)
            if stuck:
                failed.append(f"{p}: still mounted at {', '.join(stuck)}")
                continue
            shutil.rmtree(path, ignore_errors=True)
            done.append(f"removed {p}")
    if failed:
        raise MachineError("could not put back: " + "; ".join(failed))
    return done
