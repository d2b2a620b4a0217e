"""The pod injector: a mutating admission webhook (``POST /mutate-pods``, AdmissionReview
``admission.k8s.io/v1``) served on the serving port.

Training is never blocked by us: every answer is ``allowed: true``. A review we cannot
read, a TrainJob we cannot look up in time, any failure at all: the pod is admitted
unchanged and the failure is counted (``trainjob_status_injections_total{result="error"}``).
The webhook configuration says the same (``failurePolicy: Ignore``, a short timeout).

Which pods: those of a TrainJob (label ``jobset.sigs.k8s.io/jobset-name`` naming an
existing TrainJob) that the selector picks. The selector is matched against the pod's
labels together with those of the JobSet replicated job that made it, because that is
where a TrainingRuntime puts ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``:
on the Job template, which Kubernetes does not copy onto pods. What the patch does is
decided in ``injection.py``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from . import injection
from .endpoint import read_body
from .injection import Plan, Selector, Target
from .kube.cache import WatchCache
from .kube.client import KubeClient
from .kube.errors import KubeError
from .kube.resources import JOBSETS, Key, Obj
from .selfmetrics import INJECTIONS

log = logging.getLogger(__name__)

INJECT_PATH = "/mutate-pods"
ADMISSION_API_VERSION = "admission.k8s.io/v1"
# A pod is at most ~1.5 MiB in etcd; a review carries it and some request metadata.
MAX_REVIEW_BYTES = 3 * 2**20


@dataclass(frozen=True)
class InjectorSettings:
    target: Target = field(default_factory=Target)
    selector: Selector = field(default_factory=lambda: Selector.parse(injection.DEFAULT_SELECTOR))
    override_existing: bool = False
    timeout: float = 2.0
    """Seconds one review may take before the pod is admitted unchanged; below the
    webhook configuration's ``timeoutSeconds`` so the answer is ours, not the API
    server's timeout."""


class JobSetSteps:
    """The labels of the replicated job that made a pod, read from its JobSet.

    One GET per JobSet per ``ttl`` at most (a gang of pods is admitted within seconds,
    and a JobSet's replicated jobs do not change); concurrent lookups share it. A cluster
    without JobSets, or an RBAC rule that does not let us read them, gives no labels:
    the selector then sees the pod's own labels only.
    """

    def __init__(
        self,
        kube: KubeClient,
        *,
        ttl: float = 60.0,
        max_entries: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.ttl = ttl
        self.max_entries = max_entries
        self._clock = clock
        self._cache: dict[Key, tuple[float, Obj | None]] = {}
        self._fetches: dict[Key, asyncio.Task[Obj | None]] = {}

    async def labels(self, namespace: str, jobset: str, replicated_job: str) -> dict[str, str]:
        found = await self._jobset(namespace, jobset)
        return injection.step_labels(found, replicated_job) if found is not None else {}

    async def _jobset(self, namespace: str, name: str) -> Obj | None:
        key = (namespace, name)
        now = self._clock()
        held = self._cache.get(key)
        if held is not None and held[0] > now:
            return held[1]
        fetch = self._fetches.get(key)
        if fetch is None:
            fetch = asyncio.create_task(self._fetch(namespace, name))
            self._fetches[key] = fetch
            fetch.add_done_callback(lambda _: self._fetches.pop(key, None))
        # A review that gives up must not cancel the lookup the others wait for.
        return await asyncio.shield(fetch)

    async def _fetch(self, namespace: str, name: str) -> Obj | None:
        try:
            found = await self.kube.get(JOBSETS, namespace, name)
        except KubeError as exc:
            if exc.status != 403:
                raise
            log.warning(
                "cannot read JobSets: the selector sees pod labels only",
                extra={"namespace": namespace, "error": str(exc)},
            )
            found = None
        if len(self._cache) >= self.max_entries:
            now = self._clock()
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            while len(self._cache) >= self.max_entries:
                del self._cache[next(iter(self._cache))]
        self._cache[(namespace, name)] = (self._clock() + self.ttl, found)
        return found


class PodInjector:
    """The ``/mutate-pods`` handler. ``trainjobs`` is the server's TrainJob cache;
    ``steps`` reads the JobSets (None: the selector sees pod labels only)."""

    def __init__(
        self,
        settings: InjectorSettings,
        trainjobs: WatchCache,
        steps: JobSetSteps | None = None,
    ) -> None:
        self.settings = settings
        self.trainjobs = trainjobs
        self.steps = steps
        for result in injection.RESULTS:
            INJECTIONS.labels(result=result)  # every series exists from the start, at 0

    async def handle(self, request: web.Request) -> web.Response:
        uid = ""
        outcome = injection.ERROR
        patch: injection.Patch = []
        try:
            async with asyncio.timeout(self.settings.timeout):
                raw = await read_body(request, MAX_REVIEW_BYTES, self.settings.timeout)
                review = json.loads(raw)
                admission = review.get("request") if isinstance(review, dict) else None
                if not isinstance(admission, dict):
                    raise ValueError("not an AdmissionReview with a request")
                uid = str(admission.get("uid") or "")
                decided = await self.decide(admission)
            outcome, patch = decided.outcome, decided.patch
        except Exception as exc:
            # Whatever went wrong, the pod goes ahead as it is: training must not wait
            # for us. The review itself is never logged (pods carry secrets in env).
            log.warning(
                "pod admitted without injection",
                extra={"uid": uid, "error": f"{type(exc).__name__}: {exc}"},
            )
        INJECTIONS.labels(result=outcome).inc()
        return review_response(uid, patch)

    async def decide(self, admission: Mapping[str, Any]) -> Plan:
        """The plan for one admission request (``AdmissionReview.request``)."""
        resource = admission.get("resource") or {}
        if (
            admission.get("operation") != "CREATE"
            or admission.get("subResource")
            or resource.get("group") != ""
            or resource.get("resource") != "pods"
        ):
            return Plan(injection.IGNORED, [])
        pod = admission.get("object")
        if not isinstance(pod, dict):
            raise ValueError("the request carries no pod")
        namespace = admission.get("namespace") or (pod.get("metadata") or {}).get("namespace")
        if not isinstance(namespace, str) or not namespace:
            raise ValueError("the request names no namespace")
        trainjob = injection.trainjob_of(pod)
        if trainjob is None or not await self._selected(pod, namespace, trainjob):
            return Plan(injection.NOT_SELECTED, [])
        if not await self._trainjob_exists(namespace, trainjob):
            return Plan(injection.UNKNOWN_TRAINJOB, [])
        decided = injection.plan(
            pod,
            namespace,
            trainjob,
            self.settings.target,
            override_existing=self.settings.override_existing,
        )
        log.info(
            "pod admission",
            extra={"namespace": namespace, "trainjob": trainjob, "result": decided.outcome},
        )
        return decided

    async def _selected(self, pod: Obj, namespace: str, trainjob: str) -> bool:
        selector = self.settings.selector
        labels = injection.labels_of(pod)
        if selector.matches(labels):
            return True
        replicated_job = labels.get(injection.REPLICATED_JOB_LABEL)
        if self.steps is None or replicated_job is None:
            return False
        step = await self.steps.labels(namespace, trainjob, replicated_job)
        return selector.matches({**step, **labels})

    async def _trainjob_exists(self, namespace: str, name: str) -> bool:
        # The cache remembers a TrainJob found missing for a while, so the pods of a
        # JobSet that is no TrainJob's cost one lookup, not one each.
        return await self.trainjobs.get_or_fetch(namespace, name) is not None


def review_response(uid: str, patch: injection.Patch) -> web.Response:
    """An AdmissionReview answer that admits the pod, with ``patch`` if there is one."""
    answer: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = base64.b64encode(
            json.dumps(patch, separators=(",", ":")).encode()
        ).decode()
    body = {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": answer}
    return web.json_response(body)
