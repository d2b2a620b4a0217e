"""The replicas' endpoints. The hand-over: where another replica gives this one updates
to write, those of the TrainJobs this one owns (``peers/forwarding.py``) and, at
shutdown, those its drain could not write (``peers/replicas.py``). The newest: what this
one holds of a namespace's TrainJobs, for another one's aggregated API reads.

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
from ..peers.batch import (
    HANDOVER_PATH,
    MAX_BATCH_BYTES,
    MAX_NAME,
    NEWEST_PATH,
    Handed,
    decode_batch,
    encode_batch,
)
from ..status.validation import EncodedStatus
from . import errors
from .endpoint import read_body
from .responses import Answer, json_answer, json_object_answer

__all__ = ["HANDOVER_PATH", "NEWEST_PATH", "HandOverEndpoint", "NewestEndpoint"]


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


class Holder(Protocol):
    """What updates a replica holds: ``status.writer.CoalescingWriter``."""

    def newest_in(self, namespace: str | None) -> list[tuple[tuple[str, str], EncodedStatus]]:
        """The newest accepted update of each TrainJob of ``namespace`` it holds."""
        ...


@dataclass(frozen=True)
class NewestEndpoint:
    """``GET NEWEST_PATH?namespace=...[&name=...]``: the newest updates this replica
    holds (pending, being written, or written and not yet seen by its watch), for
    another replica only."""

    peers: PeerCheck
    writer: Holder

    async def handle(self, request: web.BaseRequest) -> Answer:
        await self.peers.check(request.headers.get("Authorization"), request.remote or "")
        namespace, name = request.query.get("namespace"), request.query.get("name")
        for value in (namespace, name):
            if value is not None and not 0 < len(value) <= MAX_NAME:
                raise errors.bad_request("namespace and name: not names")
        if namespace is None and name is not None:
            raise errors.bad_request("a name needs its namespace")
        held = [
            Handed(key[0], key[1], update)
            for key, update in self.writer.newest_in(namespace)
            if name is None or key[1] == name
        ]
        return json_answer(encode_batch(held))


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
