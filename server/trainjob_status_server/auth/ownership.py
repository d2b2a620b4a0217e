"""Binding by ownership: a pod posts for a TrainJob only if its controller chain leads
there, uid by uid, as the Trainer, JobSet and Job controllers build it: the pod's
controller is a Job, the Job's a JobSet, the JobSet's the TrainJob (the one the URL
names, with the uid the TrainJob cache holds).

The label ``jobset.sigs.k8s.io/jobset-name`` names a TrainJob anyone who may create a
pod can name; a uid cannot be guessed, only read (``get`` on the Job), so a pod labelled
into another TrainJob of its namespace is refused. The Jobs (those a JobSet made: the
same label selects them) and the JobSets come from list+watch caches, so the check
makes no request.

It fails closed. Where either cannot be listed (JobSet not installed, RBAC without the
rules: 403 or 404) for ``labels_after`` seconds in a row, the label is the only link
checked: the *labels* mode. Until then, at start or after a transient refusal, the
mode is *undecided*: a chain the caches still show (from their last list) passes, any
other post is answered 503 and retried, never let through on its label. Which mode is
in force is logged when it changes and exported
(``trainjob_status_pod_binding_mode{mode}``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from trainjob_status.contract import JOBSET_NAME_LABEL

from ..failures import Unavailable
from ..kube.cache import WatchCache
from ..kube.client import KubeClient
from ..kube.resources import JOBS, JOBSETS, Obj
from ..kube.views import owned_view
from ..metrics.selfmetrics import POD_BINDING_MODE

log = logging.getLogger(__name__)

OWNERSHIP = "ownership"
LABELS = "labels"
UNDECIDED = "undecided"
MODES = (OWNERSHIP, LABELS, UNDECIDED)

LABELS_AFTER = 60.0
"""Seconds Jobs or JobSets must stay unlistable (403 or 404) before the label alone
binds a pod: longer than a watch's hiccup or an RBAC rollout, short enough for a
cluster without JobSet to serve posts within a minute of start."""


def controller_of(obj: Obj) -> tuple[str, str, str] | None:
    """(kind, name, uid) of ``obj``'s controller reference, or None."""
    meta = obj.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, dict) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            kind, name, uid = ref.get("kind"), ref.get("name"), ref.get("uid")
            if isinstance(kind, str) and isinstance(name, str) and isinstance(uid, str):
                return kind, name, uid
    return None


def _uid(obj: Obj | None) -> str | None:
    meta = obj.get("metadata") if obj is not None else None
    uid = meta.get("uid") if isinstance(meta, dict) else None
    return uid if isinstance(uid, str) else None


def owned_through(
    pod: Obj,
    trainjob: str,
    trainjob_uid: str | None,
    job: Callable[[str], Obj | None],
    jobset: Callable[[str], Obj | None],
) -> bool:
    """Whether ``pod``'s controller chain reaches TrainJob ``trainjob`` (uid
    ``trainjob_uid``): ``job`` and ``jobset`` give the cached object of a name (pure)."""
    step: Obj | None = pod
    for kind, fetch in (("Job", job), ("JobSet", jobset)):
        ref = controller_of(step) if step is not None else None
        if ref is None or ref[0] != kind:
            return False
        step = fetch(ref[1])
        if _uid(step) != ref[2]:
            return False
    ref = controller_of(step) if step is not None else None
    return (
        ref is not None
        and ref[0] == "TrainJob"
        and ref[1] == trainjob
        and trainjob_uid is not None
        and ref[2] == trainjob_uid
    )


class OwnerChain:
    """The Job and JobSet caches (listed and watched with ``watch``) and the judgement.
    ``trainjobs`` is the server's TrainJob cache; ``jobsets``, when given, a JobSet cache
    that keeps each JobSet's controller and is started and stopped by its owner (the pod
    injector's), else one of its own. ``grace`` is how long a Job or JobSet the cache
    lacks is waited for (the watch may trail a creation)."""

    def __init__(
        self,
        watch: KubeClient,
        trainjobs: WatchCache,
        *,
        jobsets: WatchCache | None = None,
        grace: float = 1.0,
        labels_after: float = LABELS_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.jobs = WatchCache(
            watch, JOBS, label_selector=JOBSET_NAME_LABEL, transform=owned_view, optional=True
        )
        self._own_jobsets = jobsets is None
        self.jobsets = (
            WatchCache(watch, JOBSETS, transform=owned_view, optional=True)
            if jobsets is None
            else jobsets
        )
        self.trainjobs = trainjobs
        self.grace = grace
        self.labels_after = labels_after
        self._clock = clock
        self.noted: str | None = None
        self._announce: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.jobs.start()
        if self._own_jobsets:
            await self.jobsets.start()
        self._announce = asyncio.create_task(self._announced(), name="pod-binding-mode")

    async def stop(self) -> None:
        if self._announce is not None:
            self._announce.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._announce
        await self.jobs.stop()
        if self._own_jobsets:
            await self.jobsets.stop()

    @property
    def mode(self) -> str:
        caches = (self.jobs, self.jobsets)
        if all(c.synced.is_set() and not c.unavailable for c in caches):
            return OWNERSHIP
        now = self._clock()
        for cache in caches:
            since = cache.unavailable_since
            if cache.unavailable and since is not None and now - since >= self.labels_after:
                return LABELS
        return UNDECIDED

    def note_mode(self) -> str:
        """The mode in force, logged and exported when it is not the one noted last."""
        mode = self.mode
        if mode != self.noted:
            self.noted = mode
            for each in MODES:
                POD_BINDING_MODE.labels(each).set(1 if each == mode else 0)
            fields: dict[str, Any] = {"mode": mode}
            if mode != OWNERSHIP:
                fields["unlisted"] = [
                    c.resource.qualified
                    for c in (self.jobs, self.jobsets)
                    if c.unavailable or not c.synced.is_set()
                ]
            log.log(
                logging.INFO if mode == OWNERSHIP else logging.WARNING,
                "pod binding mode",
                extra=fields,
            )
        return mode

    async def _announced(self) -> None:
        """Notes the mode once each cache has listed or turned out unavailable, then
        whenever it changes (a refusal turning sustained needs no event: looked at
        every second)."""
        for cache in (self.jobs, self.jobsets):
            # An unavailable cache never lists: looked at again every tenth of a second.
            while not (cache.synced.is_set() or cache.unavailable):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(cache.synced.wait(), 0.1)
        while True:
            self.note_mode()
            await asyncio.sleep(1.0)

    async def owns(self, namespace: str, pod: Obj, trainjob: str) -> bool:
        """Whether ``pod`` may post for ``trainjob`` by ownership (always, in the labels
        mode). Never a request: a Job or JobSet the caches lack is waited for up to
        ``grace`` seconds. Undecided, a chain the caches do not show raises
        ``Unavailable``: it cannot be told, and the label alone does not bind."""
        mode = self.note_mode()
        if mode == LABELS:
            return True
        job_ref = controller_of(pod)
        if job_ref is not None and job_ref[0] == "Job":
            await self._wait(self.jobs, namespace, job_ref)
            job = self.jobs.get(namespace, job_ref[1])
            set_ref = controller_of(job) if job is not None else None
            if set_ref is not None and set_ref[0] == "JobSet":
                await self._wait(self.jobsets, namespace, set_ref)
        held = self.trainjobs.get(namespace, trainjob)
        if held is None:  # created a moment ago, or gone: the watch may trail either
            held = await self.trainjobs.wait_for(namespace, trainjob, self.grace)
        owned = owned_through(
            pod,
            trainjob,
            _uid(held),
            lambda name: self.jobs.get(namespace, name),
            lambda name: self.jobsets.get(namespace, name),
        )
        if not owned and mode == UNDECIDED:
            raise Unavailable()
        return owned

    def trainjob_uid(self, namespace: str, trainjob: str) -> str | None:
        """The uid of the TrainJob the cache holds under that name, or None."""
        return _uid(self.trainjobs.get(namespace, trainjob))

    async def _wait(self, cache: WatchCache, namespace: str, ref: tuple[str, str, str]) -> None:
        if _uid(cache.get(namespace, ref[1])) != ref[2]:
            await cache.wait_for(namespace, ref[1], self.grace, fits=lambda o: _uid(o) == ref[2])
