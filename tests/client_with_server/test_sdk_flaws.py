"""The five flaws issue 8 measured in the Kubeflow SDK's client, each shown by the
SDK-like helper and shown fixed in ours, in the same test."""

from __future__ import annotations

import asyncio
import threading

from client.conftest import MakeReporter
from client.sink import Reply, Sink, peer_status
from trainjob_devcluster import DevCluster
from trainjob_status import StatusReporter
from trainjob_status.contract import MAX_METRICS

from .conftest import Pod, stored_status
from .sdk_like import SdkLikeClient


def test_flaw_1_a_fast_loop_ending_at_100_delivers_100(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    sdk = SdkLikeClient(sink.environ())
    for progress in range(101):
        sdk.update_trainjob_status(progress)
    assert [r.status["progressPercentage"] for r in sink.requests] == [0]  # stuck at 0

    sink.requests.clear()
    reporter = make_reporter()  # the default 5 s interval
    for progress in range(101):
        assert reporter.report(progress)
    assert reporter.flush(5)
    assert sink.requests[-1].status["progressPercentage"] == 100
    assert len(sink.requests) <= 2  # the first at once, the last on flush


def test_flaw_2_a_stalled_server_never_holds_the_caller(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    reporter = make_reporter(min_interval=0, timeout=60)
    with sink.stalled():
        reporter.report(1)
        assert sink.held.wait(5)  # the post is now stuck inside the server
        calls = [reporter.report(50, metrics={"call": call}) for call in range(10_000)]
        # Every call returned while the server still held the first post.
        assert all(calls)
        assert not sink.gate.is_set()
        assert sink.answered == 0
    assert reporter.flush(5)
    assert sink.requests[-1].status["metrics"] == [{"name": "call", "value": "9999"}]

    sink.requests.clear()
    sdk = SdkLikeClient(sink.environ(), timeout=60)
    with sink.stalled():
        caller = threading.Thread(target=sdk.update_trainjob_status, args=(5,))
        caller.start()
        assert sink.held.wait(5)
        caller.join(0.2)
        assert caller.is_alive()  # the SDK's caller waits for the server
    caller.join(5)


async def test_flaw_3_oversized_metrics_and_float_eta_are_fitted_not_rejected(
    pod: Pod, devcluster: DevCluster
) -> None:
    metrics = {"n" * 70: 1.0, "text": "v" * 100, **{f"m{i}": i for i in range(300)}}
    sdk = SdkLikeClient(pod.environ)
    assert not await asyncio.to_thread(sdk.update_trainjob_status, 50, 12.7, metrics)
    assert sdk.answers == [422]  # the whole update refused
    assert stored_status(devcluster) is None

    reporter = StatusReporter(environ=pod.environ)
    assert reporter.report(150, 12.7, metrics)
    assert await asyncio.to_thread(reporter.flush, 10)
    status = stored_status(devcluster)
    assert status is not None
    assert status["progressPercentage"] == 100
    assert status["estimatedRemainingSeconds"] == 13
    assert len(status["metrics"]) == MAX_METRICS
    assert status["metrics"][:3] == [
        {"name": "n" * 64, "value": "1"},
        {"name": "text", "value": "v" * 64},
        {"name": "m0", "value": "0"},
    ]
    await asyncio.to_thread(reporter.close, 0)


def test_flaw_4_a_rotated_token_is_used_at_once_after_a_401(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    old = sink.token
    sdk = SdkLikeClient(sink.environ(), min_interval=0)
    assert sdk.update_trainjob_status(1)
    new = sink.write_token("second")
    sink.accepted_tokens = {new}
    assert not sdk.update_trainjob_status(2)
    assert sdk.answers == [200, 401]  # still the cached old token, for up to 300 s
    assert [r.token for r in sink.requests] == [old, old]

    sink.requests.clear()
    sink.accepted_tokens = None
    sink.token_file.write_text(old)
    reporter = make_reporter(min_interval=0)
    # Kubelet replaces the file just after our read; the server refuses the old token.
    refuse = Reply(401, peer_status(401, "Unauthorized", "Unauthorized"))
    refuse.action = lambda: sink.write_token("third")
    sink.replies.append(refuse)
    reporter.report(2)
    assert reporter.flush(5)
    assert [r.token for r in sink.requests] == [old, sink.token]  # re-read at once
    assert reporter.stats.retries == 0  # the same request, repeated with the new token


def test_flaw_5_an_update_answered_503_is_retried_not_lost(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    unavailable = Reply(503, peer_status(503, "ServiceUnavailable", "busy"), {"Retry-After": "0.2"})
    sink.replies.append(unavailable)
    sdk = SdkLikeClient(sink.environ())
    assert not sdk.update_trainjob_status(100)
    assert sdk.answers == [503]
    assert len(sink.requests) == 1

    sink.requests.clear()
    sink.replies.append(unavailable)
    reporter = make_reporter()
    reporter.report(100)
    assert reporter.flush(5)
    assert [r.status["progressPercentage"] for r in sink.requests] == [100, 100]
