"""A Node taint as our controllers and the simulated cluster read and write it (core/v1 ``Taint``, less
``timeAdded``). Standard library only: the simulated cluster's scripts import it without the venv's client."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str | None = None

    def to_k8s(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value is not None:
            out["value"] = self.value
        return out
