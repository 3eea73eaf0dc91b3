"""In-memory stand-ins for the toolkit's parts: a hand-driven clock and the Lease API with the API server's
resourceVersion checks."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

from daemons.toolkit.kube import ConflictError, KubeError
from daemons.toolkit.lease import LeaseRecord


class Clock:
    """Monotonic seconds and a matching wall clock, both advanced by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_800_000_000.0 + self.now

    def utc(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.wall(), dt.UTC)

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeLeases:
    """A Lease store with resourceVersion checks, as the API server does them."""

    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], LeaseRecord] = {}
        self._rv = 0
        self.fail: KubeError | None = None
        self.before_write: Any = None

    def _bump(self, record: LeaseRecord) -> LeaseRecord:
        self._rv += 1
        return replace(record, resource_version=str(self._rv))

    def get(self, namespace: str, name: str) -> LeaseRecord | None:
        if self.fail:
            raise self.fail
        return self.leases.get((namespace, name))

    def create(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord:
        if self.before_write:
            hook, self.before_write = self.before_write, None
            hook()
        if self.fail:
            raise self.fail
        if (namespace, name) in self.leases:
            raise ConflictError("already exists")
        stored = self._bump(record)
        self.leases[(namespace, name)] = stored
        return stored

    def update(self, namespace: str, name: str, record: LeaseRecord) -> LeaseRecord:
        if self.before_write:
            hook, self.before_write = self.before_write, None
            hook()
        if self.fail:
            raise self.fail
        current = self.leases.get((namespace, name))
        if current is None:
            raise KubeError("not found")
        if record.resource_version != current.resource_version:
            raise ConflictError("stale resourceVersion")
        stored = self._bump(record)
        self.leases[(namespace, name)] = stored
        return stored
