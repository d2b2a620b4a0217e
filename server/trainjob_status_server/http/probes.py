"""The probe port: ``/healthz`` and ``/readyz`` alone, on a port of their own, with an
admission rule of its own.

The kubelet opens one connection per probe, sends its request at once and is answered
from memory; every answer here closes its connection (``Connection: close``). So a
connection that holds a probe slot for more than a moment has not sent its request:
such a connection is closed to make room for a newcomer (``slots.Slots``), after
``FIRST_REQUEST_TIMEOUT`` at the latest (the kubelet's default probe timeout; a probe
not sent by then has failed anyway), and one address may hold only ``PER_ADDRESS``
(liveness, readiness and startup probes may overlap). Scrapers holding every metrics
slot, or strangers holding connections to this port from any number of addresses,
cannot make a probe fail; a NetworkPolicy in front of it is welcome but not relied on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web

from .request_handling import no_server_header

CONNECTIONS = 64
PER_ADDRESS = 4
FIRST_REQUEST_TIMEOUT = 1.0

Handler = Callable[[web.BaseRequest], Awaitable[web.Response]]


def probe_app(healthz: Handler, readyz: Handler) -> web.Application:
    """The probe port's application: the two probes, each answer closing its connection."""
    app = web.Application()
    app.on_response_prepare.append(no_server_header)
    app.on_response_prepare.append(close_after)  # aiohttp's own answers (404)
    app.router.add_get("/healthz", closing(healthz))
    app.router.add_get("/readyz", closing(readyz))
    return app


async def close_after(_request: web.Request, response: web.StreamResponse) -> None:
    """An ``on_response_prepare`` hook: the answer closes its connection. aiohttp runs
    it after it has written the head's fields, so the header is set here too."""
    response.force_close()
    response.headers[hdrs.CONNECTION] = "close"


def closing(handler: Handler) -> Handler:
    """``handler`` whose answers close their connection, set on the answer itself rather
    than left to the prepare hook."""

    async def closed(request: web.BaseRequest) -> web.Response:
        response = await handler(request)
        response.force_close()
        return response

    return closed
