"""The other replicas, as the EndpointSlices list them, and what a stopping replica hands
them: the pure parts (``peers/ring.py``, ``peers/batch.py``), and the forwarder's count
of what it is giving."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections import Counter
from typing import Any

import pytest

from trainjob_status_server.peers.batch import Handed, decode_batch, encode_batch
from trainjob_status_server.peers.forwarding import Forwarder, queued
from trainjob_status_server.peers.ring import Peer, ranked, ready_peers
from trainjob_status_server.status.validation import (
    EncodedStatus,
    PayloadError,
    ValidationFailed,
    parse_trainer_status,
)

RECEIVED = dt.datetime(2026, 12, 7, 10, 0, 1, 500_000, tzinfo=dt.UTC)


def endpoint(address: str, **conditions: bool) -> dict[str, Any]:
    return {"addresses": [address, "10.9.9.9"], "conditions": conditions}


def slice_of(*endpoints: dict[str, Any], port: int = 10443, **fields: Any) -> dict[str, Any]:
    return {
        "addressType": "IPv4",
        "endpoints": list(endpoints),
        "ports": [
            {"name": "webhook", "port": 9443},
            {"name": "status-server", "port": port},
        ],
        **fields,
    }


def test_ready_peers_are_the_ready_endpoints_on_the_status_port() -> None:
    slices = [
        slice_of(
            endpoint("10.0.0.2", ready=True),
            endpoint("10.0.0.1"),  # no condition: ready, as the API defines it
            endpoint("10.0.0.3", ready=False),
            endpoint("10.0.0.4", ready=True, terminating=True),
        ),
        slice_of(endpoint("10.0.0.1", ready=True)),  # listed twice: once
        slice_of(endpoint("10.0.1.1"), port=20443),
        slice_of(endpoint("pod.example"), addressType="FQDN"),
        {"addressType": "IPv4", "endpoints": [endpoint("10.0.2.1")], "ports": []},
        {"addressType": "IPv4", "endpoints": None, "ports": [{"name": "status-server"}]},
    ]
    assert ready_peers(slices) == [
        Peer("10.0.0.1", 10443),
        Peer("10.0.0.2", 10443),
        Peer("10.0.1.1", 20443),
    ]


def test_a_peer_url_brackets_an_ipv6_address() -> None:
    assert Peer("10.0.0.1", 10443).url == "https://10.0.0.1:10443"
    assert Peer("fd00::2", 10443).url == "https://[fd00::2]:10443"


def test_every_replica_ranks_a_trainjobs_peers_alike_and_a_leaver_moves_only_its_own() -> None:
    peers = [Peer(f"10.0.0.{i}", 10443) for i in range(1, 5)]
    keys = [("team-a", f"job{i}") for i in range(2000)]
    first = {key: ranked(key, peers)[0] for key in keys}
    assert all(ranked(key, list(reversed(peers)))[0] == first[key] for key in keys)
    # Spread: each of four replicas ranks first about a quarter of the TrainJobs.
    shares = Counter(first.values())
    assert all(400 <= shares[peer] <= 600 for peer in peers), shares
    # One leaves: only the TrainJobs it ranked first move, each to its second choice.
    gone = peers[0]
    rest = peers[1:]
    for key in keys:
        now_first = ranked(key, rest)[0]
        if first[key] != gone:
            assert now_first == first[key]
        else:
            assert now_first == ranked(key, peers)[1]


def handed(name: str, progress: int, body: dict[str, Any] | None = None) -> Handed:
    status = body or {"progressPercentage": progress, "lastUpdatedTime": "2026-12-07T10:00:00Z"}
    update = parse_trainer_status({"trainerStatus": status}, trainjob=name, received=RECEIVED)
    assert update is not None
    return Handed("team-a", name, update.encoded(RECEIVED))


def test_a_batch_carries_each_update_whole_with_its_receive_time() -> None:
    items = [
        handed("job1", 100),
        handed(
            "job1",
            40,
            {
                "progressPercentage": 40,
                "estimatedRemainingSeconds": 120,
                "metrics": [{"name": "loss", "value": "0.25"}],
                "lastUpdatedTime": "2026-12-07T10:00:00.25Z",
            },
        ),
        handed("job2", 7),
    ]
    assert decode_batch(encode_batch(items)) == items


def batch_with(item: Any) -> bytes:
    return json.dumps({"updates": [item]}).encode()


GOOD: dict[str, Any] = {
    "namespace": "team-a",
    "name": "job1",
    "received": "2026-12-07T10:00:01Z",
    "trainerStatus": {"progressPercentage": 5, "lastUpdatedTime": "2026-12-07T10:00:00Z"},
}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[]", "Invalid payload: body must be a JSON object, got array"),
        (b'{"updates": {}}', "Invalid payload: updates: not a list"),
        (batch_with(3), "Invalid payload: updates[0]: not an object"),
        (
            batch_with({**GOOD, "namespace": ""}),
            "Invalid payload: updates[0].namespace: not a name",
        ),
        (batch_with({**GOOD, "name": 5}), "Invalid payload: updates[0].name: not a name"),
        (batch_with({**GOOD, "name": "x" * 254}), "Invalid payload: updates[0].name: not a name"),
        (
            batch_with({**GOOD, "received": "yesterday"}),
            "Invalid payload: updates[0].received: not an RFC 3339 time",
        ),
        (
            batch_with({**GOOD, "received": "2026-12-07T10:00:01"}),
            "Invalid payload: updates[0].received: not an RFC 3339 time",
        ),
        (
            batch_with({**GOOD, "trainerStatus": None}),
            "Invalid payload: updates[0].trainerStatus: missing",
        ),
    ],
)
def test_a_batch_of_the_wrong_shape_is_refused_whole(body: bytes, message: str) -> None:
    with pytest.raises(PayloadError) as refused:
        decode_batch(body)
    assert refused.value.message == message


def test_an_update_the_crd_refuses_is_refused_as_a_post_would_be() -> None:
    item = {**GOOD, "trainerStatus": {**GOOD["trainerStatus"], "progressPercentage": 101}}
    with pytest.raises(ValidationFailed) as refused:
        decode_batch(batch_with(item))
    assert refused.value.message == (
        'TrainJob.trainer.kubeflow.org "job1" is invalid: '
        "status.trainerStatus.progressPercentage: Invalid value: 101: "
        "trainerStatus.progressPercentage in body should be less than or equal to 100"
    )


def test_a_queued_update_for_the_owner_keeps_the_newest_and_every_final() -> None:
    def at(progress: int, tenths: int) -> EncodedStatus:
        stamp = f"2026-12-07T10:00:00.{tenths}Z"  # before RECEIVED: ordered by its stamp
        return handed(
            "job1", progress, {"progressPercentage": progress, "lastUpdatedTime": stamp}
        ).update

    first, final, after, newest = at(10, 1), at(100, 2), at(99, 3), at(98, 4)
    assert queued([], first) == [first]
    assert queued([first], final) == [final]  # the newer replaces the held one
    assert queued([final], after) == [final, after]  # a final one is never replaced
    assert queued([final, after], newest) == [final, newest]
    assert queued([final, newest], after) == [final, newest]  # an older one is dropped


class OneOwner:
    """The replicas as the forwarder sees them: every TrainJob owned by ``PEER``, whose
    hand-over waits for ``answer`` and then takes (or keeps) what it was given."""

    def __init__(self, takes: bool) -> None:
        self.takes = takes
        self.asked = asyncio.Event()
        self.answer = asyncio.Event()

    def owner(self, key: tuple[str, str]) -> Peer:
        return PEER

    async def give(
        self, peer: Peer, updates: list[tuple[tuple[str, str], EncodedStatus]], seconds: float
    ) -> set[tuple[str, str]]:
        self.asked.set()
        await self.answer.wait()
        return {key for key, _ in updates} if self.takes else set()


class KeptHere:
    """This replica's writer: what the owner did not take."""

    def __init__(self) -> None:
        self.submitted: list[tuple[tuple[str, str], EncodedStatus]] = []

    async def write(self, namespace: str, name: str, update: EncodedStatus) -> None:
        raise AssertionError("every TrainJob has an owner: nothing is written at once")

    def submit(self, key: tuple[str, str], update: EncodedStatus) -> None:
        self.submitted.append((key, update))


PEER = Peer("10.0.0.2", 10443)


@pytest.mark.parametrize("takes", [True, False])
async def test_an_update_is_queued_from_its_post_until_its_owner_takes_it_or_it_is_kept(
    takes: bool,
) -> None:
    """``queued`` never reads 0 while an update is on its way: not in the loop turn
    between leaving the queue and the hand-over's request (what waits for it, at
    shutdown or in a test, would go on without it)."""
    owners, writer = OneOwner(takes), KeptHere()
    forwarder = Forwarder(writer, owners, interval=0)  # type: ignore[arg-type]
    await forwarder.start()
    try:
        update = handed("job1", 10).update
        await forwarder.write("team-a", "job1", update)
        seen = []
        while not owners.asked.is_set():
            seen.append(forwarder.queued)
            await asyncio.sleep(0)
        assert seen
        assert set(seen) == {1}
        assert forwarder.queued == 1
        owners.answer.set()
        while forwarder.queued:
            await asyncio.sleep(0)
        assert writer.submitted == ([] if takes else [(("team-a", "job1"), update)])
    finally:
        owners.answer.set()  # a failed check must not leave the give waiting
        await forwarder.stop()
