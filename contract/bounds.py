"""A controller's admission bound, as data: which fields of which objects its ServiceAccount may change.

RBAC says which objects a controller may write; a bound says which fields of them. A spec lists its bounds
(``ControllerSpec.bounds``); the stack renders each as a ValidatingAdmissionPolicy matched to the controller's
ServiceAccount (``components/guardrails_policies/controllers.py``), so a stolen token of it can change nothing else.
A controller whose writes fit none of these shapes keeps a rule of its own there (make-before-break's, the quota
controller's).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobSetAnnotationOnly:
    """It changes a JobSet (any in the team namespaces: RBAC cannot name them) only by one annotation."""

    #: The policy's name, kept stable (it names a live object).
    policy: str
    #: Who, in the policy's messages (``stall detector``).
    who: str
    annotation: str


@dataclass(frozen=True)
class NodeMarksOnly:
    """It changes a Node (any: RBAC cannot name them) only by its own taint, labels and annotations, and adds its
    taint only to a Node with a GPU resource (never a control-plane or system node)."""

    policy: str
    who: str
    taint_key: str
    taint_effect: str
    labels: tuple[str, ...]
    annotations: tuple[str, ...]


Bound = JobSetAnnotationOnly | NodeMarksOnly
