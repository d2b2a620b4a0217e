"""Pod binding: the token's pod exists now, with the token's uid, in the TrainJob.

Pods come from a list+watch cache limited by a label selector (the pods of TrainJobs),
so the usual answer is a dict lookup. What the cache cannot answer:

- a uid the watch saw leave (deleted, recreated under the same name, or relabelled out
  of the selection) is remembered in a bounded set, and refused with no API call;
- a pod the cache does not hold (created a moment ago) is fetched once, through the
  cache, so the posts that follow find it;
- a pod the cache holds with another uid, not seen leaving (the token may be newer than
  the watch), is fetched once with a GET.

Concurrent posts that need the same fetch share it. ``check_cached`` is the part that
needs no request, for tokens no one has vouched for yet.
Refusals that came from a fetch are cached for ``negative_ttl`` seconds, so a stale
token retried in a loop costs one request per interval, not one per post.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainjob_status.contract import JOBSET_NAME_LABEL

from ..failures import TrainJobNotFound, Unavailable
from ..kube.cache import WatchCache
from ..kube.client import KubeClient
from ..kube.errors import KubeError, KubeUnavailable
from ..kube.resources import PODS, Obj
from ..kube.store import ADDED, DELETED, CacheEvent
from ..kube.views import pod_view
from . import failures
from .failures import AuthFailure
from .ownership import LABELS, OwnerChain

MEMBERSHIP_LABEL = JOBSET_NAME_LABEL
TRAINJOB_PODS = MEMBERSHIP_LABEL  # the selector: every pod that has the label


def _meta(pod: Obj) -> dict[str, Any]:
    meta = pod.get("metadata")
    return meta if isinstance(meta, dict) else {}


def uid_of(pod: Obj) -> str:
    return str(_meta(pod).get("uid") or "")


def _gone_since(meta: dict[str, Any]) -> float | None:
    stamp = meta.get("deletionTimestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return dt.datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def _pod_view(obj: Obj) -> Obj:
    return pod_view(obj, (MEMBERSHIP_LABEL,))


def judge_pod(
    pod: Obj, *, uid: str, trainjob: str, require_membership: bool, now: float, leeway: float
) -> str | None:
    """The refusal reason for posting as ``pod`` with a token bound to ``uid``, or None.

    A terminating pod still posts (its final update at exit) until ``leeway`` after its
    deletion deadline, as kube-apiserver accepts its token."""
    meta = _meta(pod)
    if meta.get("uid") != uid:
        return failures.POD_UID
    if "deletionTimestamp" in meta:
        deadline = _gone_since(meta)
        if deadline is not None and deadline < now - leeway:
            return failures.POD_GONE
    if require_membership:
        labels = meta.get("labels")
        if not isinstance(labels, dict) or labels.get(MEMBERSHIP_LABEL) != trainjob:
            return failures.NOT_MEMBER
    return None


def judge_departed(held: Obj | None) -> str:
    """The reason for a token whose pod uid the watch saw leave."""
    return failures.POD_GONE if held is None else failures.POD_UID


@dataclass(frozen=True, slots=True)
class Fit:
    """What passed the pod binding: the pod cache's object, and the uid of the TrainJob
    and the binding mode it passed under. While all three hold, a check for the same
    token would pass again; a TrainJob recreated under the name, or another mode, asks
    for a new check."""

    pod: Obj
    trainjob_uid: str | None
    mode: str


class _Bounded(OrderedDict[Any, Any]):
    """An OrderedDict that forgets its oldest entries beyond ``limit``."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: Any, value: Any) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


class PodBinding:
    """``start()`` launches the pod cache; ``ready`` once it has listed. Fetches spend
    ``kube``; the cache lists and watches with ``watch`` (default ``kube``)."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        watch: KubeClient | None = None,
        label_selector: str | None = TRAINJOB_PODS,
        require_membership: bool = True,
        leeway: float = 60.0,
        negative_ttl: float = 10.0,
        grace: float = 1.0,
        max_departed: int = 65_536,
        max_negative: int = 10_000,
        owners: OwnerChain | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.owners = owners
        self.pods = WatchCache(
            watch if watch is not None else kube,
            PODS,
            label_selector=label_selector,
            transform=_pod_view,
            fetch_client=kube,
        )
        self.require_membership = require_membership
        self.leeway = leeway
        self.negative_ttl = negative_ttl
        self.grace = grace
        self._clock = clock
        self._departed = _Bounded(max_departed)  # uid -> None
        self._negative = _Bounded(max_negative)  # (namespace, name, uid) -> (reason, until)
        self._fetches: dict[tuple[str, str, str], asyncio.Task[Obj | None]] = {}
        self.pods.add_listener(self._on_event)

    @property
    def ready(self) -> bool:
        return self.pods.synced.is_set()

    async def start(self) -> None:
        await self.pods.start()
        if self.owners is not None:
            await self.owners.start()

    async def stop(self) -> None:
        fetches = list(self._fetches.values())
        for task in fetches:
            task.cancel()
        for task in fetches:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.pods.stop()
        if self.owners is not None:
            await self.owners.stop()

    def _on_event(self, event: CacheEvent) -> None:
        old_uid = uid_of(event.old) if event.old is not None else ""
        new_uid = uid_of(event.new) if event.new is not None else ""
        if old_uid and (event.type == DELETED or old_uid != new_uid):
            self._departed.remember(old_uid, None)
        if new_uid and event.type != DELETED:
            # Back in the selection (relabelled back): the cache answers for it again.
            self._departed.pop(new_uid, None)
        if event.type == ADDED and new_uid:
            meta = _meta(event.new or {})
            self._negative.pop((meta.get("namespace"), meta.get("name"), new_uid), None)

    async def check(
        self, namespace: str, name: str, uid: str, trainjob: str, now: float
    ) -> Fit | None:
        """Raise AuthFailure unless pod ``namespace/name`` with ``uid`` may post for
        ``trainjob``; ``Unavailable`` when a needed fetch fails or the binding cannot be
        told. ``now`` is wall-clock seconds.

        Returns what passed when its verdict does not depend on the time (the pod is
        not terminating), else None: while it still holds (``still_fit``), a check for
        the same uid and TrainJob would pass again."""
        pod = self.pods.get(namespace, name)
        if pod is None or _meta(pod).get("uid") != uid:
            pod = await self._resolve(namespace, name, uid, pod)
        self._judge(pod, uid, trainjob, now)
        mode = await self._owned(namespace, pod, trainjob)
        if "deletionTimestamp" in _meta(pod):
            return None
        return Fit(pod, self._trainjob_uid(namespace, trainjob), mode)

    def still_fit(self, namespace: str, name: str, trainjob: str, fit: Fit | None) -> bool:
        """Whether ``fit`` (what ``check`` returned) still holds for a post as pod
        ``namespace/name`` to ``trainjob``: the pod cache holds that same object (cached
        objects are replaced, never changed: the same incarnation with the same labels),
        the TrainJob is the same incarnation, and the binding mode is the same."""
        return (
            fit is not None
            and self.pods.get(namespace, name) is fit.pod
            and self._trainjob_uid(namespace, trainjob) == fit.trainjob_uid
            and self._mode() == fit.mode
        )

    def _mode(self) -> str:
        return self.owners.mode if self.owners is not None else LABELS

    def _trainjob_uid(self, namespace: str, trainjob: str) -> str | None:
        return self.owners.trainjob_uid(namespace, trainjob) if self.owners is not None else None

    async def check_cached(
        self, namespace: str, name: str, uid: str, trainjob: str, now: float
    ) -> None:
        """Refuse what the pod cache alone can refuse, for a token no one has vouched
        for yet (before a TokenReview): a uid the watch saw leave, a pod the watch does
        not show with that uid within ``grace`` seconds (the cache may trail a
        recreation by a moment: it is given that long), the pod with that uid judged
        unfit. Never a request: a forged token naming a live pod with the wrong uid
        costs no review."""
        if uid in self._departed:
            raise AuthFailure(judge_departed(self.pods.get(namespace, name)))
        pod = await self.pods.wait_for(
            namespace, name, self.grace, fits=lambda held: uid_of(held) == uid
        )
        if pod is None:
            raise AuthFailure(failures.POD_GONE)
        if uid_of(pod) != uid:
            raise AuthFailure(failures.POD_UID)
        self._judge(pod, uid, trainjob, now)
        await self._owned(namespace, pod, trainjob)

    def _judge(self, pod: Obj, uid: str, trainjob: str, now: float) -> None:
        reason = judge_pod(
            pod,
            uid=uid,
            trainjob=trainjob,
            require_membership=self.require_membership,
            now=now,
            leeway=self.leeway,
        )
        if reason is not None:
            raise AuthFailure(reason)

    async def _owned(self, namespace: str, pod: Obj, trainjob: str) -> str:
        """Refuses a pod whose owner chain does not lead to ``trainjob`` (ownership mode;
        only when membership is required at all); the mode it was judged in. Where
        ``trainjob`` does not exist (a pod of a TrainJob deleted meanwhile) no chain can
        lead there: the answer is the 404 the post would get later, as in the labels
        mode and from Kubeflow Trainer's status server, not a refusal that reads as a
        wrong credential."""
        if not self.require_membership or self.owners is None:
            return LABELS
        mode = self.owners.mode
        if not await self.owners.owns(namespace, pod, trainjob):
            if self.owners.trainjobs.get(namespace, trainjob) is None:
                raise TrainJobNotFound()
            raise AuthFailure(failures.NOT_OWNED)
        return mode

    async def _resolve(self, namespace: str, name: str, uid: str, held: Obj | None) -> Obj:
        if uid in self._departed:
            raise AuthFailure(judge_departed(held))
        key = (namespace, name, uid)
        known = self._negative.get(key)
        if known is not None:
            reason, until = known
            if self._clock() < until:
                raise AuthFailure(reason)
            del self._negative[key]
        fetch = self._fetches.get(key)
        if fetch is None:
            fetch = asyncio.create_task(self._fetch(namespace, name, listed=held is None))
            self._fetches[key] = fetch
            fetch.add_done_callback(lambda done: self._fetched(key, done))
        try:
            # A caller that gives up must not cancel the others' request.
            fetched = await asyncio.shield(fetch)
        except (KubeUnavailable, KubeError) as exc:
            raise Unavailable.of(exc) from exc
        if fetched is None or uid_of(fetched) != uid:
            reason = failures.POD_GONE if fetched is None else failures.POD_UID
            self._negative.remember(key, (reason, self._clock() + self.negative_ttl))
            raise AuthFailure(reason)
        return fetched

    async def _fetch(self, namespace: str, name: str, *, listed: bool) -> Obj | None:
        if listed:
            # Through the cache: it keeps what it finds, so the next post asks nobody.
            return await self.pods.get_or_fetch(namespace, name)
        # The cache holds another incarnation; only a GET tells which one is current.
        return await self.kube.get(PODS, namespace, name)

    def _fetched(self, key: tuple[str, str, str], task: asyncio.Task[Obj | None]) -> None:
        self._fetches.pop(key, None)
        if not task.cancelled():
            # Retrieved here too: every caller may have given up before it failed.
            task.exception()
