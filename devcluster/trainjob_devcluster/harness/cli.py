"""``trainjob-devcluster``: the development Kubernetes API server and the demo."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from pathlib import Path

from trainjob_status_server.cli import UsageParser

from .. import __version__


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="trainjob-devcluster",
        description=(
            "A local development Kubernetes API server and a demo of the whole status path. "
            "For development and tests only."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser(
        "serve",
        help="run a local development Kubernetes API server (never for production)",
        description=(
            "Serve a small local Kubernetes API over HTTPS on 127.0.0.1 for development "
            "and tests: namespaces, pods, service accounts, config maps, secrets, RBAC and "
            "the TrainJob custom resource, with server-side apply, CRD validation, watch, "
            "service-account tokens, OIDC discovery and TokenReview. It keeps everything in "
            "memory and mints a new CA at every start. Never use it in production."
        ),
    )
    serve.add_argument(
        "--port",
        type=int,
        default=_env_int("DEVCLUSTER_PORT", 6443),
        help=(
            "TCP port on 127.0.0.1 to listen on; 0 picks a free one "
            "(env DEVCLUSTER_PORT, default 6443)"
        ),
    )
    serve.add_argument(
        "--kubeconfig-out",
        type=Path,
        default=Path(os.environ.get("DEVCLUSTER_KUBECONFIG", "devcluster.kubeconfig")),
        help=(
            "where to write the admin kubeconfig once the server accepts requests; removed "
            "again on exit (env DEVCLUSTER_KUBECONFIG, default ./devcluster.kubeconfig)"
        ),
    )

    demo = commands.add_parser(
        "demo",
        help="run the whole path on this machine: cluster, server, a training loop",
        description=(
            "Start a development cluster, a TrainJob and its pod, a CA and serving "
            "certificate, and the server with token verification; then run a simulated "
            "training loop that reports through the in-pod client with a token minted for "
            "the pod, showing what the API server holds as a live progress bar. Exits 0 "
            "once the TrainJob shows 100%."
        ),
    )
    demo.add_argument(
        "--duration", type=float, default=30.0, help="seconds of simulated training (default 30)"
    )
    demo.add_argument(
        "--report-interval",
        type=float,
        default=2.0,
        help="the client's minimum seconds between posts (default 2; real pods use 5)",
    )
    demo.add_argument(
        "--keep", action="store_true", help="keep everything running after the loop, until Ctrl-C"
    )
    demo.add_argument(
        "--workdir", type=Path, default=None, help="keep certificates and kubeconfig here"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        from .standalone import main as serve_devcluster

        serve_devcluster(args.port, args.kubeconfig_out)
        return
    from .demo import DemoOptions, run_demo

    options = DemoOptions(args.duration, args.report_interval, args.keep, args.workdir)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            raise SystemExit(asyncio.run(run_demo(options)))
    except asyncio.CancelledError:
        # SIGTERM: the demo has cleaned up; exit as a process ended by it would.
        raise SystemExit(128 + signal.SIGTERM) from None


if __name__ == "__main__":
    main()
