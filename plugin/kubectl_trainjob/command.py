"""``kubectl trainjob progress``: flags, the user's kubeconfig, one list or a watch."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TextIO, TypeVar

from rich.live import Live

from .follow import Change, Follower, reason_of
from .fresh import PROGRESSES, Freshness, changed_rows
from .fresh import REFRESH_SECONDS as FRESH_SECONDS
from .kube import (
    TRAINJOBS,
    USER_AGENT,
    Key,
    KubeClient,
    KubeConfigError,
    KubeError,
    KubeUnavailable,
    Obj,
    ObjectList,
    key_of,
    load_config,
    one_line,
)
from .output import View, selected
from .rows import SORT_KEYS, Row, row_of, sort_key
from .terminal import printable
from .version import __version__

REFRESH_SECONDS = 1.0  # a terminal table redraws this often so the ages move on
T = TypeVar("T")


def not_found(name: str) -> str:
    """What ``kubectl get`` says of a name that is not there."""
    return f'Error from server (NotFound): {TRAINJOBS.qualified} "{name}" not found'


def missing_kubeconfig(kubeconfig: str | None) -> str | None:
    """The error when no file of ``kubeconfig`` exists (what the loader would say, a
    missing current-context, is not what is wrong), else None."""
    if kubeconfig is None or any(os.path.isfile(p) for p in kubeconfig.split(os.pathsep) if p):
        return None
    return f"error: no kubeconfig: {kubeconfig} does not exist (set KUBECONFIG or --kubeconfig)"


def kubeconfig_file(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """The kubeconfig kubectl would read: ``--kubeconfig``, else ``KUBECONFIG`` (files
    joined with ":" are merged), else ``~/.kube/config``; None (the pod's service
    account) when there is none of them and we run in a pod."""
    if flag:
        return flag
    if environ.get("KUBECONFIG"):
        return environ["KUBECONFIG"]
    default = os.path.expanduser("~/.kube/config")
    if not os.path.exists(default) and environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    return default


async def progress(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    configuration, context_namespace = await load_config(args.kubeconfig_file, args.context)
    namespace = None if args.all_namespaces else (args.namespace or context_namespace)
    view = View(args, out, time.time, err)
    async with KubeClient(configuration) as client:
        # With -w too: a refusal (RBAC, no such resource, a bad selector) ends the
        # command at once with the API's message; later failures are retried.
        listed = await client.list(TRAINJOBS, namespace=namespace, label_selector=args.selector)
        rows = selected((row_of(obj) for obj in listed.items), args.names)
        # The figures of updates the server has not written to the TrainJobs yet, where
        # it serves them (never an error: without them, the rows are the stored status).
        fresh = Freshness(client, namespace, view.message)
        if rows:
            await fresh.read()
        rows = [fresh.row(row) for row in rows]
        found = {row.name for row in rows}
        missing = [name for name in dict.fromkeys(args.names) if name not in found]
        if not args.watch or missing:
            # As `kubectl get`: what was found, then a NotFound line for each name that
            # was not, and exit status 1.
            if rows or (view.output is not None and not missing):
                view.snapshot(rows)
            elif not missing:
                where = "" if namespace is None else f" in {namespace} namespace"
                err.write(printable(f"No resources found{where}.") + "\n")
            for name in missing:
                err.write(printable(not_found(name)) + "\n")
            return 1 if missing else 0
        await watch(client, namespace, args.selector, listed, args.names, view, fresh)
    return 0


async def watch(
    client: KubeClient,
    namespace: str | None,
    selector: str | None,
    listed: ObjectList,
    names: Sequence[str],
    view: View,
    fresh: Freshness,
) -> None:
    """Follow the TrainJobs from ``listed`` until interrupted; redraw (or print events)
    on each change, rows marked stale while the API server does not answer. ``fresh``
    is read again every few seconds: a change of its figures is a change too."""
    pending: list[Change] = []
    refreshed: list[Row] = []
    changed = asyncio.Event()

    def heard(events: Sequence[Change]) -> None:
        pending.extend(e for e in events if not names or e.key[1] in names)
        # No events: the rows' health changed, which the table shows too.
        if pending or not events:
            changed.set()

    def stored() -> list[Row]:
        return selected(map(row_of, follower.objects()), names)

    def rows() -> list[Row]:
        return [fresh.row(row) for row in stored()]

    def read(before: Mapping[Key, Obj]) -> None:
        # Only a change of what the rows show redraws (or prints a document per row):
        # an update the status now holds, say, changes nothing.
        now = changed_rows(stored(), before, fresh.progress)
        if now:
            if view.output is not None:
                refreshed.extend(now)
            changed.set()

    follower = Follower(client, namespace, selector, on_change=heard, on_message=view.message)
    follower.load(listed)
    live = Live(console=view.console, auto_refresh=False) if view.interactive else None
    task = asyncio.create_task(follower.run(), name="kubectl-trainjob-watch")
    # The follower ends only by raising: wake the loop below to raise it here.
    task.add_done_callback(lambda _: changed.set())
    reads = asyncio.create_task(
        fresh.run(read, paused=lambda: follower.health.stale), name="kubectl-trainjob-fresh"
    )
    try:
        with live if live is not None else contextlib.nullcontext():
            view.live = live
            # One table (or one document per TrainJob) for what the list found, then
            # changes only.
            if view.output is None:
                view.snapshot(rows())
            else:
                for obj in follower.objects():
                    event = Change("ADDED", key_of(obj), obj)
                    _print_event(view, event, fresh, names)
            while True:
                timeout = REFRESH_SECONDS if live is not None else None
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await changed.wait()
                if task.done():
                    task.result()
                redraw = changed.is_set()
                changed.clear()
                events = _drain(pending)
                if view.output is None:
                    if redraw or live is not None:
                        view.snapshot(rows(), stale=follower.health.stale)
                else:
                    for event in events:
                        _print_event(view, event, fresh, names)
                    for row in _drain(refreshed):
                        view.event("MODIFIED", row)
    finally:
        view.live = None
        for running in (task, reads):
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running


def _drain(pending: list[T]) -> list[T]:
    items = list(pending)
    pending.clear()
    return items


def _print_event(view: View, event: Change, fresh: Freshness, names: Sequence[str] = ()) -> None:
    if not names or event.key[1] in names:
        view.event(event.type, fresh.row(row_of(event.obj)))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubectl trainjob",
        description="Kubeflow Trainer TrainJobs at a glance (a kubectl plugin).",
    )
    # Long form only: to a kubectl user -v is the log verbosity, a flag of kubectl's own.
    parser.add_argument("--version", action="version", version=version_line())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cmd = commands.add_parser(
        "progress",
        help="progress, ETA, last update and metrics of TrainJobs",
        description=(
            "Show each TrainJob's state (the condition its controller set: Failed, "
            "Complete, Suspended or Created) and its trainer's last report: a progress "
            "bar, the estimated time remaining, how long ago it reported, and its metrics "
            "(the first few reported, or those chosen with --metric). TrainJobs that have "
            "not reported show '-'. The figures are the TrainJob's status.trainerStatus, "
            "or, where the status server's aggregated API is registered "
            f"({PROGRESSES.qualified}), the newest update that server accepted when it is "
            "later: the server writes a TrainJob's status at most so often. When that API "
            "cannot be read (no RBAC on it, the server down), stderr says why, once, and "
            "the rows show the status. With -w, the rows are redrawn on every change of "
            f"the TrainJobs and the newest updates are read every {FRESH_SECONDS:g} s; a "
            "lost API server is reported on stderr, the rows are marked '(stale)' until it "
            "answers again, and the watch resumes by itself."
        ),
    )
    cmd.add_argument("names", nargs="*", metavar="NAME", help="only these TrainJobs")
    cmd.add_argument("-n", "--namespace", help="namespace (default: the context's, else 'default')")
    # As kubectl takes them: -A wins over -n.
    cmd.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        help="TrainJobs of every namespace (-n is then ignored, as kubectl does)",
    )
    cmd.add_argument(
        "-w", "--watch", action="store_true", help="keep watching; redraw on every change"
    )
    cmd.add_argument(
        "-l",
        "--selector",
        metavar="SELECTOR",
        help="label selector, as kubectl takes it (e.g. team=a,tier!=dev)",
    )
    cmd.add_argument(
        "--metric",
        action="append",
        metavar="NAME",
        help=(
            "a metric to show as a column (repeat, or separate with commas); default: "
            "the first 3 reported (every one with -o wide)"
        ),
    )
    cmd.add_argument(
        "--sort-by",
        type=_sort_key,
        default="name",
        metavar="KEY",
        help=(
            f"order rows by {', '.join(SORT_KEYS)} or metric:NAME (rows without it last; "
            "default: namespace and name)"
        ),
    )
    cmd.add_argument(
        "-o",
        "--output",
        choices=("wide", "json", "yaml"),
        help=(
            "wide: the table with the runtime and every metric; json, yaml: documents "
            "instead of the table (with -w: one per change)"
        ),
    )
    cmd.add_argument("--kubeconfig", help="kubeconfig file (default: KUBECONFIG, ~/.kube/config)")
    cmd.add_argument("--context", help="kubeconfig context (default: the current context)")
    commands.add_parser("version", help="print the plugin's version")
    return parser


def version_line() -> str:
    return f"{USER_AGENT} {__version__}"


def _sort_key(value: str) -> str:
    try:
        return sort_key(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--sort-by: ")) from exc


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(version_line())
        return 0
    logging.basicConfig(level=logging.WARNING, format="kubectl-trainjob: %(message)s")
    args.kubeconfig_file = kubeconfig_file(args.kubeconfig, os.environ)
    missing = missing_kubeconfig(args.kubeconfig_file)
    if missing is not None:
        print(printable(missing), file=sys.stderr)
        return 1
    try:
        return asyncio.run(progress(args, sys.stdout, sys.stderr))
    except KeyboardInterrupt:
        return 130
    # What an error says may come from the API server (or whatever answers in its
    # place): printed as printable text only.
    except KubeConfigError as exc:
        print(printable(f"error: {one_line(str(exc))}"), file=sys.stderr)
    except KubeError as exc:
        if exc.status == 404:  # a list answers 404 only when the resource type is missing
            print('error: the server doesn\'t have a resource type "trainjobs"', file=sys.stderr)
        else:
            print(printable(reason_of(exc)), file=sys.stderr)
    except KubeUnavailable as exc:
        print(printable(f"error: {reason_of(exc)}"), file=sys.stderr)
    except BrokenPipeError:
        # `kubectl trainjob progress | head`: the reader has gone; so do we.
        sys.stderr.close()
    return 1
