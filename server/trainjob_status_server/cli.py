"""``trainjob-status-server``: the command line (serve)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import ssl
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NoReturn

from trainjob_status.contract import STATUS_PATH

from . import __version__, config, logs, versions
from .certificates import tls
from .kube.errors import KubeConfigError

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"  # what kubelet sets in every pod
KUBECONFIG_ENV = "KUBECONFIG"

log = logging.getLogger(__name__)


class UsageParser(argparse.ArgumentParser):
    """Usage errors in one line (the flag and what is wrong with it), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (--help lists the options)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="trainjob-status-server",
        description="Status ingest server for Kubeflow Trainer TrainJobs.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser(
        "serve",
        help="run the status ingest server",
        description=(
            f"Serve POST {STATUS_PATH.format(namespace='NS', name='NAME')} "
            "over HTTPS: validate the update as the TrainJob CRD does and write it "
            "to status.trainerStatus with server-side apply. Metrics, /healthz and /readyz "
            "on the metrics port. Every flag falls back to the environment variable shown."
        ),
    )
    config.add_flags(serve)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    raise SystemExit(_serve(args))


def with_kubeconfig_from_environment(
    settings: config.Config, environ: Mapping[str, str]
) -> config.Config:
    """The Kubernetes configuration in the order controller-runtime's managers (and
    kubectl, in-cluster aside) look for it: ``--kubeconfig`` (or
    TRAINJOB_STATUS_KUBECONFIG), else ``$KUBECONFIG`` (files joined with ":" are merged),
    else the in-cluster configuration inside a pod, else ``~/.kube/config`` where it
    exists. A shell that works with kubectl works with ``serve``; a pod sets no
    KUBECONFIG and has no such file, so the deployed server is not affected."""
    if settings.kubeconfig is not None:
        return settings
    if environ.get(KUBECONFIG_ENV):
        return dataclasses.replace(settings, kubeconfig=Path(environ[KUBECONFIG_ENV]))
    home = _home_kubeconfig(environ)
    if not environ.get(IN_CLUSTER_ENV) and home is not None:
        return dataclasses.replace(settings, kubeconfig=home)
    return settings


def _home_kubeconfig(environ: Mapping[str, str]) -> Path | None:
    """``$HOME/.kube/config``, where it is a file."""
    home = environ.get("HOME")
    path = Path(home) / ".kube" / "config" if home else None
    return path if path is not None and path.is_file() else None


def startup_problems(settings: config.Config, environ: Mapping[str, str]) -> list[str]:
    """What would stop ``serve`` at start that can be told before it starts, one line
    each: files that are not there, a TLS pair that does not load, no way to reach the
    Kubernetes API."""
    problems = []
    kubeconfig, source = settings.kubeconfig, "--kubeconfig"
    if kubeconfig is None and environ.get(KUBECONFIG_ENV):
        kubeconfig, source = Path(environ[KUBECONFIG_ENV]), KUBECONFIG_ENV
    if kubeconfig is None and not environ.get(IN_CLUSTER_ENV):
        kubeconfig, source = _home_kubeconfig(environ), "~/.kube/config"
    if kubeconfig is None:
        if not environ.get(IN_CLUSTER_ENV):
            problems.append(
                f"not running in a cluster ({IN_CLUSTER_ENV} is unset) and no ~/.kube/config:"
                f" give --kubeconfig (or TRAINJOB_STATUS_KUBECONFIG, or set {KUBECONFIG_ENV})"
            )
    elif not any(Path(p).is_file() for p in str(kubeconfig).split(os.pathsep) if p):
        problems.append(f"{source} {kubeconfig}: no such file")
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
    aiohttp_version = versions.installed_aiohttp()
    untested = not versions.aiohttp_tested(aiohttp_version)
    if untested and not settings.allow_untested_aiohttp:
        # Before anything imports the serving path, which an untested aiohttp may break.
        return _refuse([versions.untested_aiohttp_problem(aiohttp_version)])
    problems = settings.check() or startup_problems(settings, os.environ)
    if problems:
        return _refuse(problems)
    settings = with_kubeconfig_from_environment(settings, os.environ)
    logs.configure(settings.log_level, settings.log_format)
    if untested:
        log.warning(
            "aiohttp outside the tested range, allowed by --allow-untested-aiohttp",
            extra={"aiohttp": aiohttp_version, "tested": versions.AIOHTTP_RANGE},
        )
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
