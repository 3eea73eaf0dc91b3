"""What stands for the world outside the cluster on the simulated cluster: the rental providers' APIs.

The stack's burst providers rent from the world outside: a cloud's API, RunPod's REST API v2. On the simulated
cluster a fake stands for each provider whose URL is this machine's loopback or the real node's address (which a
pod of the real node reaches this machine's loopback by): the fake GPU cloud for a ``fake`` provider, and RunPod's
fake for a ``runpod`` provider. They start before the stack is deployed (``sim/processes.py start --outside``), as
real providers are there before any cluster, and their rented instances answer on the benchmarking range
(:data:`RENTED_NETWORK`), which one route makes local to this machine.

Each fake is a module of ``sim/fakes/`` (not in the daemon image), and its docstring says what it
models of the provider and what it does not.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import subprocess
import urllib.parse
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from sim.daemon_runtime import ROOT, Daemon, DaemonError, Stack, deployed_text, kubectl, secret_value, tools_bin

#: The fake GPU cloud the local stack's fake providers point at (``sim/fakes/``).
FAKE_CLOUD_MODULE = "sim.fakes.cloud_server"
#: The fake cloud's knobs, overridable from the environment (the flip scenario and chaos runs set them).
FAKE_CLOUD_ENV = {
    "boot-seconds": "GPUCLUSTER_FAKE_BOOT_SECONDS",
    "create-failure-rate": "GPUCLUSTER_FAKE_CREATE_FAILURE_RATE",
    "death-rate": "GPUCLUSTER_FAKE_DEATH_RATE",
    "model-load-seconds": "GPUCLUSTER_FAKE_MODEL_LOAD_SECONDS",
}
FAKE_CLOUD_DEFAULTS = {"boot-seconds": "5", "create-failure-rate": "0", "death-rate": "0"}
#: How long an in-cluster replica of the simulated cluster loads its model before kwok makes it Ready (a Go duration
#: in the pod's annotation; sim/kwok-stages.yaml). A rented replica loads for as long: never less, so the flip is
#: not flattered by rented replicas that serve sooner than the ones they replace.
READY_AFTER_ANNOTATION = "sim.gpucluster.io/ready-after"


def model_load_seconds(config: Any) -> float:
    """The longest in-cluster model load of the stack's InferenceServices (their ready-after annotation), 0 if none:
    what the fakes give each rented replica, unless GPUCLUSTER_FAKE_MODEL_LOAD_SECONDS says otherwise."""
    from contract.model import parse_duration  # noqa: PLC0415 (needs ROOT on the path)

    return max(
        (
            parse_duration(spec.pod_annotations[READY_AFTER_ANNOTATION])
            for spec in config.inference_services
            if READY_AFTER_ANNOTATION in spec.pod_annotations
        ),
        default=0.0,
    )


#: Rented instances get addresses of the benchmarking range (RFC 2544), which one route makes local to this machine:
#: each answers HTTP on its own address (fakes/replica.py), the burst provider's probes and traffic reach it, and the
#: API server takes it in an EndpointSlice (it refuses loopback and link-local addresses there).
RENTED_NETWORK = "198.18.0.0/15"
#: The model-server stand-in of every replica, rented or in the cluster.
REPLICA_MODULE = "sim/fakes/replica.py"
FAKE_CLOUD_ADDRESS_POOL = "198.18.0.0/16"
#: The fake RunPod's public IPs (one /24, as its pods' hosts number 1 to 253).
FAKE_RUNPOD_PUBLIC_IPS = "198.19.0.0/24"


CLOUD_SERVER_MODULE = "sim/fakes/cloud_server.py"
RUNPOD_SERVER_MODULE = "sim/fakes/runpod_server.py"


def _fake_code(module: str) -> Callable[[], str]:
    """A fake's fingerprint: its code, the replicas' and where they serve, so a fake of older code restarts."""
    return lambda: "".join((ROOT / m).read_text() for m in (module, REPLICA_MODULE)) + RENTED_NETWORK


def route_rented_network() -> None:
    """Make RENTED_NETWORK local (``ip route replace local ... dev lo``; idempotent, left in place by make down).

    Needs root or CAP_NET_ADMIN, as the simulated cluster's other network set-up does; DaemonError says so.
    """
    cmd = ["ip", "route", "replace", "local", RENTED_NETWORK, "dev", "lo"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DaemonError(f"{' '.join(cmd)}: {exc} (iproute2's ip is needed)") from None
    if done.returncode != 0:
        raise DaemonError(
            f"{' '.join(cmd)} failed: {done.stderr.strip()[:300]} (rented replicas of the simulated cluster serve on "
            f"{RENTED_NETWORK}; making it local needs root or CAP_NET_ADMIN)"
        )


#: The fake of RunPod's REST API v2 that a runpod provider on loopback points at (``sim/fakes/``):
#: it boots pods as long as the fake cloud does; tests set its other knobs through its /admin/knobs.
FAKE_RUNPOD_MODULE = "sim.fakes.runpod_cli"
FAKE_RUNPOD_BOOT_SECONDS = FAKE_CLOUD_DEFAULTS["boot-seconds"]
#: The path the fake serves RunPod's API under (its base URL is http://HOST:PORT/v2).
FAKE_RUNPOD_PATH = "/v2"


def fake_clouds(s: Stack) -> Iterable[Daemon]:
    """The fake GPU cloud of each fake provider, on the address the provider names (this machine's loopback, which
    the real node's pods reach at the node's address), sized for every provider."""
    for p in s.burst.providers:
        if p.fake is None:
            continue
        url = urllib.parse.urlsplit(str(p.fake.url))
        host = loopback_host(url.hostname)
        if host is None:
            raise DaemonError(
                f"provider {p.name}: fake.url {p.fake.url} is neither this machine's loopback nor the real node's "
                "address, so the simulated cluster cannot run its fake cloud there"
            )
        port = str(url.port or 80)

        def cmd(p: Any = p, host: str = host, port: str = port) -> list[str]:
            route_rented_network()
            defaults = {**FAKE_CLOUD_DEFAULTS, "model-load-seconds": f"{model_load_seconds(s.config):g}"}
            knobs = {k: os.environ.get(env, defaults[k]) for k, env in FAKE_CLOUD_ENV.items()}
            capacity = sum(x.max_gpus for x in s.burst.providers) * 4
            line = [s.python, "-m", FAKE_CLOUD_MODULE, "--listen", f"{host}:{port}"]
            line += ["--address-pool", FAKE_CLOUD_ADDRESS_POOL]
            for k, v in knobs.items():
                line += [f"--{k}", v]
            for gpu, offer in p.gpu_types.items():
                line += ["--capacity", f"{gpu}={capacity}", "--price", f"{gpu}={offer.price_per_gpu_hour}"]
            seed = os.environ.get("GPUCLUSTER_FAKE_SEED", "1")
            return [*line, "--seed", seed, "--state-file", str(s.state / f"fake-cloud-{p.name}.json")]

        yield s.daemon(
            f"fake-cloud-{p.name}",
            cmd,
            ready_url=f"http://{host}:{port}/offers",
            fingerprint=_fake_code(CLOUD_SERVER_MODULE),
        )


def loopback_host(host: str | None) -> str | None:
    """The address to listen on for a URL's host when it is this machine's loopback (127.0.0.0/8, localhost) or the
    real node's address, which stands for this machine's loopback to pods and to the machine (sim/node.py
    ``host_services``)."""
    from sim.node import NODE_IP  # noqa: PLC0415 (needs the venv: without one this module still answers)

    if host in ("localhost", NODE_IP):
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host or "")
    except ValueError:
        return None
    return str(address) if address.version == 4 and address.is_loopback else None


def stack_secret(key: str) -> bytes:
    """The stack config's secret ``gpucluster:<key>``, decrypted by ``pulumi config get`` in make up's Pulumi
    environment (the stack selected, its passphrase set). Its value is never shown, not even in an error."""
    stack = os.environ.get("GPUCLUSTER_STACK", "local")
    argv = [str(tools_bin() / "pulumi"), "config", "get", f"gpucluster:{key}", "--stack", stack]
    sim_stack = os.environ.get("GPUCLUSTER_SIM_STACK")
    if sim_stack and Path(sim_stack).resolve() != (ROOT / "stacks" / f"Pulumi.{stack}.yaml").resolve():
        argv += ["--config-file", sim_stack]
    try:
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DaemonError(f"pulumi config get gpucluster:{key}: {exc} (make tools builds pulumi)") from None
    if done.returncode != 0 or not done.stdout.strip():
        why = done.stderr.decode(errors="replace").strip()[:300] or "no value"
        raise DaemonError(
            f"pulumi config get gpucluster:{key} --stack {stack}: {why} (make up runs it, stack selected)"
        )
    return done.stdout.rstrip(b"\n")


def runpod_key(namespace: str, secret: str, key: str) -> bytes:
    """The API key RunPod's fake accepts: the one the provider Secret holds under ``key``. Before the stack's first
    update, which makes that Secret, the stack config's value the Secret is made from (:func:`stack_secret`): RunPod
    knows the keys it issued before any cluster is deployed, and the fakes standing for it start first."""
    found = kubectl("get", "secret", secret, "-n", namespace, "--ignore-not-found", "-o", "name", check=False)
    return secret_value(namespace, secret, key) if found.strip() else stack_secret(key)


def fake_runpods(s: Stack) -> Iterable[Daemon]:
    """The fake RunPod API of each runpod provider whose URL is on loopback (or the real node's address), with the
    key the provider service sends.

    A runpod provider pointing anywhere else is RunPod itself (or a test's own server): nothing runs for it. The key
    the fake accepts is the one Pulumi puts in the provider Secret under the provider's ``apiKeySecret``
    (:func:`runpod_key`), so the provider service authenticates exactly as it would at RunPod; a changed key
    restarts the fake.
    """
    app, _ = _virtual_node_app()
    ns = s.burst.virtual_node.namespace
    secret = f"{app}-provider-secrets"
    from daemons.burst_provider.providers.runpod import runpod_gpu_id  # noqa: PLC0415 (needs ROOT on the path)

    for p in s.burst.providers:
        if p.runpod is None:
            continue
        url = urllib.parse.urlsplit(p.runpod.url)
        host = loopback_host(url.hostname)
        if host is None:
            continue
        if url.scheme != "http" or url.path.rstrip("/") != FAKE_RUNPOD_PATH:
            raise DaemonError(
                f"provider {p.name}: runpod.url {p.runpod.url} is on loopback, so the simulated cluster runs the fake "
                f"RunPod there, which serves plain http under {FAKE_RUNPOD_PATH}: use http://{url.netloc}{FAKE_RUNPOD_PATH}"
            )
        listen = f"{host}:{url.port or 80}"
        key_name = p.runpod.api_key_secret

        def cmd(p: Any = p, listen: str = listen, key_name: str = key_name) -> list[str]:
            route_rented_network()
            key_file = s.state / f"fake-runpod-{p.name}" / "api-key"
            key_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            key_file.write_bytes(runpod_key(ns, secret, key_name))
            key_file.chmod(0o600)
            price = min(offer.price_per_gpu_hour for offer in p.gpu_types.values())
            line = [s.python, "-m", FAKE_RUNPOD_MODULE, "--listen", listen, "--api-key-file", str(key_file)]
            line += ["--boot-seconds", FAKE_RUNPOD_BOOT_SECONDS, "--price", f"{price}"]
            load = os.environ.get(FAKE_CLOUD_ENV["model-load-seconds"], f"{model_load_seconds(s.config):g}")
            line += ["--public-ip-pool", FAKE_RUNPOD_PUBLIC_IPS, "--model-load-seconds", load]
            for gpu in p.gpu_types:
                line += ["--capacity", f"{runpod_gpu_id(p.gpu_types, gpu)}={p.max_gpus}"]
            return line

        def key(key_name: str = key_name) -> str:
            return base64.b64encode(runpod_key(ns, secret, key_name)).decode() + _fake_code(RUNPOD_SERVER_MODULE)()

        yield s.daemon(f"fake-runpod-{p.name}", cmd, ready_url=f"http://{listen}/healthz", fingerprint=key)


def _virtual_node_app() -> tuple[str, str]:
    from components.virtual_node import APP, NODE_TAINT  # noqa: PLC0415 (needs ROOT on the path)

    return APP, NODE_TAINT


def instance_owner(config: Any) -> str:
    """What the deployed provider service tags its instances with (the cluster's and the node's name): the settings
    Pulumi deployed, where the VirtualNode component filled the cluster's name."""
    app, _ = _virtual_node_app()
    ns = config.burst.settings.virtual_node.namespace
    deployed = json.loads(deployed_text(ns, f"{app}-settings", "settings.json"))
    vn = deployed["virtualNode"]
    return f"{vn['clusterName']}.{vn['nodeName']}" if vn.get("clusterName") else str(vn["nodeName"])
