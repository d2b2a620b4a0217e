"""The other replicas of the server, and what one gives them: the updates of the
TrainJobs another replica owns (``peers/forwarding.py``), and at shutdown what its drain
could not write (``hand_over``). A replica takes what it is given and writes it.

The replicas are the ready endpoints of the server's Service (its EndpointSlices, listed
and watched in the server's namespace); this one is ``--pod-ip`` on the serving port.
A TrainJob is owned by the first replica of its ranking (``ring.ranked``) among them
and this one. At shutdown each TrainJob's updates go to the first of the others, and to
the next one if that one cannot take them (unreachable, or stopping too: 503); all of
one TrainJob's updates travel together, in order. The sender proves itself with the
projected token of ``--peer-token-file`` and checks the receiver's certificate against
the serving CA under the Service's name.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from ..kube.cache import WatchCache
from ..kube.client import KubeClient
from ..kube.resources import ENDPOINTSLICES
from ..metrics import selfmetrics
from ..status.validation import EncodedStatus, PayloadError, ValidationFailed
from .batch import (
    HANDOVER_PATH,
    MAX_BATCH_BYTES,
    NEWEST_PATH,
    Handed,
    decode_batch,
    encode_batch,
    encoded_size,
)
from .ring import Key, Peer, ranked, ready_peers

log = logging.getLogger(__name__)

SERVICE_NAME_LABEL = "kubernetes.io/service-name"

JSON = "application/json"

TOKEN_SECONDS = 30.0
"""How long the token file's content is used before it is read again: kubelet renews a
projected token well before it expires (at 80% of its life)."""

CA_RETRY_SECONDS = 60.0  # after a CA file that would not load
_BATCH_BYTES = MAX_BATCH_BYTES // 2  # what a sender puts in one batch, at most


def _grouped(updates: Sequence[tuple[Key, EncodedStatus]]) -> dict[Key, list[Handed]]:
    """``updates`` by TrainJob, each TrainJob's in their order."""
    by_key: dict[Key, list[Handed]] = {}
    for key, update in updates:
        by_key.setdefault(key, []).append(Handed(key[0], key[1], update))
    return by_key


def _chunks(groups: Sequence[list[Handed]]) -> list[list[Handed]]:
    """``groups`` (one TrainJob's updates each) packed into batches of at most
    ``_BATCH_BYTES``, a TrainJob's updates never split."""
    chunks: list[list[Handed]] = []
    size = 0
    for group in groups:
        group_size = sum(encoded_size(h) for h in group)
        if not chunks or size + group_size > _BATCH_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].extend(group)
        size += group_size
    return chunks


class Replicas:
    """Built from the config; ``start()`` lists the Service's endpoints, ``stop()``
    closes. ``successors()`` are the replicas that would take updates now, ``owner()``
    which one writes a TrainJob."""

    def __init__(
        self,
        watch: KubeClient,
        *,
        namespace: str,
        service: str,
        own: Peer | None,
        token_file: Path | None,
        ca_file: Path | None,
        timeout: float = 2.0,
    ) -> None:
        self.own = own
        self.token_file = token_file
        self.ca_file = ca_file
        self.tls_name = f"{service}.{namespace}.svc"
        self.timeout = timeout
        self.endpoints = WatchCache(
            watch,
            ENDPOINTSLICES,
            namespace=namespace,
            label_selector=f"{SERVICE_NAME_LABEL}={service}",
            optional=True,
        )
        self._session: aiohttp.ClientSession | None = None
        self._ca_failed_at: float | None = None
        self._token_read: tuple[str | None, float] | None = None
        self._watching = False
        self._ready: list[Peer] | None = None  # the ready endpoints, until they change
        self._changes = 0

    async def start(self) -> None:
        """Watch the Service's endpoints, where this replica has a token to give updates
        with (else it gives none: it writes what it takes, and its drain has all its
        time)."""
        if self.token_file is None or not self.token_file.is_file():
            log.info(
                "no peer token file: this replica writes what it takes, and hands nothing over",
                extra={"path": None if self.token_file is None else str(self.token_file)},
            )
            return
        self._watching = True
        self.endpoints.add_listener(self._changed)
        await self.endpoints.start()

    async def stop(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._watching:
            self._watching = False
            self.endpoints.remove_listener(self._changed)
            await self.endpoints.stop()

    def _changed(self, _event: object) -> None:
        self._ready = None
        self._changes += 1

    @property
    def version(self) -> int:
        """Changes whenever ``owns`` may answer differently: the endpoints changed, or
        this replica became able, or unable, to give updates away."""
        able = self.own is not None and self._token() is not None and self._client() is not None
        return self._changes * 2 + able

    def owns(self, key: Key) -> bool:
        """Whether this replica writes (and exports) ``key``: see ``owner``."""
        return self.owner(key) is None

    @property
    def watching(self) -> bool:
        """Whether the Service's endpoints are watched (a token to hand over with)."""
        return self._watching

    def _ready_peers(self) -> list[Peer]:
        if self._ready is None:
            self._ready = ready_peers(self.endpoints.list())
        return self._ready

    def successors(self) -> list[Peer]:
        """The ready replicas of the Service but this one."""
        return [peer for peer in self._ready_peers() if peer != self.own]

    def owner(self, key: Key) -> Peer | None:
        """The replica that writes ``key``'s updates, if another one does: the first of
        its ranking among the ready replicas and this one (None: this one, or a replica
        that cannot give updates away, without its own address, token or CA)."""
        own = self.own
        if own is None or not self._watching or self._token() is None or self._client() is None:
            return None
        peers = self._ready_peers()
        if own not in peers:
            peers = [*peers, own]  # ready or not in the Service's eyes, it writes its share
        first = ranked(key, peers)[0]
        return None if first == own else first

    def _token(self) -> str | None:
        """The projected token (kubelet rotates the file: read again every
        ``TOKEN_SECONDS``)."""
        now = time.monotonic()
        if self._token_read is not None and now - self._token_read[1] < TOKEN_SECONDS:
            return self._token_read[0]
        token: str | None = None
        if self.token_file is not None:
            try:
                token = self.token_file.read_text().strip() or None
            except OSError:
                token = None
        self._token_read = (token, now)
        return token

    def _client(self) -> aiohttp.ClientSession | None:
        """The HTTPS client that trusts the serving CA; None while the CA file does not
        load (tried again every ``CA_RETRY_SECONDS``)."""
        if self._session is not None or self.ca_file is None:
            return self._session
        now = time.monotonic()
        if self._ca_failed_at is not None and now - self._ca_failed_at < CA_RETRY_SECONDS:
            return None
        try:
            context = ssl.create_default_context(cafile=str(self.ca_file))
        except (OSError, ssl.SSLError) as exc:
            self._ca_failed_at = now
            log.warning("hand-over impossible: the CA file", extra={"error": str(exc)})
            return None
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context))
        return self._session

    async def hand_over(
        self, updates: Sequence[tuple[Key, EncodedStatus]], seconds: float
    ) -> set[Key]:
        """Send ``updates`` (in order, several per TrainJob where one waits behind
        another) to the replicas that stay, within ``seconds``; the TrainJobs whose
        updates one took."""
        by_key = _grouped(updates)
        if not by_key:
            return set()
        peers, token, client = self.successors(), self._token(), self._client()
        if not peers or token is None or client is None:
            log.warning(
                "no replica to hand updates over to",
                extra={
                    "trainjobs": len(by_key),
                    "replicas": len(peers),
                    "token": token is not None,
                    "ca": client is not None,
                },
            )
            return set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        given: set[Key] = set()
        rankings = {key: ranked(key, peers) for key in by_key}
        failed: set[Peer] = set()
        while loop.time() < deadline:
            round_: dict[Peer, list[list[Handed]]] = {}
            for key, group in by_key.items():
                target = next((p for p in rankings[key] if p not in failed), None)
                if key not in given and target is not None:
                    round_.setdefault(target, []).append(group)
            if not round_:
                break
            results = await asyncio.gather(
                *(
                    self._give(client, token, peer, groups, deadline)
                    for peer, groups in round_.items()
                )
            )
            for peer, (taken, whole) in zip(round_, results, strict=True):
                given |= taken
                if taken:
                    fields = {"replica": peer.url, "trainjobs": len(taken)}
                    log.info("updates handed over", extra=fields)
                if not whole:
                    failed.add(peer)
        return given

    async def give(
        self, peer: Peer, updates: Sequence[tuple[Key, EncodedStatus]], seconds: float
    ) -> set[Key]:
        """Give ``updates`` (in order) to ``peer`` within ``seconds``: the TrainJobs whose
        updates it took."""
        token, client = self._token(), self._client()
        if token is None or client is None:
            return set()
        deadline = asyncio.get_running_loop().time() + seconds
        groups = list(_grouped(updates).values())
        taken, _ = await self._give(client, token, peer, groups, deadline)
        return taken

    async def _give(
        self,
        client: aiohttp.ClientSession,
        token: str,
        peer: Peer,
        groups: list[list[Handed]],
        deadline: float,
    ) -> tuple[set[Key], bool]:
        """Send ``groups`` to ``peer`` in batches, each before ``deadline``: the
        TrainJobs it took, and whether it took them all (if not, the rest goes to the
        next replica)."""
        taken: set[Key] = set()
        loop = asyncio.get_running_loop()
        for chunk in _chunks(groups):
            left = min(self.timeout, deadline - loop.time())
            if left <= 0:
                return taken, False
            try:
                async with client.post(
                    peer.url + HANDOVER_PATH,
                    data=encode_batch(chunk),
                    headers={"Authorization": f"Bearer {token}", "Content-Type": JSON},
                    server_hostname=self.tls_name,
                    timeout=aiohttp.ClientTimeout(total=left),
                ) as answer:
                    status = answer.status
                    await answer.read()
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.warning(
                    "hand-over to a replica failed",
                    extra={"replica": peer.url, "error": type(exc).__name__},
                )
                return taken, False
            if status != 200:
                log.warning(
                    "hand-over refused by a replica", extra={"replica": peer.url, "code": status}
                )
                return taken, False
            keys = {h.key for h in chunk}
            taken |= keys
            selfmetrics.PEER_UPDATES.labels("given").inc(len(chunk))
            log.debug("updates given", extra={"replica": peer.url, "trainjobs": len(keys)})
        return taken, True

    async def newest(
        self, peers: Sequence[Peer], namespace: str | None, name: str | None, seconds: float
    ) -> list[Handed]:
        """What ``peers`` hold of ``namespace``'s TrainJobs (``name``'s alone, if given),
        each asked at once and for ``seconds`` at most; a replica that cannot answer adds
        nothing (logged)."""
        token, client = self._token(), self._client()
        if token is None or client is None or not peers:
            return []
        query = {} if namespace is None else {"namespace": namespace}
        if name is not None:
            query["name"] = name
        answers = await asyncio.gather(
            *(self._newest(client, token, peer, query, seconds) for peer in peers)
        )
        return [handed for answer in answers for handed in answer]

    async def _newest(
        self,
        client: aiohttp.ClientSession,
        token: str,
        peer: Peer,
        query: dict[str, str],
        seconds: float,
    ) -> list[Handed]:
        try:
            async with client.get(
                peer.url + NEWEST_PATH,
                params=query,
                headers={"Authorization": f"Bearer {token}", "Accept": JSON},
                server_hostname=self.tls_name,
                timeout=aiohttp.ClientTimeout(total=seconds),
            ) as answer:
                status = answer.status
                raw = await answer.content.read(MAX_BATCH_BYTES + 1)
            if status != 200 or len(raw) > MAX_BATCH_BYTES:
                log.warning(
                    "newest updates refused by a replica",
                    extra={"replica": peer.url, "code": status},
                )
                return []
            return decode_batch(raw)
        except (aiohttp.ClientError, TimeoutError, PayloadError, ValidationFailed) as exc:
            log.warning(
                "newest updates of a replica unavailable",
                extra={"replica": peer.url, "error": type(exc).__name__},
            )
            return []
