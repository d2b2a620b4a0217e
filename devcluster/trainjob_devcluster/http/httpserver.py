"""The development cluster's HTTP server: aiohttp's web server with one route for every
path, adapted to the cluster's handler.

A handler gets the whole request (its body read, at most ``max_body`` bytes; a longer
one is answered 413 as kube-apiserver answers it) and returns a ``Response``, or a
coroutine for answers that wait (a stalled request, a watch). A coroutine may stream its
answer through the ``Stream`` it was given and then return None. When the client goes
away while a coroutine runs, the coroutine is cancelled.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from multidict import CIMultiDictProxy, MultiMapping

from ..common.status import ApiError
from ..storage.store import dumps

log = logging.getLogger(__name__)

# Go's net/http limit on a request's line and headers (http.DefaultMaxHeaderBytes): here
# the limit of one line and of one header, as aiohttp counts.
MAX_HEAD_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # percent-decoded
    query: MultiMapping[str]  # the first value of a repeated parameter is query[name]
    headers: CIMultiDictProxy[str]
    body: bytes
    scheme: str  # http or https, as the server listens

    @property
    def host(self) -> str:
        return self.headers.get("Host", "")


@dataclass(slots=True)
class Response:
    status: int
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


class Stream:
    """The chunked answer of one request, for handlers that stream (watches)."""

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self.response: web.StreamResponse | None = None

    async def start(
        self, code: int, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        if self.response is not None:
            raise RuntimeError("the answer has started")
        response = web.StreamResponse(
            status=code, headers={**(headers or {}), "Content-Type": content_type}
        )
        response.enable_chunked_encoding()
        self.response = response
        await response.prepare(self._request)

    async def write(self, data: bytes) -> None:
        """Send ``data`` as one chunk; waits while the client is not reading."""
        if self.response is None:
            raise RuntimeError("write outside the answer")
        if data:
            await self.response.write(data)


HandlerResult = Response | Coroutine[Any, Any, Response | None]
Handler = Callable[[Request, Stream], HandlerResult]


def _internal_error() -> Response:
    return Response(500, dumps(ApiError(500, "InternalError", "internal error").to_json()))


def _too_large(limit: int) -> web.Response:
    """The real server's answer to a body over its limit; the connection then closes
    with what is left of the body unread."""
    error = ApiError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {limit}")
    answer = web.Response(
        status=413, body=dumps(error.to_json()), headers={"Content-Type": "application/json"}
    )
    answer.force_close()
    return answer


def _web_response(response: Response) -> web.Response:
    headers = {**response.headers, "Content-Type": response.content_type}
    return web.Response(status=response.status, body=response.body, headers=headers)


async def _no_server_header(_request: web.Request, response: web.StreamResponse) -> None:
    """kube-apiserver names no server software; aiohttp would name itself."""
    response.headers.popall("Server", None)


class HttpServer:
    """Listens on ``host:port`` (TLS when given a context) and serves ``handler``."""

    def __init__(
        self,
        handler: Handler,
        host: str,
        port: int,
        *,
        ssl_context: ssl.SSLContext | None,
        max_body: int,
        grace: float = 2.0,
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.max_body = max_body
        app = web.Application(client_max_size=max_body)
        app.router.add_route("*", "/{path:.*}", self._serve)
        app.on_response_prepare.append(_no_server_header)
        self._runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            # A watch or a stalled request ends when its client goes.
            handler_cancellation=True,
            # What stop() gives requests being served before it closes their connections.
            shutdown_timeout=grace,
            # A body left unread (413) is not waited for: the connection closes at once.
            lingering_time=0,
            max_line_size=MAX_HEAD_BYTES,
            max_field_size=MAX_HEAD_BYTES,
        )

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        length = request.content_length
        if length is not None and length > self.max_body:
            return _too_large(self.max_body)
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return _too_large(self.max_body)
        ours = Request(
            method=request.method,
            path=request.path,
            query=request.query,
            headers=request.headers,
            body=body,
            scheme=request.scheme,
        )
        stream = Stream(request)
        try:
            answer = self.handler(ours, stream)
            response = answer if isinstance(answer, Response) else await answer
        except ConnectionError:
            raise  # the client went while its answer streamed: aiohttp notes it
        except Exception:
            log.exception("handler failed for %s %s", request.method, request.path)
            response = _internal_error()
        if stream.response is not None:
            if response is not None:
                log.error("%s %s streamed and answered", request.method, request.path)
            return stream.response
        if response is None:
            log.error("%s %s had no answer", request.method, request.path)
            response = _internal_error()
        return _web_response(response)

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            self.host,
            self.port,
            ssl_context=self.ssl_context,
            reuse_address=True,
            backlog=1024,
        )
        await site.start()
        self.port = site.port

    async def stop(self) -> None:
        """Stop listening; give requests being served the grace period, then close every
        connection."""
        await self._runner.cleanup()
