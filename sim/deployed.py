"""Our daemons that run as the stack's own pods on the real node (``sim/node.py``), as tests and benchmarks handle them.

A daemon the stack places on the real node is no local process (``sim/processes.py`` leaves it out): its
Deployment's pods run there, from our images. What a scenario does to a daemon is done the way an operator would:

- ``stop`` scales the Deployment to zero and waits for its pods to be gone; ``start`` scales it back to the
  replicas the stack asks for and waits for the rollout (a later ``pulumi up`` would set them again anyway);
- ``kill`` is a crash: SIGKILL to the container's process from the machine, through containerd (nothing is
  flushed, no Lease is released), after which the kubelet restarts it in place, as it would a crashed daemon;
- ``leader`` reads the Lease's holder identity (``<pod>_<n>``), which ``kill`` takes; ``logs`` is ``kubectl logs``.

A scenario that needs the daemon with other settings (the flip's baseline columns: make-before-break answering its
check at once) runs a **variant** (:class:`Variant`): the Deployment scaled to zero, and a copy of it beside, its pod
template exactly the live one's but for a settings ConfigMap of the copy's own (the stack's document with the
overrides laid over it) and the label ``sim.gpucluster.io/variant``. Same image, ServiceAccount, Lease, probes and
ports; nothing Pulumi wrote is edited but the replica count, as ``stop`` does. ``python sim/deployed.py restore``
(run by ``make up``) deletes every variant and scales the stack's controllers back, should a scenario have stopped
before it could.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.daemon_runtime import DaemonError, kubectl
from sim.node import CONTAINERD_NAMESPACE, Paths

#: On a variant's Deployment, ConfigMap and pods: which variant (the stack's own never carry it).
VARIANT_LABEL = "sim.gpucluster.io/variant"
#: The label every pod of one of our daemons carries, its value the app (the Deployment's name).
APP_LABEL = "app.kubernetes.io/name"
#: The pod volume the stack's daemons mount their settings ConfigMap from (components/daemon_deployment.py).
SETTINGS_VOLUME = "settings"


def _items(*args: str) -> list[dict[str, Any]]:
    out = kubectl("get", *args, "-o", "json")
    try:
        items: list[dict[str, Any]] = json.loads(out).get("items", [])
    except ValueError as exc:
        raise DaemonError(f"kubectl get {' '.join(args)}: not JSON ({exc})") from None
    return items


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def lease_holder(namespace: str, lease: str) -> str:
    """The holder identity of the Lease ``namespace/lease``; DaemonError when none holds it."""
    out = kubectl("get", "lease", "-n", namespace, lease, "-o", "jsonpath={.spec.holderIdentity}", check=False)
    if not out.strip():
        raise DaemonError(f"lease {namespace}/{lease} has no holder")
    return out.strip()


@dataclass(frozen=True)
class Deployed:
    """One Deployment of ours and the replicas the stack gives it."""

    namespace: str
    name: str
    replicas: int
    #: The port its pods serve /metrics on (0: none known).
    metrics_port: int = 0
    #: Its pods' ``app.kubernetes.io/name`` when not the Deployment's name (a chart's: the release's name differs).
    app: str = ""
    #: The node's containerd (the real node's, unless a test says otherwise).
    node: Paths = field(default_factory=Paths)

    def __str__(self) -> str:
        return f"deployment {self.namespace}/{self.name}"

    @property
    def selector(self) -> str:
        """Its own pods: a variant's carry the same app label and the variant's."""
        return f"{APP_LABEL}={self.app or self.name},!{VARIANT_LABEL}"

    def pods(self) -> list[dict[str, Any]]:
        """Its pods that are not being deleted, oldest first."""
        pods = [
            p
            for p in _items("pods", "-n", self.namespace, "-l", self.selector)
            if "deletionTimestamp" not in p["metadata"]
        ]
        return sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))

    def running(self) -> bool:
        """At least one pod is Ready."""
        return any(_ready(p) for p in self.pods())

    def _wait(self, what: str, check: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise DaemonError(
                    f"deployment {self.namespace}/{self.name}: timed out after {timeout:.0f}s waiting for {what}"
                )
            time.sleep(0.5)

    def start(self, timeout: float = 120) -> None:
        """Scale back to the stack's replicas and wait until every one is Ready."""
        kubectl("scale", "deployment", "-n", self.namespace, self.name, f"--replicas={self.replicas}")
        self._wait(
            f"{self.replicas} Ready pod(s)",
            lambda: sum(_ready(p) for p in self.pods()) >= self.replicas,
            timeout,
        )

    def wait_ready(self, timeout: float = 120) -> None:
        """Wait until a pod is Ready (after a crash, the kubelet's restart and the readiness probe); scales nothing,
        so a variant running in its place is never joined by a second pod."""
        self._wait("a Ready pod", self.running, timeout)

    def stop(self, timeout: float = 60) -> None:
        """Scale to zero and wait until no pod of it is left."""
        kubectl("scale", "deployment", "-n", self.namespace, self.name, "--replicas=0")
        self._wait(
            "its pods to be gone",
            lambda: not _items("pods", "-n", self.namespace, "-l", self.selector),
            timeout,
        )

    def leader(self, lease: str) -> str:
        """The holder identity of ``lease`` (``<pod>_<n>``); DaemonError when none holds it."""
        return lease_holder(self.namespace, lease)

    def kill(self, identity: str | None = None, container: str | None = None) -> list[str]:
        """SIGKILL the daemon's process in the pod a Lease holder ``identity`` (``<pod>_<n>``) or pod name names, each
        pod's when None, through the node's containerd: a crash, which the kubelet answers by restarting the container
        in place. ``container`` names one container of the pod (every one when None). The containers killed."""
        names = {p["metadata"]["name"] for p in self.pods()}
        pod = identity if identity is None or identity in names else identity.rsplit("_", 1)[0]
        killed = []
        for p in self.pods():
            if pod is not None and p["metadata"]["name"] != pod:
                continue
            for status in (p.get("status") or {}).get("containerStatuses") or []:
                if container is not None and status.get("name") != container:
                    continue
                task = str(status.get("containerID", "")).removeprefix("containerd://")
                if not task:
                    continue
                argv = ["ctr", "--address", str(self.node.socket), "-n", CONTAINERD_NAMESPACE, "tasks", "kill"]
                try:
                    done = subprocess.run(
                        [*argv, "-s", "SIGKILL", task], capture_output=True, text=True, timeout=30, check=False
                    )
                except (OSError, subprocess.TimeoutExpired) as exc:
                    raise DaemonError(f"SIGKILL to {p['metadata']['name']}: ctr did not run: {exc}") from None
                if done.returncode != 0:
                    raise DaemonError(f"SIGKILL to {p['metadata']['name']}: {done.stderr.strip()[:300]}")
                killed.append(f"{p['metadata']['name']}/{status.get('name')}")
        if (pod is not None or container is not None) and not killed:
            what = " ".join(x for x in (pod and f"pod {pod}", container and f"container {container}") if x)
            raise DaemonError(f"deployment {self.namespace}/{self.name} has no running {what}")
        return killed

    def restarts(self) -> int:
        """Container restarts over its pods (a kill shows here once the kubelet has restarted it)."""
        return sum(
            int(s.get("restartCount", 0))
            for p in self.pods()
            for s in (p.get("status") or {}).get("containerStatuses") or []
        )

    def metrics_urls(self) -> list[str]:
        """The /metrics page of each pod that has an address, as Prometheus reaches it (pod IP, metrics port)."""
        if not self.metrics_port:
            raise DaemonError(f"deployment {self.namespace}/{self.name}: no metrics port known")
        ips = [(p.get("status") or {}).get("podIP") for p in self.pods()]
        return [f"http://{ip}:{self.metrics_port}/metrics" for ip in ips if ip]

    def logs(
        self, pod: str | None = None, container: str | None = None, tail: int | None = None, since_time: str = ""
    ) -> str:
        """``kubectl logs`` of ``pod`` (the oldest when None), of one ``container`` of it when given, from
        ``since_time`` (RFC 3339) when given."""
        pods = [p["metadata"]["name"] for p in self.pods()]
        target = pod or (pods[0] if pods else None)
        if target is None:
            raise DaemonError(f"deployment {self.namespace}/{self.name} has no pod")
        args = ["-c", container] if container else []
        args += [f"--tail={tail}"] if tail is not None else []
        args += [f"--since-time={since_time}"] if since_time else []
        return kubectl("logs", "-n", self.namespace, target, *args)


def _settings_volume(template: dict[str, Any], what: str) -> dict[str, Any]:
    for volume in template["spec"].get("volumes") or []:
        if volume.get("name") == SETTINGS_VOLUME and "configMap" in volume:
            found: dict[str, Any] = volume
            return found
    raise DaemonError(f"{what}: its pods mount no ConfigMap volume {SETTINGS_VOLUME!r}")


def variant_objects(
    live: dict[str, Any],
    settings: dict[str, Any],
    variant: str,
    overrides: Mapping[str, Any],
    replicas: int,
    *,
    secrets: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The ConfigMap and Deployment of ``variant``: ``live`` (the stack's Deployment as the API server returns it)
    copied with its settings (the live ConfigMap ``settings``) and ``overrides`` laid over them. With ``secrets``
    (file name -> value), also a Secret of the variant's own in place of the one its pods mount as
    ``provider-secrets``."""
    from contract.constants import settings_digest  # noqa: PLC0415 (needs ROOT on the path)
    from contract.spec import SETTINGS_FILE  # noqa: PLC0415

    meta = live["metadata"]
    what = f"deployment {meta['namespace']}/{meta['name']}"
    try:
        document = json.loads((settings.get("data") or {})[SETTINGS_FILE])
    except (KeyError, ValueError) as e:
        raise DaemonError(f"{what}: its settings ConfigMap holds no JSON {SETTINGS_FILE} ({e})") from None
    if not isinstance(document, dict):
        raise DaemonError(f"{what}: its {SETTINGS_FILE} is not a JSON object")
    text = json.dumps({**document, **overrides}, sort_keys=True)
    name = f"{meta['name']}-{variant}"
    labels = {**(meta.get("labels") or {}), VARIANT_LABEL: variant}
    template = copy.deepcopy(live["spec"]["template"])
    template["metadata"]["labels"] = {**(template["metadata"].get("labels") or {}), VARIANT_LABEL: variant}
    template["metadata"]["annotations"] = {**(template["metadata"].get("annotations") or {}), **settings_digest(text)}
    _settings_volume(template, what)["configMap"]["name"] = name
    selector = {**live["spec"]["selector"]["matchLabels"], VARIANT_LABEL: variant}
    secret: list[dict[str, Any]] = []
    if secrets is not None:
        volumes = [v for v in template["spec"].get("volumes") or [] if v.get("name") == PROVIDER_SECRETS_VOLUME]
        if not volumes or "secret" not in volumes[0]:
            raise DaemonError(f"{what}: its pods mount no Secret volume {PROVIDER_SECRETS_VOLUME!r}")
        volumes[0]["secret"]["secretName"] = name
        secret.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels},
                "type": "Opaque",
                "stringData": dict(secrets),
            }
        )
    return [
        *secret,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels},
            "data": {SETTINGS_FILE: text},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": meta["namespace"], "labels": labels},
            "spec": {"replicas": replicas, "selector": {"matchLabels": selector}, "template": template},
        },
    ]


@dataclass(frozen=True)
class Variant:
    """The Deployment ``deployed`` run as a copy with ``overrides`` laid over its settings (a JSON object of the
    settings' camelCase keys), while the stack's own is scaled to zero."""

    deployed: Deployed
    name: str
    overrides: Mapping[str, Any]
    #: File name -> value of a provider Secret of the variant's own (None: the stack's, as deployed).
    secrets: Mapping[str, str] | None = None

    @property
    def selector(self) -> str:
        return f"{APP_LABEL}={self.deployed.name},{VARIANT_LABEL}={self.name}"

    def _ready(self) -> int:
        return sum(_ready(p) for p in _items("pods", "-n", self.deployed.namespace, "-l", self.selector))

    def start(self, timeout: float = 120) -> None:
        """Stop the stack's pods, then run the copy until every replica is Ready."""
        d = self.deployed
        live = json.loads(kubectl("get", "deployment", "-n", d.namespace, d.name, "-o", "json"))
        cm = _settings_volume(live["spec"]["template"], str(d))["configMap"]["name"]
        settings = json.loads(kubectl("get", "configmap", "-n", d.namespace, cm, "-o", "json"))
        objects = variant_objects(live, settings, self.name, self.overrides, d.replicas, secrets=self.secrets)
        remove_variants(d.namespace, any_variant(d))  # one at a time
        try:
            d.stop()
            kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
            d._wait(f"{d.replicas} Ready pod(s) of variant {self.name}", lambda: self._ready() >= d.replicas, timeout)
        except BaseException:
            self.stop()  # never leave the stack's controller at zero replicas
            raise

    def stop(self, timeout: float = 120) -> None:
        """Delete the copy, then scale the stack's Deployment back and wait for it (even when the delete failed)."""
        try:
            remove_variants(self.deployed.namespace, self.selector, timeout)
        finally:
            self.deployed.start(timeout)


def any_variant(d: Deployed) -> str:
    """The label selector of every variant of ``d`` (its Deployment, ConfigMap and pods)."""
    return f"{APP_LABEL}={d.name},{VARIANT_LABEL}"


def remove_variants(namespace: str, selector: str, timeout: float = 120) -> None:
    """Delete the variants' Deployments, ConfigMaps and Secrets ``selector`` picks in ``namespace``; wait for their
    pods."""
    kubectl(
        "delete", "deployment,configmap,secret", "-n", namespace, "-l", selector, "--ignore-not-found", "--wait=true"
    )
    deadline = time.monotonic() + timeout
    while _items("pods", "-n", namespace, "-l", selector):
        if time.monotonic() > deadline:
            raise DaemonError(f"variants {selector} in {namespace}: pods still there after {timeout:.0f}s")
        time.sleep(0.5)


def placed_controllers(config: Any) -> list[Deployed]:
    """The registered controllers the stack turns on, and its virtual node, as deployed (wherever their pods run)."""
    from contract.registry import CONTROLLERS  # noqa: PLC0415 (needs the venv: without one this module still answers)

    out = []
    for spec in CONTROLLERS:
        if config.running(spec) is not None:
            out.append(controller(config, spec.name))
    if config.burst_enabled:
        out.append(virtual_node(config))
    return out


#: The virtual node's pod: the node binary and the provider service, one container each (components/virtual_node.py).
NODE_CONTAINER = "node"
PROVIDER_CONTAINER = "provider"
#: The provider Secret's pod volume (components/virtual_node.py).
PROVIDER_SECRETS_VOLUME = "provider-secrets"


def virtual_node(config: Any) -> Deployed:
    """The virtual node's Deployment as the stack deploys it: one pod, its node and provider containers; the metrics
    port is the provider service's (the node binary's is ``components.virtual_node.NODE_METRICS_PORT``)."""
    from components.virtual_node import APP  # noqa: PLC0415
    from contract.burst_settings import PROVIDER_METRICS_PORT  # noqa: PLC0415 (needs ROOT on the path)

    if not config.burst_enabled:
        raise DaemonError("the stack does not burst: it deploys no virtual node")
    return Deployed(config.burst.settings.virtual_node.namespace, APP, 1, metrics_port=PROVIDER_METRICS_PORT)


#: The descheduler chart's pods' app label (its Deployment is named after the Helm release).
DESCHEDULER_APP = "descheduler"


def descheduler(config: Any) -> Deployed:
    """The descheduler chart's Deployment (one replica, its container ``descheduler``), found by its pods' label."""
    ns = config.descheduler.namespace
    names = kubectl("get", "deployment", "-n", ns, "-l", f"{APP_LABEL}={DESCHEDULER_APP}", "-o", "name").split()
    if len(names) != 1:
        raise DaemonError(f"{len(names)} descheduler Deployments in {ns} (labelled {APP_LABEL}={DESCHEDULER_APP})")
    return Deployed(ns, names[0].split("/", 1)[1], 1, app=DESCHEDULER_APP)


def node_ready(name: str) -> bool:
    out = kubectl("get", "node", name, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False)
    return out.strip() == "True"


def virtual_node_registered(config: Any, variant: str | None = None) -> bool:
    """The virtual node's Node is Ready and registered by the running pod (its InternalIP is that pod's address):
    the Node an earlier pod registered stays Ready for a while after that pod is gone. ``variant`` names the
    variant whose pod it must be (the stack's own when None)."""
    d = virtual_node(config)
    selector = d.selector if variant is None else f"{APP_LABEL}={d.name},{VARIANT_LABEL}={variant}"
    pods = [p for p in _items("pods", "-n", d.namespace, "-l", selector) if _ready(p)]
    name = config.burst.settings.virtual_node.node_name
    out = kubectl(
        "get", "node", name, "-o", "jsonpath={.status.addresses[?(@.type=='InternalIP')].address}", check=False
    )
    ips = {(p.get("status") or {}).get("podIP") for p in pods}
    return node_ready(name) and bool(out.strip()) and out.strip() in ips


def restore(config: Any) -> list[str]:
    """Every variant deleted and each controller the stack deploys (and its virtual node) at the stack's replicas
    again (a scenario that stopped before it could put them back); what was done."""
    done = []
    for d in placed_controllers(config):
        left = kubectl("get", "deployment,configmap,secret", "-n", d.namespace, "-l", any_variant(d), "-o", "name")
        if left.strip():
            remove_variants(d.namespace, any_variant(d))
            done.append(f"{d}: variant removed ({', '.join(left.split())})")
        live = json.loads(kubectl("get", "deployment", "-n", d.namespace, d.name, "-o", "json", check=False) or "{}")
        if live and live["spec"].get("replicas") != d.replicas:
            kubectl("scale", "deployment", "-n", d.namespace, d.name, f"--replicas={d.replicas}")
            done.append(f"{d}: scaled back to {d.replicas}")
    return done


def controller(config: Any, spec_name: str) -> Deployed:
    """The registered controller ``spec_name`` as the stack deploys it (its namespace, app and replicas)."""
    from contract.registry import by_name  # noqa: PLC0415 (needs the venv: without one this module still answers)

    spec = by_name(spec_name)
    settings = config.running(spec)
    if settings is None:
        raise DaemonError(f"the stack does not run {spec_name}")
    return Deployed(settings.namespace, spec.app, settings.replicas, metrics_port=spec.metrics_port)


def on_real_node(config: Any) -> list[str]:
    """What the stack places on the real node, by name: the registered controllers it turns on, the metrics adapter,
    the virtual node and the upstream charts' pods (Kueue, JobSet, the descheduler); sim/placement.py."""
    from sim.placement import pods  # noqa: PLC0415 (only the script needs it)

    return [pod.name for pod in pods(config) if pod.placed]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim/deployed.py", description="Our daemons as the stack's pods.")
    parser.add_argument(
        "action",
        choices=["restore", "placed", "wait-virtual-node"],
        help="restore: delete every variant, scale controllers back; placed: what the stack puts on the real node; "
        "wait-virtual-node: wait until the virtual node its pod registers is Ready",
    )
    parser.add_argument("--timeout", type=float, default=180, help="seconds wait-virtual-node waits (default 180)")
    args = parser.parse_args(argv)
    from sim.processes import stack_config  # noqa: PLC0415 (only the script needs the stack's config)

    try:
        if args.action == "placed":
            print(" ".join(on_real_node(stack_config())))
            return 0
        if args.action == "wait-virtual-node":
            config = stack_config()
            name = config.burst.settings.virtual_node.node_name
            deadline = time.monotonic() + args.timeout
            while not virtual_node_registered(config):
                if time.monotonic() > deadline:
                    pods = kubectl("get", "pods", "-A", "-l", virtual_node(config).selector, "-o", "wide", check=False)
                    raise DaemonError(f"node {name} is not Ready after {args.timeout:.0f}s; its pod:\n{pods.strip()}")
                time.sleep(1)
            print(f"==> node {name} Ready")
            return 0
        for line in restore(stack_config()):
            print(f"==> {line}")
    except DaemonError as e:
        print(f"sim/deployed.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
