"""The serving port's one request handler: it routes each request (the status path, the
probes, the webhook) and has ``request_handling.answer`` answer it.

The port runs on aiohttp's low-level server (``web.Server``), not an Application: a
status post comes thousands of times a second, and an Application spends a share of
each one's CPU on what this port does not use (router resolution into a match-info
object, the middleware chain, asking for the event loop, which on Python 3.11 is a
getpid system call): 5-14% more CPU per post as an Application with its router and a
middleware, measured in docs/measurements/2026-12-07-request-path.md. The routes match
as aiohttp's router matched them (``tests/server/test_serving.py``), so every path
answers as an Application's would.

Anything but the routes is Kubeflow Trainer's 404 "Not found", whatever the method. A request
with an ``Expect`` header other than ``100-continue`` is refused with 417, as Go's
server (Kubeflow Trainer's) refuses it; ``100 Continue`` itself is sent when the handler first
waits for the body (``endpoint.read_body``), so a post refused before that (its token,
its size) never gets it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Coroutine, Mapping
from typing import Any

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11

from trainjob_status.contract import STATUS_PATH

from . import errors
from .endpoint import expects_continue
from .request_handling import answer

Handling = Coroutine[Any, Any, web.StreamResponse]
Handler = Callable[[web.BaseRequest], Handling]
StatusHandler = Callable[[web.BaseRequest, str, str], Handling]


def _route_pattern(path: str) -> re.Pattern[str]:
    """What aiohttp's router makes of a path with ``{variables}``: each matches one
    non-empty segment with neither ``{`` nor ``}``, the rest literally."""
    pattern = ""
    for literal, variable in re.findall(r"([^{}]*)(?:\{(\w+)\})?", path):
        pattern += re.escape(literal)
        if variable:
            pattern += f"(?P<{variable}>[^{{}}/]+)"
    return re.compile(pattern)


_STATUS = _route_pattern(STATUS_PATH)
_READS = frozenset({hdrs.METH_GET, hdrs.METH_HEAD})  # what the ``gets`` routes answer


def status_target(path: str) -> tuple[str, str] | None:
    """The namespace and name of a status path (``path`` as yarl's ``path_safe`` gives it,
    the form aiohttp routes on: decoded, but for ``%2F`` and ``%25``), or None. In a
    segment, ``%2F`` and ``%25`` are then decoded as aiohttp decodes them."""
    match = _STATUS.fullmatch(path)
    if match is None:
        return None
    namespace, name = match.group("namespace", "name")
    return _unquote_segment(namespace), _unquote_segment(name)


def _unquote_segment(value: str) -> str:
    if "%" not in value:
        return value
    return value.replace("%2F", "/").replace("%25", "%")


class ServingHandler:
    """``status`` answers POSTs to the status path (None: a 404 like any unknown path);
    ``gets`` (also asked with HEAD) and ``posts`` are the other routes by exact path.
    Requests for the paths in ``uncounted`` are logged but neither counted nor timed as
    status posts."""

    def __init__(
        self,
        status: StatusHandler | None,
        *,
        gets: Mapping[str, Handler],
        posts: Mapping[str, Handler] | None = None,
        uncounted: Collection[str] = (),
    ) -> None:
        self.status = status
        self.gets = dict(gets)
        self.posts = dict(posts or {})
        self.uncounted = frozenset(uncounted)

    async def __call__(self, request: web.BaseRequest) -> web.StreamResponse:
        url = request.rel_url
        # The path as the router read it; a path with no escape in it is that already.
        path = url.raw_path
        if "%" in path:
            path = url.path_safe
        method = request.method
        handling: Handling | None = None  # the route's handler, not started yet
        if method == hdrs.METH_POST:
            target = status_target(path)
            if target is not None and self.status is not None:
                handling = self.status(request, *target)
            elif (handler := self.posts.get(path)) is not None:
                handling = handler(request)
        elif method in _READS and (handler := self.gets.get(path)) is not None:
            handling = handler(request)
        if handling is None:
            handling = _refused(errors.not_found())
        elif _unmet_expectation(request):
            handling.close()  # never started: dropped without a "never awaited" warning
            handling = _refused(errors.expectation_failed())
        return await answer(request, handling, path not in self.uncounted)


async def _refused(error: errors.StatusError) -> web.StreamResponse:
    raise error


def _unmet_expectation(request: web.BaseRequest) -> bool:
    """An expectation other than 100-continue (HTTP/1.1; HTTP/1.0 has none): 417."""
    return (
        hdrs.EXPECT in request.headers
        and request.version >= HttpVersion11
        and not expects_continue(request)
    )
