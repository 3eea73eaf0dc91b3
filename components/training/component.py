"""TrainingJob: a standing training job defined in Pulumi, for platform teams (the same JobSet ``gpucluster
submit`` creates, from the same spec and checks).

Build its args from a stack with :meth:`TrainingJobArgs.from_stack`: the spec is checked against the stack (team,
priority, flavor fit, queue) and its interval is the stack's prior (the Pulumi program reads no cluster; a
standing job is re-planned at each ``pulumi up``). Kueue unsuspends the JobSet on admission, so ``spec.suspend``
is not diffed; the JobSet controller refuses changes to a JobSet's jobs, so a changed spec replaces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.config.stack import StackConfig
from components.training.checks import check_spec
from components.training.manifest import (
    JOBSET_API_VERSION,
    JOBSET_KIND,
    JobContext,
    checkpoint_interval,
    job_context,
    jobset_manifest,
)
from components.training.spec import JobSpec
from contract.model import check_qualified_name

TOKEN = "gpucluster:training:TrainingJob"


@dataclass(frozen=True)
class TrainingJobArgs:
    #: The job as a researcher would write it.
    spec: JobSpec
    #: What the stack decides for it (:func:`components.training.manifest.job_context`).
    context: JobContext
    labels: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.spec, JobSpec):
            raise TypeError(f"TrainingJobArgs.spec: expected JobSpec, got {type(self.spec).__name__}")
        if not isinstance(self.context, JobContext):
            raise TypeError(f"TrainingJobArgs.context: expected JobContext, got {type(self.context).__name__}")
        for key in self.labels:
            check_qualified_name(key, "TrainingJobArgs.labels key")

    @classmethod
    def from_stack(cls, spec: JobSpec, stack: StackConfig, labels: Mapping[str, str] | None = None) -> TrainingJobArgs:
        """Checked against ``stack`` (:class:`~components.training.spec.SpecError` names the field), the
        interval from the stack's prior."""
        check_spec(spec, stack, f"TrainingJob {spec.name}")
        return cls(spec, job_context(spec, stack, checkpoint_interval(spec, stack, None)), dict(labels or {}))


class TrainingJob(pulumi.ComponentResource):
    """One JobSet in the team's namespace, queued on the team's LocalQueue."""

    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TOKEN, name, None, opts)
        manifest = jobset_manifest(args.spec, args.context)
        metadata = manifest["metadata"]
        metadata["labels"] = {**args.labels, **metadata["labels"]}
        self.jobset = k8s.apiextensions.CustomResource(
            f"{name}-jobset",
            api_version=JOBSET_API_VERSION,
            kind=JOBSET_KIND,
            metadata=metadata,
            spec=manifest["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                ignore_changes=["spec.suspend"],
                replace_on_changes=["spec"],
                delete_before_replace=True,
            ),
        )
        self.jobset_name = args.spec.name
        self.namespace = args.context.namespace
        self.checkpoint_interval_seconds = args.context.checkpoint_interval_seconds
        self.register_outputs(
            {
                "jobsetName": self.jobset_name,
                "namespace": self.namespace,
                "checkpointIntervalSeconds": self.checkpoint_interval_seconds,
            }
        )
