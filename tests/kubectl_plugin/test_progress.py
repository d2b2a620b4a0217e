"""``kubectl trainjob progress``: its pure formatting, then the real kubectl binary running
the plugin from PATH against the devcluster (table, -A, names, -o json|yaml, --context,
--kubeconfig, -w redraws and watch events, errors)."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import os
import pty
import re
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import yaml
from rich.console import Console

from kubectl_trainjob import fresh
from kubectl_trainjob.command import kubeconfig_file
from kubectl_trainjob.follow import Health, failed, reason_of, recovered
from kubectl_trainjob.kube import KubeClient as PluginClient
from kubectl_trainjob.kube import KubeError, KubeUnavailable
from kubectl_trainjob.output import yaml_text
from kubectl_trainjob.rows import (
    Row,
    chosen_metrics,
    document,
    fresher,
    progress_bar,
    row_of,
    shown_metrics,
    sort_key,
    sorted_rows,
    state_of,
    table,
    updated_text,
)
from kubectl_trainjob.terminal import printable
from server import replicas
from server.aggregation import PROGRESS, available, register, soon, unregister
from server.conftest import NS
from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, MakeStatusServer, on_real_server
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_devcluster.harness.testing import ServingCerts, eventually
from trainjob_status.contract import GROUP
from trainjob_status_server.app import StatusServer
from trainjob_status_server.kube import KubeClient
from trainjob_status_server.kube.errors import KubeError as ServerKubeError
from trainjob_status_server.progress import resource

NOW = dt.datetime(2026, 12, 2, 18, 33, 25, tzinfo=dt.UTC).timestamp()


def iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat().replace("+00:00", "Z")


# -- pure ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("percent", "bar"),
    [
        (None, "-"),
        (0, "░░░░░░░░░░░░░░░░░░░░   0%"),
        (42, "████████░░░░░░░░░░░░  42%"),
        (100, "████████████████████ 100%"),
    ],
)
def test_progress_bar(percent: int | None, bar: str) -> None:
    assert progress_bar(percent) == bar
    assert progress_bar(50, width=4) == "██░░  50%"


def full_trainjob(name: str = "tj", namespace: str = "team-a") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runtimeRef": {"name": "torch", "kind": "ClusterTrainingRuntime"}},
        "status": {
            "conditions": [
                {"type": "Created", "status": "True"},
                {"type": "Suspended", "status": "False"},
            ],
            "trainerStatus": {
                "progressPercentage": 42,
                "estimatedRemainingSeconds": 3700,
                "lastUpdatedTime": iso(NOW - 90),
                "metrics": [{"name": "loss", "value": "0.25"}, {"name": "acc", "value": "0.9"}],
            },
        },
    }


def test_rows_and_documents() -> None:
    row = row_of(full_trainjob())
    assert row == Row(
        "team-a",
        "tj",
        progress=42,
        eta_seconds=3700,
        last_updated=iso(NOW - 90),
        metrics=(("loss", "0.25"), ("acc", "0.9")),
        state="Created",
        runtime="torch",
    )
    assert updated_text(row, NOW) == "90s ago"
    assert document(row, ["acc"]) == {
        "namespace": "team-a",
        "name": "tj",
        "state": "Created",
        "runtime": "torch",
        "progressPercentage": 42,
        "estimatedRemainingSeconds": 3700,
        "lastUpdatedTime": iso(NOW - 90),
        "metrics": [{"name": "acc", "value": "0.9"}],
    }
    assert document(row)["metrics"] == [
        {"name": "loss", "value": "0.25"},
        {"name": "acc", "value": "0.9"},
    ]
    bare = row_of({"metadata": {"name": "new", "namespace": "team-a"}})
    assert bare == Row("team-a", "new")
    assert document(bare)["state"] is None
    assert updated_text(bare, NOW) == "-"
    odd = row_of(
        {
            "metadata": {"name": "odd", "namespace": "x"},
            "status": {"trainerStatus": {"progressPercentage": "42", "lastUpdatedTime": "soon"}},
        }
    )
    assert (odd.progress, updated_text(odd, NOW)) == (None, "soon")


def test_chosen_metrics() -> None:
    assert chosen_metrics(None) == []
    assert chosen_metrics(["loss", "acc,loss", "lr,,"]) == ["loss", "acc", "lr"]


def shown(rendered: Any) -> list[str]:
    console = Console(file=io.StringIO(), width=200)
    console.print(rendered)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return [line.rstrip() for line in out.splitlines()]


def test_table_layout() -> None:
    rows = [row_of(full_trainjob("b")), row_of({"metadata": {"name": "a", "namespace": "x"}})]
    assert shown(table(rows, metrics=["loss", "lr"], all_namespaces=True, now=NOW)) == [
        "NAMESPACE   NAME   STATE     PROGRESS                    ETA   UPDATED   loss   lr",
        "team-a      b      Created   ████████░░░░░░░░░░░░  42%   61m   90s ago   0.25   -",
        "x           a      -         -                           -     -         -      -",
    ]
    # Wide: the runtime too. Stale: every row says so.
    wide = table(rows, metrics=[], all_namespaces=False, now=NOW, wide=True, stale=True)
    assert shown(wide) == [
        "NAME   STATE             PROGRESS                    ETA   UPDATED   RUNTIME",
        "b      Created (stale)   ████████░░░░░░░░░░░░  42%   61m   90s ago   torch",
        "a      - (stale)         -                           -     -         -",
    ]


@pytest.mark.parametrize(
    ("conditions", "state"),
    [
        (None, None),
        ("Complete", None),
        ([], None),
        ([{"type": "Created", "status": "True"}], "Created"),
        ([{"type": "Created", "status": "False"}], None),
        ([{"type": "Created", "status": "True"}, {"type": "Suspended", "status": "True"}],
         "Suspended"),
        ([{"type": "Suspended", "status": "False"}, {"type": "Created", "status": "True"}],
         "Created"),
        ([{"type": "Complete", "status": "True"}, {"type": "Suspended", "status": "True"}],
         "Complete"),
        ([{"type": "Complete", "status": "True"}, {"type": "Failed", "status": "True"}],
         "Failed"),
        ([{"type": "Other", "status": "True"}, "Failed", {"status": "True"}], None),
    ],
)  # fmt: skip
def test_the_state_is_the_most_telling_true_condition(conditions: Any, state: str | None) -> None:
    assert state_of(conditions) == state


def metric_row(name: str, namespace: str = "a", **figures: Any) -> Row:
    return Row(namespace, name, **figures)


def test_default_metric_columns_are_the_first_few_reported() -> None:
    rows = [
        metric_row("b", metrics=(("loss", "1"), ("lr", "2"), ("acc", "3"), ("step", "4"))),
        metric_row("a", metrics=(("tokens", "9"), ("loss", "1"))),
    ]
    assert shown_metrics(rows, [], wide=False) == ["tokens", "loss", "lr"]
    assert shown_metrics(rows, [], wide=True) == ["tokens", "loss", "lr", "acc", "step"]
    assert shown_metrics(rows, ["step"], wide=True) == ["step"]
    assert shown_metrics([], [], wide=False) == []


def test_rows_sort_by_a_column_missing_figures_last_ties_by_name() -> None:
    rows = [
        metric_row("c", progress=50, eta_seconds=10, state="Created", runtime="torch",
                   last_updated="2026-12-02T18:00:00Z", metrics=(("loss", "0.5"),)),
        metric_row("a", progress=None, state=None, metrics=(("loss", "warmup"),)),
        metric_row("b", "0", progress=50, eta_seconds=5, state="Failed", runtime="jax",
                   last_updated="2026-12-02T17:00:00Z", metrics=(("loss", "10"),)),
        metric_row("d", progress=7, metrics=(("loss", "9"),)),
    ]  # fmt: skip

    def names(by: str) -> list[str]:
        return [row.name for row in sorted_rows(rows, by)]

    assert names("name") == ["b", "a", "c", "d"]  # namespace "0" first
    assert names("progress") == ["d", "b", "c", "a"]
    assert names("eta") == ["b", "c", "a", "d"]
    assert names("updated") == ["b", "c", "a", "d"]
    assert names("state") == ["c", "b", "a", "d"]
    assert names("runtime") == ["b", "c", "a", "d"]
    # Numbers compare as numbers only when every value is one; else as text.
    assert names("metric:loss") == ["c", "b", "d", "a"]
    numeric = [r for r in rows if r.name != "a"]
    assert [r.name for r in sorted_rows(numeric, "metric:loss")] == ["c", "d", "b"]
    assert names("metric:absent") == ["b", "a", "c", "d"]


@pytest.mark.parametrize("value", ["", "size", "metric:", "Name", "metric"])
def test_sort_keys_are_checked(value: str) -> None:
    with pytest.raises(ValueError, match="is none of name, state, runtime"):
        sort_key(value)
    assert sort_key("metric:loss") == "metric:loss"


def test_an_outage_is_told_once_and_its_end_once() -> None:
    healthy = Health()
    down, line = failed(healthy, "Error from server (ServiceUnavailable): gone")
    assert down == Health(stale=True, reason="Error from server (ServiceUnavailable): gone")
    assert line == (
        "error: Error from server (ServiceUnavailable): gone (retrying; rows are marked stale"
        " until the API server answers)"
    )
    # Every retry that fails the same way: nothing more to say.
    assert failed(down, "Error from server (ServiceUnavailable): gone") == (down, None)
    # Another reason is news.
    other, line = failed(down, "GET /apis: Cannot connect to host")
    assert other.reason == "GET /apis: Cannot connect to host"
    assert line is not None
    assert line.startswith("error: GET /apis: Cannot connect to host (retrying")
    assert recovered(other) == (Health(), "the API server answers again: rows are current")
    assert recovered(healthy) == (healthy, None)


def test_failure_reasons_read_as_kubectl_says_them() -> None:
    error = KubeError(503, "ServiceUnavailable", "The server is currently unable to handle it")
    assert reason_of(error) == (
        "Error from server (ServiceUnavailable): The server is currently unable to handle it"
    )
    assert reason_of(KubeUnavailable("GET /apis/x: timed out")) == "GET /apis/x: timed out"
    assert reason_of(KubeUnavailable()) == "KubeUnavailable"
    assert reason_of(ValueError("watch line is not an event")) == "watch line is not an event"


# -- fresh progress (the aggregated API) --------------------------------------------------


def progress_item(
    percent: int, stamp: str, *, uid: str | None = "uid-1", name: str = "tj"
) -> dict[str, Any]:
    """A TrainJobProgress as the server lists it."""
    metadata = {"name": name, "namespace": "team-a", **({"uid": uid} if uid else {})}
    return {
        "kind": resource.KIND,
        "apiVersion": resource.GROUP_VERSION,
        "metadata": metadata,
        "trainerStatus": {
            "progressPercentage": percent,
            "estimatedRemainingSeconds": 60,
            "metrics": [{"name": "loss", "value": "0.1"}],
            "lastUpdatedTime": stamp,
        },
        "stored": False,
    }


def test_a_later_update_replaces_the_stored_figures_and_keeps_state_and_runtime() -> None:
    stored = replace(row_of(full_trainjob()), uid="uid-1")  # 42%, reported at NOW - 90
    newer = fresher(stored, progress_item(60, iso(NOW - 5)))
    assert newer == Row(
        "team-a",
        "tj",
        progress=60,
        eta_seconds=60,
        last_updated=iso(NOW - 5),
        metrics=(("loss", "0.1"),),
        state="Created",
        runtime="torch",
        uid="uid-1",
    )
    # Times compare as times, whatever their form.
    assert fresher(stored, progress_item(61, "2026-12-02T18:32:00.5+00:00")).progress == 61
    # The update the status holds, an older one, or one whose time does not parse: the
    # stored figures stay.
    for stamp in (iso(NOW - 90), "2026-12-02T18:31:55.000Z", iso(NOW - 600), "soon"):
        assert fresher(stored, progress_item(60, stamp)) == stored, stamp
    # Another TrainJob of that name (deleted and made again): not its progress.
    assert fresher(stored, progress_item(60, iso(NOW - 5), uid="uid-2")) == stored
    assert fresher(stored, progress_item(60, iso(NOW - 5), uid=None)).progress == 60
    # A row without a report, or with a time that does not parse, takes one that does.
    assert fresher(Row("team-a", "tj"), progress_item(60, iso(NOW - 5))).progress == 60
    unparsed = replace(stored, last_updated="soon")
    assert fresher(unparsed, progress_item(60, iso(NOW - 5))).progress == 60
    # Not a progress at all.
    odd: list[Any] = [None, "x", {}, {"trainerStatus": "x"}, {"trainerStatus": {"x": 1}}]
    for item in odd:
        assert fresher(stored, item) == stored, item


def test_fresh_progress_falls_back_to_the_status_and_says_why_once() -> None:
    start = fresh.Source()
    # Not registered: nothing to say, and nothing to ask again.
    assert fresh.failed(start, 404) == (fresh.Source(asking=False), None)
    refused, line = fresh.failed(start, 403)
    assert refused.asking
    assert line == "fresh progress unavailable (403 Forbidden): showing stored status"
    assert fresh.failed(refused, 403) == (refused, None)  # every later read: said
    down, line = fresh.failed(refused, 503)
    assert line == "fresh progress unavailable (503 Service Unavailable): showing stored status"
    why = "cannot connect to the API server at 10.0.0.1:6443: connection refused"
    lost, line = fresh.failed(down, None, why)
    assert line == f"fresh progress unavailable ({why}): showing stored status"
    assert (
        fresh.failed(lost, None)[1]
        == "fresh progress unavailable (no answer): showing stored status"
    )
    assert fresh.failed(start, 599)[1] == "fresh progress unavailable (599): showing stored status"
    # Back: said when a failure was told, and the next failure is told again.
    assert fresh.answered(down) == (fresh.Source(), "fresh progress available again")
    assert fresh.answered(start) == (start, None)
    # A 403 where the group-version is not discovered: no API to refuse.
    assert [fresh.refusal_status(code) for code in (404, None, 503, 403)] == [404, 403, 403, 403]


def test_progress_items_by_trainjob_and_the_rows_they_change() -> None:
    items = [progress_item(60, iso(NOW - 5)), progress_item(7, iso(NOW), name="other")]
    junk = [
        "x",
        {"metadata": "x"},
        {"metadata": {"name": "n"}},
        {"metadata": {"namespace": "a", "name": 1}},
    ]
    found = fresh.by_trainjob({"items": [*items, *junk]})
    assert found == {("team-a", "tj"): items[0], ("team-a", "other"): items[1]}
    odd: list[Any] = [None, [], {"items": "x"}, {}]
    for listed in odd:
        assert fresh.by_trainjob(listed) == {}
    rows = [row_of(full_trainjob()), Row("team-a", "other"), Row("team-a", "quiet")]
    changed = fresh.changed_rows(rows, {}, found)
    assert [(row.name, row.progress) for row in changed] == [("tj", 60), ("other", 7)]
    # The status caught up: nothing shown changes.
    assert fresh.changed_rows(rows, found, found) == []
    older = {("team-a", "tj"): progress_item(10, iso(NOW - 600))}
    assert fresh.changed_rows(rows[:1], {}, older) == []
    # Gone (the API failed): back to the stored figures.
    assert [row.progress for row in fresh.changed_rows(rows, found, {})] == [42, None]


class Answers(PluginClient):
    """Answers ``get_json`` by path: an object, an error to raise, or no answer."""

    def __init__(self, answers: dict[str, Any]) -> None:
        super().__init__(None)
        self.answers = answers
        self.asked: list[str] = []

    async def get_json(self, path: str, query: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
        self.asked.append(path)
        answer = self.answers[path]
        if isinstance(answer, Exception):
            raise answer
        if answer is None:
            await asyncio.sleep(3600)
        assert isinstance(answer, dict)
        return answer


LIST = fresh.PROGRESSES.path("team-a")


def forbidden() -> KubeError:
    return KubeError(403, "Forbidden", "cannot list resource")


async def test_reads_fall_back_say_why_once_and_stop_where_there_is_no_api() -> None:
    told: list[str] = []
    listed = {"items": [progress_item(60, iso(NOW))]}
    client = Answers({LIST: KubeError(503, "ServiceUnavailable", "service unavailable")})
    reads = fresh.Freshness(client, "team-a", told.append, timeout=0.2)
    assert await reads.read() == {}
    assert await reads.read() == {}
    client.answers[LIST] = listed
    assert await reads.read() == {}
    assert reads.row(Row("team-a", "tj")).progress == 60
    client.answers[LIST] = None  # no answer
    assert await reads.read() == fresh.by_trainjob(listed)
    assert reads.progress == {}
    client.answers[LIST] = KubeUnavailable("GET /apis/x: timed out")
    await reads.read()
    assert told == [
        "fresh progress unavailable (503 Service Unavailable): showing stored status",
        "fresh progress available again",
        "fresh progress unavailable (no answer within 0.2s): showing stored status",
        "fresh progress unavailable (GET /apis/x: timed out): showing stored status",
    ]
    # Refused: told where the API is there (or may be: its discovery fails), silent and
    # not asked again where it is not.
    told.clear()
    client.answers |= {LIST: forbidden(), fresh.DISCOVERY: {"kind": "APIResourceList"}}
    await reads.read()
    client.answers[fresh.DISCOVERY] = KubeError(503, "ServiceUnavailable", "")
    await reads.read()
    assert told == ["fresh progress unavailable (403 Forbidden): showing stored status"]
    client.answers[fresh.DISCOVERY] = KubeError(404, "NotFound", "404 page not found")
    await reads.read()
    assert (reads.source.asking, reads.progress) == (False, {})
    client.asked.clear()
    await reads.read()
    await reads.run(lambda before: None, interval=0)  # returns: nothing to ask
    assert client.asked == []
    assert len(told) == 1


async def test_a_watch_reads_again_and_hears_each_change() -> None:
    client = Answers({LIST: {"items": []}})
    reads = fresh.Freshness(client, "team-a", lambda line: None)
    heard: list[dict[Any, Any]] = []
    paused = [True]
    task = asyncio.create_task(
        reads.run(
            lambda before: heard.append(dict(before)), paused=lambda: paused[0], interval=0.01
        )
    )
    try:
        await asyncio.sleep(0.05)
        assert client.asked == []  # paused: the TrainJob watch is down and says so
        paused[0] = False
        await until(lambda: len(client.asked) > 2)
        assert heard == []  # the same answer: no change
        client.answers[LIST] = {"items": [progress_item(60, iso(NOW))]}
        await until(lambda: bool(heard))
        assert heard == [{}]
        client.answers[LIST] = KubeError(404, "NotFound", "")
        await asyncio.wait_for(task, 5)  # not registered any more: done
    finally:
        task.cancel()
    assert heard[-1] == fresh.by_trainjob({"items": [progress_item(60, iso(NOW))]})


# What a hostile writer may put in any string the plugin prints: a screen clear, a
# recolour, a terminal hyperlink, a window title, Rich markup, a bidi override, NUL.
HOSTILE = (
    "\x1b[2J\x1b[H\x1b]8;;http://evil.example/\x07click\x1b]8;;\x07"
    "\x1b]0;title\x1b\\[red]x[/red][link=http://e]y[/link]\u202ez\x00\x9b31m\x7f!"
)
SHOWN = "click[red]x[/red][link=http://e]y[/link]z!"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("plain λόγος 🚀", "plain λόγος 🚀"),
        ("\x1b[31mred\x1b[0m", "red"),
        ("\x1b[2J\x1b[3J\x1bc", ""),
        ("\x1b]8;;http://x/\x07link\x1b]8;;\x07", "link"),
        ("\x1b]8;;http://x/\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x1b]0;title", ""),
        ("\x9b2J\x9d0;t\x9cok", "ok"),
        ("\x1bP+q\x1b\\dcs", "dcs"),
        ("a\tb\nc\rd\x85e\u2028f", "a b c d e f"),
        ("\u202eevil\u202c \u2066x\u2069 \u200f", "evil x "),
        ("nul\x00bel\x07del\x7fc1\x80", "nulbeldelc1"),
        ("[bold]markup[/bold]", "[bold]markup[/bold]"),
        ("lone\ud800", "lone"),
        (HOSTILE, SHOWN),
    ],
)
def test_printable_drops_escape_sequences_and_controls(raw: str, shown: str) -> None:
    assert printable(raw) == shown


def no_control_bytes(text: str) -> bool:
    """Nothing but line feeds below the space, no DEL, C1, bidi control or ESC."""
    return not any(
        (ord(ch) < 0x20 and ch != "\n")
        or 0x7F <= ord(ch) <= 0x9F
        or ch in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
        for ch in text
    )


def test_the_table_shows_hostile_strings_literally_and_without_controls() -> None:
    row = Row(
        "team-a",
        "tj",
        progress=5,
        last_updated=HOSTILE,
        metrics=(("loss", HOSTILE), ("acc", "[red]0.9[/red]")),
    )
    console = Console(file=io.StringIO(), width=400, force_terminal=True, color_system="truecolor")
    console.print(table([row], metrics=["loss", "acc", "[b]col[/b]"], all_namespaces=True, now=NOW))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    # A terminal console styles the bar and headers itself; nothing else may.
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert no_control_bytes(plain)
    for raw in ("\x1b]", "\x1b[2J", "\x1b[H"):
        assert raw not in out
    assert f"{SHOWN}   {SHOWN}   [red]0.9[/red]   -" in plain
    assert "[b]col[/b]" in plain


def test_yaml_escapes_bidi_controls_and_keeps_other_text_as_is() -> None:
    assert yaml_text({"m": "λόγος"}) == "m: λόγος\n"
    assert yaml_text({"m": "\u202eλ", "n": "\x1b"}) == 'm: "\\u202E\\u03BB"\nn: "\\e"\n'
    assert yaml.safe_load(yaml_text({"m": "\u202eλ"})) == {"m": "\u202eλ"}


def test_kubeconfig_is_found_as_kubectl_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    default = str(tmp_path / ".kube" / "config")
    assert kubeconfig_file("/given", {"KUBECONFIG": "/env"}) == "/given"
    assert kubeconfig_file(None, {"KUBECONFIG": "/a:/b"}) == "/a:/b"
    assert kubeconfig_file(None, {}) == default
    # In a pod with no kubeconfig: the pod's service account.
    assert kubeconfig_file(None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) is None
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("{}")
    assert kubeconfig_file(None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == default


# -- through kubectl -------------------------------------------------------------------------


@dataclass
class Result:
    code: int
    out: str
    err: str


_WITH_DEFAULT_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


class Kubectl:
    """The real kubectl with the plugin on PATH (a wrapper running this checkout's module)."""

    def __init__(self, cluster: KubeAPI, home: Path) -> None:
        bin_dir = home / "bin"
        bin_dir.mkdir()
        self.plugin = bin_dir / "kubectl-trainjob"
        self.plugin.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kubectl_trainjob "$@"\n')
        self.plugin.chmod(0o755)
        self.env = {
            # `kubectl plugin list` warns about every PATH entry it cannot read (a Go
            # toolchain's bin folder that nothing was installed into yet, say).
            "PATH": os.pathsep.join(
                [
                    str(bin_dir),
                    *(p for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.isdir(p)),
                ]
            ),
            "HOME": str(home),
            "KUBECONFIG": str(cluster.kubeconfig_path),
        }
        # A checkout put on the path rather than installed: the plugin runs from it too.
        if "PYTHONPATH" in os.environ:
            self.env["PYTHONPATH"] = os.environ["PYTHONPATH"]

    async def start(
        self, *args: str, env: dict[str, str] | None = None, stdout: int = asyncio.subprocess.PIPE
    ) -> asyncio.subprocess.Process:
        # Not blocking the event loop: the devcluster serves from this same loop. kubectl
        # starts with Ctrl-C's default action, as in a terminal, even when this test run
        # ignores SIGINT (a background job of a non-interactive shell does, and ignored
        # signals stay ignored across exec: the plugin would never hear its Ctrl-C).
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _WITH_DEFAULT_SIGINT,
            "kubectl",
            *args,
            stdout=stdout,
            stderr=asyncio.subprocess.PIPE,
            env={**self.env, **(env or {})},
        )

    async def run(self, *args: str, env: dict[str, str] | None = None) -> Result:
        proc = await self.start(*args, env=env)
        out, err = await proc.communicate()
        assert proc.returncode is not None
        return Result(proc.returncode, out.decode(), err.decode())

    async def ok(self, *args: str) -> str:
        result = await self.run(*args)
        assert (result.code, result.err) == (0, ""), result.err
        return result.out


@pytest_asyncio.fixture
async def kubectl(kube_api: KubeAPI, tmp_path: Path) -> Kubectl:
    return Kubectl(kube_api, tmp_path)


@pytest_asyncio.fixture
async def kube(kube_api: KubeAPI) -> AsyncIterator[KubeClient]:
    async with KubeClient(kube_api.kubeconfig_path, qps=1000, burst=1000, timeout=5) as client:
        yield client


async def report(kube: KubeClient, namespace: str, name: str, **status: Any) -> None:
    """Write a trainerStatus as a trainer's post would end up."""
    await kube.apply_trainjob_status(namespace, name, status)


@pytest_asyncio.fixture
async def jobs(kube_api: KubeAPI, kube: KubeClient) -> float:
    """team-a/tj-a reported an hour ago and was created, team-a/tj-b never reported;
    team-b/tj-c is done and complete."""
    for namespace, name in (("team-a", "tj-a"), ("team-a", "tj-b"), ("team-b", "tj-c")):
        kube_api.create_trainjob(namespace, name)
    now = dt.datetime.now(dt.UTC).timestamp()
    await report(
        kube,
        "team-a",
        "tj-a",
        progressPercentage=42,
        estimatedRemainingSeconds=3700,
        lastUpdatedTime=iso(now - 3600),
        metrics=[{"name": "loss", "value": "0.25"}, {"name": "acc", "value": "0.9"}],
    )
    done = {"progressPercentage": 100, "estimatedRemainingSeconds": 0}
    await report(kube, "team-b", "tj-c", **done, lastUpdatedTime=iso(now - 3600))
    set_conditions(kube_api, "team-a", "tj-a", {"type": "Created", "status": "True"})
    set_conditions(
        kube_api,
        "team-b",
        "tj-c",
        {"type": "Created", "status": "True"},
        {"type": "Complete", "status": "True"},
    )
    return now


def set_conditions(
    cluster: KubeAPI, namespace: str, name: str, *conditions: dict[str, str]
) -> None:
    """What the Trainer's controller does: write ``status.conditions`` (stored and
    watched), leaving the rest of the status as it is."""
    if isinstance(cluster, RealCluster):
        # Through the API, with the fields metav1.Condition requires there.
        full = [
            {"lastTransitionTime": cluster.now(), "reason": c["type"], "message": "", **c}
            for c in conditions
        ]
        path = cluster.path("trainjobs", namespace, name, GROUP) + "/status"
        patch = {"status": {"conditions": full}}
        cluster.call("PATCH", path, patch, content_type="application/merge-patch+json")
        return
    qualified = cluster.resource("trainjobs", GROUP).qualified
    old = cluster.store.get(qualified, namespace, name)
    assert old is not None
    status = {**old.get("status", {}), "conditions": list(conditions)}
    new = {**old, "metadata": dict(old["metadata"]), "status": status}
    cluster.store.update(qualified, new, old)


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
class TestThroughKubectl:
    async def test_kubectl_finds_the_plugin(self, kubectl: Kubectl) -> None:
        out = await kubectl.ok("plugin", "list")
        assert str(kubectl.plugin) in out
        help_text = await kubectl.ok("trainjob", "progress", "--help")
        assert "usage: kubectl trainjob progress" in help_text

    @on_real_server
    async def test_table_of_a_namespace_with_chosen_metrics(
        self, kubectl: Kubectl, jobs: float
    ) -> None:
        out = await kubectl.ok("trainjob", "progress", "-n", "team-a", "--metric", "acc")
        assert out.splitlines() == [
            "NAME   STATE     PROGRESS                    ETA   UPDATED   acc",
            "tj-a   Created   ████████░░░░░░░░░░░░  42%   61m   60m ago   0.9",
            "tj-b   -         -                           -     -         -",
        ]

    @on_real_server
    async def test_all_namespaces_and_names(self, kubectl: Kubectl, jobs: float) -> None:
        # The metrics reported are shown without asking.
        out = await kubectl.ok("trainjob", "progress", "-A")
        assert out.splitlines() == [
            "NAMESPACE   NAME   STATE      PROGRESS                    ETA   UPDATED   loss   acc",
            "team-a      tj-a   Created    ████████░░░░░░░░░░░░  42%   61m   60m ago   0.25   0.9",
            "team-a      tj-b   -          -                           -     -         -      -",
            "team-b      tj-c   Complete   ████████████████████ 100%   0s    60m ago   -      -",
        ]
        out = await kubectl.ok("trainjob", "progress", "-n", "team-a", "tj-b")
        assert out.splitlines() == [
            "NAME   STATE   PROGRESS   ETA   UPDATED",
            "tj-b   -       -          -     -",
        ]

    @on_real_server
    async def test_json_and_yaml_for_scripts(self, kubectl: Kubectl, jobs: float) -> None:
        out = await kubectl.ok(
            "trainjob", "progress", "-n", "team-a", "-o", "json", "--metric", "acc"
        )
        assert json.loads(out) == {
            "items": [
                {
                    "namespace": "team-a",
                    "name": "tj-a",
                    "state": "Created",
                    "runtime": "torch-distributed",
                    "progressPercentage": 42,
                    "estimatedRemainingSeconds": 3700,
                    "lastUpdatedTime": iso(jobs - 3600),
                    "metrics": [{"name": "acc", "value": "0.9"}],
                },
                {
                    "namespace": "team-a",
                    "name": "tj-b",
                    "state": None,
                    "runtime": "torch-distributed",
                    "progressPercentage": None,
                    "estimatedRemainingSeconds": None,
                    "lastUpdatedTime": None,
                    "metrics": [],
                },
            ]
        }
        out = await kubectl.ok("trainjob", "progress", "-A", "-o", "yaml", "tj-c")
        assert yaml.safe_load(out) == {
            "items": [
                {
                    "namespace": "team-b",
                    "name": "tj-c",
                    "state": "Complete",
                    "runtime": "torch-distributed",
                    "progressPercentage": 100,
                    "estimatedRemainingSeconds": 0,
                    "lastUpdatedTime": iso(jobs - 3600),
                    "metrics": [],
                }
            ]
        }

    async def test_context_and_kubeconfig_flags(
        self, kubectl: Kubectl, devcluster: DevCluster, jobs: float, tmp_path: Path
    ) -> None:
        # Another file: its current context points nowhere, context "b" at team-b.
        config = yaml.safe_load(devcluster.kubeconfig_path.read_text())
        good = config["contexts"][0]["context"]
        config["clusters"].append({"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}})
        config["contexts"] = [
            {"name": "broken", "context": {**good, "cluster": "nowhere"}},
            {"name": "b", "context": {**good, "namespace": "team-b"}},
        ]
        config["current-context"] = "broken"
        other = tmp_path / "other.kubeconfig"
        other.write_text(yaml.safe_dump(config))
        out = await kubectl.ok("trainjob", "progress", "--kubeconfig", str(other), "--context", "b")
        assert out.splitlines() == [
            "NAME   STATE      PROGRESS                    ETA   UPDATED",
            "tj-c   Complete   ████████████████████ 100%   0s    60m ago",
        ]
        # From KUBECONFIG, as kubectl passes it on.
        result = await kubectl.run(
            "trainjob", "progress", "--context", "b", env={"KUBECONFIG": str(other)}
        )
        assert (result.code, result.out.splitlines()[1].split()[0]) == (0, "tj-c")
        broken = await kubectl.run("trainjob", "progress", "--kubeconfig", str(other))
        assert broken.code == 1
        assert (
            broken.err
            == "error: cannot connect to the API server at 127.0.0.1:1: connection refused\n"
        )

    async def test_errors_and_empty_answers(self, kubectl: Kubectl, jobs: float) -> None:
        unknown = await kubectl.run("trainjob", "progress", "--context", "nope")
        assert unknown.code == 1
        assert unknown.out == ""
        assert unknown.err.startswith("error: cannot load kubeconfig: ")
        assert "nope" in unknown.err
        empty = await kubectl.run("trainjob", "progress", "-n", "empty")
        assert (empty.code, empty.out, empty.err) == (
            0,
            "",
            "No resources found in empty namespace.\n",
        )
        assert json.loads(
            await kubectl.ok("trainjob", "progress", "-n", "empty", "-o", "json")
        ) == {"items": []}
        # As kubectl takes them: -A wins over -n.
        both = await kubectl.run("trainjob", "progress", "-n", "empty", "-A")
        assert both.code == 0, both.err
        assert both.out == await kubectl.ok("trainjob", "progress", "-A")
        version = await kubectl.run("trainjob", "version")
        assert (version.code, version.err) == (0, "")
        assert version.out == (await kubectl.run("trainjob", "--version")).out
        assert version.out.startswith("kubectl-trainjob ")

    async def test_hostile_cluster_strings_print_literally_and_without_controls(
        self, kubectl: Kubectl, kube: KubeClient, devcluster: DevCluster
    ) -> None:
        devcluster.create_trainjob("team-a", "evil")
        metrics = [
            {"name": "note", "value": HOSTILE[:64]},
            {"name": HOSTILE[:64], "value": "1"},
            {"name": "bidi", "value": "\u202eevil λ"},
        ]
        await report(
            kube,
            "team-a",
            "evil",
            progressPercentage=1,
            lastUpdatedTime="2026-12-02T18:33:25Z",
            metrics=metrics,
        )
        shown = printable(HOSTILE[:64])
        out = await kubectl.ok("trainjob", "progress", "-n", "team-a", "--metric", "note")
        assert no_control_bytes(out)
        assert out.splitlines()[1].endswith(f"   {shown}")
        assert shown == "click[red]x[/r"  # the markup, cut at 64 characters, as text
        # Scripts get the stored strings exactly, escaped by JSON and YAML themselves.
        for fmt, load in (("json", json.loads), ("yaml", yaml.safe_load)):
            out = await kubectl.ok("trainjob", "progress", "-n", "team-a", "-o", fmt)
            for raw in ("\x1b", "\x00", "\x07", "\x7f", "\x9b", "\u202e"):
                assert raw not in out
            assert load(out)["items"][0]["metrics"] == metrics

    async def test_a_refusal_is_the_apis_message(
        self, kubectl: Kubectl, devcluster: DevCluster, jobs: float, tmp_path: Path
    ) -> None:
        # A service account without RBAC rights to TrainJobs.
        token = devcluster.request_token("team-a", "default", [devcluster.issuer])
        config = yaml.safe_load(devcluster.kubeconfig_path.read_text())
        config["users"][0]["user"] = {"token": token}
        limited = tmp_path / "limited.kubeconfig"
        limited.write_text(yaml.safe_dump(config))
        refused = await kubectl.run(
            "trainjob", "progress", "-n", "team-a", "--kubeconfig", str(limited)
        )
        assert refused.code == 1
        assert refused.out == ""
        assert refused.err == (
            "Error from server (Forbidden): trainjobs.trainer.kubeflow.org is forbidden: User "
            '"system:serviceaccount:team-a:default" cannot list resource "trainjobs" in API group '
            '"trainer.kubeflow.org" in the namespace "team-a"\n'
        )

    async def test_watch_redraws_the_table_on_each_change(
        self, kubectl: Kubectl, kube: KubeClient, devcluster: DevCluster, jobs: float
    ) -> None:
        proc = await kubectl.start("trainjob", "progress", "-n", "team-a", "-w")
        assert proc.stdout is not None
        first = await read_table(proc.stdout)
        assert [line.split()[:3] for line in first[1:]] == [
            ["tj-a", "Created", "████████░░░░░░░░░░░░"],
            ["tj-b", "-", "-"],
        ]
        await report(kube, "team-a", "tj-b", progressPercentage=100, lastUpdatedTime=iso(jobs))
        second = await read_table(proc.stdout)
        assert second[2].split()[:4] == ["tj-b", "-", "████████████████████", "100%"]
        devcluster.delete("trainjobs", "team-a", "tj-a", GROUP)
        third = await read_table(proc.stdout)
        assert [line.split()[0] for line in third[1:]] == ["tj-b"]
        assert await interrupted(proc) == (130, "")

    async def test_wide_selector_and_sort_by(
        self, kubectl: Kubectl, kube: KubeClient, devcluster: DevCluster, jobs: float
    ) -> None:
        for name, team, runtime in (("x-1", "x", "jax"), ("x-2", "x", "torch"), ("y-1", "y", "t")):
            body = {
                "apiVersion": f"{GROUP}/v1alpha1",
                "kind": "TrainJob",
                "metadata": {"name": name, "labels": {"team": team}},
                "spec": {"runtimeRef": {"name": runtime, "kind": "TrainingRuntime"}},
            }
            devcluster.create("trainjobs", body, "team-a", GROUP)
        metrics = [{"name": n, "value": v} for n, v in (("a", "1"), ("b", "2"), ("c", "3"))]
        metrics.append({"name": "d", "value": "4"})
        stamp = iso(jobs - 3600)
        await report(
            kube, "team-a", "x-2", progressPercentage=5, metrics=metrics, lastUpdatedTime=stamp
        )
        await report(kube, "team-a", "x-1", progressPercentage=70, lastUpdatedTime=stamp)
        out = await kubectl.ok("trainjob", "progress", "-n", "team-a", "-l", "team=x")
        # The first three metrics reported, by default.
        assert out.splitlines() == [
            "NAME   STATE   PROGRESS                    ETA   UPDATED   a   b   c",
            "x-1    -       ██████████████░░░░░░  70%   -     60m ago   -   -   -",
            "x-2    -       █░░░░░░░░░░░░░░░░░░░   5%   -     60m ago   1   2   3",
        ]
        out = await kubectl.ok(
            "trainjob", "progress", "-n", "team-a", "--selector", "team", "-o", "wide",
            "--sort-by", "progress",
        )  # fmt: skip
        assert out.splitlines() == [
            "NAME   STATE   PROGRESS                    ETA   UPDATED   RUNTIME   a   b   c   d",
            "x-2    -       █░░░░░░░░░░░░░░░░░░░   5%   -     60m ago   torch     1   2   3   4",
            "x-1    -       ██████████████░░░░░░  70%   -     60m ago   jax       -   -   -   -",
            "y-1    -       -                           -     -         t         -   -   -   -",
        ]
        out = await kubectl.ok(
            "trainjob", "progress", "-n", "team-a", "-l", "team in (x,y)", "--sort-by",
            "metric:d", "-o", "json",
        )  # fmt: skip
        assert [item["name"] for item in json.loads(out)["items"]] == ["x-2", "x-1", "y-1"]
        none = await kubectl.run("trainjob", "progress", "-n", "team-a", "-l", "team=z")
        assert (none.code, none.out, none.err) == (
            0,
            "",
            "No resources found in team-a namespace.\n",
        )
        bad = await kubectl.run("trainjob", "progress", "--sort-by", "size")
        assert bad.code == 2
        assert bad.err.endswith(
            "argument --sort-by: 'size' is none of name, state, runtime, progress, eta, updated"
            " or metric:NAME\n"
        )

    async def test_watch_marks_rows_stale_while_the_api_server_is_gone_and_recovers(
        self, kubectl: Kubectl, kube: KubeClient, devcluster: DevCluster, jobs: float
    ) -> None:
        proc = await kubectl.start("trainjob", "progress", "-n", "team-a", "-w", "--metric", "x")
        assert proc.stdout is not None
        assert proc.stderr is not None
        first = await read_table(proc.stdout)
        assert [line.split()[:2] for line in first[1:]] == [["tj-a", "Created"], ["tj-b", "-"]]
        # The API server stops answering.
        await take_the_api_away(devcluster)
        reason = await read_line(proc.stderr)
        assert reason == (
            "error: Error from server (ServiceUnavailable): The server is currently unable to"
            " handle the request (retrying; rows are marked stale until the API server"
            " answers)\n"
        )
        stale = await read_table(proc.stdout)
        assert [line.split()[:3] for line in stale] == [
            ["NAME", "STATE", "PROGRESS"],
            ["tj-a", "Created", "(stale)"],
            ["tj-b", "-", "(stale)"],
        ]
        # Meanwhile the cluster changes, and the plugin keeps trying.
        devcluster.delete("trainjobs", "team-a", "tj-a", GROUP)
        devcluster.create_trainjob("team-a", "tj-new")
        lists = devcluster.faults.count("list", "trainjobs")
        await until(lambda: devcluster.faults.count("list", "trainjobs") >= lists + 2)
        # Back: one fresh table (no table, header or line per retry before it), current.
        devcluster.faults.clear()
        assert await read_line(proc.stderr) == "the API server answers again: rows are current\n"
        back = await read_table(proc.stdout)
        assert [line.split()[:3] for line in back] == [
            ["NAME", "STATE", "PROGRESS"],
            ["tj-b", "-", "-"],
            ["tj-new", "-", "-"],
        ]
        # And the watch follows changes again.
        await report(kube, "team-a", "tj-new", progressPercentage=100, lastUpdatedTime=iso(jobs))
        after = await read_table(proc.stdout)
        assert after[2].split()[:4] == ["tj-new", "-", "████████████████████", "100%"]
        assert await interrupted(proc) == (130, "")

    async def test_on_a_terminal_the_live_table_is_marked_and_stderr_says_why(
        self, kubectl: Kubectl, devcluster: DevCluster, jobs: float
    ) -> None:
        # stdout a terminal (the table redrawn in place), stderr a file: the reason goes
        # to stderr, not into the table.
        screen = Screen()
        try:
            proc = await kubectl.start(
                "trainjob", "progress", "-n", "team-a", "-w", stdout=screen.child,
                env={"COLUMNS": "120", "TERM": "xterm"},
            )  # fmt: skip
            assert proc.stderr is not None
            await screen.shows(lambda frame: "tj-b" in frame)
            await take_the_api_away(devcluster)
            assert (await read_line(proc.stderr)).startswith(
                "error: Error from server (ServiceUnavailable): "
            )
            stale = await screen.shows(lambda frame: "- (stale)" in frame)
            assert "Created (stale)" in stale
            devcluster.delete("trainjobs", "team-a", "tj-a", GROUP)
            devcluster.faults.clear()
            assert (
                await read_line(proc.stderr) == "the API server answers again: rows are current\n"
            )
            # Redrawn without the marks and without the TrainJob deleted meanwhile; the
            # reason never went into the table.
            back = await screen.shows(lambda frame: "tj-b" in frame and "tj-a" not in frame)
            assert "stale" not in back
            assert "error" not in screen.text
            assert await interrupted(proc) == (130, "")
        finally:
            screen.close()

    async def test_watch_documents_resume_after_the_api_server_is_back(
        self, kubectl: Kubectl, devcluster: DevCluster, jobs: float
    ) -> None:
        proc = await kubectl.start("trainjob", "progress", "-n", "team-a", "-w", "-o", "json")
        assert proc.stdout is not None
        assert proc.stderr is not None
        seen = [json.loads(await read_line(proc.stdout)) for _ in range(2)]
        assert sorted((d["type"], d["name"]) for d in seen) == [
            ("ADDED", "tj-a"),
            ("ADDED", "tj-b"),
        ]
        await take_the_api_away(devcluster)
        assert (await read_line(proc.stderr)).startswith(
            "error: Error from server (ServiceUnavailable): "
        )
        devcluster.delete("trainjobs", "team-a", "tj-a", GROUP)
        devcluster.faults.clear()
        assert await read_line(proc.stderr) == "the API server answers again: rows are current\n"
        # What changed while it was away, from the fresh list: documents only.
        deleted = json.loads(await read_line(proc.stdout))
        assert (deleted["type"], deleted["name"]) == ("DELETED", "tj-a")
        assert await interrupted(proc) == (130, "")

    async def test_watch_prints_one_document_per_change(
        self, kubectl: Kubectl, kube: KubeClient, devcluster: DevCluster, jobs: float
    ) -> None:
        proc = await kubectl.start("trainjob", "progress", "-n", "team-a", "-w", "-o", "json")
        assert proc.stdout is not None
        seen = [json.loads(await read_line(proc.stdout)) for _ in range(2)]
        assert sorted((d["type"], d["name"], d["progressPercentage"]) for d in seen) == [
            ("ADDED", "tj-a", 42),
            ("ADDED", "tj-b", None),
        ]
        await report(kube, "team-a", "tj-b", progressPercentage=7, lastUpdatedTime=iso(jobs))
        changed = json.loads(await read_line(proc.stdout))
        assert (changed["type"], changed["name"], changed["progressPercentage"]) == (
            "MODIFIED",
            "tj-b",
            7,
        )
        devcluster.delete("trainjobs", "team-a", "tj-b", GROUP)
        deleted = json.loads(await read_line(proc.stdout))
        assert (deleted["type"], deleted["name"]) == ("DELETED", "tj-b")
        assert await interrupted(proc) == (130, "")


on_the_real_server = pytest.mark.parametrize("kube_api", ["real"], indirect=True)
UNAVAILABLE = "fresh progress unavailable ({}): showing stored status\n"


@dataclass
class Pending:
    """A status server whose writes wait a minute after the first, and TrainJob llama:
    10% stored, 42% accepted but not written yet."""

    server: StatusServer
    session: aiohttp.ClientSession
    port: int

    async def post(self, body: bytes) -> None:
        assert await replicas.post(self.session, self.server.url, "llama", body) == 200


@pytest_asyncio.fixture
async def pending(
    kube_api: KubeAPI,
    serving_certs: ServingCerts,
    make_status_server: MakeStatusServer,
    unused_tcp_port: int,
) -> AsyncIterator[Pending]:
    kube_api.create_trainjob(NS, "llama")
    set_conditions(kube_api, NS, "llama", {"type": "Created", "status": "True"})
    connector = aiohttp.TCPConnector(ssl=serving_certs.client_context())
    async with (
        make_status_server(
            host="0.0.0.0", progress_api_port=unused_tcp_port, min_write_interval=60.0
        ) as server,
        aiohttp.ClientSession(connector=connector) as session,
    ):
        handle = Pending(server, session, unused_tcp_port)
        await handle.post(replicas.update(10, 1))
        await soon(lambda: replicas.stored_progress(kube_api, "llama") == 10, "the first write")
        await handle.post(replicas.update(42, 2))
        yield handle


def figures(out: str) -> list[list[str]]:
    """Each row's NAME, STATE, bar and percentage."""
    return [line.split()[:4] for line in out.splitlines()[1:]]


TEN, FORTY_TWO = "██░░░░░░░░░░░░░░░░░░", "████████░░░░░░░░░░░░"


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
class TestFreshProgress:
    """The figures of an update the server accepted but has not written yet, read from
    its aggregated API through kube-apiserver; the stored ones where it is not there."""

    @on_the_real_server
    async def test_progress_shows_the_update_whose_write_is_pending(
        self,
        kube_api: RealCluster,
        kubectl: Kubectl,
        serving_certs: ServingCerts,
        pending: Pending,
    ) -> None:
        register(kube_api, serving_certs, replicas.machine_address(), pending.port)
        try:
            await soon(lambda: available(kube_api), "the APIService is Available", 30)
            out = await kubectl.ok("trainjob", "progress", "-n", NS)
            # The state is the TrainJob's; the figures are the newer update's.
            assert figures(out) == [["llama", "Created", FORTY_TWO, "42%"]]
            documents = json.loads(await kubectl.ok("trainjob", "progress", "-A", "-o", "json"))
            (document,) = documents["items"]
            assert (document["state"], document["progressPercentage"]) == ("Created", 42)
            assert document["lastUpdatedTime"] == "2026-12-01T10:00:02Z"
            # The TrainJob's status still holds the first.
            assert replicas.stored_progress(kube_api, "llama") == 10

            # With -w, a newer update shows within a read or two, no TrainJob event needed.
            proc = await kubectl.start("trainjob", "progress", "-n", NS, "-w")
            assert proc.stdout is not None
            assert figures("\n".join(await read_table(proc.stdout))) == [
                ["llama", "Created", FORTY_TWO, "42%"]
            ]
            await pending.post(replicas.update(77, 3))
            later = await read_table(proc.stdout)
            assert later[1].split()[3] == "77%"
            assert replicas.stored_progress(kube_api, "llama") == 10
            assert await interrupted(proc) == (130, "")
        finally:
            unregister(kube_api)

    @on_real_server
    async def test_without_the_apiservice_the_status_is_shown_and_nothing_said(
        self, kube_api: KubeAPI, kubectl: Kubectl, pending: Pending
    ) -> None:
        out = await kubectl.ok("trainjob", "progress", "-n", NS)
        assert figures(out) == [["llama", "Created", TEN, "10%"]]
        documents = json.loads(await kubectl.ok("trainjob", "progress", "-o", "json", "-n", NS))
        assert documents["items"][0]["lastUpdatedTime"] == "2026-12-01T10:00:01Z"

    @on_the_real_server
    async def test_a_refusal_or_an_outage_is_said_once_and_the_status_shown(
        self,
        kube_api: RealCluster,
        kubectl: Kubectl,
        kube: KubeClient,
        serving_certs: ServingCerts,
        unused_tcp_port: int,
        tmp_path: Path,
    ) -> None:
        kube_api.create_trainjob(NS, "llama")
        await report(kube, NS, "llama", progressPercentage=10, lastUpdatedTime=iso(0))
        reader = reader_kubeconfig(kube_api, tmp_path)
        # May read TrainJobs, not their progress, of an API that is not there: no news.
        out = await kubectl.ok("trainjob", "progress", "-n", NS, "--kubeconfig", str(reader))
        assert figures(out) == [["llama", "-", TEN, "10%"]]
        # Registered, but nothing serves it (a server that is down).
        register(kube_api, serving_certs, replicas.machine_address(), unused_tcp_port)
        try:

            async def unavailable() -> bool:
                try:
                    await kube.request_json("GET", PROGRESS)
                except ServerKubeError as exc:
                    return exc.status == 503
                return False

            await eventually(unavailable, "the APIService's reads answer 503", 30)
            for kubeconfig, reason in (
                (kube_api.kubeconfig_path, "503 Service Unavailable"),
                (reader, "403 Forbidden"),
            ):
                result = await kubectl.run(
                    "trainjob", "progress", "-n", NS, "--kubeconfig", str(kubeconfig)
                )
                assert (result.code, result.err) == (0, UNAVAILABLE.format(reason))
                assert figures(result.out) == [["llama", "-", TEN, "10%"]]
        finally:
            unregister(kube_api)


def reader_kubeconfig(cluster: RealCluster, tmp_path: Path) -> Path:
    """A kubeconfig of a service account that may get and list TrainJobs in NS, and
    nothing else."""
    cluster.create("serviceaccounts", {"metadata": {"name": "reader"}}, NS)
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}"
    rule = {"apiGroups": [GROUP], "resources": ["trainjobs"], "verbs": ["get", "list"]}
    cluster.call("POST", f"{rbac}/roles", {"metadata": {"name": "reader"}, "rules": [rule]})
    binding = {
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}],
    }
    cluster.call("POST", f"{rbac}/rolebindings", binding)
    config = yaml.safe_load(cluster.kubeconfig_path.read_text())
    config["users"][0]["user"] = {"token": cluster.request_token(NS, "reader", [cluster.issuer])}
    path = tmp_path / "reader.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


async def interrupted(proc: asyncio.subprocess.Process) -> tuple[int, str]:
    """Ctrl-C, then the exit code and stderr; a process still there 10 s later is killed
    and the test fails with what it wrote to stderr (so none outlives its test)."""
    assert proc.stderr is not None
    proc.send_signal(signal.SIGINT)
    try:
        code = await asyncio.wait_for(proc.wait(), 10)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        err = (await proc.stderr.read()).decode(errors="replace")
        raise AssertionError(f"still running 10 s after SIGINT; its stderr: {err!r}") from None
    return code, (await proc.stderr.read()).decode(errors="replace")


class Screen:
    """A pseudo-terminal for the plugin's stdout; what it draws, read as it comes."""

    def __init__(self) -> None:
        self.parent, self.child = pty.openpty()
        self.text = ""
        self.changed = asyncio.Event()
        asyncio.get_running_loop().add_reader(self.parent, self._read)

    def _read(self) -> None:
        try:
            data = os.read(self.parent, 65536)
        except OSError:  # the other end closed
            data = b""
        self.text += data.decode(errors="replace")
        self.changed.set()

    def frame(self) -> str:
        """The last table drawn (each redraw starts with the header), maybe in part."""
        return self.text[self.text.rfind("NAME") :]

    async def shows(self, check: Callable[[str], bool]) -> str:
        """Wait until the last table drawn satisfies ``check``; that table."""
        async with asyncio.timeout(15):
            while not check(self.frame()):
                self.changed.clear()
                await self.changed.wait()
        return self.frame()

    def close(self) -> None:
        asyncio.get_running_loop().remove_reader(self.parent)
        os.close(self.parent)
        os.close(self.child)


async def take_the_api_away(cluster: DevCluster) -> None:
    """Every list and watch of TrainJobs answers 503 from now on, and the open watch is
    closed: once the plugin has asked again and been refused, it knows."""
    asked = cluster.faults.count("watch", "trainjobs") + cluster.faults.count("list", "trainjobs")
    cluster.faults.fail(503, times=None, resource="trainjobs")

    def refused() -> bool:
        # Closed again each time: a watch opened just before the fault was set, too.
        cluster.drop_watches("trainjobs", GROUP)
        again = cluster.faults.count("watch", "trainjobs") + cluster.faults.count(
            "list", "trainjobs"
        )
        return again > asked

    await until(refused)


async def until(check: Callable[[], bool]) -> None:
    """Wait for ``check`` to hold (the plugin's retries come within seconds)."""
    async with asyncio.timeout(15):
        while not check():
            await asyncio.sleep(0.05)


async def read_line(stream: asyncio.StreamReader) -> str:
    line = await asyncio.wait_for(stream.readline(), 15)
    assert line, "the plugin ended"
    return line.decode()


async def read_table(stream: asyncio.StreamReader) -> list[str]:
    """One table of piped -w output (each ends with a blank line)."""
    lines: list[str] = []
    while line := (await read_line(stream)).rstrip("\n"):
        lines.append(line)
    return lines
