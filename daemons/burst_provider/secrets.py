"""Provider secrets (API keys, kubeconfigs), read by NAME from files in one directory.

The VirtualNode component mounts one Kubernetes Secret into the provider container only; each key is a file named
after the secret config key (``<secrets-dir>/runpodApiKey``). Values never reach a log line or a repr.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class SecretMissingError(LookupError):
    """A provider needs a secret the directory does not hold. The message names the file, never a value."""


class SecretStore:
    """Reads ``<directory>/<name>`` on each call, so a rotated Secret is picked up without a restart."""

    def __init__(self, directory: str | Path | None, values: Mapping[str, str] | None = None) -> None:
        self._directory = Path(directory) if directory is not None else None
        self._values = dict(values or {})

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> SecretStore:
        """An in-memory store (tests, the simulated cluster)."""
        return cls(None, values)

    @property
    def directory(self) -> Path | None:
        return self._directory

    def get(self, name: str) -> str:
        """The secret's value without surrounding whitespace; SecretMissingError when it is not there."""
        if not _NAME.match(name):
            raise SecretMissingError(f"secret name {name!r} is not a file name")
        if name in self._values:
            return self._values[name]
        if self._directory is None:
            raise SecretMissingError(f"secret {name!r}: no secrets directory configured (--secrets-dir)")
        path = self._directory / name
        try:
            return path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SecretMissingError(f"secret {name!r}: cannot read {path}: {exc.strerror}") from None

    def has(self, name: str) -> bool:
        try:
            self.get(name)
        except SecretMissingError:
            return False
        return True

    def __repr__(self) -> str:
        names = sorted(self._values)
        return f"SecretStore(directory={str(self._directory)!r}, in_memory={names!r}, values=<hidden>)"

    __str__ = __repr__
