"""Settings of the metrics adapter (``components/metrics_adapter.py``): ``gpucluster:metricsAdapter``.

The adapter serves ``custom.metrics.k8s.io`` for the HPAs of the InferenceServices: ``requests_per_second`` of each
one's Service, one PromQL query per Service. The query reads the request rate where the traffic enters (a gateway,
an ingress controller, a service mesh's proxies), never from inside the pods: a replica on a rented GPU is neither
scraped by the cluster's Prometheus nor seen by the virtual node's stats, but its requests pass the entrance like
any other.

Example (stack YAML)::

    gpucluster:metricsAdapter:
      enabled: true
      prometheusUrl: http://prometheus-operated.monitoring.svc:9090
      # ingress-nginx counts each request by the Service it went to
      requestRateQuery: >-
        sum(rate(nginx_ingress_controller_requests{exported_namespace="<<.Namespace>>",
        exported_service="<<.Name>>"}[1m]))
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import AfterValidator, Field, HttpUrl, field_validator

from contract.images_settings import DEFAULT_VIRTUAL_NODE_IMAGE
from contract.issues import shown
from contract.model import (
    ConfigModel,
    DnsLabel,
    Image,
    PositiveDuration,
    Problem,
    Toleration,
    check_labels,
    parse_duration,
)

STACK_KEY = "metricsAdapter"
#: The custom metrics API the HPA controller reads (v1beta2: what it asks for first).
API_GROUP = "custom.metrics.k8s.io"
API_VERSION = "v1beta2"
#: The adapter's HTTPS port in its pod and on its Service.
SECURE_PORT = 6443
#: The placeholders of the query: the Service's namespace and name (prometheus-adapter's template delimiters).
NAMESPACE_PLACEHOLDER = "<<.Namespace>>"
NAME_PLACEHOLDER = "<<.Name>>"


class MetricsAdapterSettings(ConfigModel):
    """``gpucluster:metricsAdapter``."""

    enabled: bool = False
    #: Its own namespace: it holds nothing but the adapter.
    namespace: DnsLabel = "gpucluster-metrics"
    #: The Go image (``gpucluster-virtual-node`` carries the adapter's binary too).
    image: Image = DEFAULT_VIRTUAL_NODE_IMAGE
    replicas: Annotated[int, Field(ge=1, le=5)] = 2
    prometheus_url: HttpUrl = HttpUrl("http://prometheus-operated.monitoring.svc:9090")
    #: PromQL: the requests per second the Service ``<<.Name>>`` in ``<<.Namespace>>`` receives, aggregated to one
    #: sample (``sum(rate(...))``). No default: which counter sees every request depends on the cluster's entrance.
    request_rate_query: Annotated[str, Field(min_length=1, max_length=2048)] | None = None
    query_timeout: PositiveDuration = "5s"
    #: ``host:port`` where the adapter runs outside the cluster: the stack then deploys no pod, and the APIService
    #: reaches that address through an ExternalName Service.
    external_address: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?:\d{1,5}$")] | None = None
    #: Where its pods run (the Deployment's nodeSelector and tolerations): as a rule system nodes, never the GPUs.
    node_selector: Annotated[dict[str, str], AfterValidator(check_labels)] = {}
    tolerations: list[Toleration] = []

    @field_validator("request_rate_query")
    @classmethod
    def _names_the_service(cls, v: str | None) -> str | None:
        if v is not None and NAME_PLACEHOLDER not in v:
            raise ValueError(
                f"{shown(v)} never names the Service ({NAME_PLACEHOLDER}): every Service would read the same rate"
            )
        return v

    @field_validator("query_timeout")
    @classmethod
    def _timeout(cls, v: str) -> str:
        if parse_duration(v) > 60:
            raise ValueError(f"{shown(v)} is over 60s: the HPA controller would wait on it every sync")
        return v

    def rule_problems(self) -> Iterator[Problem]:
        if self.external_address is not None:
            for key, value in (("nodeSelector", self.node_selector), ("tolerations", self.tolerations)):
                if value:
                    yield Problem(
                        (key,),
                        "places the adapter's pods, but externalAddress runs the adapter outside the cluster: "
                        "no pod is deployed (leave one of the two out)",
                    )
        if self.enabled and self.request_rate_query is None:
            yield Problem(
                ("requestRateQuery",),
                "is required when the adapter is enabled: which counter sees every request depends on the cluster",
            )

    def document(self, namespaces: list[str], metric: str) -> dict[str, Any]:
        """The adapter's configuration file (``virtualnode/internal/metricsadapter``)."""
        assert self.request_rate_query is not None
        return {
            "prometheusUrl": str(self.prometheus_url).rstrip("/"),
            "queryTimeoutSeconds": parse_duration(self.query_timeout),
            "namespaces": namespaces,
            "metrics": [{"name": metric, "resource": "services", "query": self.request_rate_query}],
        }
