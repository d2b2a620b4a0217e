"""Every private name of aiohttp and asyncio the fence (``http/aiohttp_internals.py``)
relies on exists on the installed versions: a release that renames one fails here, not on
a request. Each is looked up on a real object of the kind the fence uses."""

from __future__ import annotations

import asyncio
import ssl
from asyncio import sslproto
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from trainjob_status_server.http import aiohttp_internals
from trainjob_status_server.http.aiohttp_internals import RELIED_ON


async def _ok(_request: web.BaseRequest) -> web.StreamResponse:
    return web.Response()


def _request_handler() -> object:
    return web.RequestHandler(web.Server(_ok), loop=asyncio.get_running_loop())


def _site() -> object:
    return web.BaseSite


def _response() -> object:
    return web.Response(body=b"{}", content_type="application/json")


def _tls() -> object:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    return sslproto.SSLProtocol(
        asyncio.get_running_loop(), asyncio.Protocol(), context, None, server_side=True
    )


# How to make an object of each kind the fence names, to look its names up on.
MAKERS: dict[str, Callable[[], Any]] = {
    "aiohttp.web_protocol.RequestHandler (instance)": _request_handler,
    "aiohttp.web_runner.BaseSite (slot)": _site,
    "aiohttp.web_response.Response (instance)": _response,
    "asyncio.sslproto.SSLProtocol (instance)": _tls,
}


def test_every_kind_the_fence_names_is_checked() -> None:
    assert set(RELIED_ON) == set(MAKERS)


@pytest.mark.parametrize("kind", sorted(RELIED_ON))
async def test_each_private_name_exists(kind: str) -> None:
    made = MAKERS[kind]()
    missing = [name for name in RELIED_ON[kind] if not hasattr(made, name)]
    assert missing == [], f"{kind} no longer has {missing}: see http/aiohttp_internals.py"


async def test_the_shared_tls_buffer_replaces_asyncios_own() -> None:
    """What ``SharedBufferTLS`` relies on: asyncio reads into ``_ssl_buffer_view`` through
    ``get_buffer``, which hands out the buffer set in ``__init__`` for any size asked."""
    loop = asyncio.get_running_loop()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    first = aiohttp_internals.tls_protocol(loop, asyncio.Protocol(), context, 5.0)
    second = aiohttp_internals.tls_protocol(loop, asyncio.Protocol(), context, 5.0)
    for asked in (-1, 1, 2**14, 2**18):
        assert first.get_buffer(asked).obj is second.get_buffer(asked).obj
    assert len(first.get_buffer(-1)) == aiohttp_internals.SharedBufferTLS.max_size
