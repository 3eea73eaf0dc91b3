"""tools/install-debian-deps.sh (make debian-deps, which make up and make test run first): quick and silent about
apt when everything is installed, installing only what is missing, and one clear line when it cannot.

dpkg-query, apt-get, id and sudo are stand-ins on a PATH without the real ones.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.sim import path_without

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "install-debian-deps.sh"
PACKAGES = (
    "prometheus",
    "prometheus-node-exporter",
    "openssl",
    "curl",
    "fio",
    "mmdebstrap",
    "umoci",
    "runc",
    "skopeo",
    "containerd",
    "containernetworking-plugins",
    "iptables",
    "gcc",
    "libc6-dev",
)
#: The programs those packages give, as the script checks them without dpkg.
PROGRAMS = (
    "prometheus",
    "promtool",
    "prometheus-node-exporter",
    "openssl",
    "curl",
    "fio",
    "mmdebstrap",
    "umoci",
    "runc",
    "skopeo",
    "containerd",
    "ctr",
    "iptables",
    "cc",
)


@dataclass(frozen=True)
class Machine:
    stubs: Path
    path: str
    log: Path

    def stub(self, name: str, body: str) -> None:
        f = self.stubs / name
        f.write_text(f'#!/bin/sh\necho "{name} $*" >>"{self.log}"\n{body}\n')
        f.chmod(0o755)

    def installed(self, *packages: str) -> None:
        """dpkg-query says these packages are installed, and no other."""
        cases = "".join(f'  *" {p}") echo "install ok installed"; exit 0 ;;\n' for p in packages)
        self.stub("dpkg-query", f'case " $*" in\n{cases}esac\nexit 1')

    def run(self) -> subprocess.CompletedProcess[str]:
        env = {"PATH": f"{self.stubs}:{self.path}", "HOME": str(self.stubs)}
        return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=env, check=False)

    def calls(self, program: str) -> list[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [line for line in lines if line.startswith(program + " ")]


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    real = path_without(tmp_path, "dpkg-query", "apt-get", "sudo", "id", "systemctl", *PACKAGES, *PROGRAMS)
    m = Machine(stubs=stubs, path=real, log=tmp_path / "calls")
    m.stub("apt-get", "exit 0")
    m.stub("id", "echo 0")
    return m


def test_everything_installed_is_said_and_apt_is_not_called(machine: Machine) -> None:
    machine.installed(*PACKAGES)
    proc = machine.run()
    assert (proc.returncode, proc.stdout) == (0, f"debian deps present: {' '.join(PACKAGES)}\n")
    assert machine.calls("apt-get") == []


def test_only_the_missing_packages_are_installed(machine: Machine) -> None:
    machine.installed(*(p for p in PACKAGES if p not in ("prometheus", "curl")))
    proc = machine.run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "installing: prometheus curl\n"
    assert machine.calls("apt-get") == [
        "apt-get update -qq",
        "apt-get install -y -qq --no-install-recommends prometheus curl",
    ]


def test_a_user_without_root_or_sudo_is_told_what_is_missing(machine: Machine) -> None:
    machine.installed(*PACKAGES[1:])
    machine.stub("id", "echo 1000")
    proc = machine.run()
    assert proc.returncode == 1
    assert proc.stderr == "install-debian-deps: need root (or sudo) to install: prometheus\n"
    assert machine.calls("apt-get") == []


def test_a_user_with_sudo_installs_through_it(machine: Machine) -> None:
    machine.installed(*PACKAGES[:-1])
    machine.stub("id", "echo 1000")
    machine.stub("sudo", 'exec "$@"')
    proc = machine.run()
    assert proc.returncode == 0, proc.stderr
    assert f"sudo apt-get install -y -qq --no-install-recommends {PACKAGES[-1]}" in machine.calls("sudo")


def test_without_dpkg_the_programs_must_be_on_path(machine: Machine) -> None:
    proc = machine.run()
    assert proc.returncode == 1
    assert proc.stderr == (
        "install-debian-deps: no dpkg here to install packages; install these programs yourself: "
        f"{' '.join(PROGRAMS)}\n"
    )
    for program in PROGRAMS:
        machine.stub(program, "exit 0")
    proc = machine.run()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("debian deps present: ")
