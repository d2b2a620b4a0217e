"""The serving app's middleware: request ids, one log line per request, errors as Status.

Unknown paths and methods become the peer's 404 "Not found"; an unexpected exception
becomes 500 "Internal error" and is logged with its traceback (never with a header).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable

from aiohttp import web

from . import errors

log = logging.getLogger("trainjob_status_server.access")

REQUEST_ID = web.RequestKey("request_id", str)
TRAINJOB = web.RequestKey("trainjob", str)
"""``namespace/name`` of the TrainJob a post is for, once the path is matched."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# A caller's request id is kept only if it cannot break or forge a log line.
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")

# Answers after which the connection may hold unread body bytes: close it.
_CLOSE_AFTER = frozenset({408, 413})


@web.middleware
async def status_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    request_id = request.headers.get("X-Request-Id", "")
    if not _REQUEST_ID.fullmatch(request_id):
        request_id = uuid.uuid4().hex[:16]
    request[REQUEST_ID] = request_id
    started = time.perf_counter()
    try:
        response = await handler(request)
    except errors.StatusError as exc:
        response = exc.response()
    except web.HTTPNotFound:
        response = errors.not_found().response()
    except web.HTTPMethodNotAllowed:
        response = errors.not_found().response()
    except web.HTTPException as exc:
        # aiohttp's own refusals (e.g. a malformed request line) keep their code.
        response = errors.StatusError(exc.status, exc.reason, exc.reason).response()
    except Exception:
        log.exception("request failed", extra={"request_id": request_id})
        response = errors.internal_error().response()
    if response.status in _CLOSE_AFTER:
        response.force_close()
    response.headers["X-Request-Id"] = request_id
    log.info(
        "request",
        extra={
            "method": request.method,
            "path": request.path,
            "code": response.status,
            "duration_ms": round((time.perf_counter() - started) * 1000, 3),
            "trainjob": request.get(TRAINJOB),
            "request_id": request_id,
        },
    )
    return response
