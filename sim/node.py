"""One real node of the simulated cluster, beside the kwok GPU nodes: containerd, a kubelet and kube-proxy.

The kwok nodes stand for GPU machines (nothing can run a GPU here) and run nothing. This node runs pods for real:

- containerd and runc from Debian, with the CRI plugin (``restrict_oom_score_adj``: this container lacks
  ``CAP_SYS_RESOURCE``), the pod sandbox image built offline (``sim/pause_image.py``), the descheduler chart's
  images of the upstream charts' controllers (descheduler, Kueue, JobSet) built from the modules the tools pin
  (``sim/upstream_images.py``), images imported from their OCI
  archives into containerd's ``k8s.io`` namespace — nothing is ever pulled;
- pod networking from Debian's ``containernetworking-plugins``: a bridge with :data:`POD_CIDR` (``host-local``),
  the node at :data:`NODE_IP` on it. The range is CGNAT space that exists only in this machine's namespaces;
- the kubelet and kube-proxy built from the same ``k8s.io/kubernetes`` release as the control plane
  (``tools/kubelet``), the kubelet told ``failCgroupV1: false`` (this machine mounts cgroup v1 controllers; 1.35+
  refuses them otherwise) and ``cgroupDriver: cgroupfs`` (no systemd);
- the Service range (:data:`SERVICE_CIDR`, the API server's default) routed onto the bridge, so a ClusterIP that
  kube-proxy has not programmed yet dies there instead of following the default route off the machine.

The node is named by its address (the API server reaches a kubelet by its node's first address, and looks a
``Hostname`` up in the machine's resolver, which knows no node). It carries the taint and label
:data:`REAL_NODE_KEY`, so only pods that ask for it land here. Its kubelet listens on the bridge address only and
admits the API server's log, exec and port-forward calls anonymously: the simulated cluster's API server (kwokctl's)
presents no client certificate to kubelets. Nothing outside this machine reaches that address.

What the parts change on the machine (sysctls, firewall rules, cgroups, paths they create whatever their settings
say) is written down before the first start and put back by ``down`` (``sim/node_machine.py``).

``python sim/node.py up [--image ARCHIVE=NAME ...]`` (idempotent), ``down``, ``status``, ``wait [--timeout S]``.
State and logs live in ``.state/node``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib

from images import oci
from sim import node_machine, upstream_images
from sim.daemon_runtime import (
    ADMIN_KUBECONFIG,
    STATE,
    Daemon,
    DaemonError,
    http_ok,
    kubectl,
    node_ready,
    tools_bin,
    wait_for,
)
from sim.pause_image import PAUSE_IMAGE, PauseImageError
from sim.pause_image import build as build_pause
from sim.upstream_images import UpstreamImageError
from sim.upstream_images import build as build_upstream

NODE_STATE = STATE / "node"
NODE_IP = "100.127.0.1"
POD_CIDR = "100.127.0.0/24"
#: kube-apiserver's default --service-cluster-ip-range (the simulated cluster's API server sets none).
SERVICE_CIDR = "10.0.0.0/24"
BRIDGE = "gpusim0"
NODE_NAME = NODE_IP
#: The node's taint (NoSchedule) and label: a pod lands here only when it tolerates and selects it.
REAL_NODE_KEY = "sim.gpucluster.io/real-node"
#: Ports on the bridge address (kubelet API) and loopback (health, metrics), clear of the virtual node's.
KUBELET_PORT = 10350
KUBELET_HEALTHZ_PORT = 10348
KUBE_PROXY_HEALTHZ_PORT = 10356
KUBE_PROXY_METRICS_PORT = 10359
CNI_BIN = Path("/usr/lib/cni")
CONTAINERD_NAMESPACE = "k8s.io"
#: The programs the node takes from Debian (tools/install-debian-deps.sh) and the pinned tools it needs.
DEBIAN_PARTS = ("containerd", "ctr", "runc", "iptables", "ip", "cc")
TOOL_PARTS = ("kubelet", "kube-proxy")


class NodeError(RuntimeError):
    """The real node could not be brought up or down; the message says which part and why."""


class Paths:
    """Everything the node keeps under one directory."""

    def __init__(self, root: Path = NODE_STATE) -> None:
        self.root = root
        self.containerd = root / "containerd"
        self.socket = root / "containerd" / "containerd.sock"
        self.containerd_config = root / "containerd.toml"
        self.cni_conf = root / "cni" / "net.d"
        self.cni_ipam = root / "cni" / "ipam"
        self.kubelet_root = root / "kubelet"
        self.kubelet_config = root / "kubelet.yaml"
        self.kube_proxy_config = root / "kube-proxy.yaml"
        self.snapshot = root / "machine-before.json"
        self.pause_archive = root / "images" / "pause.oci.tar"
        #: The upstream charts' controller images, built from the modules the tools pin (sim/upstream_images.py).
        self.upstream_archives = {tool: root / "images" / f"{tool}.oci.tar" for tool in upstream_images.ALL}
        self.imported = root / "images" / "imported.json"


def _run(argv: Sequence[str], what: str, timeout: float = 120) -> str:
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NodeError(f"{what}: {exc}") from None
    if done.returncode != 0:
        raise NodeError(f"{what}: {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[:400]}")
    return done.stdout


def missing_parts() -> list[str]:
    """What the node needs and this machine lacks, each with what installs it."""
    out = [f"{p} (make debian-deps)" for p in DEBIAN_PARTS if shutil.which(p) is None]
    out += [f"{CNI_BIN}/{p} (make debian-deps)" for p in ("bridge", "host-local") if not (CNI_BIN / p).exists()]
    b = tools_bin()
    out += [f"{b}/{t} (make tools)" for t in TOOL_PARTS if not (b / t).exists()]
    return out


# ---------------------------------------------------------------------------------------------------------------
# Configuration files
# ---------------------------------------------------------------------------------------------------------------


def containerd_config(p: Paths) -> str:
    return f"""version = 2
root = "{p.containerd}/root"
state = "{p.containerd}/state"

[grpc]
  address = "{p.socket}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{p.cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
"""


def cni_config(p: Paths) -> dict[str, object]:
    return {
        "cniVersion": "0.4.0",
        "name": "gpusim",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                # The node's address is each pod's default route: ClusterIPs (kube-proxy rewrites them on the host)
                # and the rented replicas' 198.18.0.0/15 are reached through it.
                "isDefaultGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]], "dataDir": str(p.cni_ipam)},
            }
        ],
    }


def kubelet_config(p: Paths) -> dict[str, object]:
    """The real node's kubelet. ``syncFrequency`` 10s, not the default minute: a Secret a pod mounts is refreshed
    within 10 s of a change. Kueue's controller reports Ready only once the webhook certificate it issues itself
    appears in its mounted Secret (its cert-controller's ``ensureCertsMounted``), so with the default a ``make up``
    could wait up to a minute more for that alone; no figure the tests or benchmarks report rests on that refresh."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "containerRuntimeEndpoint": f"unix://{p.socket}",
        "address": NODE_IP,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "failSwapOn": False,
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
        "enforceNodeAllocatable": [],
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "serializeImagePulls": False,
        "syncFrequency": "10s",
        "registerNode": True,
        "registerWithTaints": [{"key": REAL_NODE_KEY, "value": "true", "effect": "NoSchedule"}],
        "resolvConf": "/etc/resolv.conf",
    }


def kube_proxy_config(kubeconfig: Path) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": POD_CIDR,
        "bindAddress": NODE_IP,
        "healthzBindAddress": f"127.0.0.1:{KUBE_PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": f"127.0.0.1:{KUBE_PROXY_METRICS_PORT}",
        "conntrack": {"maxPerCore": 0},
    }


def write_configs(p: Paths) -> None:
    for d in (p.root, p.cni_conf, p.cni_ipam, p.kubelet_root, p.pause_archive.parent):
        d.mkdir(parents=True, exist_ok=True)
    p.containerd_config.write_text(containerd_config(p), encoding="utf-8")
    (p.cni_conf / "10-gpusim.conflist").write_text(json.dumps(cni_config(p), indent=2) + "\n", encoding="utf-8")
    # JSON is YAML: the kubelet and kube-proxy read these as their configuration files.
    p.kubelet_config.write_text(json.dumps(kubelet_config(p), indent=2) + "\n", encoding="utf-8")
    p.kube_proxy_config.write_text(json.dumps(kube_proxy_config(ADMIN_KUBECONFIG), indent=2) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------------------------------
# The parts
# ---------------------------------------------------------------------------------------------------------------


def daemons(p: Paths) -> dict[str, Daemon]:
    """containerd, the kubelet and kube-proxy as local processes (pid files and logs under the node's state)."""
    b = tools_bin()

    def containerd() -> list[str]:
        return ["containerd", "--config", str(p.containerd_config)]

    def kubelet() -> list[str]:
        return [
            str(b / "kubelet"),
            f"--config={p.kubelet_config}",
            f"--kubeconfig={ADMIN_KUBECONFIG}",
            f"--root-dir={p.kubelet_root}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={NODE_IP}",
            f"--node-labels={REAL_NODE_KEY}=true",
        ]

    def kube_proxy() -> list[str]:
        return [str(b / "kube-proxy"), f"--config={p.kube_proxy_config}"]

    def configured(*files: Path) -> Callable[[], str]:
        """What a part was started with: its files and the cluster's kubeconfig, so a part of a cluster that was
        created again (new certificates, no Node) is restarted instead of kept."""
        return lambda: "".join(f.read_text(encoding="utf-8") if f.is_file() else "" for f in files)

    state = p.root
    return {
        "containerd": Daemon(
            "containerd",
            containerd,
            ready_check=lambda: ctr_answers(p),
            fingerprint=configured(p.containerd_config),
            state=state,
        ),
        "kubelet": Daemon(
            "kubelet",
            kubelet,
            ready_check=lambda: node_ready(NODE_NAME),
            ready_timeout=120,
            fingerprint=configured(p.kubelet_config, ADMIN_KUBECONFIG),
            state=state,
        ),
        "kube-proxy": Daemon(
            "kube-proxy",
            kube_proxy,
            ready_url=f"http://127.0.0.1:{KUBE_PROXY_HEALTHZ_PORT}/healthz",
            fingerprint=configured(p.kube_proxy_config, ADMIN_KUBECONFIG),
            state=state,
        ),
    }


def ctr(p: Paths, *args: str, timeout: float = 120) -> str:
    return _run(["ctr", "--address", str(p.socket), "-n", CONTAINERD_NAMESPACE, *args], f"ctr {args[0]}", timeout)


def ctr_answers(p: Paths) -> bool:
    try:
        ctr(p, "version", timeout=5)
    except NodeError:
        return False
    return True


def link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True, check=False).returncode == 0


#: The nat chain that makes the node's address stand for this machine's loopback (see :func:`host_services`).
HOST_CHAIN = "GPUSIM-HOST"


def host_services() -> None:
    """The machine's loopback services, as pods see them: at the node's address (idempotent).

    The simulated cluster's own services (its Prometheus, the fake GPU clouds) listen on this machine's loopback,
    as they always have; a pod cannot reach loopback, and a real cluster would give them Services. Here every TCP
    connection to the node's address, from a pod (PREROUTING, on the bridge) or from the machine (OUTPUT), is
    rewritten to 127.0.0.1 on the same port, as kube-proxy does for NodePorts on localhost (which needs
    ``route_localnet`` on the interface it arrives on: the bridge's own, gone with the bridge). The kubelet's port is
    left alone: it is the one thing listening on the node's address itself.
    """
    Path(f"/proc/sys/net/ipv4/conf/{BRIDGE}/route_localnet").write_text("1\n", encoding="utf-8")
    if subprocess.run(["iptables", "-t", "nat", "-n", "-L", HOST_CHAIN], capture_output=True, check=False).returncode:
        _run(["iptables", "-t", "nat", "-N", HOST_CHAIN], "the host services chain")
    _run(["iptables", "-t", "nat", "-F", HOST_CHAIN], "the host services chain")
    rule = ["-d", NODE_IP, "-p", "tcp", "!", "--dport", str(KUBELET_PORT), "-j", "DNAT"]
    _run(["iptables", "-t", "nat", "-A", HOST_CHAIN, *rule, "--to-destination", "127.0.0.1"], "the host services rule")
    for chain, match in (("PREROUTING", ["-i", BRIDGE]), ("OUTPUT", [])):
        jump = [chain, *match, "-d", NODE_IP, "-j", HOST_CHAIN]
        if subprocess.run(["iptables", "-t", "nat", "-C", *jump], capture_output=True, check=False).returncode:
            _run(["iptables", "-t", "nat", "-A", *jump], f"the host services jump from {chain}")


def network_up() -> None:
    """The bridge with the node's address, the Service range routed onto it, and the machine's loopback services at
    the node's address (idempotent)."""
    if not link_exists(BRIDGE):
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"], "the pod bridge")
    _run(["ip", "addr", "replace", f"{NODE_IP}/{POD_CIDR.split('/')[1]}", "dev", BRIDGE], "the node's address")
    _run(["ip", "link", "set", BRIDGE, "up"], "the pod bridge")
    _run(["ip", "route", "replace", SERVICE_CIDR, "dev", BRIDGE], "the Service range's route")
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n", encoding="utf-8")
    host_services()


def network_down() -> None:
    subprocess.run(["ip", "route", "del", SERVICE_CIDR, "dev", BRIDGE], capture_output=True, check=False)
    if link_exists(BRIDGE):
        _run(["ip", "link", "del", BRIDGE], "the pod bridge")


def archive_digest(archive: Path) -> str:
    """The manifest digest of the one image in an OCI archive (what a stack's ``name:tag@digest`` names)."""
    try:
        manifests: Any = oci.read_archive_index(archive)["manifests"]
        (manifest,) = manifests
        digest = str(manifest["digest"])
    except (ValueError, KeyError, TypeError) as exc:
        raise NodeError(f"{archive}: not an archive of one image ({type(exc).__name__}: {exc})") from None
    except oci.OciError as exc:
        raise NodeError(str(exc)) from None
    return digest


def import_image(p: Paths, archive: Path, name: str) -> str:
    """Import an OCI archive as ``name`` (fully qualified, as the CRI plugin looks images up) and as
    ``repository@digest``, the name a reference ``name:tag@digest`` resolves to; skipped when the same archive was
    imported under that name before. The digest reference."""
    record = json.loads(p.imported.read_text(encoding="utf-8")) if p.imported.is_file() else {}
    digest = archive_digest(archive)
    repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name
    by_digest = f"{repository}@{digest}"
    if record.get(name) == digest and by_digest in ctr(p, "images", "ls", "-q").split():
        return by_digest
    # --base-name names the image by the archive's own tag (ref.name); the CRI plugin finds it by that name.
    ctr(p, "images", "import", "--base-name", repository, str(archive), timeout=600)
    ctr(p, "images", "tag", "--force", name, by_digest)
    record[name] = digest
    p.imported.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return by_digest


#: Where ``make images`` writes the images and the record of each (``images/build.py``).
IMAGES_DIR = STATE / "images"


def built_images(directory: Path = IMAGES_DIR) -> list[tuple[Path, str]]:
    """Each image ``make images`` built, as (archive, name:tag): none when it has not run. The name is the
    reference the stacks use without its digest (the digest is the image's own, which containerd records)."""
    record = directory / "digests.json"
    if not record.is_file():
        return []
    try:
        value = json.loads(record.read_text(encoding="utf-8"))
        out = [(directory / str(r["archive"]), str(r["reference"]).split("@", 1)[0]) for r in value.values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise NodeError(f"{record}: not the record make images writes ({type(exc).__name__}: {exc})") from None
    absent = [str(a) for a, _ in out if not a.is_file()]
    if absent:
        raise NodeError(f"{record} names archives that are missing: {', '.join(absent)} (run make images again)")
    return out


def stale_pods(pods: Sequence[Mapping[str, Any]], current: Mapping[str, str]) -> list[str]:
    """``namespace/name`` of each pod with a container started from another build of an image imported now
    (``current``: repository -> digest), as its status's imageID says."""
    out = []
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            repository, _, digest = str(status.get("imageID", "")).partition("@")
            if repository in current and digest and digest != current[repository]:
                out.append(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
                break
    return out


def replace_stale_pods(current: Mapping[str, str], say: Callable[[str], None]) -> None:
    """Delete the node's pods that run an older build of an imported image: their owners start them again from the
    one imported now (a stack names our images by tag, which a new build keeps)."""
    listed = kubectl("get", "pods", "-A", "--field-selector", f"spec.nodeName={NODE_NAME}", "-o", "json", check=False)
    try:
        pods = json.loads(listed).get("items", []) if listed else []
    except ValueError:
        return
    for pod in stale_pods(pods, current):
        ns, name = pod.split("/", 1)
        kubectl("delete", "pod", "-n", ns, name, "--wait=false", check=False)
        say(f"==> {pod}: ran an older build of its image; deleted for its owner to start it again")


def up(images: Sequence[tuple[Path, str]] = (), p: Paths | None = None, say: object = print) -> None:
    """Bring the node up (idempotent): the machine written down first, then network, containerd, the images
    (``images``, else what make images built), the kubelet (until the Node is Ready) and kube-proxy."""
    p = p or Paths()
    images = list(images) or built_images()
    missing = missing_parts()
    if missing:
        raise NodeError("the real node needs: " + ", ".join(missing))
    p.root.mkdir(parents=True, exist_ok=True)
    if not p.snapshot.is_file():
        node_machine.snapshot().save(p.snapshot)
    write_configs(p)
    network_up()
    parts = daemons(p)
    started = time.monotonic()
    try:
        parts["containerd"].start()
        build_pause(p.pause_archive)
        import_image(p, p.pause_archive, PAUSE_IMAGE)
        for tool, archive in p.upstream_archives.items():
            import_image(p, archive, build_upstream(upstream_images.ALL[tool], archive))
        current = dict(import_image(p, archive, name).split("@", 1) for archive, name in images)
        parts["kubelet"].start()
        parts["kube-proxy"].start()
        replace_stale_pods(current, say if callable(say) else print)
    except (DaemonError, PauseImageError, UpstreamImageError, OSError, ValueError) as exc:
        raise NodeError(f"{exc} (logs: {p.root / 'logs'}; make down puts the machine back)") from None
    if callable(say):
        say(
            f"==> real node {NODE_NAME} Ready in {time.monotonic() - started:.0f}s (pods on {POD_CIDR}, state {p.root})"
        )


def _node_pods() -> list[str]:
    out = kubectl(
        "get",
        "pods",
        "-A",
        "--field-selector",
        f"spec.nodeName={NODE_NAME}",
        "-o",
        "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{'\\n'}{end}",
        check=False,
    )
    return [line for line in out.splitlines() if line.strip()]


def _tasks(p: Paths) -> list[str]:
    """The containers (pods' and their sandboxes') whose process still runs (``ctr tasks ls`` keeps stopped ones)."""
    if not ctr_answers(p):
        return []
    rows = [line.split() for line in ctr(p, "tasks", "ls").splitlines()[1:]]
    return [row[0] for row in rows if len(row) >= 3 and row[2] == "RUNNING"]


def down(p: Paths | None = None, say: object = print) -> list[str]:
    """Stop the node and put the machine back; what was put back, one line each. Safe to run at any point."""
    p = p or Paths()
    parts = daemons(p) if shutil.which("ctr") else {}
    if parts and parts["kubelet"].running() and http_ok(f"http://127.0.0.1:{KUBELET_HEALTHZ_PORT}/healthz"):
        # The kubelet stops the containers and tears down the sandboxes' networks of pods the API server no
        # longer has: the clean way out for a pod. Cordoned first, or their owners' replacements land here again.
        kubectl("cordon", NODE_NAME, check=False)
        for pod in _node_pods():
            ns, name = pod.split("/", 1)
            kubectl("delete", "pod", "-n", ns, name, "--grace-period=0", "--force", "--wait=false", check=False)
        with contextlib.suppress(DaemonError, NodeError):
            wait_for("the node's pods to stop", lambda: not list(_tasks(p)), 60)
    for name in ("kube-proxy", "kubelet"):
        if name in parts:
            parts[name].stop()
    for task in _tasks(p):
        subprocess.run(
            ["ctr", "--address", str(p.socket), "-n", CONTAINERD_NAMESPACE, "tasks", "kill", "-s", "SIGKILL", task],
            capture_output=True,
            check=False,
        )
    if "containerd" in parts:
        parts["containerd"].stop()
    # A shim outlives its containerd; one of ours is named by our socket on its command line.
    subprocess.run(["pkill", "-KILL", "-f", f"containerd-shim.*{p.socket}"], capture_output=True, check=False)
    kubectl("delete", "node", NODE_NAME, "--ignore-not-found", "--wait=false", check=False)
    network_down()
    done: list[str] = []
    stuck = node_machine.unmount_all(p.root)
    if stuck:
        raise NodeError(f"still mounted under {p.root}: {', '.join(stuck)}")
    if p.snapshot.is_file():
        done = node_machine.restore(node_machine.Snapshot.load(p.snapshot))
        p.snapshot.unlink()
    shutil.rmtree(p.containerd / "state", ignore_errors=True)
    shutil.rmtree(p.kubelet_root, ignore_errors=True)
    shutil.rmtree(p.cni_ipam, ignore_errors=True)
    if callable(say):
        say(f"==> real node down; put back: {', '.join(done) or 'nothing to put back'}")
    return done


def _serves(pod: dict[str, Any]) -> bool:
    """A pod that runs until stopped (a Deployment's, a DaemonSet's), not one that runs to completion (a Job's: the
    checkpoint verifier's checks), which is never Ready for long and is no part of the stack being up."""
    owners = pod.get("metadata", {}).get("ownerReferences") or []
    return not any(o.get("kind") == "Job" for o in owners) and pod.get("status", {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def wait_ready(timeout: float) -> list[str]:
    """Wait until every pod on the node that serves is Ready (:func:`_serves`); the pods, ``namespace/name``.
    NodeError naming those that are not."""

    def unready() -> tuple[list[str], list[str]]:
        listed = kubectl("get", "pods", "-A", "--field-selector", f"spec.nodeName={NODE_NAME}", "-o", "json")
        pods = [q for q in json.loads(listed).get("items", []) if _serves(q)]
        names = [f"{q['metadata']['namespace']}/{q['metadata']['name']}" for q in pods]
        ready = {
            n
            for n, q in zip(names, pods, strict=True)
            for c in q.get("status", {}).get("conditions") or []
            if c.get("type") == "Ready" and c.get("status") == "True"
        }
        return names, [n for n in names if n not in ready]

    deadline = time.monotonic() + timeout
    while True:
        names, waiting = unready()
        if not waiting:
            return names
        if time.monotonic() > deadline:
            raise NodeError(f"not Ready after {timeout:.0f}s: {', '.join(waiting)} (kubectl describe pod says why)")
        time.sleep(1)


def status(p: Paths | None = None) -> int:
    p = p or Paths()
    parts = daemons(p)
    for name, d in parts.items():
        print(f"{name:12} {'running (pid ' + str(d.pid()) + ')' if d.running() else 'stopped'}")
    print(f"{'node':12} {NODE_NAME} {'Ready' if node_ready(NODE_NAME) else 'not Ready'}")
    return 0 if all(d.running() for d in parts.values()) else 1


def image_arg(value: str) -> tuple[Path, str]:
    archive, sep, name = value.partition("=")
    if not sep or not archive or not name:
        raise argparse.ArgumentTypeError(f"{value!r}: expected ARCHIVE=NAME (an OCI archive and its image name)")
    path = Path(archive)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{archive}: no such OCI archive")
    return path, name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sim/node.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up_cmd = sub.add_parser("up", help="start the node (idempotent)")
    up_cmd.add_argument("--image", type=image_arg, action="append", default=[], metavar="ARCHIVE=NAME")
    sub.add_parser("down", help="stop the node and put the machine back")
    sub.add_parser("status", help="the node's parts")
    wait_cmd = sub.add_parser("wait", help="wait until every pod on the node is Ready")
    wait_cmd.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            up(args.image)
        elif args.command == "down":
            down()
        elif args.command == "wait":
            ready = wait_ready(args.timeout)
            print(f"==> every pod on the real node is Ready ({len(ready)})")
        else:
            return status()
    except (NodeError, DaemonError, node_machine.MachineError) as exc:
        print(f"sim/node.py {args.command}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
