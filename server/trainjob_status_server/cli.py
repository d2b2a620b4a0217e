"""``trainjob-status-server``: the command line (serve | devcluster | demo)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainjob-status-server",
        description="Status ingest server for Kubeflow Trainer TrainJobs.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser(
        "serve",
        help="run the status ingest server (not built yet)",
        description="Run the status ingest server. Not built yet.",
    )

    dev = commands.add_parser(
        "devcluster",
        help="run a local development Kubernetes API server (never for production)",
        description=(
            "Serve a small local Kubernetes API over HTTPS on 127.0.0.1 for development "
            "and tests: namespaces, pods, service accounts, config maps, secrets, RBAC and "
            "the TrainJob custom resource, with server-side apply, CRD validation, watch, "
            "service-account tokens, OIDC discovery and TokenReview. It keeps everything in "
            "memory and mints a new CA at every start. Never use it in production."
        ),
    )
    dev.add_argument(
        "--port",
        type=int,
        default=_env_int("DEVCLUSTER_PORT", 6443),
        help=(
            "TCP port on 127.0.0.1 to listen on; 0 picks a free one "
            "(env DEVCLUSTER_PORT, default 6443)"
        ),
    )
    dev.add_argument(
        "--kubeconfig-out",
        type=Path,
        default=Path(os.environ.get("DEVCLUSTER_KUBECONFIG", "devcluster.kubeconfig")),
        help=(
            "where to write the admin kubeconfig once the server accepts requests; removed "
            "again on exit (env DEVCLUSTER_KUBECONFIG, default ./devcluster.kubeconfig)"
        ),
    )

    commands.add_parser(
        "demo",
        help="run the whole path on this machine (not built yet)",
        description="Run the whole path locally. Not built yet.",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    if args.command == "devcluster":
        from .devcluster.standalone import run

        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run(args.port, args.kubeconfig_out))
        return
    print(f"trainjob-status-server {args.command}: not built yet", file=sys.stderr)
    raise SystemExit(2)


if __name__ == "__main__":
    main()
