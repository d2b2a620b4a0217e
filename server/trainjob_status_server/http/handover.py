"""The hand-over endpoint: where another replica gives this one updates to write, those
of the TrainJobs this one owns (``peers/forwarding.py``) and, at shutdown, those its
drain could not write (``peers/replicas.py``).

Only another replica may send them (``auth.peers.PeerGate``, before the body is read).
Each update is validated again, as a post is, then taken by the writer as if posted
here, with the time its post was first received; a batch is taken whole or not at all
(a stopping replica refuses it with 503, and the sender tries the next replica).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from ..metrics import selfmetrics
from ..peers.batch import HANDOVER_PATH, MAX_BATCH_BYTES, Handed, decode_batch
from ..status.validation import EncodedStatus
from . import errors
from .endpoint import read_body
from .responses import Answer, json_object_answer

__all__ = ["HANDOVER_PATH", "HandOverEndpoint"]


class PeerCheck(Protocol):
    """Whether a request comes from another replica: ``auth.peers.PeerGate``."""

    async def check(self, authorization: str | None, source: str) -> None:
        """Raises a ``failures.Failure`` for a sender that is not one."""
        ...


class Successor(Protocol):
    """Takes handed-over updates: ``status.writer.CoalescingWriter``."""

    def adopt(self, updates: Sequence[tuple[tuple[str, str], EncodedStatus]]) -> None:
        """Raises ``failures.ShuttingDown`` (taking none) once this replica stops."""
        ...


@dataclass(frozen=True)
class HandOverEndpoint:
    peers: PeerCheck
    writer: Successor
    read_timeout: float

    async def handle(self, request: web.BaseRequest) -> Answer:
        if (request.content_length or 0) > MAX_BATCH_BYTES:
            raise errors.payload_too_large()
        await self.peers.check(request.headers.get("Authorization"), request.remote or "")
        raw = await read_body(request, MAX_BATCH_BYTES, self.read_timeout)
        batch: list[Handed] = decode_batch(raw)
        self.writer.adopt([(handed.key, handed.update) for handed in batch])
        selfmetrics.PEER_UPDATES.labels("taken").inc(len(batch))
        return json_object_answer({"taken": len(batch)})
