"""Settings of the inference room (``components/inference.py``): one entry of ``gpucluster:inferenceServices``.

Example (stack YAML)::

    gpucluster:inferenceServices:
      - name: sd-serve
        namespace: inference          # must be one of gpucluster:inferenceNamespaces
        image: ghcr.io/example/sd-serve:1.4.2
        replicas: 8
        gpusPerReplica: 1
        gpuType: H100                 # what a burst provider must rent (annotation burst.gpucluster.io/gpu-type)
        port: 8080
        readinessPath: /health        # HTTP GET on the port: 200-399 once the model is loaded and it can serve
        drainSeconds: 5               # keeps serving this long once told to stop, while traffic moves away
        resources: {cpu: "4", memory: 16Gi}
        minAvailable: 75%             # PodDisruptionBudget: the descheduler's evictions never go below it
        hpa: {minReplicas: 4, maxReplicas: 16, targetRequestsPerReplica: 5, scaleDownStabilization: 5m}
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import AfterValidator, Field, field_validator

from contract.issues import shown
from contract.model import (
    ByteQuantity,
    ConfigModel,
    DnsLabel,
    Image,
    PositiveDuration,
    Problem,
    Quantity,
    check_qualified_name,
    parse_duration,
)

_PERCENT = re.compile(r"^(\d{1,3})%$")


class InferenceResources(ConfigModel):
    """Per-replica CPU and memory; the GPUs come from ``gpusPerReplica``."""

    #: CPU: ``500m`` is half a core.
    cpu: Quantity = "1"
    #: Memory: a whole number of bytes (``512Mi``, ``4Gi``; ``500m`` would be half a byte).
    memory: ByteQuantity = "4Gi"


#: The custom metric an InferenceService's HPA reads from the metrics adapter: requests per second its Service
#: receives (``components/metrics_adapter.py`` serves it for Services; the adapter's query says where it is counted).
REQUESTS_METRIC = "requests_per_second"


class InferenceHpa(ConfigModel):
    """An autoscaling/v2 HorizontalPodAutoscaler on the Service's request rate, CPU utilisation, or both (the HPA
    follows whichever asks for more replicas). Neither named: CPU at 70 %."""

    min_replicas: Annotated[int, Field(ge=1, le=1000)]
    max_replicas: Annotated[int, Field(ge=1, le=1000)]
    target_cpu_utilization: Annotated[int, Field(ge=1, le=100)] | None = None
    #: Requests per second one replica should serve: the HPA reads ``requests_per_second`` of the app's Service
    #: through the metrics adapter (``gpucluster:metricsAdapter``) and divides by the replica count. The rate is
    #: counted where traffic enters, so it keeps working while replicas are rented (the virtual node serves no pod
    #: stats, and the cluster's Prometheus cannot scrape a rented pod).
    target_requests_per_replica: Annotated[float, Field(gt=0, le=100_000)] | None = None
    #: How long the HPA keeps the highest recommendation of this window before it scales down (its
    #: ``behavior.scaleDown.stabilizationWindowSeconds``; Kubernetes' default is 5m): a replica that loads a model
    #: for minutes is not given back on one quiet minute.
    scale_down_stabilization: PositiveDuration = "5m"

    @property
    def cpu_target(self) -> int | None:
        if self.target_cpu_utilization is None and self.target_requests_per_replica is None:
            return 70
        return self.target_cpu_utilization

    @property
    def scale_down_stabilization_seconds(self) -> int:
        return int(parse_duration(self.scale_down_stabilization))

    def rule_problems(self) -> Iterator[Problem]:
        if self.min_replicas > self.max_replicas:
            yield Problem((), f"minReplicas {self.min_replicas} is above maxReplicas {self.max_replicas}")
        if self.scale_down_stabilization_seconds > 3600:
            # the API's own bound for stabilizationWindowSeconds
            yield Problem(("scaleDownStabilization",), f"{self.scale_down_stabilization} is over the HPA's 1h")


def _annotation_keys(v: dict[str, str]) -> dict[str, str]:
    for key in v:
        check_qualified_name(key, "annotation key")
    return v


class InferenceServiceSpec(ConfigModel):
    """One entry of ``gpucluster:inferenceServices``."""

    name: DnsLabel
    namespace: DnsLabel
    image: Image
    replicas: Annotated[int, Field(ge=1, le=1000)] = 1
    gpus_per_replica: Annotated[int, Field(ge=0, le=16)] = 1
    #: What a burst provider must offer; unset: the burst settings' defaultGpuType.
    gpu_type: Annotated[str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")] | None = None
    port: Annotated[int, Field(ge=1, le=65535)] = 8080
    #: The replica's readiness probe: an HTTP GET of this path on ``port`` that answers 200-399 only once the model
    #: is loaded (vLLM and TGI: ``/health``; Triton and KServe v2: ``/v2/health/ready``). A port that accepts a
    #: connection is not a model that serves, so there is no TCP probe: a replica is Ready, in the cluster or rented
    #: (the burst provider runs this probe against the rented instance), only when this path says so.
    readiness_path: Annotated[str, Field(min_length=1, max_length=256, pattern=r"^/[!-~]*$")] = "/health"
    #: Seconds a replica keeps serving once told to stop (its preStop sleep), while its endpoint is terminating and
    #: the Service's traffic moves to the others: a flip or a scale-down then drops no request in flight. Rented
    #: replicas drain the same way (the burst provider keeps the instance until then). 0: it stops at once.
    drain_seconds: Annotated[int, Field(ge=0, le=300)] = 5
    command: list[str] | None = None
    args: list[str] | None = None
    resources: InferenceResources = InferenceResources()
    #: PodDisruptionBudget minAvailable: a replica count or a percentage such as "75%".
    min_available: int | str = "50%"
    #: How many replicas a rollout adds before it removes any (maxUnavailable is always 0): a count or a
    #: percentage. The make-before-break flip is a rollout, so this is how many replicas move at a time: "100%"
    #: moves them all at once (the flip takes one boot, and rents every replacement together), "25%" moves a
    #: quarter at a time (slower flips; a routine image rollout rents fewer surge GPUs while the cluster is full).
    max_surge: int | str = "25%"
    hpa: InferenceHpa | None = None
    #: Extra pod template annotations (the simulated cluster reads sim.gpucluster.io/ready-after from here).
    pod_annotations: Annotated[dict[str, str], AfterValidator(_annotation_keys)] = {}

    @field_validator("max_surge", mode="before")
    @classmethod
    def _max_surge(cls, v: Any) -> int | str:
        if isinstance(v, int) and not isinstance(v, bool):
            if v < 1:
                raise ValueError(f"{v} adds no replica: with maxUnavailable 0 a rollout could never progress")
            return v
        if isinstance(v, str):
            m = _PERCENT.match(v.strip())
            if m and 1 <= int(m.group(1)) <= 100:
                return v.strip()
        raise ValueError(f"{shown(v)} is neither a replica count of at least 1 nor a percentage from '1%' to '100%'")

    @field_validator("min_available", mode="before")
    @classmethod
    def _min_available(cls, v: Any) -> int | str:
        if isinstance(v, int) and not isinstance(v, bool):
            if v < 0:
                raise ValueError(f"{v} is negative")
            return v
        if isinstance(v, str):
            m = _PERCENT.match(v.strip())
            if m and int(m.group(1)) <= 100:
                return v.strip()
        raise ValueError(f"{shown(v)} is neither a replica count nor a percentage such as '75%'")

    def rule_problems(self) -> Iterator[Problem]:
        """A budget that allows no eviction would pin burst replicas on rented GPUs forever."""
        floor = self.hpa.min_replicas if self.hpa else self.replicas
        if isinstance(self.min_available, int) and self.min_available >= floor:
            yield Problem(
                (),
                f"minAvailable {self.min_available} allows no eviction of {floor} replica(s): the descheduler "
                "could never bring a replica home",
            )
        if self.min_available == "100%":
            yield Problem(
                (), "minAvailable '100%' allows no eviction: the descheduler could never bring a replica home"
            )
