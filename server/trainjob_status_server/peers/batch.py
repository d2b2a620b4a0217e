"""What a stopping replica hands a replica that stays, on the wire (pure).

A batch is one JSON object::

    {"updates": [{"namespace": "team-a", "name": "job1",
                  "received": "2026-12-07T10:00:01.5Z",
                  "trainerStatus": {...}}, ...]}

in the order the receiver takes them (a final update before the newer one that waited
behind it). Each update keeps the time its post was received (updates are ordered by it
and its ``lastUpdatedTime``) and is validated again where it is taken, as a post is: the
receiver trusts the sender's identity, not its bytes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..status.validation import (
    EncodedStatus,
    PayloadError,
    decode_payload,
    format_time,
    parse_trainer_status,
)

HANDOVER_PATH = "/apis/trainjob-status.kubeflow.org/v1/handover"
"""Where a replica takes handed-over updates: on the serving port, over its TLS."""

NEWEST_PATH = "/apis/trainjob-status.kubeflow.org/v1/newest"
"""Where a replica answers, to another, the newest updates it holds of a namespace's
TrainJobs (``?namespace=``, and ``&name=`` for one), as a batch: the aggregated API's
reads on any replica return the newest update whichever replica received it."""

MAX_BATCH_BYTES = 4 * 1024 * 1024
"""A batch's body at most: a few hundred updates of typical size, 64 of the largest."""

MAX_NAME = 253  # a Kubernetes object name (and more than a namespace's 63)


@dataclass(frozen=True, slots=True)
class Handed:
    """One TrainJob's accepted update, as handed over."""

    namespace: str
    name: str
    update: EncodedStatus

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def _item(handed: Handed) -> dict[str, Any]:
    return {
        "namespace": handed.namespace,
        "name": handed.name,
        "received": format_time(handed.update.received),
        "trainerStatus": json.loads(handed.update.json),
    }


def encode_batch(items: Sequence[Handed]) -> bytes:
    return json.dumps({"updates": [_item(h) for h in items]}, separators=(",", ":")).encode()


def encoded_size(handed: Handed) -> int:
    """About what ``handed`` adds to a batch (its update's JSON and the names around it)."""
    return len(handed.update.json) + len(handed.namespace) + len(handed.name) + 96


def _name(item: dict[str, Any], field: str, index: int) -> str:
    value = item.get(field)
    if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME:
        raise PayloadError(f"updates[{index}].{field}: not a name")
    return value


def _received(item: dict[str, Any], index: int) -> datetime:
    value = item.get("received")
    try:
        stamp = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        stamp = None
    if stamp is None or stamp.tzinfo is None:
        raise PayloadError(f"updates[{index}].received: not an RFC 3339 time")
    return stamp


def decode_batch(raw: bytes) -> list[Handed]:
    """The updates of a batch body, each validated as a post's is: PayloadError for a
    body or field of the wrong shape, ValidationFailed for an update the CRD refuses."""
    payload = decode_payload(raw)
    items = payload.get("updates")
    if not isinstance(items, list):
        raise PayloadError("updates: not a list")
    batch = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise PayloadError(f"updates[{index}]: not an object")
        namespace, name = _name(item, "namespace", index), _name(item, "name", index)
        received = _received(item, index)
        update = parse_trainer_status(item, trainjob=name, received=received)
        if update is None:
            raise PayloadError(f"updates[{index}].trainerStatus: missing")
        batch.append(Handed(namespace, name, update.encoded(received)))
    return batch
