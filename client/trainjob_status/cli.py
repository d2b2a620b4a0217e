"""``trainjob-status report``: report a TrainJob's status from shell-driven training.

    trainjob-status report --progress 40 --eta 300 --metric loss=0.31 --metric acc=0.9

Sends one update and waits for it (at most ``--timeout`` seconds). Like the library it
never fails the training script for the status: the exit code is 0 when not in a
TrainJob or when the update could not be delivered (a line on stderr says so), unless
``--strict`` makes both exit 1. Wrong arguments exit 2 with a usage line, and nothing is
sent: a progress that is not a whole number from 0 to 100, a negative ETA, a metric
without a name or a value or over the CRD's 64 characters. On a terminal a delivered update
is echoed (what was sent, and where); in a script, or with ``-q``, success is silent.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

from . import __version__
from .contract import (
    CA_CERT_ENV,
    INT32_MAX,
    MAX_METRIC_CHARS,
    MAX_PROGRESS_PERCENT,
    TOKEN_ENV,
    URL_ENV,
)
from .payload import fit
from .reporter import Report, StatusReporter, observe

EXIT_OK = 0
EXIT_NOT_DELIVERED = 1


def _metric(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    for part, what in ((name, "name"), (value, "value")):
        if len(part) > MAX_METRIC_CHARS:
            raise argparse.ArgumentTypeError(
                f"a metric's {what} has at most {MAX_METRIC_CHARS} characters, got {len(part)}"
            )
    return name, value


def _progress(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= MAX_PROGRESS_PERCENT:
        raise argparse.ArgumentTypeError(
            f"expected a whole number from 0 to {MAX_PROGRESS_PERCENT}, got {text!r}"
        )
    return value


def _eta(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= INT32_MAX:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainjob-status", description="Report a Kubeflow TrainJob's training status."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    # Not required here: main() says what is wrong, an unknown option before a missing
    # command (argparse would only say that a command is required).
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    report = commands.add_parser(
        "report",
        help="send one status update",
        description="Send one status update (the whole trainerStatus: options left out are "
        "left out of the TrainJob's status) and wait until it is delivered.",
    )
    report.add_argument(
        "--progress", type=_progress, help="percent done, a whole number from 0 to 100"
    )
    report.add_argument("--eta", type=_eta, help="estimated remaining seconds, >= 0")
    report.add_argument(
        "--metric",
        type=_metric,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a metric (repeatable); the value is sent as written",
    )
    report.add_argument("--step", type=int, help="current step (sent as metric 'step')")
    report.add_argument("--epoch", type=float, help="current epoch (sent as metric 'epoch')")
    report.add_argument(
        "--timeout", type=float, default=10.0, help="seconds to wait for delivery (default 10)"
    )
    report.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when not in a TrainJob or when the update was not delivered",
    )
    report.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print nothing on success (the default when stdout is not a terminal)",
    )
    report.add_argument("--url", help=f"status URL (default: ${URL_ENV})")
    report.add_argument("--token-file", help=f"bearer token file (default: ${TOKEN_ENV})")
    report.add_argument("--ca-file", help=f"server CA file (default: ${CA_CERT_ENV})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.error("a command is required: report")
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="trainjob-status: %(message)s")
    reporter = StatusReporter(
        args.url,
        args.token_file,
        args.ca_file,
        timeout=min(args.timeout, 5.0),
        flush_timeout=args.timeout,
    )
    try:
        if not reporter.enabled:
            reason = reporter.settings.skip_reason or "status reporting is off"
            print(f"trainjob-status: nothing sent: {reason}", file=sys.stderr)
            return EXIT_NOT_DELIVERED if args.strict else EXIT_OK
        metrics = dict(args.metric)
        taken = Report(args.progress, args.eta, metrics, args.step, args.epoch, time.time())
        reporter.report(args.progress, args.eta, metrics, step=args.step, epoch=args.epoch)
        if reporter.flush(args.timeout):
            if not args.quiet and sys.stdout.isatty():
                status, _ = fit(observe(taken))
                print(sent_line(status, reporter.settings.url or ""), file=sys.stdout)
            return EXIT_OK
    finally:
        reporter.close(timeout=0)
    print("trainjob-status: the update was not delivered", file=sys.stderr)
    return EXIT_NOT_DELIVERED if args.strict else EXIT_OK


def sent_line(status: dict[str, Any], url: str) -> str:
    """What was delivered, in one line: the fields of ``trainerStatus`` as sent."""
    parts = []
    if "progressPercentage" in status:
        parts.append(f"progress {status['progressPercentage']}%")
    if "estimatedRemainingSeconds" in status:
        parts.append(f"ETA {status['estimatedRemainingSeconds']} s")
    metrics = " ".join(f"{m['name']}={m['value']}" for m in status.get("metrics", ()))
    if metrics:
        parts.append(f"metrics {metrics}")
    return f"trainjob-status: sent {', '.join(parts) or 'an empty status'} to {url}"


if __name__ == "__main__":
    sys.exit(main())
