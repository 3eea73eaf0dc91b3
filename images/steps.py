"""The build steps of the images, each a call to one tool of this machine: mmdebstrap, pip, installer, go.

Each step writes into a cache or a staging directory and says how long it took; a step whose output is cached
(the Debian base, the downloaded wheels, Go's build cache) is quick the second time.
"""

from __future__ import annotations

import compileall
import hashlib
import os
import py_compile
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.sources import WheelFile

from images.definitions import (
    BASE_EPOCH,
    DEBIAN_SOURCES,
    DEBIAN_SUITE,
    DPKG_OPTIONS,
    PYTHON_INTERPRETER,
    PYTHON_SITE,
)


class BuildError(RuntimeError):
    """A step failed; the message names the step, the command and the last lines it printed."""


def run(step: str, argv: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> str:
    """Run one command, its output captured; a failure raises with the tail of what it printed."""
    try:
        proc = subprocess.run(
            list(argv),
            cwd=cwd,
            env={**os.environ, **(env or {})},
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        raise BuildError(f"{step}: {argv[0]} is not installed (make images-deps installs it)") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise BuildError(f"{step}: `{' '.join(argv[:3])} ...` exited {proc.returncode}:\n{tail}")
    return proc.stdout


# ----------------------------------------------------------------------------------------------------
# The Debian base
# ----------------------------------------------------------------------------------------------------


def base_key(packages: Sequence[str]) -> str:
    """The cache key of a base: everything mmdebstrap is given."""
    text = "\n".join([DEBIAN_SUITE, *DEBIAN_SOURCES, *packages, *DPKG_OPTIONS, str(BASE_EPOCH)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def debian_base(packages: Sequence[str], cache: Path, *, refresh: bool = False) -> tuple[Path, bool]:
    """The base root filesystem as a tar (mmdebstrap's own, reproducible for one mirror state), and whether it
    was built now (False: taken from the cache)."""
    out = cache / f"debian-{DEBIAN_SUITE}-{base_key(packages)}.tar"
    if out.is_file() and not refresh:
        return out, False
    cache.mkdir(parents=True, exist_ok=True)
    # Each builder its own partial file: two builds at once (two checkouts, two test workers) each finish theirs and
    # the last rename wins with the same content, instead of one renaming the other's file away.
    tmp = out.with_name(f"{out.name}.{os.getpid()}.partial")
    argv = [
        "mmdebstrap",
        "--quiet",
        "--variant=essential",
        "--format=tar",
        f"--include={','.join(packages)}",
        # No device nodes in a layer: the runtime provides /dev.
        "--skip=output/dev",
        *(f"--dpkgopt={o}" for o in DPKG_OPTIONS),
        DEBIAN_SUITE,
        str(tmp),
        *DEBIAN_SOURCES,
    ]
    run("debian base (mmdebstrap)", argv, env={"SOURCE_DATE_EPOCH": str(BASE_EPOCH)})
    tmp.replace(out)
    return out, True


def base_packages(base_tar: Path) -> list[str]:
    """``name=version`` of every package in a base, from its dpkg status file."""
    with tarfile.open(base_tar) as tar:
        member = tar.extractfile("./var/lib/dpkg/status")
        if member is None:
            raise BuildError(f"{base_tar}: no var/lib/dpkg/status")
        status = member.read().decode()
    out = []
    for stanza in status.split("\n\n"):
        fields = dict(re.findall(r"^(Package|Version): (.*)$", stanza, re.M))
        if "Package" in fields:
            out.append(f"{fields['Package']}={fields.get('Version', '')}")
    return sorted(out)


def read_from_base(base_tar: Path, path: str) -> bytes:
    """One file of the base, following a symbolic link inside it once."""
    with tarfile.open(base_tar) as tar:
        member = tar.getmember(f"./{path}")
        if member.issym():
            target = Path(path).parent / member.linkname if not member.linkname.startswith("/") else None
            member = tar.getmember(f"./{target}" if target else f".{member.linkname}")
        data = tar.extractfile(member)
        if data is None:
            raise BuildError(f"{base_tar}: {path} is not a regular file")
        return data.read()


# ----------------------------------------------------------------------------------------------------
# Python: the locked wheels and the project's own
# ----------------------------------------------------------------------------------------------------

#: The wheels the image's interpreter (CPython 3.11 on glibc 2.36, x86_64) loads, whatever machine builds it.
PIP_PLATFORM = (
    "--only-binary=:all:",
    "--implementation=cp",
    "--python-version=3.11",
    "--abi=cp311",
    *(
        f"--platform={p}"
        for p in (
            "manylinux_2_36_x86_64",
            "manylinux_2_34_x86_64",
            "manylinux_2_28_x86_64",
            "manylinux_2_17_x86_64",
            "manylinux2014_x86_64",
        )
    ),
)
#: A distribution name at the start of a requirement or lock line.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")
_WHEEL = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)-.*\.whl$")


_SDIST = re.compile(r"^(?P<name>.+)-(?P<version>[^-]+)\.(?:tar\.gz|zip)$")


def hashed_pins(files: Path) -> list[str]:
    """``name==version --hash=sha256:...`` for each wheel or source archive pip downloaded into ``files``."""
    lines = []
    for path in sorted(files.iterdir(), key=lambda p: p.name.lower()):
        m = _WHEEL.match(path.name) or _SDIST.match(path.name)
        if m is None:
            raise BuildError(f"lock: {path.name} is neither a wheel nor a source archive file name")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        lines.append(f"{m['name'].replace('_', '-').lower()}=={m['version']} --hash=sha256:{digest}")
    return lines


def lock_wheels(requirements: Sequence[str], out: Path) -> list[str]:
    """Resolve ``requirements`` for the image's interpreter and write every wheel with its hash to ``out``."""
    with tempfile.TemporaryDirectory(prefix="gpucluster-lock-") as tmp:
        run(
            "lock (pip download)",
            [sys.executable, "-m", "pip", "download", "-q", *PIP_PLATFORM, "-d", tmp, *requirements],
        )
        lines = hashed_pins(Path(tmp))
    header = (
        "# The daemon image's third-party wheels, for CPython 3.11 on Debian bookworm (x86_64).\n"
        "# Written by `python -m images lock` from pyproject.toml's pins; do not edit by hand.\n"
    )
    out.write_text(header + "\n".join(lines) + "\n", encoding="utf-8")
    return lines


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(lock: Path) -> dict[str, tuple[str, list[str]]]:
    """Canonical name -> (version, hashes) for each line of a lock; a line that is not ``name==version --hash=...``
    is refused with its line number."""
    out: dict[str, tuple[str, list[str]]] = {}
    for n, raw in enumerate(lock.read_text(encoding="utf-8").splitlines(), start=1):
        line = "" if raw.lstrip().startswith("#") else raw.strip()
        if not line:
            continue
        spec, *options = line.split()
        name, sep, version = spec.partition("==")
        hashes = [o.removeprefix("--hash=sha256:") for o in options if o.startswith("--hash=sha256:")]
        if not sep or not NAME.fullmatch(name) or not version:
            raise BuildError(f"{lock}:{n}: {spec!r} is not name==version")
        if not hashes or len(hashes) != len(options) or any(not re.fullmatch(r"[0-9a-f]{64}", h) for h in hashes):
            raise BuildError(f"{lock}:{n}: {name} needs one or more --hash=sha256:<64 hex digits> and nothing else")
        if canonical(name) in out:
            raise BuildError(f"{lock}:{n}: {name} is locked twice")
        out[canonical(name)] = (version, hashes)
    return out


def locked_versions(lock: Path) -> dict[str, str]:
    """Package name (canonical: lower case, dashes) -> version, as the lock file pins it."""
    return {name: version for name, (version, _) in read_lock(lock).items()}


def download_locked(lock: Path, cache: Path) -> list[Path]:
    """Every wheel the lock names, checked against its hash, into ``cache`` (kept between builds)."""
    cache.mkdir(parents=True, exist_ok=True)
    run(
        "wheels (pip download)",
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--require-hashes",
            *PIP_PLATFORM,
            "-d",
            str(cache),
            "-r",
            str(lock),
        ],
    )
    wanted = locked_versions(lock)
    wheels = []
    for wheel in sorted(cache.glob("*.whl")):
        m = _WHEEL.match(wheel.name)
        if m and wanted.get(m["name"].replace("_", "-").lower()) == m["version"]:
            wheels.append(wheel)
    if len(wheels) != len(wanted):
        raise BuildError(f"wheels: the lock names {len(wanted)} wheels, {len(wheels)} are in {cache}")
    return wheels


def project_wheel(root: Path, out: Path) -> Path:
    """The project's own wheel, built from a copy of the files git tracks (as they are in the work tree), so
    neither an untracked file nor a stale ``build/`` directory goes into the image."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.whl"):
        old.unlink()
    listed = run("project wheel (git ls-files)", ["git", "ls-files", "-z"], cwd=root)
    with tempfile.TemporaryDirectory(prefix="gpucluster-wheel-") as tmp:
        for rel in filter(None, listed.split("\0")):
            source = root / rel
            if source.is_file() and not source.is_symlink():
                target = Path(tmp) / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target)
        run(
            "project wheel (pip wheel)",
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), tmp],
        )
    wheels = list(out.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"project wheel: expected one wheel in {out}, found {len(wheels)}")
    return wheels[0]


def install_wheels(wheels: Sequence[Path], staging: Path) -> None:
    """Install wheels into ``staging`` as they lie in the image (``/usr/local``), scripts run by the image's
    interpreter, and compile their bytecode (hash-checked, so no timestamp of this machine goes in)."""
    if staging.exists():
        shutil.rmtree(staging)
    site = f"/{PYTHON_SITE}"
    scheme = {
        "purelib": site,
        "platlib": site,
        "headers": "/usr/local/include/python3.11",
        "scripts": "/usr/local/bin",
        "data": "/usr/local",
    }
    for wheel in wheels:
        destination = SchemeDictionaryDestination(
            scheme, interpreter=PYTHON_INTERPRETER, script_kind="posix", destdir=str(staging)
        )
        with WheelFile.open(wheel) as source:
            install(source, destination, additional_metadata={"INSTALLER": b"gpucluster-images\n"})
    ok = compileall.compile_dir(
        str(staging / PYTHON_SITE),
        ddir=site,
        quiet=1,
        workers=1,
        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
    )
    if not ok:
        raise BuildError(f"bytecode: a module under {staging / PYTHON_SITE} does not compile")


# ----------------------------------------------------------------------------------------------------
# Go: the virtual node
# ----------------------------------------------------------------------------------------------------


def go_binary(module: Path, package: str, out: Path, version: str) -> Path:
    """One Go program, static and reproducible: no cgo, no paths of this machine, no build id, no VCS stamp."""
    out.parent.mkdir(parents=True, exist_ok=True)
    run(
        f"{out.name} (go build)",
        [
            "go",
            "build",
            "-trimpath",
            "-buildvcs=false",
            f"-ldflags=-s -w -buildid= -X main.version={version}",
            "-o",
            str(out),
            package,
        ],
        cwd=module,
        env={
            "CGO_ENABLED": "0",
            "GOOS": "linux",
            "GOARCH": "amd64",
            "GOFLAGS": "-mod=readonly",
            "GOTOOLCHAIN": "local",
        },
    )
    return out
