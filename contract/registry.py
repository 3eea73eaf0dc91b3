"""Every controller of ours that runs behind a Lease, listed once.

The image's entry points (``daemons.image``), the simulated cluster and the tests read this list; the stack model and
``GpuCluster`` deploy each spec with ``components.controller.Controller``. A controller is its contract module
(``contract/controllers/<name>.py``: spec, rules, hooks; its settings model beside it in ``contract/``), its daemon
package (``daemons/<name>/``, ``__main__.py`` over the kit's runner) and one line here.
"""

from __future__ import annotations

from typing import Any

from contract.controllers.checkpoint_verifier import SPEC as CHECKPOINT_VERIFIER
from contract.controllers.interruptions import SPEC as INTERRUPTIONS
from contract.controllers.make_before_break import SPEC as MAKE_BEFORE_BREAK
from contract.controllers.quarantine import SPEC as QUARANTINE
from contract.controllers.quota_controller import SPEC as QUOTA_CONTROLLER
from contract.controllers.stall_detector import SPEC as STALL_DETECTOR
from contract.controllers.taint_controller import SPEC as TAINT_CONTROLLER
from contract.spec import ControllerSpec

__all__ = [
    "CHECKPOINT_VERIFIER",
    "CONTROLLERS",
    "INTERRUPTIONS",
    "MAKE_BEFORE_BREAK",
    "QUARANTINE",
    "QUOTA_CONTROLLER",
    "STALL_DETECTOR",
    "TAINT_CONTROLLER",
    "by_name",
    "check_unique",
]

CONTROLLERS: tuple[ControllerSpec[Any], ...] = (
    TAINT_CONTROLLER,
    MAKE_BEFORE_BREAK,
    QUOTA_CONTROLLER,
    QUARANTINE,
    INTERRUPTIONS,
    STALL_DETECTOR,
    CHECKPOINT_VERIFIER,
)


def by_name(name: str) -> ControllerSpec[Any]:
    for spec in CONTROLLERS:
        if spec.name == name:
            return spec
    raise KeyError(f"no controller named {name!r}; known: {', '.join(s.name for s in CONTROLLERS)}")


def check_unique(specs: tuple[ControllerSpec[Any], ...]) -> None:
    """ValueError when two specs share a name, a metrics port or prefix, a stack key or a component type."""
    for attribute in ("name", "metrics_port", "metrics_prefix", "stack_key", "component_type"):
        values = [getattr(s, attribute) for s in specs]
        repeated = sorted({str(v) for v in values if values.count(v) > 1})
        if repeated:
            raise ValueError(f"contract.registry: two controllers share a {attribute}: {', '.join(repeated)}")


check_unique(CONTROLLERS)
