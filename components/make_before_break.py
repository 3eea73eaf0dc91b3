"""MakeBeforeBreak: the controller of ``contract/controllers/make_before_break.py`` deployed by the kit, and the Kueue
AdmissionCheck it answers for.

Every ClusterQueue lists the check while the controller runs (``components/queues.py``), so Kueue admits a training
gang only once the controller sets it Ready: the nodes it needs reserved, the inference in the way rolled off them
make-before-break. What the kit deploys, and the least-privilege grants, are the spec's.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from components.controller import Controller, ControllerArgs
from contract.constants import KUEUE_API
from contract.make_before_break_settings import CHECK_NAME, CONTROLLER_NAME


class MakeBeforeBreak(Controller):
    """The AdmissionCheck, then everything :class:`Controller` deploys for the spec."""

    def extra_resources(self, name: str, args: ControllerArgs, child: pulumi.ResourceOptions) -> list[pulumi.Resource]:
        # Kueue's CRDs come with its chart, which the ClusterQueues listing the check wait for too.
        self.admission_check = k8s.apiextensions.CustomResource(
            f"{name}-admission-check",
            api_version=KUEUE_API,
            kind="AdmissionCheck",
            metadata={"name": CHECK_NAME, "labels": args.resource_labels()},
            spec={"controllerName": CONTROLLER_NAME},
            opts=child,
        )
        return [self.admission_check]
