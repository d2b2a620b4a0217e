"""How every request of the serving port is answered: request ids, one log line per
request, errors as Status, and the request counter and duration histogram.

A refusal of the domain (``failures.Failure``) is answered as ``errors.answer_for`` says;
an unexpected exception becomes 500 "Internal error" and is logged with its traceback
(never with a header). Answers below 400 are logged at debug (thousands a second are
normal and the metrics count them); refusals and failures at info, so a default log
shows every one of them. ``serving.ServingHandler`` routes each request here.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Awaitable

from aiohttp import web

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

# A caller's request id is kept only if it cannot break or forge a log line.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")

# Answers after which the connection may hold unread body bytes: close it.
_CLOSE_AFTER = frozenset({400, 408, 413, 415, 417})


def new_request_id() -> str:
    """16 hex digits for a request that brought no usable id of its own. They tell one
    request's log lines from another's and need not be secret: they come from the random
    module (reseeded in a forked child), not from a system call per request."""
    return f"{random.getrandbits(64):016x}"


async def no_server_header(_request: web.Request, response: web.StreamResponse) -> None:
    """An ``on_response_prepare`` hook: aiohttp names itself and the Python version in a
    ``Server`` header on every answer, telling a scanner which known bugs to try. For the
    metrics and probe ports, whose answers include aiohttp's own (a 404 from the router);
    the serving port's are all ``responses.Answer``, which drops the header without a
    signal per post."""
    response.headers.popall("Server", None)


async def answer(
    request: web.BaseRequest, handling: Awaitable[web.StreamResponse], counted: bool
) -> web.StreamResponse:
    """The answer to ``request``: what ``handling`` (its handler's coroutine, not started
    yet) returns, or the Status its failure calls for. A ``counted`` request (a status
    post, or a request for no route) is counted and timed as a post; probes and the
    webhook are logged only."""
    request_id = request.headers.get("X-Request-Id")
    if request_id is None or not _REQUEST_ID.fullmatch(request_id):
        request_id = new_request_id()
    request[REQUEST_ID] = request_id
    started = time.perf_counter()
    try:
        response = await handling
    except errors.StatusError as exc:
        response = exc.response()
    except Failure as failure:
        response = errors.answer_for(failure).response()
    except web.HTTPException as exc:
        # aiohttp's own refusals, raised by what a handler calls, keep their code.
        response = errors.refused_by_aiohttp(exc.status, exc.reason).response()
    except ConnectionResetError:
        # The client went away in the middle of its request (closed, reset, or closed
        # for a newcomer while it dripped its body): nothing failed here, and no answer
        # can reach it. Neither counted as a post nor logged as an error.
        log.info("request abandoned: connection lost", extra={"request_id": request_id})
        return errors.bad_request("connection lost").response()
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
