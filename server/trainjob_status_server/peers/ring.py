"""Which replicas a TrainJob's update goes to (pure).

The replicas are the ready endpoints of the server's Service, as its EndpointSlices list
them. Each TrainJob ranks them by rendezvous hashing: every replica that knows the same
endpoints ranks them in the same order, a replica that leaves moves only the TrainJobs
it ranked first, and they spread evenly over the others.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# The Service's port (and so the EndpointSlices' port) that serves status posts: the
# Kubeflow Trainer's port name.
PORT_NAME = "status-server"

Key = tuple[str, str]


@dataclass(frozen=True, order=True, slots=True)
class Peer:
    """One replica's serving endpoint."""

    address: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"https://{host}:{self.port}"


def _port(ports: Any, name: str) -> int | None:
    for entry in ports if isinstance(ports, list) else ():
        if isinstance(entry, dict) and entry.get("name") == name:
            port = entry.get("port")
            if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536:
                return port
    return None


def _ready(endpoint: dict[str, Any]) -> bool:
    """Ready and not terminating (an absent condition is true, as the API defines it)."""
    conditions = endpoint.get("conditions")
    conditions = conditions if isinstance(conditions, dict) else {}
    return conditions.get("ready") is not False and conditions.get("terminating") is not True


def ready_peers(slices: Iterable[dict[str, Any]], port_name: str = PORT_NAME) -> list[Peer]:
    """The ready endpoints of ``slices`` on the port named ``port_name``, each once, in
    order."""
    peers: set[Peer] = set()
    for endpoint_slice in slices:
        if endpoint_slice.get("addressType") not in ("IPv4", "IPv6"):
            continue  # FQDN slices name no address to connect to
        port = _port(endpoint_slice.get("ports"), port_name)
        endpoints = endpoint_slice.get("endpoints")
        if port is None or not isinstance(endpoints, list):
            continue
        for endpoint in endpoints:
            if not isinstance(endpoint, dict) or not _ready(endpoint):
                continue
            addresses = endpoint.get("addresses")
            if isinstance(addresses, list) and addresses and isinstance(addresses[0], str):
                # The first address is the one to use (the others are the same pod's).
                peers.add(Peer(addresses[0], port))
    return sorted(peers)


def _score(key: Key, peer: Peer) -> bytes:
    text = f"{peer.address}\x00{peer.port}\x00{key[0]}\x00{key[1]}"
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def ranked(key: Key, peers: Sequence[Peer]) -> list[Peer]:
    """``peers`` in the order ``key``'s updates go to them: the first takes them, the
    next one if the first cannot."""
    return sorted(peers, key=lambda peer: _score(key, peer), reverse=True)
