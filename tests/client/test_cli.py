"""``trainjob-status report``: one update from a shell, exit 0 unless --strict."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from trainjob_status.cli import main
from trainjob_status.contract import ENV_NAMES, URL_ENV

from .sink import Reply, Sink, peer_status


@pytest.fixture(autouse=True)
def no_pod_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*ENV_NAMES, "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)


def to_sink(sink: Sink) -> list[str]:
    return [
        "--url",
        sink.url(),
        "--token-file",
        str(sink.token_file),
        "--ca-file",
        str(sink.ca_file),
    ]


def test_report_sends_one_update(sink: Sink) -> None:
    argv = ["report", "--progress", "40", "--eta", "300", "--metric", "loss=0.31"]
    argv += ["--metric", "acc=0.9", "--metric", "note=a=b", "--step", "7", *to_sink(sink)]
    assert main(argv) == 0
    (received,) = sink.requests
    status = received.status
    assert (status["progressPercentage"], status["estimatedRemainingSeconds"]) == (40, 300)
    assert status["metrics"] == [
        {"name": "step", "value": "7"},
        {"name": "loss", "value": "0.31"},  # as written, not reformatted
        {"name": "acc", "value": "0.9"},
        {"name": "note", "value": "a=b"},
    ]


def test_outside_a_trainjob_exits_0_unless_strict(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--progress", "40"]) == 0
    assert f"{URL_ENV} is not set" in capsys.readouterr().err
    assert main(["report", "--progress", "40", "--strict"]) == 1


def test_an_update_not_delivered_exits_0_unless_strict(
    sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    sink.replies.append(Reply(422, peer_status(422, "Invalid", "bad")))
    assert main(["report", "--progress", "40", *to_sink(sink)]) == 0
    assert "not delivered" in capsys.readouterr().err
    sink.replies.append(Reply(422, peer_status(422, "Invalid", "bad")))
    assert main(["report", "--progress", "40", "--strict", *to_sink(sink)]) == 1


def test_a_stalled_server_is_bounded_by_timeout(sink: Sink) -> None:
    with sink.stalled():
        assert (
            main(["report", "--progress", "1", "--timeout", "0.3", "--strict", *to_sink(sink)]) == 1
        )


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (["--metric", "novalue"], "argument --metric: expected NAME=VALUE, got 'novalue'"),
        (["--metric", "=1"], "argument --metric: expected NAME=VALUE, got '=1'"),
        (["--metric", "loss="], "argument --metric: expected NAME=VALUE, got 'loss='"),
        (
            ["--metric", "n" * 65 + "=1"],
            "argument --metric: a metric's name has at most 64 characters, got 65",
        ),
        (
            ["--metric", "loss=" + "9" * 65],
            "argument --metric: a metric's value has at most 64 characters, got 65",
        ),
        (
            ["--progress", "x"],
            "argument --progress: expected a whole number from 0 to 100, got 'x'",
        ),
        (
            ["--progress", "150"],
            "argument --progress: expected a whole number from 0 to 100, got '150'",
        ),
        (
            ["--progress", "42.5"],
            "argument --progress: expected a whole number from 0 to 100, got '42.5'",
        ),
        (
            ["--progress", "-1"],
            "argument --progress: expected a whole number from 0 to 100, got '-1'",
        ),
        (["--eta", "-5"], "argument --eta: expected seconds >= 0, got '-5'"),
    ],
)
def test_wrong_arguments_exit_2_with_usage_and_send_nothing(
    bad: list[str], error: str, sink: Sink, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["report", *bad, *to_sink(sink)])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: trainjob-status report ")
    assert err.rstrip().endswith(f"trainjob-status report: error: {error}")
    assert sink.requests == []


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--bogus"], "unrecognized arguments: --bogus"),
        ([], "a command is required: report"),
        (["report", "--progress", "5", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_a_wrong_command_line_says_what_is_wrong_under_its_usage(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: trainjob-status ")
    assert err.endswith(f"trainjob-status: error: {error}\n")


def test_runs_as_a_module(sink: Sink) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ENV_NAMES}
    env.update(sink.environ())
    done = subprocess.run(
        [sys.executable, "-m", "trainjob_status.cli", "report", "--progress", "55"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert sink.requests[0].status["progressPercentage"] == 55


def on_a_terminal(sink: Sink, *args: str) -> tuple[int, str, str]:
    """``trainjob-status report ARGS`` with stdout a terminal: (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_NAMES}
    env.update(sink.environ())
    primary, secondary = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "trainjob_status.cli", "report", *args],
            env=env,
            stdout=secondary,
            stderr=subprocess.PIPE,
            text=True,
            timeout=30,
        )
        os.close(secondary)
        secondary = -1
        out = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    return done.returncode, out.decode().replace("\r\n", "\n"), done.stderr


def test_on_a_terminal_report_says_what_it_sent(sink: Sink) -> None:
    code, out, err = on_a_terminal(
        sink, "--progress", "40", "--eta", "300.4", "--step", "7", "--metric", "loss=0.31"
    )
    assert (code, err) == (0, "")
    # What was sent, as fitted: the ETA rounded down, step first among the metrics.
    assert (
        out
        == f"trainjob-status: sent progress 40%, ETA 300 s, metrics step=7 loss=0.31 to {sink.url()}\n"
    )
    assert sink.requests[0].status["progressPercentage"] == 40


def test_quiet_on_a_terminal_with_q(sink: Sink) -> None:
    assert on_a_terminal(sink, "--progress", "40", "-q") == (0, "", "")
    assert sink.requests[0].status["progressPercentage"] == 40


def test_quiet_when_not_a_terminal(sink: Sink, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--progress", "40", *to_sink(sink)]) == 0
    assert capsys.readouterr() == ("", "")
    assert sink.requests[0].status["progressPercentage"] == 40
