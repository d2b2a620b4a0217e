"""Process exit: the last update of a fast loop arrives without an explicit flush, and a
dead server cannot hold exit longer than the flush timeout. Real interpreters in
subprocesses (atexit only runs there)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from trainjob_status import update_trainjob_status

from .sink import Sink


def run(
    code: str, environ: dict[str, str], timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env.update(environ)
    return subprocess.run(
        [sys.executable, "-c", code], env=env, timeout=timeout, capture_output=True, text=True
    )


def pod_environ(sink: Sink) -> dict[str, str]:
    return {
        "KUBEFLOW_TRAINER_SERVER_URL": sink.url(),
        "KUBEFLOW_TRAINER_SERVER_TOKEN": str(sink.token_file),
        "KUBEFLOW_TRAINER_SERVER_CA_CERT": str(sink.ca_file),
    }


def test_a_fast_loop_that_exits_delivers_its_final_update(sink: Sink) -> None:
    code = (
        "from trainjob_status import update_trainjob_status\n"
        "for step in range(1, 1001):\n"
        "    assert update_trainjob_status(step // 10, 1000 - step, {'loss': 1 / step})\n"
    )
    done = run(code, pod_environ(sink))
    assert done.returncode == 0, done.stderr
    final = sink.requests[-1].status
    assert (final["progressPercentage"], final["estimatedRemainingSeconds"]) == (100, 0)
    assert final["metrics"] == [{"name": "loss", "value": "0.001"}]
    assert len(sink.requests) <= 2  # the first at once, the last at exit


def test_exit_with_a_stalled_server_returns_within_the_flush_timeout(sink: Sink) -> None:
    code = (
        "from trainjob_status import StatusReporter\n"
        "reporter = StatusReporter(timeout=600, flush_timeout=0.5)\n"
        "reporter.report(10)\n"
        "reporter.report(100)\n"
    )
    with sink.stalled():
        # Without the bound the exit would wait for the 600 s socket timeout (and the
        # subprocess timeout would fail the test); it ends while the server still stalls.
        done = run(code, pod_environ(sink), timeout=60)
        assert done.returncode == 0, done.stderr
        assert not sink.gate.is_set()
        assert sink.answered == 0


def test_the_shared_reporter_is_built_once_from_the_environment(sink: Sink) -> None:
    code = (
        "from trainjob_status import default_reporter, update_trainjob_status\n"
        "assert update_trainjob_status(metrics={'a': 1})\n"
        "assert default_reporter() is default_reporter()\n"
        "assert default_reporter().flush(5)\n"
    )
    done = run(code, pod_environ(sink))
    assert done.returncode == 0, done.stderr
    assert len(sink.requests) == 1


def test_a_worker_rank_reports_nothing(sink: Sink) -> None:
    code = (
        "from trainjob_status import update_trainjob_status\nassert not update_trainjob_status(5)\n"
    )
    done = run(code, {**pod_environ(sink), "RANK": "2", "WORLD_SIZE": "4"})
    assert done.returncode == 0, done.stderr
    assert sink.requests == []


def test_outside_a_trainjob_update_trainjob_status_is_false(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBEFLOW_TRAINER_SERVER_URL", raising=False)
    assert update_trainjob_status(50, 10, {"loss": 0.1}) is False


def test_a_forked_child_reports_through_its_own_reporter(sink: Sink) -> None:
    code = (
        "import os, sys\n"
        "from trainjob_status import default_reporter, update_trainjob_status\n"
        "assert update_trainjob_status(10)\n"
        "assert default_reporter().flush(5)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    update_trainjob_status(77)  # the parent's sending thread is not here\n"
        "    sys.exit(0)  # the child's exit flush sends it\n"
        "assert os.waitpid(pid, 0)[1] == 0\n"
        "update_trainjob_status(20)\n"
    )
    done = run(code, pod_environ(sink))
    assert done.returncode == 0, done.stderr
    assert [r.status["progressPercentage"] for r in sink.requests] == [10, 77, 20]
