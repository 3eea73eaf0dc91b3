"""The fake of RunPod's REST API v2 (``runpod_server``) as its own process: ``python -m sim.fakes.runpod_cli
--listen 127.0.0.1:18082 --api-key-file KEYFILE``. The key it accepts is read from a file (as the provider service
reads it from its secrets directory) or from the environment variable ``--api-key-env`` names, never from a flag. It
prints one JSON ready line on stdout and stops on SIGTERM. The simulated cluster runs it (``sim/outside.py``) for a
``runpod`` provider whose URL is on loopback or the real node's address.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path

from daemons.toolkit.listen import ListenError, parse_listen
from daemons.toolkit.logs import LEVELS, setup_logging
from sim.fakes._http import serve_until_signal
from sim.fakes.runpod_contract import contract_problem
from sim.fakes.runpod_server import FakeRunpod, FakeRunpodServer, log


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m sim.fakes.runpod_cli",
        description=(
            "Serve a fake of RunPod's REST API v2 (pods and the catalogue) under /v2, held to RunPod's OpenAPI "
            "document; admin knobs at /admin/knobs. Prints one JSON ready line on stdout; SIGTERM stops it."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--listen", default="127.0.0.1:18082", help="host:port to serve on (port 0: pick a free one)")
    key = p.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key-file",
        type=Path,
        default=None,
        help="file holding the bearer key the server accepts (one trailing newline is ignored)",
    )
    key.add_argument(
        "--api-key-env",
        default="RUNPOD_API_KEY",
        help="name of the environment variable holding the bearer key the server accepts (without --api-key-file)",
    )
    p.add_argument("--boot-seconds", type=float, default=2.0, help="seconds before a pod runs with public ports")
    p.add_argument("--price", type=float, default=2.99, help="price per GPU-hour reported in cost and the catalogue")
    p.add_argument(
        "--capacity",
        action="append",
        default=[],
        metavar="GPU_TYPE_ID=N",
        help="GPUs of a type (RunPod id) that may run at once; repeatable; unlimited when not given",
    )
    p.add_argument("--never-address", action="store_true", help="pods run but never get public ports")
    p.add_argument(
        "--public-ip-pool",
        default="203.0.113.0/24",
        help="network of the pods' public IPs; where they are this machine's, a running pod answers on them",
    )
    p.add_argument(
        "--model-load-seconds", type=float, default=20.0, help="seconds a running pod answers 503 before it serves"
    )
    p.add_argument("--request-seconds", type=float, default=0.05, help="seconds one request takes once it serves")
    p.add_argument("--log-level", default="info", choices=LEVELS, help="log level")
    return p


def _read_key(args: argparse.Namespace) -> str:
    """The bearer key from ``--api-key-file`` or the ``--api-key-env`` variable; ValueError saying what is wrong."""
    if args.api_key_file is not None:
        try:
            key: str = args.api_key_file.read_text(encoding="utf-8").removesuffix("\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"--api-key-file: cannot read {args.api_key_file}: {type(exc).__name__}") from None
        if not key.strip():
            raise ValueError(f"--api-key-file: {args.api_key_file} is empty")
        return key
    from_env = os.environ.get(args.api_key_env, "")
    if not from_env:
        raise ValueError(f"--api-key-env: environment variable {args.api_key_env} is empty or unset")
    return from_env


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_level, style="plain")
    try:
        host, port = parse_listen(args.listen)
    except ListenError as exc:
        parser.error(str(exc))
    try:
        key = _read_key(args)
    except ValueError as exc:
        parser.error(str(exc))
    if problem_text := contract_problem():
        parser.error(problem_text)
    capacity: dict[str, int] = {}
    for item in args.capacity:
        name, _, count = item.rpartition("=")
        if not name or not count.isdigit():
            parser.error(f"--capacity: {item!r} is not GPU_TYPE_ID=N")
        capacity[name] = int(count)
    api = FakeRunpod(
        key,
        boot_seconds=args.boot_seconds,
        price_per_gpu_hour=args.price,
        capacity=capacity,
        never_address=args.never_address,
        public_ip_pool=args.public_ip_pool,
        model_load_seconds=args.model_load_seconds,
        request_seconds=args.request_seconds,
    )
    try:
        server = FakeRunpodServer(api, host, port)
    except OSError as exc:
        parser.error(f"--listen: cannot listen on {args.listen}: {exc}")
    return serve_until_signal(server, "runpod", log, {"baseUrl": server.base_url})


if __name__ == "__main__":
    raise SystemExit(main())
