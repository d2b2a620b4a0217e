"""The answer type of the serving port: every answer it sends, 200s and refusals alike.

An ``Answer`` is an aiohttp ``web.Response``, made and written by aiohttp as any other,
with two differences:

- no ``Server`` header (``aiohttp_internals.ServerlessResponse``);
- it is written one event-loop turn after the handler returns it. By then the loop has
  read, and started, the other requests that were ready when this one was handled, and
  their answers go out together after the reads. Measured
  (docs/measurements/2026-12-05-request-path.md, "Readability against the budget"):
  written at once, a post costs the server 19-30% more CPU under load, on loopback and
  across a veth pair alike.
  ``tests/server/test_answer_turn.py`` pins what it relies on: posts that arrive
  together are all handled before any of their answers is sent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from .aiohttp_internals import ServerlessResponse


class Answer(ServerlessResponse):
    """An answer of the serving port (``web.Response``'s arguments)."""

    async def write_eof(self, data: bytes = b"") -> None:
        await asyncio.sleep(0)  # one loop turn: see the module's docstring
        await super().write_eof(data)


def json_answer(
    body: bytes, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> Answer:
    """An answer whose body is ``body``, JSON already encoded."""
    return Answer(status=status, body=body, content_type="application/json", headers=headers)


def json_object_answer(body: Mapping[str, Any]) -> Answer:
    """A 200 whose body is ``body`` as compact JSON."""
    return json_answer(json.dumps(body, separators=(",", ":")).encode())
