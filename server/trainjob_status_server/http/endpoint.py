"""The status endpoint: the request path of docs/design.md, top to bottom.

It decides nothing itself: sizes, identities, payload rules and write outcomes come from
the components and pure functions it calls, and their refusals (``failures.Failure``)
are answered through ``errors.answer_for`` (``request_handling.answer``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from dataclasses import dataclass
from typing import Protocol

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11

from ..auth import Authenticator
from ..config import MAX_BODY_BYTES
from ..failures import TrainJobNotFound
from ..status import validation
from ..status.validation import EncodedStatus
from . import codings, errors
from .protocol import awaiting_body
from .request_handling import POSTER, TRAINJOB
from .responses import Answer, json_answer, json_object_answer


class TrainJobLookup(Protocol):
    """Whether a TrainJob exists. Served by ``status.lookup.CachedTrainJobs``: the
    TrainJob cache, one GET on a miss."""

    async def trainjob_exists(self, namespace: str, name: str) -> bool:
        """Raises ``failures.Unavailable`` when the API server cannot tell."""
        ...


class StatusWriter(Protocol):
    """Takes an accepted update for its write to the TrainJob's status. Served by
    ``status.writer.CoalescingWriter`` (one pending update per TrainJob, written within
    the API budget) or ``DirectWriter`` (one write per post, awaited)."""

    async def write(self, namespace: str, name: str, update: EncodedStatus) -> None:
        """Raises a ``failures.Failure`` when the update is refused or cannot be written."""
        ...


class Clock(Protocol):
    """What time a post was received: ``utc_now`` but in tests."""

    def __call__(self) -> dt.datetime: ...


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class StatusEndpoint:
    """POST handler of the status path; every answer is 200 or a metav1.Status."""

    authenticator: Authenticator
    trainjobs: TrainJobLookup
    writer: StatusWriter
    read_timeout: float
    clock: Clock = utc_now

    async def handle(self, request: web.BaseRequest, namespace: str, name: str) -> Answer:
        """The answer to a post to the status path of ``namespace/name``."""
        request[TRAINJOB] = f"{namespace}/{name}"
        received = self.clock()
        if (request.content_length or 0) > MAX_BODY_BYTES:
            raise errors.payload_too_large()
        try:
            coding = codings.body_coding(request.headers.get("Content-Encoding"))
        except codings.UnsupportedCoding as exc:
            raise errors.unsupported_coding(str(exc), codings.ACCEPTED) from None
        request[POSTER] = await self.authenticator.authenticate(
            request.headers.get("Authorization"), namespace, name, request.remote or ""
        )
        raw = await read_body(request, MAX_BODY_BYTES, self.read_timeout, coding)
        payload = validation.decode_payload(raw)
        update = validation.parse_trainer_status(payload, trainjob=name, received=received)
        if update is None:
            return json_object_answer({})
        if not await self.trainjobs.trainjob_exists(namespace, name):
            raise TrainJobNotFound()
        encoded = update.encoded(received)
        await self.writer.write(namespace, name, encoded)
        # The JSON the update is written with, echoed as it is.
        return json_answer(b'{"trainerStatus":' + encoded.json + b"}")


async def read_body(
    request: web.BaseRequest, limit: int, seconds: float, coding: str | None = None
) -> bytes:
    """The body, at most ``limit`` bytes whether announced or chunked (413 beyond), within
    ``seconds`` of the first wait for it (408 for a client that stalls), with ``coding``
    (a content coding from ``codings.body_coding``) undone: then ``limit`` bounds the
    decoded bytes too, and a body that does not decode is 400."""
    raw = await _read_raw(request, limit, seconds)
    if coding is None:
        return raw
    decoder = codings.Decoder(coding, limit)
    try:
        decoded = decoder.feed(raw)
        decoder.finish()
    except codings.CodingError as exc:
        raise errors.bad_request(str(exc)) from None
    except codings.TooLarge:
        raise errors.payload_too_large() from None
    return decoded


async def _read_raw(request: web.BaseRequest, limit: int, seconds: float) -> bytes:
    stream = request.content
    deadline: float | None = None
    chunks: list[bytes] = []
    size = 0
    try:
        while True:
            # Most posts arrive whole with their headers: what is buffered is taken
            # without arming a timer or reading the loop's clock (on Python 3.11 finding
            # the running loop is a getpid system call); only a body still on its way is
            # waited for, under a deadline that starts with the first wait, and the
            # connection says since when it waits (a slow one may be closed for others).
            chunk = stream.read_nowait()
            if not chunk and not stream.at_eof():
                if deadline is None:
                    deadline = asyncio.get_running_loop().time() + seconds
                    awaiting_body(request, time.monotonic())
                    if expects_continue(request):
                        await _send_continue(request)
                try:
                    async with asyncio.timeout_at(deadline):
                        chunk = await stream.readany()
                except TimeoutError as exc:
                    raise errors.request_timeout() from exc
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > limit:
                raise errors.payload_too_large()
            if not chunks and stream.at_eof():
                return chunk  # the whole body in one piece, as most posts come
            chunks.append(chunk)
    finally:
        if deadline is not None:
            awaiting_body(request, None)


def expects_continue(request: web.BaseRequest) -> bool:
    """Whether the client waits for ``100 Continue`` before it sends the body."""
    expect = request.headers.get(hdrs.EXPECT)
    return (
        expect is not None and request.version >= HttpVersion11 and expect.lower() == "100-continue"
    )


async def _send_continue(request: web.BaseRequest) -> None:
    """The interim ``100 Continue``: what the client waits for before it sends the body."""
    writer = request.writer
    await writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    # Not part of the answer: the connection may still carry a refusal of this request.
    writer.output_size = 0
