"""The answer type of the serving port: every answer it sends, 200s and refusals alike.

An ``Answer`` is an aiohttp ``web.Response`` (made and used as one) that is written in
one piece and without aiohttp's ``Server`` header: the serving port runs on aiohttp's
low-level ``web.Server``, which has no ``on_response_prepare`` signal to drop that
header. How it is written lives behind the fence (``aiohttp_internals.OneWriteResponse``);
``tests/server/test_answer_framing.py`` checks over a socket that it sends what
``web.Response`` sends, less ``Server``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .aiohttp_internals import OneWriteResponse


class Answer(OneWriteResponse):
    """An answer of the serving port (``web.Response``'s arguments)."""


def json_answer(
    body: bytes, *, status: int = 200, headers: Mapping[str, str] | None = None
) -> Answer:
    """An answer whose body is ``body``, JSON already encoded."""
    return Answer(status=status, body=body, content_type="application/json", headers=headers)


def json_object_answer(body: Mapping[str, Any]) -> Answer:
    """A 200 whose body is ``body`` as compact JSON."""
    return json_answer(json.dumps(body, separators=(",", ":")).encode())
