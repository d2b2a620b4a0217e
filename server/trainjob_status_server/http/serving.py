"""The serving port's one request handler: it routes each request (the status path, the
probes, the webhook) and has ``answering.answer`` answer it.

The port runs on aiohttp's low-level server (``web.Server``), not an Application: a
status post comes thousands of times a second, and an Application spends a share of
each one's CPU on what this port does not use (router resolution into a match-info
object, the middleware chain, asking for the event loop, which on Python 3.11 is a
getpid system call). Measured: docs/scaling.md. The routes match as aiohttp's router
matched them, so every path answers as before.

Anything but the routes is the peer's 404 "Not found", whatever the method. A request
with an ``Expect`` header other than ``100-continue`` is refused with 417, as Go's
server (the peer's) refuses it; ``100 Continue`` itself is sent when the handler first
waits for the body (``endpoint.read_body``), so a post refused before that (its token,
its size) never gets it.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection, Mapping

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11

from trainjob_status.contract import STATUS_PATH

from . import errors
from .answering import answer
from .endpoint import expects_continue

Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
StatusHandler = Callable[[web.BaseRequest, str, str], Awaitable[web.StreamResponse]]


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
    """``status`` answers POSTs to the status path; ``gets`` (also asked with HEAD) and
    ``posts`` are the other routes by exact path. Requests for the paths in
    ``uncounted`` are logged but neither counted nor timed as status posts."""

    def __init__(
        self,
        status: StatusHandler,
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
        handler: Handler | None = None
        if method == hdrs.METH_POST:
            target = status_target(path)
            if target is not None:
                return await answer(request, self._status(request, *target), True)
            handler = self.posts.get(path)
        elif method == hdrs.METH_GET or method == hdrs.METH_HEAD:
            handler = self.gets.get(path)
        counted = path not in self.uncounted
        if handler is None:
            return await answer(request, _not_found(), counted)
        return await answer(request, _checked(request, handler), counted)

    async def _status(
        self, request: web.BaseRequest, namespace: str, name: str
    ) -> web.StreamResponse:
        _check_expectation(request)
        return await self.status(request, namespace, name)


async def _checked(request: web.BaseRequest, handler: Handler) -> web.StreamResponse:
    _check_expectation(request)
    return await handler(request)


async def _not_found() -> web.StreamResponse:
    raise errors.not_found()


def _check_expectation(request: web.BaseRequest) -> None:
    """417 for an expectation other than 100-continue (HTTP/1.1; HTTP/1.0 has none)."""
    if (
        hdrs.EXPECT in request.headers
        and request.version >= HttpVersion11
        and not expects_continue(request)
    ):
        raise errors.expectation_failed()
