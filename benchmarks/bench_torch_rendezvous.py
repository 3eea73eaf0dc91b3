"""The example training job forms its group with PyTorch's own launcher, fed what the rendered JobSet gives each pod.

``examples/training/job.yaml`` is checked against the local stack and rendered into its JobSet by the same code as
``gpucluster submit``. Each of its pods is then played by one ``torchrun`` process (PyTorch |TORCH|, from PyPI, in
its own virtual environment, installed on the first run), started with exactly the container's command and
arguments and the environment the kubelet would give that pod (``sim/pod_env.py``: the completion index as the
Job controller sets it, the downward API, ``$(VAR)`` expansion), and nothing of this machine's own environment
but ``PATH`` and ``HOME``. The only addition is ``GLOO_SOCKET_IFNAME=lo``: the pods share this machine's loopback
instead of each having its own interface; gloo stands in for NCCL, the CPU for the GPUs.

The leader's name (``<job>-node-0-0.<job>``, JobSet's headless Service) resolves to 127.0.0.1 inside a private
mount namespace whose ``/etc/hosts`` says so (``unshare``; root only). Where that is not permitted the run says so
and puts 127.0.0.1 in the endpoint instead: then the name itself was not resolved.

Side by side, in the same run: ``before``, the environment the JobSet gave before the launcher's (no ``PET_*``) and
the example's former arguments (``--nnodes=2 --nproc-per-node=8``): both pods start as node rank 0 with the store
on 127.0.0.1. Each waits for a second node that never joins it; here, where the pods share one loopback, the second
cannot even open its store (EADDRINUSE). The group does not form within ``--baseline-timeout``.

Each worker (``benchmarks/rendezvous/train.py``, named ``train.py`` in each pod's working directory as the
example's image would hold it) joins the gloo group, all-reduces rank + 1 and writes what it saw. Printed: world
size formed, ranks per pod (node rank = completion index), the all-reduce sum against n(n+1)/2, seconds to form
and in all. Exits non-zero when the ``after`` group does not form or the sum is wrong.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.torch_env import DEFAULT_VENV, TORCH_VERSION, torch_python  # noqa: E402
from components.config import parse_stack_config, read_stack_file  # noqa: E402
from components.training.checks import check_spec  # noqa: E402
from components.training.manifest import (  # noqa: E402
    REPLICATED_JOB,
    checkpoint_interval,
    job_context,
    jobset_manifest,
)
from components.training.spec import JobSpec, load_spec  # noqa: E402
from contract.constants import COMPLETION_INDEX_ANNOTATION, JOBSET_RESTART_ATTEMPT_LABEL  # noqa: E402
from sim.pod_env import PodMeta, container_env  # noqa: E402

EXAMPLE = ROOT / "examples" / "training" / "job.yaml"
STACK = ROOT / "stacks" / "Pulumi.local.yaml"
WORKER = ROOT / "benchmarks" / "rendezvous" / "train.py"
#: What the example's arguments were before the launcher's environment.
BEFORE_ARGS = ["--nnodes=2", "--nproc-per-node=8"]


def rendered_pods(spec: JobSpec) -> tuple[dict[str, Any], list[PodMeta]]:
    """The example's trainer container and the metadata of each of its pods, as JobSet and the Job controller
    would create them on the first attempt."""
    stack = parse_stack_config(read_stack_file(STACK), str(STACK))
    check_spec(spec, stack, str(EXAMPLE))
    manifest = jobset_manifest(spec, job_context(spec, stack, checkpoint_interval(spec, stack, None)))
    template = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    (container,) = template["spec"]["containers"]
    namespace = manifest["metadata"]["namespace"]
    pods = [
        PodMeta(
            name=f"{spec.name}-{REPLICATED_JOB}-0-{i}-x{i:04d}",
            namespace=namespace,
            labels={**template["metadata"]["labels"], JOBSET_RESTART_ATTEMPT_LABEL: "0"},
            annotations={**template["metadata"].get("annotations", {}), COMPLETION_INDEX_ANNOTATION: str(i)},
        )
        for i in range(spec.nodes)
    ]
    return dict(container), pods


@dataclass
class Formed:
    name: str
    ok: bool
    why: str
    world_sizes: list[int]
    ranks_by_pod: dict[int, list[int]]
    all_reduce: float | None
    expected: float | None
    init_seconds: float | None
    seconds: float


def can_unshare() -> bool:
    probe = ["unshare", "-m", "sh", "-c", "mount --bind /etc/hosts /etc/hosts"]
    try:
        return subprocess.run(probe, capture_output=True, check=False, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_group(
    name: str,
    python: Path,
    container: Mapping[str, Any],
    *,
    envs: Sequence[dict[str, str]],
    args: Sequence[str],
    world: int,
    timeout: float,
    hosts: str | None,
) -> Formed:
    """One torchrun per pod, started together; the group's results when every process has ended or at timeout."""
    work = Path(tempfile.mkdtemp(prefix=f"rendezvous-{name}-"))
    results = work / "results"
    results.mkdir()
    hosts_file = work / "hosts"
    if hosts is not None:
        hosts_file.write_text(Path("/etc/hosts").read_text() + hosts)
    procs: list[subprocess.Popen[bytes]] = []
    started = time.monotonic()
    for i, pod_env in enumerate(envs):
        pod_dir = work / f"pod-{i}"
        pod_dir.mkdir()
        shutil.copy(WORKER, pod_dir / "train.py")
        env = {
            "PATH": f"{python.parent}:/usr/bin:/bin",
            "HOME": str(pod_dir),
            "GLOO_SOCKET_IFNAME": "lo",
            "RENDEZVOUS_RESULTS": str(results),
            **pod_env,
        }
        command = [*container["command"], *args]
        if hosts is not None:
            command = [
                "unshare",
                "-m",
                "sh",
                "-c",
                f'mount --bind {hosts_file} /etc/hosts && exec "$@"',
                "sh",
                *command,
            ]
        log = (work / f"pod-{i}.log").open("wb")
        procs.append(subprocess.Popen(command, cwd=pod_dir, env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = started + timeout
    timed_out = False
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    seconds = time.monotonic() - started
    seen = [json.loads(p.read_text()) for p in sorted(results.glob("rank-*.json"))]
    ranks_by_pod: dict[int, list[int]] = {}
    for r in seen:
        ranks_by_pod.setdefault(int(r["groupRank"]), []).append(int(r["rank"]))
    worlds = sorted({int(r["worldSize"]) for r in seen})
    sums = {r["allReduce"] for r in seen}
    ok = not timed_out and worlds == [world] and len(seen) == world and len(sums) == 1
    ok = ok and all(r["allReduce"] == r["expected"] for r in seen)
    if ok:
        why = "formed"
    elif timed_out:
        why = f"did not form in {timeout:.0f} s"
    else:
        codes = [p.returncode for p in procs]
        tail = (work / "pod-0.log").read_text(errors="replace").strip().splitlines()[-1:]
        why = f"exit codes {codes}: {tail[0][:160] if tail else 'no output'}"
    print(f"  [{name}] logs in {work}", flush=True)
    return Formed(
        name,
        ok,
        why,
        worlds,
        {k: sorted(v) for k, v in sorted(ranks_by_pod.items())},
        seen[0]["allReduce"] if seen else None,
        seen[0]["expected"] if seen else None,
        max((r["initSeconds"] for r in seen), default=None),
        seconds,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--torch-version", default=TORCH_VERSION)
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds the formed group may take")
    parser.add_argument("--baseline-timeout", type=float, default=45.0, help="seconds given to the former env")
    args = parser.parse_args(argv)

    python = torch_python(args.venv, args.torch_version)
    spec = load_spec(EXAMPLE)
    container, pods = rendered_pods(spec)
    envs = [container_env(container["env"], pod, completion_index=i) for i, pod in enumerate(pods)]
    leader = envs[0]["PET_RDZV_ENDPOINT"].rsplit(":", 1)[0]
    hosts: str | None = f"127.0.0.1\t{leader}\n"
    if not can_unshare():
        print(f"  unshare -m is not permitted here: {leader} replaced by 127.0.0.1 (its name is not resolved)")
        hosts = None
        for env in envs:
            for key in ("PET_RDZV_ENDPOINT", "MASTER_ADDR"):
                env[key] = env[key].replace(leader, "127.0.0.1")
    print(
        f"example job {spec.name}: {spec.nodes} pods x PET_NPROC_PER_NODE={envs[0]['PET_NPROC_PER_NODE']}, "
        f"rendezvous {envs[0]['PET_RDZV_BACKEND']} on {envs[0]['PET_RDZV_ENDPOINT']}, torch {args.torch_version}",
        flush=True,
    )
    world = spec.nodes * spec.gpus_per_node
    after = run_group(
        "after", python, container, envs=envs, args=container["args"], world=world, timeout=args.timeout, hosts=hosts
    )
    before_envs = [{k: v for k, v in env.items() if not k.startswith("PET_")} for env in envs]
    before_args = [*BEFORE_ARGS, *container["args"]]
    before = run_group(
        "before",
        python,
        container,
        envs=before_envs,
        args=before_args,
        world=world,
        timeout=args.baseline_timeout,
        hosts=hosts,
    )
    print(f"{'':28}{'before':>28}{'after':>28}")
    for label, get in (
        ("group", lambda f: f.why),
        ("world sizes seen", lambda f: ",".join(map(str, f.world_sizes)) or "-"),
        ("ranks by node rank", lambda f: "; ".join(f"{k}:{v[0]}-{v[-1]}" for k, v in f.ranks_by_pod.items()) or "-"),
        ("all-reduce (expected)", lambda f: f"{f.all_reduce} ({f.expected})" if f.all_reduce is not None else "-"),
        ("slowest init_process_group s", lambda f: f"{f.init_seconds:.2f}" if f.init_seconds is not None else "-"),
        ("wall s", lambda f: f"{f.seconds:.1f}"),
    ):
        print(f"{label:28}{str(get(before))[:27]:>28}{str(get(after))[:27]:>28}")
    return 0 if after.ok else 1


if __name__ == "__main__":
    sys.exit(main())
