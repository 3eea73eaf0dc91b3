"""The virtual node on the simulated cluster: pods run on the fake GPU cloud, on RunPod's fake and on a second
cluster, every failure is a Failed pod with a Running replacement, a crash leaks nothing, and the RBAC Pulumi grants
is enough and no more.

The virtual node and the provider service run as the stack's own pod on the simulated cluster's real node (two
containers, the ServiceAccount, settings and provider Secret Pulumi created), reaching the fakes that stand for
the providers at the node's address. A crash is SIGKILL to a container, which the kubelet restarts. A probe
Deployment in the inference namespace tolerates the virtual node's taint and the burst
taint and selects the virtual node, so it lands there whatever the taint controller decides.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from components.config import load_stack_file
from contract.burst_settings import with_cluster_name
from daemons.burst_provider.providers.base import InstanceTags
from daemons.burst_provider.providers.runpod import ENV_NAMESPACE, ENV_NODE, ENV_POD, ENV_UID, pod_name
from tests.support.local_stack import ROOT, LocalStack, Watch, wait_for
from tests.support.sim import load_sim_module

pytestmark = pytest.mark.integration

CFG = load_stack_file(ROOT / "stacks" / "Pulumi.local.yaml")
assert CFG.burst is not None
BURST = CFG.burst.settings
NODE = BURST.virtual_node.node_name
#: What the deployed service tags its instances with: the cluster's name (the stack's, filled by the component) and
#: the node's.
OWNER = with_cluster_name(BURST, "local").virtual_node.instance_owner
NS = BURST.virtual_node.inference_namespaces[0]
FAKE = next(p.fake.url for p in BURST.providers if p.fake is not None)
PROBE = "burst-probe"
PROVIDER_TAINT = ("virtual-kubelet.io/provider", "gpucluster")
processes = load_sim_module("processes")
outside = load_sim_module("outside")
controllers = load_sim_module("controllers")
deployed = load_sim_module("deployed")
NODE_IP = load_sim_module("node").NODE_IP
#: The runpod provider at the real node's address (runpod-fake): sim/outside.py runs RunPod's fake on loopback
#: there, with the key Pulumi put in the provider Secret. Its own routes (/healthz, /admin/...) sit beside the API's
#: /v2.
RUNPOD = next(p for p in BURST.providers if p.runpod is not None)
assert RUNPOD.runpod is not None
RUNPOD_API = RUNPOD.runpod.url.rstrip("/")
RUNPOD_ROOT = RUNPOD_API.removesuffix(outside.FAKE_RUNPOD_PATH)
PROVIDER_SECRET = "gpucluster-virtual-node-provider-secrets"


def http(
    method: str, url: str, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        out = json.loads(r.read() or b"{}")
    assert isinstance(out, dict)
    return out


def knobs(**values: Any) -> None:
    http("POST", f"{FAKE}/admin/knobs", values)


def instances() -> list[dict[str, Any]]:
    """The fake cloud's live instances of this virtual node (what would be billed)."""
    listed = http("GET", f"{FAKE}/instances?node={OWNER}")["instances"]
    return [i for i in listed if i["state"] in ("creating", "running")]


def probe(replicas: int = 1, name: str = PROBE) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}, "annotations": {"burst.gpucluster.io/gpu-type": "H100"}},
                "spec": {
                    # The probe stops at once; 30 s of grace per deletion only lengthened every teardown.
                    "terminationGracePeriodSeconds": 2,
                    "nodeSelector": {"type": "virtual-kubelet"},
                    "tolerations": [
                        {
                            "key": PROVIDER_TAINT[0],
                            "operator": "Equal",
                            "value": PROVIDER_TAINT[1],
                            "effect": "NoSchedule",
                        },
                        {"key": CFG.burst_taint_key, "operator": "Exists", "effect": "NoSchedule"},
                    ],
                    "containers": [
                        {
                            "name": "server",
                            "image": "registry.invalid/probe:1",
                            "ports": [{"name": "http", "containerPort": 8080}],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        },
    }


def pods(stack: LocalStack, name: str = PROBE) -> list[dict[str, Any]]:
    return stack.items("pods", "-n", NS, "-l", f"app={name}")


def ready(p: dict[str, Any]) -> bool:
    return p.get("status", {}).get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in p["status"].get("conditions") or []
    )


def running_on_node(stack: LocalStack, n: int, name: str = PROBE) -> list[dict[str, Any]] | None:
    live = [p for p in pods(stack, name) if not p["metadata"].get("deletionTimestamp")]
    ok = [p for p in live if ready(p) and p["spec"].get("nodeName") == NODE]
    return ok if len(ok) == n and len(live) == n else None


@pytest.fixture
def clean(local_stack: LocalStack) -> Iterator[LocalStack]:
    """Knobs at rest, no probe before or after; waits until the probe's instances are gone."""
    knobs(createFailureRate=0.0, deathRate=0.0, bootSeconds=2.0)
    local_stack.kubectl("delete", "deployment", PROBE, "-n", NS, "--ignore-not-found", "--wait=true")
    yield local_stack
    knobs(createFailureRate=0.0, deathRate=0.0, bootSeconds=5.0, addressForm="dotted")
    local_stack.kubectl("delete", "deployment", PROBE, "-n", NS, "--ignore-not-found", "--wait=true")
    wait_for(
        "the probe's pods and instances to be gone",
        lambda: not pods(local_stack) and not [i for i in instances() if i["tags"]["pod"].startswith(PROBE)],
        timeout=120,
    )


# --- the node -------------------------------------------------------------------------------------------------


def test_virtual_node_registers_with_the_providers_caps_and_its_taint(local_stack: LocalStack) -> None:
    node = local_stack.get("node", NODE)
    assert node["metadata"]["labels"]["type"] == "virtual-kubelet"
    assert "kwok.x-k8s.io/node" not in (node["metadata"].get("annotations") or {}), "kwok must not manage it"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == str(sum(p.max_gpus for p in BURST.providers))
    taints = {(t["key"], t.get("value"), t["effect"]) for t in node["spec"].get("taints") or []}
    assert (*PROVIDER_TAINT, "NoSchedule") in taints
    assert all(t[2] != "NoExecute" for t in taints)
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])


def test_a_tolerating_pod_runs_on_the_fake_cloud_and_is_reachable(clean: LocalStack) -> None:
    stack = clean
    stack.apply(probe(1))
    stack.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": PROBE, "namespace": NS},
            "spec": {"selector": {"app": PROBE}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
        }
    )
    try:
        (pod,) = wait_for("the probe Ready on the virtual node", lambda: running_on_node(stack, 1), timeout=90)
        uid = pod["metadata"]["uid"]
        (inst,) = [i for i in instances() if i["tags"]["uid"] == uid]
        assert inst["state"] == "running"
        assert inst["tags"] == {"node": OWNER, "namespace": NS, "pod": pod["metadata"]["name"], "uid": uid}
        try:
            address = wait_for(
                "the external address annotation",
                lambda: (
                    stack.get("pod", pod["metadata"]["name"], "-n", NS)["metadata"]
                    .get("annotations", {})
                    .get("burst.gpucluster.io/address")
                ),
            )
        except AssertionError as e:  # only the provider's reconcile loop writes it: say what the loop was doing
            now = stack.get("pod", pod["metadata"]["name"], "-n", NS, "--show-managed-fields")["metadata"]
            writers = [(f.get("manager"), f.get("operation"), f.get("time")) for f in now.get("managedFields") or []]
            raise AssertionError(
                f"{e}\nthe pod's annotations now: {now.get('annotations')}\nwho wrote the pod: {writers}"
                f"\nthe provider's log, last lines:\n{_provider_log_tail()}"
            ) from None
        assert address == inst["address"]
        slices = wait_for(
            "an EndpointSlice for the external replica",
            # The probe's own: replicas moved on purpose (make-before-break) have slices of their Services too.
            lambda: stack.items(
                "endpointslices",
                *(
                    "-n",
                    NS,
                    "-l",
                    f"endpointslice.kubernetes.io/managed-by=burst.gpucluster.io,kubernetes.io/service-name={PROBE}",
                ),
            ),
        )
        endpoints = [e for s in slices for e in s.get("endpoints") or []]
        assert [e["addresses"] for e in endpoints] == [[address]]
        assert all(s["metadata"]["labels"]["kubernetes.io/service-name"] == PROBE for s in slices)
    finally:
        stack.kubectl("delete", "service", PROBE, "-n", NS, "--ignore-not-found")


def _provider_log_tail(lines: int = 40) -> str:
    return controllers.burst_part("provider").log_tail(lines)


def test_deleting_the_pod_deletes_its_instance(clean: LocalStack) -> None:
    stack = clean
    stack.apply(probe(1))
    (pod,) = wait_for("the probe Ready on the virtual node", lambda: running_on_node(stack, 1), timeout=90)
    uid = pod["metadata"]["uid"]
    assert [i for i in instances() if i["tags"]["uid"] == uid]
    stack.kubectl("scale", "deployment", PROBE, "-n", NS, "--replicas=0")
    wait_for("the instance to be deleted", lambda: not [i for i in instances() if i["tags"]["uid"] == uid], timeout=60)


# --- every failure is a Failed pod with a replacement --------------------------------------------------------


def _failed_then_replaced(
    stack: LocalStack, reason: str, cause: Callable[[], None], heal: Callable[[], None], timeout: float = 90
) -> dict[str, Any]:
    """Run ``cause`` under a watch of the probe's pods: one of them turns Failed with ``reason`` and terminated
    containers, then ``heal`` lets a replacement run, and the node deletes the Failed pod. Returns the Failed pod.

    The Failed pod is looked for in the watch, not by polling: the node deletes it as soon as a replacement
    exists (within one GC interval), which a one-second poll can miss.
    """

    def failed(watch: Watch) -> list[dict[str, Any]]:
        return [p for p in watch.seen() if p.get("status", {}).get("phase") == "Failed"]

    with stack.watch("pods", "-n", NS, "-l", f"app={PROBE}") as watch:
        cause()
        (first, *_) = wait_for(f"a Failed probe pod ({reason})", lambda: failed(watch), timeout=timeout)
    status = first["status"]
    assert status.get("reason") == reason, status
    for c in status.get("containerStatuses") or []:
        assert "terminated" in c["state"], c
    heal()
    wait_for("a Running replacement on the virtual node", lambda: running_on_node(stack, 1), timeout=120)
    # The node deletes the Failed pods it created once their replacement exists.
    wait_for(
        "the replaced Failed pods to be deleted",
        lambda: not [p for p in pods(stack) if p.get("status", {}).get("phase") == "Failed"],
        timeout=90,
    )
    return first


def test_a_refused_create_is_a_failed_pod_and_a_replacement_runs(clean: LocalStack) -> None:
    knobs(createFailureRate=1.0)
    _failed_then_replaced(
        clean, "ProviderCreateFailed", lambda: clean.apply(probe(1)), lambda: knobs(createFailureRate=0.0)
    )


@pytest.mark.parametrize("form", ["decimal", "short", "octal"])
def test_an_address_in_a_form_the_check_never_saw_is_refused(clean: LocalStack, form: str) -> None:
    """A provider account that reports its instance's address in a legacy IPv4 form (``2130706433``, ``127.1``,
    ``0177.0.0.01``, which a resolver reads as an IPv4 address: loopback, the metadata address, the cluster's own
    network) gets no traffic and no probe: the pod fails AddressRefused (a replacement runs as after any failure:
    the tests above)."""
    knobs(addressForm=form)

    def failed(watch: Watch) -> list[dict[str, Any]]:
        return [p for p in watch.seen() if p.get("status", {}).get("phase") == "Failed"]

    try:
        with clean.watch("pods", "-n", NS, "-l", f"app={PROBE}") as watch:
            clean.apply(probe(1))
            (first, *_) = wait_for("a Failed probe pod (AddressRefused)", lambda: failed(watch), timeout=90)
    finally:
        knobs(addressForm="dotted")
    assert first["status"].get("reason") == "AddressRefused", first["status"]
    assert "which is no canonical IP address" in first["status"].get("message", ""), first["status"]
    selector = f"endpointslice.kubernetes.io/managed-by=burst.gpucluster.io,kubernetes.io/service-name={PROBE}"
    slices = clean.items("endpointslices", "-n", NS, "-l", selector)
    assert not [s for s in slices if s.get("endpoints")], "traffic was sent to the refused address"


def test_a_creation_timeout_is_a_failed_pod_and_a_replacement_runs(clean: LocalStack) -> None:
    timeout = BURST.virtual_node.creation_timeout_seconds
    knobs(bootSeconds=timeout * 10)

    def one_instance_that_never_boots() -> None:
        clean.apply(probe(1))
        wait_for("the probe's first instance", lambda: [i for i in instances() if i["state"] == "creating"], timeout=60)
        # A boot time is fixed when the instance is created: the replacement, created the moment the first pod
        # fails, boots in seconds instead of timing out in turn.
        knobs(bootSeconds=2.0)

    _failed_then_replaced(clean, "ProviderTimeout", one_instance_that_never_boots, lambda: None, timeout=timeout + 60)
    # The instance that never booted was deleted, not left billing.
    assert len(instances()) == len([p for p in pods(clean) if p["spec"].get("nodeName") == NODE])


def test_an_instance_death_is_a_failed_pod_and_a_replacement_runs(clean: LocalStack) -> None:
    clean.apply(probe(1))
    (pod,) = wait_for("the probe Ready on the virtual node", lambda: running_on_node(clean, 1), timeout=90)
    (inst,) = [i for i in instances() if i["tags"]["uid"] == pod["metadata"]["uid"]]

    def kill() -> None:
        http("POST", f"{FAKE}/admin/instances/{inst['id']}/kill", {"exitCode": 137})

    _failed_then_replaced(clean, "InstanceDied", kill, lambda: None)


# --- RunPod, through its v2 fake ---------------------------------------------------------------------------------


def runpod_knobs(**values: Any) -> dict[str, Any]:
    return http("POST", f"{RUNPOD_ROOT}/admin/knobs", values)


def runpod_pods() -> list[dict[str, Any]]:
    """Every pod RunPod's fake lists (listPods), read with the key Pulumi put in the provider Secret."""
    assert RUNPOD.runpod is not None
    key = processes.secret_value(BURST.virtual_node.namespace, PROVIDER_SECRET, RUNPOD.runpod.api_key_secret)
    listed = http("GET", f"{RUNPOD_API}/pods", headers={"Authorization": f"Bearer {key.decode()}"})["pods"]
    assert isinstance(listed, list)
    return listed


def probe_runpod_pods() -> list[dict[str, Any]]:
    return [p for p in runpod_pods() if str(p["env"].get(ENV_POD, "")).startswith(PROBE)]


@pytest.fixture
def runpod_only(clean: LocalStack) -> Iterator[LocalStack]:
    """fake-a with no room (capacity 0: selection rejects it), so the probe goes to runpod-fake; every knob of both
    fakes put back as it was, once the probe and its RunPod pods are gone."""
    fake_before = http("GET", f"{FAKE}/admin/knobs")
    runpod_before = http("GET", f"{RUNPOD_ROOT}/admin/knobs")
    knobs(capacity=dict.fromkeys(fake_before["capacity"], 0))
    runpod_knobs(bootSeconds=2.0, refusals=[], rateLimits=[], failAfterCreate=[], neverAddress=False)
    try:
        yield clean
    finally:
        clean.kubectl("delete", "deployment", PROBE, "-n", NS, "--ignore-not-found", "--wait=true")
        wait_for("the probe's RunPod pods to be deleted", lambda: not probe_runpod_pods(), timeout=90)
        runpod_knobs(**runpod_before)
        knobs(**fake_before)


def test_a_pod_fake_a_has_no_room_for_runs_on_runpods_fake_with_the_adapters_tags(runpod_only: LocalStack) -> None:
    stack = runpod_only
    stack.apply(probe(1))
    (pod,) = wait_for("the probe Ready on the virtual node via RunPod", lambda: running_on_node(stack, 1), timeout=90)
    meta = pod["metadata"]
    tags = InstanceTags(node=OWNER, namespace=NS, pod=meta["name"], uid=meta["uid"])
    # Exactly one RunPod pod for it, named and tagged as the adapter tags what it creates, and nothing at fake-a.
    (rp,) = [p for p in runpod_pods() if p["env"].get(ENV_UID) == meta["uid"]]
    assert rp["name"] == pod_name(tags)
    assert {k: rp["env"][k] for k in (ENV_NODE, ENV_NAMESPACE, ENV_POD, ENV_UID)} == {
        ENV_NODE: OWNER,
        ENV_NAMESPACE: NS,
        ENV_POD: meta["name"],
        ENV_UID: meta["uid"],
    }
    assert rp["status"] == "RUNNING"
    assert rp["gpu"]["count"] == 1
    assert len(probe_runpod_pods()) == 1
    assert not [i for i in instances() if i["tags"]["uid"] == meta["uid"]]

    # The pod says where it runs: RunPod's pod id and the public IP of its port.
    def addressed() -> dict[str, str] | None:
        annotations = stack.get("pod", meta["name"], "-n", NS)["metadata"].get("annotations") or {}
        return annotations if "burst.gpucluster.io/address" in annotations else None

    annotations = wait_for("the external address annotation", addressed)
    assert annotations["burst.gpucluster.io/provider"] == RUNPOD.name
    assert annotations["burst.gpucluster.io/instance-id"] == rp["id"]
    assert annotations["burst.gpucluster.io/address"] == rp["runtime"]["ports"][0]["ip"]
    # Deleting the probe deletes its RunPod pod: nothing left billing.
    stack.kubectl("delete", "deployment", PROBE, "-n", NS, "--wait=true")
    wait_for("the RunPod pod to be deleted", lambda: not [p for p in runpod_pods() if p["id"] == rp["id"]], timeout=60)
    assert rp["id"] not in http("GET", f"{RUNPOD_ROOT}/admin/stats")["billing"]


def test_a_runpod_refusal_is_a_failed_pod_and_a_replacement_runs_there(runpod_only: LocalStack) -> None:
    """RunPod answers the create 400, no capacity (its words), and no other provider is left to spill to: the pod
    fails NoCapacity with RunPod's detail, and the replacement runs at RunPod once it has room again (a 400 holds
    nothing back, unlike 402/403)."""
    stack = runpod_only
    runpod_knobs(refusals=[400])
    failed = _failed_then_replaced(stack, "NoCapacity", lambda: stack.apply(probe(1)), lambda: None)
    message = failed["status"].get("message", "")
    assert f"{RUNPOD.name} refused for capacity: no capacity (HTTP 400:" in message, message
    assert "no longer any instances available" in message, message
    (pod,) = running_on_node(stack, 1) or []
    (rp,) = probe_runpod_pods()
    assert rp["env"][ENV_UID] == pod["metadata"]["uid"]
    stats = http("GET", f"{RUNPOD_ROOT}/admin/stats")
    assert stats["refusals"] >= 1
    assert runpod_knobs()["refusals"] == []


# --- crashes ---------------------------------------------------------------------------------------------------


def test_killing_the_provider_and_the_node_mid_flight_loses_nothing(clean: LocalStack) -> None:
    """SIGKILL both containers while pods are being created and one is being deleted; after restart the replicas
    all run and every live instance belongs to a live pod (no orphan, no lost replica)."""
    stack = clean
    provider, node = controllers.burst_part("provider"), controllers.burst_part("virtual-node")
    knobs(bootSeconds=6.0)
    stack.apply(probe(3))
    wait_for(
        "three probe pods bound to the virtual node",
        lambda: len([p for p in pods(stack) if p["spec"].get("nodeName") == NODE]) >= 3,
    )
    time.sleep(2)  # creates in flight: instances booting
    assert provider.kill()
    assert node.kill()
    stack.kubectl("scale", "deployment", PROBE, "-n", NS, "--replicas=2")
    time.sleep(3)
    provider.start()
    node.start()
    live = wait_for("two probe replicas Ready on the virtual node", lambda: running_on_node(stack, 2), timeout=180)
    uids = {p["metadata"]["uid"] for p in live}
    wait_for(
        "exactly one live instance per live pod",
        lambda: sorted(i["tags"]["uid"] for i in instances() if i["tags"]["pod"].startswith(PROBE)) == sorted(uids),
        timeout=60,
    )


# --- RBAC: the ServiceAccount tokens Pulumi created ------------------------------------------------------------


def _can_i(stack: LocalStack, kubeconfig: Path, *args: str) -> bool:
    proc = stack.run("kubectl", "--kubeconfig", str(kubeconfig), "auth", "can-i", *args, check=False)
    return proc.stdout.strip() == "yes"


def test_the_daemons_run_with_least_privilege(local_stack: LocalStack, tmp_path: Path) -> None:
    vn_ns = BURST.virtual_node.namespace
    vn = processes.sa_kubeconfig(vn_ns, "gpucluster-virtual-node", tmp_path / "vn")
    provider = processes.sa_kubeconfig(vn_ns, "gpucluster-virtual-node-provider", tmp_path / "provider")
    tc = processes.sa_kubeconfig(CFG.burst.taint_controller.namespace, "gpucluster-taint-controller", tmp_path / "tc")
    # What they need: the node its Node and pod statuses, the provider (internet-facing) its EndpointSlices and the
    # Secrets burst pods reference.
    assert _can_i(local_stack, vn, "patch", f"nodes/{NODE}")
    assert _can_i(local_stack, vn, "update", "pods", "--subresource=status", "-n", NS)
    assert _can_i(local_stack, provider, "create", "endpointslices.discovery.k8s.io", "-n", NS)
    assert _can_i(local_stack, provider, "get", "secrets", "-n", NS)
    assert _can_i(local_stack, tc, "patch", f"nodes/{NODE}")
    # What they must not do: neither holds the other's rights.
    assert not _can_i(local_stack, vn, "get", "secrets", "-n", NS)
    assert not _can_i(local_stack, vn, "create", "endpointslices.discovery.k8s.io", "-n", NS)
    assert not _can_i(local_stack, provider, "patch", f"nodes/{NODE}")
    assert not _can_i(local_stack, provider, "update", "pods", "--subresource=status", "-n", NS)
    assert not _can_i(local_stack, provider, "get", "secrets", "-n", "kube-system")
    assert not _can_i(local_stack, vn, "get", "secrets", "-n", "kube-system")
    assert not _can_i(local_stack, vn, "patch", "nodes/h100-node-0")
    assert not _can_i(local_stack, vn, "create", "pods", "-n", NS)
    assert not _can_i(local_stack, tc, "patch", "nodes/h100-node-0")
    assert not _can_i(local_stack, tc, "delete", "pods", "-n", NS)
    # And the API server says so when they try.
    denied = local_stack.run("kubectl", "--kubeconfig", str(vn), "get", "secrets", "-n", "kube-system", check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()
    denied = local_stack.run(
        "kubectl", "--kubeconfig", str(tc), "taint", "node", "h100-node-0", "x=y:NoSchedule", check=False
    )
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()


# --- the second cluster ------------------------------------------------------------------------------------------


@pytest.fixture
def remote_provider(clean: LocalStack) -> Iterator[Path]:
    """The virtual node's pod run as a variant (sim/deployed.py) with one provider of kind kubernetes, the second
    simulated cluster, and a provider Secret of its own holding that cluster's kubeconfig as the pod reaches it (at
    the real node's address, which the cluster's certificate names: sim/kwokctl.yaml)."""
    remote = ROOT / "sim" / "remote.sh"
    was_up = (ROOT / ".state" / "remote" / "kubeconfig").exists()
    subprocess.run([str(remote), "up"], check=True, cwd=ROOT, capture_output=True, timeout=180)
    kubeconfig = ROOT / ".state" / "remote" / "kubeconfig"
    # Its certificates inline (kwokctl's file names paths on this machine, which the pod does not have).
    flat = clean.run("kubectl", "config", "view", "--kubeconfig", str(kubeconfig), "--raw", "--flatten", "--minify")
    loopback_server = r"(server:\s*https://)(127\.0\.0\.1|localhost)(:\d+)"
    in_pod = re.sub(loopback_server, rf"\g<1>{NODE_IP}\g<3>", flat.stdout)
    assert NODE_IP in in_pod, "the second cluster's kubeconfig names no loopback server"
    providers = [
        {
            "name": "remote",
            "kind": "kubernetes",
            "maxGpus": 16,
            "gpuTypes": {"H100": {"pricePerGpuHour": 1.5}},
            "addressRanges": ["10.0.0.0/8"],  # kwok's pod addresses in the target cluster
            "kubernetes": {"kubeconfigSecret": "remoteKubeconfig", "namespaceMap": {NS: "burst-inference"}},
        }
    ]
    config = processes.stack_config()
    variant = deployed.Variant(
        deployed.virtual_node(config), "remote", {"providers": providers}, secrets={"remoteKubeconfig": in_pod}
    )
    try:
        variant.start()
        wait_for(
            "the virtual node registered by the variant's pod",
            lambda: deployed.virtual_node_registered(config, "remote"),
            timeout=120,
        )
        yield kubeconfig
    finally:
        try:
            clean.kubectl("delete", "deployment", PROBE, "-n", NS, "--ignore-not-found", "--wait=true")
            time.sleep(3)
            variant.stop()
            wait_for(
                "the virtual node registered by the stack's pod again",
                lambda: deployed.virtual_node_registered(config),
                timeout=120,
            )
        finally:
            if not was_up:
                subprocess.run([str(remote), "down"], check=False, cwd=ROOT, capture_output=True, timeout=120)


def test_a_tolerating_pod_runs_on_the_second_cluster(clean: LocalStack, remote_provider: Path) -> None:
    stack = clean
    stack.apply(probe(1))
    (pod,) = wait_for(
        "the probe Ready on the virtual node via the second cluster", lambda: running_on_node(stack, 1), timeout=120
    )
    uid = pod["metadata"]["uid"]
    remote_pods = stack.run(
        "kubectl",
        "--kubeconfig",
        str(remote_provider),
        "get",
        "pods",
        "-n",
        "burst-inference",
        "-l",
        f"burst.gpucluster.io/source-uid={uid}",
        "-o",
        "json",
    ).stdout
    (remote,) = json.loads(remote_pods)["items"]
    assert remote["metadata"]["name"].endswith(uid)
    assert remote["status"]["phase"] == "Running"
    assert pod["status"].get("podIP") == remote["status"]["podIP"]
    stack.kubectl("delete", "pod", pod["metadata"]["name"], "-n", NS, "--wait=false")
    wait_for(
        "the remote pod to be deleted",
        lambda: (
            not [
                p
                for p in json.loads(
                    stack.run(
                        "kubectl",
                        "--kubeconfig",
                        str(remote_provider),
                        "get",
                        "pods",
                        "-n",
                        "burst-inference",
                        "-l",
                        f"burst.gpucluster.io/source-uid={uid}",
                        "-o",
                        "json",
                    ).stdout
                )["items"]
                if not p["metadata"].get("deletionTimestamp")
            ]
        ),
        timeout=90,
    )
