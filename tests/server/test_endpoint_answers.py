"""The status endpoint through its seams, without a cluster: stand-ins for the
authenticator, the TrainJob look-up and the writer raise each domain failure, and a real
socket carries the exact answer back; nothing is written on any refusal.

The serving port is composed as ``StatusServer.serving_handler`` composes it (the
endpoint behind ``ServingHandler``, on aiohttp's low-level server), so what is asserted
here is what a pod reads.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import RawTestServer, TestClient

from trainjob_status.contract import STATUS_PATH
from trainjob_status_server import failures
from trainjob_status_server.auth import AuthFailure, Identity
from trainjob_status_server.failures import (
    AccessDenied,
    Failure,
    Invalid,
    RateLimited,
    ShuttingDown,
    TrainJobNotFound,
    Unauthenticated,
    Unavailable,
    WriteFailed,
)
from trainjob_status_server.http import errors
from trainjob_status_server.http.endpoint import StatusEndpoint
from trainjob_status_server.http.request_handling import POSTER
from trainjob_status_server.http.serving import ServingHandler
from trainjob_status_server.status.validation import EncodedStatus, PayloadError, ValidationFailed

NS, TJ = "team-a", "tj"
PATH = STATUS_PATH.format(namespace=NS, name=TJ)
RECEIVED = dt.datetime(2026, 12, 2, 18, 33, 25, tzinfo=dt.UTC)
UPDATE = {"progressPercentage": 42, "lastUpdatedTime": "2026-12-02T18:33:25Z"}
BUDGET_SPENT = "The Kubernetes API budget is spent: retry later"
API_GONE = "The Kubernetes API server is unavailable"


@dataclass
class Rig:
    """What the endpoint is given; each part may be told to raise a failure."""

    refusal: Failure | None = None  # raised by the authenticator
    exists: bool = True
    lookup_failure: Failure | None = None
    write_failure: Failure | None = None
    identity: Identity = field(default_factory=lambda: Identity(NS, "trainer", "tj-node-0-0"))
    asked: list[tuple[str | None, str, str]] = field(default_factory=list)
    looked_up: list[tuple[str, str]] = field(default_factory=list)
    written: list[tuple[str, str, EncodedStatus]] = field(default_factory=list)
    seen: list[Identity | None] = field(default_factory=list)

    async def authenticate(
        self, authorization: str | None, namespace: str, trainjob: str, source: str = ""
    ) -> Identity:
        self.asked.append((authorization, namespace, trainjob))
        if self.refusal is not None:
            raise self.refusal
        return self.identity

    async def trainjob_exists(self, namespace: str, name: str) -> bool:
        self.looked_up.append((namespace, name))
        if self.lookup_failure is not None:
            raise self.lookup_failure
        return self.exists

    async def write(self, namespace: str, name: str, update: EncodedStatus) -> None:
        if self.write_failure is not None:
            raise self.write_failure
        self.written.append((namespace, name, update))


Post = Callable[..., Awaitable[tuple[int, Any, dict[str, str]]]]


@pytest.fixture
def rig() -> Rig:
    return Rig()


@pytest_asyncio.fixture
async def post(rig: Rig) -> AsyncIterator[Post]:
    endpoint = StatusEndpoint(
        authenticator=rig,
        trainjobs=rig,
        writer=rig,
        read_timeout=5.0,
        clock=lambda: RECEIVED,
    )

    async def handle(request: web.BaseRequest, namespace: str, name: str) -> web.StreamResponse:
        try:
            return await endpoint.handle(request, namespace, name)
        finally:
            rig.seen.append(request.get(POSTER))

    async with TestClient(RawTestServer(ServingHandler(handle, gets={}))) as client:

        async def send(
            body: Any = None, *, raw: bytes | None = None
        ) -> tuple[int, Any, dict[str, str]]:
            data = raw if raw is not None else json.dumps(body).encode()
            headers = {"Authorization": "Bearer t0k"}
            async with client.post(PATH, data=data, headers=headers) as response:
                return response.status, json.loads(await response.read()), dict(response.headers)

        yield send


def status(code: int, reason: str, message: str, **extra: Any) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        **extra,
        "code": code,
    }


# -- accepted ---------------------------------------------------------------------------------


async def test_an_accepted_post_is_written_once_and_echoed(
    rig: Rig, post: Post, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trainjob_status_server.access")
    code, body, headers = await post({"trainerStatus": UPDATE})
    assert (code, body) == (200, {"trainerStatus": UPDATE})
    assert rig.asked == [("Bearer t0k", NS, TJ)]
    assert rig.looked_up == [(NS, TJ)]
    assert [(ns, name, json.loads(u.json)) for ns, name, u in rig.written] == [(NS, TJ, UPDATE)]
    assert "Server" not in headers
    # The identity the authenticator vouched for stays with the request, for its log line.
    assert rig.seen == [rig.identity]
    [line] = [r.__dict__ for r in caplog.records if r.name == "trainjob_status_server.access"]
    assert (line["code"], line["trainjob"], line["service_account"], line["pod"]) == (
        200,
        f"{NS}/{TJ}",
        "trainer",
        "tj-node-0-0",
    )
    assert "t0k" not in json.dumps(line, default=str)


# -- refused by the authenticator: before the body is read --------------------------------------


@pytest.mark.parametrize(
    ("refusal", "code", "reason", "message", "extra", "retry_after"),
    [
        (AuthFailure("expired"), 401, "Unauthorized", "Unauthorized", {}, None),
        (AuthFailure("no_token"), 401, "Unauthorized", "Unauthorized", {}, None),
        (AuthFailure("audience"), 403, "Forbidden", "Forbidden", {}, None),
        (AuthFailure("not_member"), 403, "Forbidden", "Forbidden", {}, None),
        (
            RateLimited(7),
            429,
            "TooManyRequests",
            "Too many requests",
            {"details": {"retryAfterSeconds": 7}},
            "7",
        ),
        (
            Unavailable(),
            503,
            "ServiceUnavailable",
            API_GONE,
            {"details": {"retryAfterSeconds": 1}},
            "1",
        ),
        (
            Unavailable(budget_wait=2.2),
            503,
            "ServiceUnavailable",
            BUDGET_SPENT,
            {"details": {"retryAfterSeconds": 3}},
            "3",
        ),
        (
            # Never a Retry-After of 0: that invites a hot retry.
            Unavailable(budget_wait=0.01),
            503,
            "ServiceUnavailable",
            BUDGET_SPENT,
            {"details": {"retryAfterSeconds": 1}},
            "1",
        ),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, Failure) else None,
)
async def test_an_authenticator_refusal_is_answered_before_the_body_is_judged(
    rig: Rig,
    post: Post,
    refusal: Failure,
    code: int,
    reason: str,
    message: str,
    extra: dict[str, Any],
    retry_after: str | None,
) -> None:
    rig.refusal = refusal
    # A body the validator would refuse: the refusal comes first.
    answer, body, headers = await post(raw=b"not json")
    assert (answer, body) == (code, status(code, reason, message, **extra))
    assert headers.get("Retry-After") == retry_after
    assert headers["Content-Type"] == "application/json"
    assert rig.looked_up == rig.written == []
    assert rig.seen == [None]


# -- refused by the payload rules ---------------------------------------------------------------


async def test_a_body_that_does_not_decode_is_422_invalid_payload(rig: Rig, post: Post) -> None:
    code, body, _ = await post(raw=b"[1, 2]")
    assert (code, body) == (
        422,
        status(422, "Invalid", "Invalid payload: body must be a JSON object, got array"),
    )
    assert rig.looked_up == rig.written == []


async def test_a_crd_violation_is_worded_as_the_api_server_words_it(rig: Rig, post: Post) -> None:
    code, body, _ = await post({"trainerStatus": {**UPDATE, "progressPercentage": 150}})
    cause = (
        "Invalid value: 150: trainerStatus.progressPercentage in body "
        "should be less than or equal to 100"
    )
    assert (code, body) == (
        422,
        status(
            422,
            "Invalid",
            f'TrainJob.trainer.kubeflow.org "tj" is invalid: '
            f"status.trainerStatus.progressPercentage: {cause}",
            details={
                "name": "tj",
                "group": "trainer.kubeflow.org",
                "kind": "TrainJob",
                "causes": [
                    {
                        "reason": "FieldValueInvalid",
                        "message": cause,
                        "field": "status.trainerStatus.progressPercentage",
                    }
                ],
            },
        ),
    )
    assert rig.looked_up == rig.written == []


# -- refused by the TrainJob look-up and the writer ---------------------------------------------


async def test_a_missing_trainjob_is_404_train_job_not_found(rig: Rig, post: Post) -> None:
    rig.exists = False
    code, body, _ = await post({"trainerStatus": UPDATE})
    assert (code, body) == (404, status(404, "NotFound", "Train job not found"))
    assert rig.written == []


async def test_a_lookup_without_an_api_answer_is_503(rig: Rig, post: Post) -> None:
    rig.lookup_failure = Unavailable(budget_wait=41.2)
    code, body, headers = await post({"trainerStatus": UPDATE})
    assert (code, body) == (
        503,
        status(503, "ServiceUnavailable", BUDGET_SPENT, details={"retryAfterSeconds": 42}),
    )
    assert headers["Retry-After"] == "42"
    assert rig.written == []


@pytest.mark.parametrize(
    ("failure", "code", "expected", "retry_after"),
    [
        (TrainJobNotFound(), 404, status(404, "NotFound", "Train job not found"), None),
        (
            Invalid('TrainJob.trainer.kubeflow.org "tj" is invalid: x', {"name": "tj"}),
            422,
            status(
                422,
                "Invalid",
                'TrainJob.trainer.kubeflow.org "tj" is invalid: x',
                details={"name": "tj"},
            ),
            None,
        ),
        # The API server's Status had no details: none are made up.
        (Invalid("Invalid", None), 422, status(422, "Invalid", "Invalid"), None),
        (
            Unavailable(),
            503,
            status(503, "ServiceUnavailable", API_GONE, details={"retryAfterSeconds": 1}),
            "1",
        ),
        (WriteFailed(), 500, status(500, "InternalError", "Internal error"), None),
    ],
    ids=["not-found", "invalid", "invalid-without-details", "unavailable", "write-failed"],
)
async def test_a_failed_write_is_answered_with_its_failure(
    rig: Rig,
    post: Post,
    failure: Failure,
    code: int,
    expected: dict[str, Any],
    retry_after: str | None,
) -> None:
    rig.write_failure = failure
    answer, body, headers = await post({"trainerStatus": UPDATE})
    assert (answer, body) == (code, expected)
    assert headers.get("Retry-After") == retry_after
    assert rig.written == []


# -- the mapping itself -------------------------------------------------------------------------


def every_failure() -> list[Failure]:
    return [
        AuthFailure("signature"),
        Unavailable(),
        RateLimited(1),
        ShuttingDown(),
        TrainJobNotFound(),
        Invalid("Invalid", None),
        WriteFailed(),
        Unauthenticated(),
        AccessDenied("bob", "get", "/metrics"),
        PayloadError("body is not valid JSON"),
        ValidationFailed("tj", ()),
    ]


def subclasses(cls: type[Failure]) -> set[type[Failure]]:
    found = set(cls.__subclasses__())
    for sub in list(found):
        found |= subclasses(sub)
    return found


def test_every_failure_has_an_answer() -> None:
    assert {type(f) for f in every_failure()} == subclasses(failures.Failure)
    for failure in every_failure():
        answer = errors.answer_for(failure)
        assert answer.body()["status"] == "Failure"
        assert 400 <= answer.code < 600


def test_a_stopping_replica_asks_for_a_retry_on_a_new_connection() -> None:
    answer = errors.answer_for(ShuttingDown())
    assert answer.body() == {
        **status(503, "ServiceUnavailable", "The server is shutting down: retry"),
        "details": {"retryAfterSeconds": 1},
    }
    assert answer.headers == {"Retry-After": "1"}
    assert answer.close


def test_the_metrics_refusals_are_worded_as_the_api_server_words_them() -> None:
    assert errors.answer_for(Unauthenticated()).body() == status(
        401, "Unauthorized", "Unauthorized"
    )
    denied = errors.answer_for(AccessDenied("bob", "get", "/metrics", "no RBAC policy matched"))
    assert (denied.code, denied.reason, denied.message) == (
        403,
        "Forbidden",
        'forbidden: User "bob" cannot get path "/metrics": no RBAC policy matched',
    )
