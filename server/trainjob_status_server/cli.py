"""``trainjob-status-server``: the command line (serve | devcluster | demo)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import ssl
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from . import config, logs, tls
from .kube.errors import KubeConfigError

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"  # what kubelet sets in every pod


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (the flag and what is wrong with it), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (--help lists the options)\n")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="trainjob-status-server",
        description="Status ingest server for Kubeflow Trainer TrainJobs.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="run the status ingest server",
        description=(
            "Serve POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/NS/trainjobs/NAME/"
            "status over HTTPS: validate the update as the TrainJob CRD does and write it "
            "to status.trainerStatus with server-side apply. Metrics, /healthz and /readyz "
            "on the metrics port. Every flag falls back to the environment variable shown."
        ),
    )
    config.add_flags(serve)

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
    if args.command == "devcluster":
        from .devcluster.standalone import main as serve_devcluster

        serve_devcluster(args.port, args.kubeconfig_out)
        return
    if args.command == "serve":
        raise SystemExit(_serve(args))
    from .demo import DemoOptions, run_demo

    options = DemoOptions(args.duration, args.report_interval, args.keep, args.workdir)
    with contextlib.suppress(KeyboardInterrupt):
        raise SystemExit(asyncio.run(run_demo(options)))


def startup_problems(settings: config.Config, environ: Mapping[str, str]) -> list[str]:
    """What would stop ``serve`` at start that can be told before it starts, one line
    each: files that are not there, a TLS pair that does not load, no way to reach the
    Kubernetes API."""
    problems = []
    if settings.kubeconfig is None:
        if not environ.get(IN_CLUSTER_ENV):
            problems.append(
                f"not running in a cluster ({IN_CLUSTER_ENV} is unset): give --kubeconfig "
                "(or TRAINJOB_STATUS_KUBECONFIG)"
            )
    elif not settings.kubeconfig.is_file():
        problems.append(f"--kubeconfig {settings.kubeconfig}: no such file")
    # The bootstrap writes the pair itself; without TLS there is none to read.
    if settings.insecure_http or settings.cert_bootstrap:
        return problems
    pair = (("--tls-cert-file", settings.tls_cert_file), ("--tls-key-file", settings.tls_key_file))
    missing = [f"{flag} {path}: no such file" for flag, path in pair if not _is_file(path)]
    problems.extend(missing)
    if not missing and settings.tls_cert_file and settings.tls_key_file:
        try:
            tls.build_context(settings.tls_cert_file, settings.tls_key_file, "1.2")
        except (OSError, ssl.SSLError) as exc:
            problems.append(
                f"--tls-cert-file {settings.tls_cert_file} and --tls-key-file "
                f"{settings.tls_key_file} do not load as a certificate and its key: {exc}"
            )
    return problems


def _is_file(path: Path | None) -> bool:
    return path is not None and path.is_file()


def _serve(args: argparse.Namespace) -> int:
    try:
        settings = config.from_args(args)
    except ValueError as exc:
        return _refuse([str(exc)])
    problems = settings.check() or startup_problems(settings, os.environ)
    if problems:
        return _refuse(problems)
    logs.configure(settings.log_level, settings.log_format)
    from .running import serve_until_signalled

    try:
        return asyncio.run(serve_until_signalled(settings))
    except KubeConfigError as exc:
        # A kubeconfig that is there but does not load, or an in-cluster account
        # without its files: nothing was served yet.
        return _refuse([str(exc)])


def _refuse(problems: list[str]) -> int:
    for problem in problems:
        # One line each, whatever a parser's message holds (YAML errors span lines).
        print(f"trainjob-status-server serve: {' '.join(problem.split())}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    main()
