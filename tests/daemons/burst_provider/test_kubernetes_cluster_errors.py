"""How the kubernetes provider reports a bad kubeconfig, an unreachable cluster and API refusals: a ProviderError
naming the provider and the call, never the kubeconfig's contents. The API is a small local HTTP stand-in."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from contract.burst_settings import ProviderSettings
from daemons.burst_provider.providers.base import AdapterContext, ProviderError
from daemons.burst_provider.providers.kubernetes.api import KubernetesApiError
from daemons.burst_provider.providers.kubernetes.provider import KubernetesClusterProvider
from daemons.burst_provider.providers.kubernetes.translate import NODE_LABEL
from daemons.burst_provider.secrets import SecretStore

TOKEN = "s3cr3t-bearer-token-do-not-print"


def kubeconfig(server: str) -> str:
    return f"""apiVersion: v1
kind: Config
clusters:
- name: east
  cluster: {{server: "{server}"}}
users:
- name: burst
  user: {{token: {TOKEN}}}
contexts:
- name: east
  context: {{cluster: east, user: burst}}
current-context: east
"""


def provider(text: str, **kw: Any) -> KubernetesClusterProvider:
    return KubernetesClusterProvider("east", text, {"H100": 1.8}, max_gpus=8, request_timeout=(2.0, 5.0), **kw)


def test_unreachable_cluster_is_a_provider_error_without_the_token() -> None:
    p = provider(kubeconfig("http://127.0.0.1:1"))
    with pytest.raises(ProviderError) as err:
        p.offers()
    text = str(err.value)
    assert text.startswith("provider east: offers: cannot reach the API server at http://127.0.0.1:1")
    assert TOKEN not in text


def test_kubeconfig_that_is_not_yaml_names_the_line_not_the_content() -> None:
    with pytest.raises(ProviderError, match=r"kubeconfig: not valid YAML \(line \d+\)") as err:
        provider(f"apiVersion: v1\nusers: [{{token: {TOKEN}\n")
    assert TOKEN not in str(err.value)


def test_kubeconfig_without_a_context_cannot_be_used() -> None:
    with pytest.raises(ProviderError, match="kubeconfig: cannot be used") as err:
        provider(f"apiVersion: v1\nkind: Config\nusers: [{{name: u, user: {{token: {TOKEN}}}}}]\n")
    assert TOKEN not in str(err.value)
    with pytest.raises(ProviderError, match="expected a YAML mapping"):
        provider("- just\n- a list\n")


def settings(**kubernetes: Any) -> ProviderSettings:
    return ProviderSettings.model_validate(
        {
            "name": "east",
            "kind": "kubernetes",
            "maxGpus": 32,
            "gpuTypes": {"H100": {"pricePerGpuHour": 1.8}},
            "addressRanges": ["10.96.0.0/12"],
            "kubernetes": {"kubeconfigSecret": "eastKubeconfig", **kubernetes},
        }
    )


def test_from_settings_reads_the_kubeconfig_secret() -> None:
    s = settings(namespaceMap={"inference": "burst-inference"}, tolerations=[{"key": "gpu", "operator": "Exists"}])
    p = KubernetesClusterProvider.from_settings(
        s, AdapterContext(SecretStore.from_values({"eastKubeconfig": kubeconfig("http://x")}))
    )
    assert p.name == "east"
    with pytest.raises(ProviderError, match="'eastKubeconfig' is not available"):
        KubernetesClusterProvider.from_settings(s, AdapterContext(SecretStore.from_values({})))


# --- API refusals, through a stand-in API server -------------------------------------------------------------------

BURST_POD = {
    "metadata": {
        "name": "web-1",
        "namespace": "burst-inference",
        "labels": {
            NODE_LABEL: "gpu-burst",
            "burst.gpucluster.io/source-namespace": "inference",
            "burst.gpucluster.io/source-name": "web",
            "burst.gpucluster.io/source-uid": "u-1",
        },
    },
    "spec": {"containers": [{"name": "server", "image": "x"}]},
    "status": {"phase": "Pending"},
}


class FakeApi(BaseHTTPRequestHandler):
    """Cluster-wide pod listing is forbidden; the burst-inference namespace holds one burst pod."""

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, body: object, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/api/v1/pods":
            self._send(403, {"kind": "Status", "reason": "Forbidden", "message": 'pods is forbidden: user "burst"'})
        elif url.path == "/api/v1/namespaces/burst-inference/pods":
            self._send(200, {"kind": "PodList", "items": [BURST_POD]})
        elif url.path == "/api/v1/namespaces/burst-inference/pods/web-1/log":
            query = parse_qs(url.query)
            self._send(200, f"container={query['container'][0]} tail={query['tailLines'][0]}\n", "text/plain")
        else:
            self._send(404, {"kind": "Status", "reason": "NotFound", "message": f"{url.path} not found"})


@pytest.fixture
def api_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_forbidden_cluster_wide_list_falls_back_to_the_mapped_namespaces(api_url: str) -> None:
    p = provider(kubeconfig(api_url), namespace_map={"inference": "burst-inference"})
    [inst] = p.list_instances("gpu-burst")
    assert inst.instance_id == "burst-inference/web-1"
    assert inst.tags.pod == "web"
    assert p.list_instances("other-node") == []


def test_forbidden_without_namespace_map_is_a_provider_error_with_status_and_message(api_url: str) -> None:
    p = provider(kubeconfig(api_url))
    with pytest.raises(KubernetesApiError) as err:
        p.list_instances("gpu-burst")
    assert err.value.status == 403
    assert str(err.value) == 'provider east: list_instances: HTTP 403 Forbidden: pods is forbidden: user "burst"'
    assert TOKEN not in str(err.value)


def test_missing_pod_is_none_and_logs_pass_container_and_tail(api_url: str) -> None:
    p = provider(kubeconfig(api_url))
    assert p.get_instance("burst-inference/gone") is None
    assert p.logs("burst-inference/web-1", "server", 5) == "container=server tail=5\n"
    with pytest.raises(ProviderError, match=r"logs: HTTP 404 Not Found: .*/pods/gone/log not found"):
        p.logs("burst-inference/gone", "server", None)
    with pytest.raises(ProviderError, match="is not <namespace>/<pod name>"):
        p.get_instance("no-slash")
