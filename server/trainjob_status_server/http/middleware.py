"""The serving app's middleware: request ids, one log line per request, errors as Status,
and the request counter and duration histogram.

A refusal of the domain (``failures.Failure``) is answered as ``errors.answer_for`` says.
Unknown paths and methods become the peer's 404 "Not found"; an unexpected exception
becomes 500 "Internal error" and is logged with its traceback (never with a header).
Answers below 400 are logged at debug (thousands a second are normal and the metrics
count them); refusals and failures at info, so a default log shows every one of them.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Collection

from aiohttp import web
from aiohttp.typedefs import Middleware

from ..auth import Identity
from ..failures import Failure
from ..metrics import selfmetrics
from . import errors

log = logging.getLogger("trainjob_status_server.access")

REQUEST_ID = web.RequestKey("request_id", str)
TRAINJOB = web.RequestKey("trainjob", str)
"""``namespace/name`` of the TrainJob a post is for, once the path is matched."""
POSTER = web.RequestKey("poster", Identity)
"""Who a post is from, once the authenticator has vouched for it."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# A caller's request id is kept only if it cannot break or forge a log line.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")

# Answers after which the connection may hold unread body bytes: close it.
_CLOSE_AFTER = frozenset({400, 408, 413, 415})


def new_request_id() -> str:
    """16 hex digits for a request that brought no usable id of its own. They tell one
    request's log lines from another's and need not be secret: they come from the random
    module (reseeded in a forked child), not from a system call per request."""
    return f"{random.getrandbits(64):016x}"


async def no_server_header(_request: web.Request, response: web.StreamResponse) -> None:
    """An ``on_response_prepare`` hook: aiohttp names itself and the Python version in a
    ``Server`` header on every answer, telling a scanner which known bugs to try. For the
    metrics and probe ports, whose answers include aiohttp's own (a 404 from the router);
    the serving port's are all ``errors.Answer``, which drops the header without a
    signal per post."""
    response.headers.popall("Server", None)


def status_errors(not_posts: Collection[str]) -> Middleware:
    """The middleware; requests for the paths in ``not_posts`` (probes, the webhook) are
    logged but neither counted nor timed as status posts."""
    uncounted = frozenset(not_posts)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await _answer(request, handler, request.path not in uncounted)

    return middleware


async def _answer(request: web.Request, handler: Handler, counted: bool) -> web.StreamResponse:
    request_id = request.headers.get("X-Request-Id", "")
    if not _REQUEST_ID.fullmatch(request_id):
        request_id = new_request_id()
    request[REQUEST_ID] = request_id
    started = time.perf_counter()
    try:
        response = await handler(request)
    except errors.StatusError as exc:
        response = exc.response()
    except Failure as failure:
        response = errors.answer_for(failure).response()
    except web.HTTPNotFound:
        response = errors.not_found().response()
    except web.HTTPMethodNotAllowed:
        response = errors.not_found().response()
    except web.HTTPException as exc:
        # aiohttp's own refusals (e.g. a malformed request line) keep their code.
        response = errors.refused_by_aiohttp(exc.status, exc.reason).response()
    except Exception:
        log.exception("request failed", extra={"request_id": request_id})
        response = errors.internal_error().response()
    if response.status in _CLOSE_AFTER:
        response.force_close()
    response.headers["X-Request-Id"] = request_id
    duration = time.perf_counter() - started
    code = response.status
    if counted:
        selfmetrics.REQUEST_STATS.record(code, duration)
    level = logging.DEBUG if code < 400 else logging.INFO
    if not log.isEnabledFor(level):
        return response
    fields = {
        "method": request.method,
        "path": request.path,
        "code": code,
        "duration_ms": round(duration * 1000, 3),
        "trainjob": request.get(TRAINJOB),
        "request_id": request_id,
    }
    poster = request.get(POSTER)
    if poster is not None:
        fields.update(service_account=poster.service_account, pod=poster.pod)
    log.log(level, "request", extra=fields)
    return response
