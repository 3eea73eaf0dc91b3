"""The simulated cluster's real node running the stack's own pods, and the sim's Prometheus scraping them by the
stack's scrape contract: both ways (a pod that listens on loopback is found down, as it would be in production)."""

from __future__ import annotations

import copy
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from components.config import load_stack_file
from components.metrics_adapter import APP
from components.scraping import Target, scrape_targets
from components.virtual_node import APP as VIRTUAL_NODE_APP
from components.virtual_node import NODE_METRICS_PORT
from contract.metrics_adapter_settings import API_GROUP, API_VERSION
from contract.registry import CONTROLLERS, TAINT_CONTROLLER
from tests.support.local_stack import ROOT, LocalStack, wait_for
from tests.support.sim import load_sim_module
from tests.support.stack_reads import all_reads, rendered

pytestmark = pytest.mark.integration

node = load_sim_module("node")
processes = load_sim_module("processes")
placement = load_sim_module("placement")
upstream_images = load_sim_module("upstream_images")
CFG = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
PROMETHEUS = f"http://127.0.0.1:{processes.PROMETHEUS_PORT}"
#: The controllers the local stack turns on: every one on the real node (sim/placement.py refuses a stack that
#: leaves one off it).
ON_NODE = [(spec, settings) for spec in CONTROLLERS if (settings := CFG.running(spec)) is not None]
LOOPBACK = "loopback-listener"


def up_values(selector: str) -> dict[str, str]:
    """``up`` of every target the selector matches, by pod."""
    url = f"{PROMETHEUS}/api/v1/query?" + urllib.parse.urlencode({"query": f"up{{{selector}}}"})
    with urllib.request.urlopen(url, timeout=10) as r:
        result = json.load(r)["data"]["result"]
    return {x["metric"].get("pod", ""): x["value"][1] for x in result}


def test_the_local_stack_places_controllers_on_the_node_the_sim_labels() -> None:
    assert {spec.name for spec, _ in ON_NODE} == {spec.name for spec in CONTROLLERS}
    for _, settings in ON_NODE:
        assert settings.node_selector == {node.REAL_NODE_KEY: "true"}
        assert [t.key for t in settings.tolerations] == [node.REAL_NODE_KEY]


def test_the_node_is_a_real_kubelet_of_the_control_planes_release(local_stack: LocalStack) -> None:
    real = local_stack.get("node", node.NODE_NAME)
    server = json.loads(local_stack.kubectl("version", "-o", "json"))["serverVersion"]["gitVersion"]
    assert real["status"]["nodeInfo"]["kubeletVersion"] == server
    assert real["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert {"key": node.REAL_NODE_KEY, "value": "true", "effect": "NoSchedule"} in real["spec"]["taints"]


@pytest.mark.parametrize("spec_settings", ON_NODE, ids=[spec.name for spec, _ in ON_NODE])
def test_each_placed_controller_runs_this_trees_image_answers_logs_and_is_scraped(
    local_stack: LocalStack, spec_settings: tuple[Any, Any]
) -> None:
    spec, settings = spec_settings
    local_stack.kubectl("rollout", "status", "-n", settings.namespace, f"deployment/{spec.app}", "--timeout=120s")
    pods = local_stack.items("pods", "-n", settings.namespace, "-l", f"app.kubernetes.io/name={spec.app}")
    pods = [p for p in pods if "deletionTimestamp" not in p["metadata"]]
    assert len(pods) == settings.replicas
    built = json.loads((ROOT / ".state" / "images" / "digests.json").read_text())["gpucluster-daemons"]["digest"]
    for pod in pods:
        assert pod["spec"]["nodeName"] == node.NODE_NAME
        (status,) = pod["status"]["containerStatuses"]
        assert status["imageID"].endswith("@" + built), "a pod runs another build than make images made"
        name = pod["metadata"]["name"]
        assert local_stack.kubectl("logs", "-n", settings.namespace, name).strip(), f"kubectl logs {name} is empty"

    def scraped() -> dict[str, str] | None:
        ups = up_values(f'job="{spec.app}",namespace="{settings.namespace}"')
        return ups if ups == {p["metadata"]["name"]: "1" for p in pods} else None

    wait_for(f"every pod of {spec.app} scraped (up == 1) by its scrape contract", scraped, timeout=60)


def test_the_metrics_adapter_serves_the_custom_metrics_api_from_its_pods_on_the_node(local_stack: LocalStack) -> None:
    """The API server reaches the adapter's pods through the stack's Service and APIService (kube-proxy routes the
    ClusterIP), and the adapter answers with the Service's request rate, read from the sim's Prometheus at the node's
    address: what the HPA controller asks."""
    ma = CFG.metrics_adapter
    assert ma.external_address is None, "the local stack runs the adapter as pods"
    local_stack.kubectl("rollout", "status", "-n", ma.namespace, f"deployment/{APP}", "--timeout=120s")
    pods = [
        p
        for p in local_stack.items("pods", "-n", ma.namespace, "-l", f"app.kubernetes.io/name={APP}")
        if "deletionTimestamp" not in p["metadata"]
    ]
    assert len(pods) == ma.replicas
    built = json.loads((ROOT / ".state" / "images" / "digests.json").read_text())["gpucluster-virtual-node"]["digest"]
    for pod in pods:
        assert pod["spec"]["nodeName"] == node.NODE_NAME
        (status,) = pod["status"]["containerStatuses"]
        assert status["imageID"].endswith("@" + built), "a pod runs another build than make images made"
    # Discovery of the group comes from the adapter itself (the API server proxies it): the metric it serves.
    out = local_stack.kubectl("get", "--raw", f"/apis/{API_GROUP}/{API_VERSION}")
    resources = {r["name"] for r in json.loads(out)["resources"]}
    assert resources == {"services/requests_per_second"}, resources
    api = local_stack.get("apiservice", f"{API_VERSION}.{API_GROUP}")
    assert api["spec"]["service"] == {"name": APP, "namespace": ma.namespace, "port": 443}


@pytest.fixture
def loopback_listener(local_stack: LocalStack) -> Iterator[tuple[str, str]]:
    """A pod beside the stall detector's, named and labelled its own, deleted afterwards (a namespace is never
    created for it: the simulated cluster deletes none while Kueue's visibility API is not served)."""
    spec, settings = next((s, c) for s, c in ON_NODE if s.name == "stall-detector")
    yield settings.namespace, spec.app
    local_stack.kubectl("delete", "pod", "-n", settings.namespace, LOOPBACK, "--ignore-not-found", "--wait=false")


def test_a_pod_whose_program_listens_on_loopback_is_discovered_and_found_down(
    local_stack: LocalStack, loopback_listener: tuple[str, str]
) -> None:
    """The other way: the stall detector's own pod template with its listener moved to loopback. The manifest says
    "scrape me", so Prometheus tries, and the target is down: the sim misses it exactly as production would."""
    namespace, app = loopback_listener
    deployed = local_stack.get("deployment", "-n", namespace, app)
    template = copy.deepcopy(deployed["spec"]["template"])
    (container,) = template["spec"]["containers"]
    container["args"] = [a.replace("$(POD_IP)", "127.0.0.1") for a in container["args"]]
    # Its readiness probe would never pass on the pod's address: the pod runs, its port answers only inside it.
    container.pop("readinessProbe", None)
    container.pop("livenessProbe", None)
    # Another Lease holder would take part in the stall detector's election: a dry run elects nobody.
    container["args"].append("--dry-run")
    template["metadata"]["labels"] = {"app.kubernetes.io/name": LOOPBACK}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": LOOPBACK, "namespace": namespace, **template["metadata"]},
        "spec": template["spec"],
    }
    local_stack.apply(pod)
    local_stack.kubectl("wait", "-n", namespace, f"pod/{LOOPBACK}", "--for=condition=Ready", "--timeout=120s")

    def down() -> dict[str, str] | None:
        ups = up_values(f'job="{LOOPBACK}",namespace="{namespace}"')
        return ups if ups == {LOOPBACK: "0"} else None

    wait_for("the loopback listener discovered and found down", down, timeout=60)


def _built(image: str) -> str:
    digest: str = json.loads((ROOT / ".state" / "images" / "digests.json").read_text())[image]["digest"]
    return digest


def test_the_virtual_node_and_its_provider_run_as_the_stacks_pod_and_register_the_node(
    local_stack: LocalStack,
) -> None:
    """One pod, two containers from this tree's images (the Go node, the provider service of the daemons' image),
    with the ServiceAccount, settings and Secret Pulumi created; the Node it registers is Ready at the pod's address,
    and both metrics ports are scraped by the stack's contract."""
    assert CFG.burst is not None
    vn = CFG.burst.settings.virtual_node
    assert "virtual-node" in [pod.name for pod in placement.pods(CFG) if pod.placed]
    local_stack.kubectl("rollout", "status", "-n", vn.namespace, f"deployment/{VIRTUAL_NODE_APP}", "--timeout=120s")
    pods = [
        p
        for p in local_stack.items("pods", "-n", vn.namespace, "-l", f"app.kubernetes.io/name={VIRTUAL_NODE_APP}")
        if "deletionTimestamp" not in p["metadata"]
    ]
    (pod,) = pods
    assert pod["spec"]["nodeName"] == node.NODE_NAME
    assert pod["spec"]["serviceAccountName"] == VIRTUAL_NODE_APP
    images = {s["name"]: s["imageID"] for s in pod["status"]["containerStatuses"]}
    assert images["node"].endswith("@" + _built("gpucluster-virtual-node"))
    assert images["provider"].endswith("@" + _built("gpucluster-daemons"))
    name = pod["metadata"]["name"]
    for container in images:
        logs = local_stack.kubectl("logs", "-n", vn.namespace, name, "-c", container)
        assert logs.strip(), f"kubectl logs {name} -c {container} is empty"
    registered = local_stack.get("node", vn.node_name)
    addresses = {a["type"]: a["address"] for a in registered["status"]["addresses"]}
    assert addresses["InternalIP"] == pod["status"]["podIP"]
    ready = {c["type"]: c["status"] for c in registered["status"]["conditions"]}
    assert ready["Ready"] == "True"

    def scraped() -> dict[str, str | None] | None:
        ups = {
            c: up_values(f'job="{VIRTUAL_NODE_APP}",namespace="{vn.namespace}",container="{c}"').get(name)
            for c in images
        }
        return ups if ups == {"node": "1", "provider": "1"} else None

    wait_for(f"both containers of {name} scraped (up == 1; the node on {NODE_METRICS_PORT})", scraped, timeout=60)


def _up(target: Target) -> dict[str, str]:
    """``up`` of the target's job and container (the real node's pods). An exporter's DaemonSet sits on the kwok
    GPU nodes, where nothing runs: a stand-in of this machine serves its job (sim/fake_dcgm.py), found by job."""
    if target.workload.startswith("DaemonSet "):
        return up_values(f'job="{target.job}"')
    return up_values(f'job="{target.job}",container="{target.container}"')


def test_every_series_the_stack_reads_comes_from_a_target_the_running_prometheus_scrapes(
    local_stack: LocalStack,
) -> None:
    """Every alert can fire, on the running Prometheus: each program of ours whose series an alert, recording rule,
    dashboard panel or controller query of the local stack reads has every target the stack's scrape contract
    reaches up (``up == 1``) in the sim's Prometheus, which scrapes what it discovers from the stack's pods. The
    other stacks cannot run here; tests/components/test_scraping.py holds each of them to the same contract from
    what it renders."""
    objs = rendered("local", CFG)
    reads, producers = all_reads(objs)
    programs = {
        p.program
        for wanted in reads.values()
        for r in wanted
        if (p := next((p for p in producers if r.metric.startswith(p.prefix)), None)) is not None and p.program
    }
    assert {"gpucluster-burst-provider", TAINT_CONTROLLER.module} <= programs, programs
    targets = [t for t in scrape_targets(objs) if t.program in programs and t.reached]
    assert {t.program for t in targets} == programs, "a program read has no reached target (see test_scraping)"

    def down() -> list[str] | None:
        problems = []
        for t in targets:
            ups = _up(t)
            if not ups or set(ups.values()) != {"1"}:
                problems.append(f"{t}: up {ups or 'never scraped'}")
        return problems or None

    deadline = time.monotonic() + 60  # a pod restarted by an earlier test is discovered within seconds
    while (left := down()) and time.monotonic() < deadline:
        time.sleep(2)
    assert not left, "targets a rule, panel or query of the stack needs are not up:\n" + "\n".join(left)


def _running_pods(local_stack: LocalStack, ns: str, selector: str) -> list[dict[str, Any]]:
    return [p for p in local_stack.items("pods", "-n", ns, "-l", selector) if "deletionTimestamp" not in p["metadata"]]


def _chart_pods_ready(local_stack: LocalStack, ns: str, selector: str) -> list[dict[str, Any]]:
    """The chart Deployment's pods once it has rolled out: each on the real node, each container Ready."""
    (deployment,) = local_stack.items("deployment", "-n", ns, "-l", selector)
    name = deployment["metadata"]["name"]
    local_stack.kubectl("rollout", "status", "-n", ns, f"deployment/{name}", "--timeout=180s")
    pods = _running_pods(local_stack, ns, selector)
    assert len(pods) == deployment["spec"]["replicas"]
    for pod in pods:
        assert pod["spec"]["nodeName"] == node.NODE_NAME
        assert all(s["ready"] for s in pod["status"]["containerStatuses"]), pod["metadata"]["name"]
    return pods


def _runs_the_upstream_image(pod: dict[str, Any], tool: str, configured: str) -> None:
    """The pod's container is the stack's configured image, which is upstream's release the tools pin, imported
    from the archive sim/upstream_images.py built from that module."""
    spec = upstream_images.ALL[tool]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == configured == spec.image_name()
    assert container["imagePullPolicy"] == "IfNotPresent"
    (status,) = pod["status"]["containerStatuses"]
    assert status["imageID"].endswith("@" + node.archive_digest(node.Paths().upstream_archives[tool]))


def test_the_descheduler_charts_pod_runs_on_the_node_from_the_image_built_from_its_module(
    local_stack: LocalStack,
) -> None:
    """The chart's own Deployment, ServiceAccount, policy and HTTPS liveness probe, on the real node, from the image
    sim/upstream_images.py builds (the release the tools pin, named as upstream's); it runs its cycles."""
    ns = CFG.descheduler.namespace
    (pod,) = _chart_pods_ready(local_stack, ns, "app.kubernetes.io/name=descheduler")
    _runs_the_upstream_image(pod, "descheduler", CFG.descheduler.image)
    (container,) = pod["spec"]["containers"]
    assert f"--descheduling-interval={CFG.descheduler.interval}" in container["args"]
    # A whole cycle of the policy the chart mounted, with the ServiceAccount the chart made (its interval: 20s).
    wait_for(
        "the descheduler logging a finished cycle",
        lambda: "Number of evictions/requests" in local_stack.kubectl("logs", "-n", ns, pod["metadata"]["name"]),
        timeout=60,
    )


#: Kueue's and JobSet's charts: (tool, namespace, the controller pods' selector, the image the stack configures).
CHART_CONTROLLERS = [
    (
        "kueue",
        CFG.kueue.namespace,
        "app.kubernetes.io/name=kueue,control-plane=controller-manager",
        CFG.kueue.controller_image,
    ),
    (
        "jobset",
        CFG.jobset.namespace,
        "app.kubernetes.io/name=jobset,app.kubernetes.io/component=controller",
        CFG.jobset.controller_image,
    ),
]


@pytest.mark.parametrize("chart", CHART_CONTROLLERS, ids=[c[0] for c in CHART_CONTROLLERS])
def test_kueue_and_jobset_run_as_their_charts_pods_with_the_configuration_pulumi_deployed(
    local_stack: LocalStack, chart: tuple[str, str, str, str]
) -> None:
    """The chart's Deployment, ServiceAccount and mounted Configuration on the real node, from upstream's image at
    the pinned release built from its module; its log says it started the controllers the Configuration names."""
    tool, ns, selector, image = chart
    pods = _chart_pods_ready(local_stack, ns, selector)
    for pod in pods:
        _runs_the_upstream_image(pod, tool, image)
    logs = "".join(local_stack.kubectl("logs", "-n", ns, p["metadata"]["name"]) for p in pods)
    assert "Starting workers" in logs, f"no {tool} controller started its workers:\n{logs[-2000:]}"


def test_kueue_serves_the_configuration_pulumi_deployed(local_stack: LocalStack) -> None:
    """The pod reads the chart's ConfigMap as it is: the stack's pods-ready gate, and Kueue's own certificate
    management (nothing on the simulated cluster turns it off)."""
    ns = CFG.kueue.namespace
    (cm,) = [
        c
        for c in local_stack.items("configmap", "-n", ns, "-l", "app.kubernetes.io/name=kueue")
        if c["metadata"]["name"].endswith("-manager-config")
    ]
    deployed = yaml.safe_load(cm["data"]["controller_manager_config.yaml"])
    assert deployed["internalCertManagement"]["enable"] is True
    assert deployed["waitForPodsReady"]["timeout"] == CFG.kueue.wait_for_pods_ready.timeout
    (pod,) = _chart_pods_ready(local_stack, ns, "app.kubernetes.io/name=kueue,control-plane=controller-manager")
    mounted = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert mounted["manager-config"]["configMap"]["name"] == cm["metadata"]["name"]


@pytest.mark.parametrize("group", ["kueue", "jobset"])
def test_the_api_server_calls_the_charts_webhooks_through_their_services(local_stack: LocalStack, group: str) -> None:
    """Every webhook names the chart's Service (never a URL) with the CA the controller's own certificate management
    injected, and the API server reaches it: an object the webhook refuses is refused by it, by name."""
    hooks = local_stack.items("validatingwebhookconfigurations", "-l", f"app.kubernetes.io/name={group}")
    hooks += local_stack.items("mutatingwebhookconfigurations", "-l", f"app.kubernetes.io/name={group}")
    assert hooks, f"no {group} webhook configurations"
    for cfg in hooks:
        for hook in cfg["webhooks"]:
            assert "url" not in hook["clientConfig"], hook["name"]
            assert hook["clientConfig"]["service"]["name"], hook["name"]
            assert hook["clientConfig"].get("caBundle"), f"{hook['name']}: no CA injected"
    refused = WEBHOOK_REFUSALS[group]
    out = local_stack.run(
        "kubectl", "apply", "--dry-run=server", "-f", "-", input=json.dumps(refused["object"]), check=False
    )
    assert out.returncode != 0, f"{group}'s webhook let {refused['object']['kind']} through"
    for words in refused["says"]:
        assert words in out.stderr, out.stderr


#: An object each chart's validating webhook refuses (a server-side dry run: nothing is created).
WEBHOOK_REFUSALS: dict[str, dict[str, Any]] = {
    "kueue": {
        # Kueue's webhook answers Forbidden: kubectl prints the API server's message, which names the webhook.
        "says": ['admission webhook "vclusterqueue.kb.io" denied the request'],
        "object": {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "webhook-probe"},
            # One flavor in two resource groups: Kueue's webhook refuses it (the schema has no rule for it).
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": [resource],
                        "flavors": [{"name": "f", "resources": [{"name": resource, "nominalQuota": quota}]}],
                    }
                    for resource, quota in (("cpu", "1"), ("memory", "1Gi"))
                ]
            },
        },
    },
    "jobset": {
        # JobSet's (from v0.12.0) answers 422 Invalid with field causes: kubectl prints those, not the webhook's name.
        # The schema has no rule for the name, so only the webhook says it.
        "says": ['The JobSet "webhook-probe" is invalid', "absent"],
        "object": {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "webhook-probe", "namespace": "default"},
            # A success policy naming a replicated job the JobSet does not have: JobSet's webhook refuses it.
            "spec": {
                "successPolicy": {"operator": "All", "targetReplicatedJobs": ["absent"]},
                "replicatedJobs": [
                    {
                        "name": "w",
                        "replicas": 1,
                        "template": {
                            "spec": {
                                "template": {
                                    "spec": {
                                        "restartPolicy": "Never",
                                        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                                    }
                                }
                            }
                        },
                    }
                ],
            },
        },
    },
}
