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
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml
from rich.console import Console

from kubectl_trainjob.command import kubeconfig_file
from kubectl_trainjob.follow import Health, failed, reason_of, recovered
from kubectl_trainjob.output import yaml_text
from kubectl_trainjob.rows import (
    Row,
    chosen_metrics,
    document,
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
from trainjob_devcluster import DevCluster
from trainjob_devcluster.harness.pytest_plugin import KubeAPI, on_both_servers
from trainjob_devcluster.harness.realcluster import RealCluster
from trainjob_status.contract import GROUP
from trainjob_status_server.kube import KubeClient
from trainjob_status_server.kube.errors import KubeError, KubeUnavailable

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

    @on_both_servers
    async def test_table_of_a_namespace_with_chosen_metrics(
        self, kubectl: Kubectl, jobs: float
    ) -> None:
        out = await kubectl.ok("trainjob", "progress", "-n", "team-a", "--metric", "acc")
        assert out.splitlines() == [
            "NAME   STATE     PROGRESS                    ETA   UPDATED   acc",
            "tj-a   Created   ████████░░░░░░░░░░░░  42%   61m   60m ago   0.9",
            "tj-b   -         -                           -     -         -",
        ]

    @on_both_servers
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

    @on_both_servers
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
