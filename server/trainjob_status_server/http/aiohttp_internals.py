"""The one module that touches private parts of aiohttp and asyncio.

aiohttp's public API covers what the server needs except what is listed here; each use
says why it is needed, what breaks without it, and the versions it was checked against.
Checked: aiohttp 3.14.4 and 3.14.5 (the range of ``versions.py``, which ``serve``
enforces at start and ``server/pyproject.toml`` declares; the tests of this module and
of the serving path run on both), asyncio of CPython 3.11 (the tests) and of 3.12 and
3.13 (``sslproto`` read: the same names, set in the same places).
``tests/server/test_aiohttp_internals.py`` fails if any private name used here
is missing from the installed versions; ``tests/server/test_private_access.py`` fails if
another module of the server reaches into a private name of aiohttp or asyncio.

What is used, by what:

- ``RequestHandler._parser``, ``_request_count``, ``_request_in_progress``, ``_messages``:
  ``RequestHandlerBase``.
- ``BaseSite._server``: ``attach_server``.
- ``StreamResponse._prepare_headers`` (overridden): ``ServerlessResponse``.
- asyncio's ``sslproto.SSLProtocol`` (a private module) and its ``_ssl_buffer``,
  ``_ssl_buffer_view``: ``SharedBufferTLS``.

What aiohttp's protocol is relied on to do, beyond its names (the same test watches each
on a real connection):

- it asks its parser (``_parser``) only ``feed_data``, ``feed_eof``, ``message_consumed``,
  ``set_upgraded`` and ``pause_reading``, and ``feed_data`` returns ``(requests,
  upgraded, tail)``: ``protocol.HeadBudget`` stands in for the parser with those five;
- a request its parser refuses, and a handler's exception, reach ``handle_error`` (the
  parser's ``HttpProcessingError``; status 500 and the exception), and aiohttp writes the
  answer it returns: ``StatusRequestHandler.handle_error`` answers both as Status.
"""

from __future__ import annotations

import asyncio
import ssl
import weakref
from asyncio import sslproto
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import hdrs, web

_Parser = TypeVar("_Parser")

# -- the request handler (one per connection) ----------------------------------------------


class RequestHandlerBase(web.RequestHandler):
    """aiohttp's protocol for one connection, with names for the private state
    ``protocol.StatusRequestHandler`` needs; aiohttp has no public way to any of it."""

    def wrap_parser(self, wrap: Callable[[Any], _Parser]) -> _Parser:
        """Puts ``wrap(parser)`` where aiohttp's request parser was: every read goes
        through it. Needed for the bound on a request's head (``protocol.HeadBudget``):
        aiohttp bounds each line, not the head. Without it a client may hold a hundred
        lines of 8 KiB each before it authenticates. aiohttp makes the parser in
        ``RequestHandler.__init__`` and feeds it from ``data_received`` (``_parser``)."""
        wrapped = wrap(self._parser)
        self._parser = wrapped  # type: ignore[assignment]  # stands in for the parser
        return wrapped

    @property
    def between_requests(self) -> bool:
        """Whether a kept-alive connection has answered a request and has neither one in
        progress nor one parsed and waiting (``_request_count``,
        ``_request_in_progress``, ``_messages``). Needed to close an idle connection to
        make room for a new one (``slots.Slots``) without dropping a request."""
        return bool(
            self._request_count > 0 and not self._request_in_progress and not self._messages
        )


# -- the site (one per listening port) -----------------------------------------------------


def attach_server(site: web.BaseSite, server: asyncio.AbstractServer) -> None:
    """Makes ``server`` (from ``loop.create_server``) the site's listening server, as
    ``web.TCPSite.start`` does: aiohttp's runner closes it on shutdown and lists its
    addresses through ``BaseSite._server``. Needed because ``listener.CappedSite``
    makes its own protocols (slots, deadlines, TLS), which ``TCPSite`` cannot."""
    site._server = server


# -- the answer (one per request) ----------------------------------------------------------


class ServerlessResponse(web.Response):
    """aiohttp's response without the ``Server`` header aiohttp adds to every answer
    (it names aiohttp and the Python version, telling a scanner which known bugs to
    try). aiohttp adds it in ``StreamResponse._prepare_headers``, the one step between
    the answer's own headers and their writing; the serving port runs on aiohttp's
    low-level ``web.Server``, which has no ``on_response_prepare`` signal (the
    Application's public way, used on the metrics and probe ports) to drop it there.
    Without this override every answer of the serving port names aiohttp's version."""

    async def _prepare_headers(self) -> None:
        await super()._prepare_headers()
        self.headers.popall(hdrs.SERVER, None)


# -- TLS (one layer per connection) --------------------------------------------------------


class SharedBufferTLS(sslproto.SSLProtocol):
    """asyncio's TLS protocol (what ``create_server(ssl=...)`` builds, from the private
    module ``asyncio.sslproto``) with a receive buffer of one TLS record, not 256 KiB,
    shared by every connection of the event loop. asyncio fills it and hands its bytes
    to the TLS object in one synchronous step (get_buffer, recv_into, buffer_updated on
    the selector loop), so no two connections ever use it at once. Without it each idle
    or stalled TLS connection holds 256 KiB (``_ssl_buffer``, ``_ssl_buffer_view``, set
    in ``__init__``; ``get_buffer`` reallocates only for a size over ``max_size``), and
    the allocator keeps much of it after a crowd of them has gone: docs/connections.md."""

    max_size = 16 * 1024

    def __init__(self, loop: asyncio.AbstractEventLoop, *args: Any, **kwargs: Any) -> None:
        super().__init__(loop, *args, **kwargs)
        self._ssl_buffer_view = _receive_buffer(loop)
        self._ssl_buffer = self._ssl_buffer_view.obj


_RECEIVE_BUFFERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, memoryview] = (
    weakref.WeakKeyDictionary()
)


def _receive_buffer(loop: asyncio.AbstractEventLoop) -> memoryview:
    view = _RECEIVE_BUFFERS.get(loop)
    if view is None:
        view = _RECEIVE_BUFFERS[loop] = memoryview(bytearray(SharedBufferTLS.max_size))
    return view


def tls_protocol(
    loop: asyncio.AbstractEventLoop,
    app: asyncio.Protocol,
    context: ssl.SSLContext,
    handshake_timeout: float,
) -> SharedBufferTLS:
    """What ``create_server(ssl=...)`` builds around ``app``, with the shared buffer."""
    return SharedBufferTLS(
        loop,
        app,
        context,
        None,  # no waiter: nothing awaits the handshake
        server_side=True,
        ssl_handshake_timeout=handshake_timeout,
    )


# Every private name used above, by the class or module that holds it: the test of this
# module checks each one exists on the installed aiohttp and Python.
RELIED_ON: dict[str, tuple[str, ...]] = {
    "aiohttp.web_protocol.RequestHandler (instance)": (
        "_parser",
        "_request_count",
        "_request_in_progress",
        "_messages",
    ),
    "aiohttp.web_runner.BaseSite (slot)": ("_server",),
    "aiohttp.web_response.Response (instance)": ("_prepare_headers",),
    "asyncio.sslproto.SSLProtocol (instance)": ("_ssl_buffer", "_ssl_buffer_view", "max_size"),
}
