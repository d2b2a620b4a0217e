"""CA distribution: the ConfigMap ``trainjob-status-ca`` (key ``ca.crt``) in every
namespace that has TrainJobs, so injected pods can verify the server.

Kubeflow Trainer's status server copies one ConfigMap per TrainJob
(``<trainjob>-tls-config``, owned by it); one per namespace is fewer objects, is there
before a TrainJob's pods are (it is written when the first TrainJob of the namespace
appears), and a TrainJob deleted and recreated under the same name cannot race its own
ConfigMap's garbage collection.

Driven by the TrainJob cache's listeners: a TrainJob in a namespace we have not written
(with the current CA) queues that namespace; one worker writes the queue by server-side
apply (field manager ``trainjob-status-ca``, so every replica owns the same fields and
their writes agree), one request at a time, within the watch budget (see
``budgets.py``), so a start with many namespaces never takes what status writes need.
The CA comes from a file (what the
certificate bootstrap writes, or cert-manager's Secret mounted), read again every
``poll_interval``: when it changes, every namespace is written again.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
from collections.abc import Callable, Iterable
from pathlib import Path

from cryptography import x509

from ..kube.backoff import Backoff
from ..kube.cache import WatchCache
from ..kube.client import KubeClient
from ..kube.errors import KubeError, KubeUnavailable
from ..kube.resources import CONFIGMAPS, Obj
from ..kube.store import CacheEvent
from .injection import CA_CONFIGMAP, CA_KEY

log = logging.getLogger(__name__)

FIELD_MANAGER = "trainjob-status-ca"
RETRY_BACKOFF = Backoff(base=1.0, cap=60.0)
LABELS = {
    "app.kubernetes.io/name": "trainjob-status",
    "app.kubernetes.io/component": "ca-bundle",
    "app.kubernetes.io/managed-by": "trainjob-status",
}


def read_ca(path: Path) -> bytes | None:
    """The CA bundle in ``path`` if it holds at least one certificate (None while it is
    missing or half-written)."""
    try:
        data = path.read_bytes()
        x509.load_pem_x509_certificates(data)
    except (OSError, ValueError):
        return None
    return data


def configmap(namespace: str, ca_pem: bytes, name: str = CA_CONFIGMAP) -> Obj:
    """The ConfigMap as we apply it: only the fields we own."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(LABELS)},
        "data": {CA_KEY: ca_pem.decode()},
    }


class CADistribution:
    """Component: ``start()`` after the TrainJob cache's, ``stop()`` before it."""

    def __init__(
        self,
        kube: KubeClient,
        trainjobs: WatchCache,
        ca_file: Path,
        *,
        name: str = CA_CONFIGMAP,
        poll_interval: float = 10.0,
        backoff: Backoff = RETRY_BACKOFF,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.kube = kube
        self.trainjobs = trainjobs
        self.ca_file = ca_file
        self.name = name
        self.poll_interval = poll_interval
        self.backoff = backoff
        self.applied: dict[str, str] = {}
        """Namespace -> digest of the CA last written there by this replica."""
        self._rand = rand
        self._ca: bytes | None = None
        self._digest = ""
        self._pending: set[str] = set()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def ca_pem(self) -> bytes | None:
        return self._ca

    @property
    def idle(self) -> bool:
        """Nothing is waiting to be written (with a CA to write)."""
        return self._ca is not None and not self._pending

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        await self.refresh()
        if self._ca is None:
            log.warning("no CA to distribute yet", extra={"ca_file": str(self.ca_file)})
        self.trainjobs.add_listener(self._on_event)
        self._queue(obj_namespace(obj) for obj in self.trainjobs.list())
        self._tasks = [
            asyncio.create_task(self._work(), name="ca-distribution"),
            asyncio.create_task(self._poll(), name="ca-distribution-poll"),
        ]

    async def stop(self) -> None:
        with contextlib.suppress(ValueError):
            self.trainjobs.remove_listener(self._on_event)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    # -- what to write -----------------------------------------------------------------

    def _on_event(self, event: CacheEvent) -> None:
        if event.new is not None:
            self._queue([event.key[0]])

    def _queue(self, namespaces: Iterable[str]) -> None:
        added = False
        for namespace in namespaces:
            if namespace and self.applied.get(namespace) != self._digest:
                self._pending.add(namespace)
                added = True
        if added:
            self._wake.set()

    async def refresh(self) -> bool:
        """Read the CA file; True when it changed (then every namespace is queued)."""
        ca = await asyncio.to_thread(read_ca, self.ca_file)
        if ca is None or ca == self._ca:
            return False
        first = self._ca is None
        self._ca = ca
        self._digest = hashlib.sha256(ca).hexdigest()[:16]
        if not first:
            log.info("CA changed, distributing it again", extra={"digest": self._digest})
        self._queue([*self.applied, *(obj_namespace(o) for o in self.trainjobs.list())])
        return True

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                await self.refresh()
            except Exception:
                log.exception("reading the CA file failed")

    async def _work(self) -> None:
        failures = 0
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending and self._ca is not None:
                # One round over the queue: a namespace that keeps failing (one being
                # deleted refuses new objects) must not hold up the others.
                failed = 0
                for namespace in sorted(self._pending):
                    try:
                        await self._apply(namespace)
                    except (KubeError, KubeUnavailable) as exc:
                        failed += 1
                        log.warning(
                            "CA ConfigMap not written",
                            extra={"namespace": namespace, "error": str(exc)},
                        )
                failures = failures + 1 if failed else 0
                if failed:
                    await asyncio.sleep(self.backoff.delay(failures, self._rand()))

    async def _apply(self, namespace: str) -> None:
        ca, digest = self._ca, self._digest
        assert ca is not None
        try:
            await self.kube.apply(
                CONFIGMAPS,
                namespace,
                self.name,
                configmap(namespace, ca, self.name),
                field_manager=FIELD_MANAGER,
            )
        except KubeError as exc:
            if exc.status != 404:
                raise
            # The namespace is gone (or going): its TrainJobs' events will tell if it
            # comes back.
            log.info("namespace gone, CA not written", extra={"namespace": namespace})
        else:
            self.applied[namespace] = digest
            log.info("CA ConfigMap written", extra={"namespace": namespace, "digest": digest})
        if self._digest == digest:
            self._pending.discard(namespace)


def obj_namespace(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")
