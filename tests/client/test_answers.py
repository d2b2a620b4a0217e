"""What the reporter does with each kind of answer: retries (429/503/5xx/network) with
newer data replacing the waiting update, token re-reads on 401/403, no retry for other
4xx, a server answering as the Trainer's status server does, CA rotation and hostname checks. The token is
never logged."""

from __future__ import annotations

import logging
import socket

import pytest

from trainjob_status import StatusReporter

from .conftest import MakeReporter
from .sink import Reply, Sink, peer_status


def test_503_is_retried_after_retry_after(sink: Sink, make_reporter: MakeReporter) -> None:
    sink.replies.append(
        Reply(503, peer_status(503, "ServiceUnavailable", "busy"), {"Retry-After": "0.1"})
    )
    reporter = make_reporter(min_interval=0)
    reporter.report(30)
    assert reporter.flush(5)
    assert [r.status["progressPercentage"] for r in sink.requests] == [30, 30]
    assert (reporter.stats.retries, reporter.stats.delivered) == (1, 1)


def test_newer_data_replaces_an_update_waiting_for_its_retry(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    sink.replies.append(
        Reply(429, peer_status(429, "TooManyRequests", "slow down"), {"Retry-After": "0.3"})
    )
    reporter = make_reporter(min_interval=0)
    reporter.report(10)
    sink.wait_answered(1)
    reporter.report(20)
    assert reporter.flush(5)
    assert [r.status["progressPercentage"] for r in sink.requests] == [10, 20]


def test_flush_gives_up_at_once_when_retry_after_is_beyond_its_deadline(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    sink.replies.append(
        Reply(429, peer_status(429, "TooManyRequests", "x"), {"Retry-After": "120"})
    )
    reporter = make_reporter(min_interval=0)
    reporter.report(10)
    sink.wait_answered(1)
    assert reporter.flush(60) is False  # returns without waiting the 60 s
    assert len(sink.requests) == 1


@pytest.mark.parametrize("code", [500, 502, 408])
def test_other_server_errors_back_off_and_retry(
    sink: Sink, make_reporter: MakeReporter, code: int
) -> None:
    sink.replies.append(Reply(code, {"message": "oops"}))
    reporter = make_reporter(min_interval=0)
    reporter.report(10)
    assert reporter.flush(5)
    assert len(sink.requests) == 2


def test_a_dropped_fresh_connection_is_a_network_error_and_retried(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    sink.replies.append(Reply(drop=True))
    reporter = make_reporter(min_interval=0)
    reporter.report(10)
    assert reporter.flush(5)
    assert len(sink.requests) == 2
    assert reporter.stats.retries == 1


@pytest.mark.parametrize("code", [400, 404, 413, 422])
def test_other_4xx_are_not_retried_and_logged_once(
    sink: Sink, make_reporter: MakeReporter, code: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "trainjob_status")
    reporter = make_reporter(min_interval=0)
    for progress in (10, 20):
        sink.replies.append(Reply(code, peer_status(code, "Invalid", "nope")))
        reporter.report(progress)
        assert reporter.flush(5) is False
    assert len(sink.requests) == 2
    assert reporter.stats.dropped == 2
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1
    assert f"code={code}" in refused[0].getMessage()


def test_a_peer_style_403_without_kind_or_apiversion_is_handled(
    sink: Sink, make_reporter: MakeReporter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "trainjob_status")
    body = peer_status(403, "Forbidden", "Forbidden")
    assert "kind" not in body
    assert "apiVersion" not in body
    sink.replies.append(Reply(403, body))
    reporter = make_reporter(min_interval=0)
    reporter.report(10)
    assert reporter.flush(5) is False  # token unchanged: dropped, not retried
    assert len(sink.requests) == 1
    assert "code=403 reason=Forbidden message='Forbidden'" in caplog.text
    reporter.report(20)  # the Trainer's 200 echoes the payload
    assert reporter.flush(5)


def test_a_403_after_the_token_rotated_is_retried_at_once_with_the_new_token(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    old = sink.token
    # Kubelet rotates the file just after the client read it; the Trainer's status server says 403.
    sink.replies.append(
        Reply(403, peer_status(403, "Forbidden", "Forbidden"), action=lambda: sink.write_token("b"))
    )
    reporter = make_reporter(min_interval=0)
    reporter.report(10)
    assert reporter.flush(5)
    assert [r.token for r in sink.requests] == [old, sink.token]
    assert reporter.stats.retries == 0


def test_unreachable_server_never_raises_and_flush_is_bounded() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the block ends: connections refused
    reporter = StatusReporter(f"https://127.0.0.1:{port}/status", environ={}, min_interval=0)
    assert reporter.report(10)
    assert reporter.flush(0.3) is False
    assert reporter.stats.retries >= 1
    reporter.close(0)


def test_rotated_server_ca_is_picked_up_from_the_ca_file(
    sink: Sink, make_reporter: MakeReporter
) -> None:
    reporter = make_reporter(min_interval=0)
    reporter.report(10)
    assert reporter.flush(5)
    new_ca = sink.rotate()  # the server now presents a certificate from a new CA
    # The next answer closes its connection, so the post after it opens a new one.
    sink.replies.append(Reply(close=True))
    reporter.report(30)
    assert reporter.flush(5)  # the kept-alive connection still works
    assert sink.requests[-1].status["progressPercentage"] == 30
    reporter.report(40)
    assert reporter.flush(0.5) is False  # the old CA cannot verify the new certificate
    sink.ca_file.write_bytes(new_ca.cert_pem.bytes())  # the mounted CA file is updated
    assert reporter.flush(10)
    assert sink.requests[-1].status["progressPercentage"] == 40


def test_the_server_name_is_checked(sink: Sink, make_reporter: MakeReporter) -> None:
    sink.rotate(dns_names=("status.example",))
    sink.ca_file.write_bytes(sink.ca.cert_pem.bytes())
    reporter = make_reporter(min_interval=0)
    reporter.report(10)
    assert reporter.flush(0.5) is False
    assert sink.requests == []
    named = make_reporter(url=sink.url(host="127.0.0.1"), min_interval=0)  # IP SAN matches
    named.report(10)
    assert named.flush(5)


def test_the_token_is_never_logged(
    sink: Sink, make_reporter: MakeReporter, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    first = sink.token
    reporter = make_reporter(min_interval=0)
    sink.replies.extend(
        [
            Reply(401, peer_status(401, "Unauthorized", "Unauthorized")),
            Reply(403, peer_status(403, "Forbidden", "Forbidden")),
            Reply(422, peer_status(422, "Invalid", "bad")),
            Reply(503, {"oops": 1}, {"Retry-After": "0"}),
        ]
    )
    for progress in range(4):
        reporter.report(progress, metrics={"huge": "x" * 100})
        reporter.flush(2)
    second = sink.write_token("second")
    sink.token_file.write_text("two words")  # unreadable as a token
    reporter.report(5)
    reporter.flush(2)
    assert caplog.records
    for record in caplog.records:
        text = record.getMessage() + repr(record.args)
        assert first not in text
        assert second not in text
        assert first.split(".")[1] not in text  # not even the claims part
