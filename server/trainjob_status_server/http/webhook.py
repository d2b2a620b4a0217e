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
decided in ``pods/injection.py``.

The port is open to every pod, and a review can name anything: TrainJobs and JobSets
come from watch caches, so no review causes a Kubernetes API request. A name the caches
lack is waited for briefly (the watch may trail the object's creation), then taken as
missing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ..kube.backoff import Backoff
from ..kube.cache import DEFAULT_BACKOFF, WatchCache
from ..kube.client import KubeClient
from ..kube.resources import JOBSETS, Obj
from ..metrics.selfmetrics import INJECTIONS
from ..pods import injection
from ..pods.injection import FirstSighting, Plan, Selector, Target
from .endpoint import read_body
from .responses import Answer

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
    watch_grace: float = 1.0
    """Seconds one review waits, in all, for the watches to show a TrainJob or JobSet it
    names that the caches do not hold: a TrainJob's pods are created moments after it,
    and the watch may be that far behind. Never an API request: a name still unknown
    after this is taken as missing."""


class JobSetSteps:
    """The labels of the replicated job that made a pod, read from a JobSet list+watch
    cache: an admission never costs an API request, whatever names it carries.

    The cache keeps, per JobSet, only the replicated jobs' names and the template labels
    the selector reads. A cluster without JobSets, or an RBAC rule that does not let us
    list them, leaves the cache ``unavailable`` (logged once): the selector then sees
    the pod's own labels only.
    """

    def __init__(
        self, kube: KubeClient, selector: Selector, *, backoff: Backoff = DEFAULT_BACKOFF
    ) -> None:
        keys = selector.keys
        self.jobsets = WatchCache(
            kube,
            JOBSETS,
            transform=lambda obj: injection.jobset_view(obj, keys),
            optional=True,
            backoff=backoff,
        )

    async def start(self) -> None:
        await self.jobsets.start()

    async def stop(self) -> None:
        await self.jobsets.stop()

    async def labels(
        self, namespace: str, jobset: str, replicated_job: str, wait: float = 0.0
    ) -> dict[str, str]:
        """The step's labels; a JobSet the cache does not hold yet is waited for up to
        ``wait`` seconds (it may have been created a moment ago), then taken as none."""
        found = await self.jobsets.wait_for(namespace, jobset, wait)
        return injection.step_labels(found, replicated_job) if found is not None else {}


class PodInjector:
    """The ``/mutate-pods`` handler. ``trainjobs`` is the server's TrainJob cache;
    ``steps`` reads the JobSets (None: the selector sees pod labels only). Reviews come
    from anyone who can reach the port, so the answer comes from the caches alone."""

    def __init__(
        self,
        settings: InjectorSettings,
        trainjobs: WatchCache,
        steps: JobSetSteps | None = None,
    ) -> None:
        self.settings = settings
        self.trainjobs = trainjobs
        self.steps = steps
        # A TrainJob's pods all carry the same foreign injection: one line says so.
        self.foreign = FirstSighting()
        for result in injection.RESULTS:
            INJECTIONS.labels(result=result)  # every series exists from the start, at 0

    async def handle(self, request: web.BaseRequest) -> web.Response:
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
        # One grace period for both caches: a review naming unknown objects is answered
        # well within the timeout.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(self.settings.watch_grace, self.settings.timeout / 2)
        if trainjob is None or not await self._selected(pod, namespace, trainjob, deadline):
            return Plan(injection.NOT_SELECTED, [])
        if not await self._trainjob_exists(namespace, trainjob, deadline):
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
        foreign = decided.outcome in (injection.PRESENT, injection.OVERRIDDEN)
        if foreign and self.foreign.first((namespace, trainjob)):
            self._log_foreign(pod, namespace, trainjob, decided.outcome)
        return decided

    def _log_foreign(self, pod: Obj, namespace: str, trainjob: str, outcome: str) -> None:
        """Once per TrainJob: its pods already carry another injection (the Trainer's
        own status server, or the user's values), left alone or replaced."""
        fields = {
            "namespace": namespace,
            "trainjob": trainjob,
            "result": outcome,
            "elsewhere": injection.elsewhere(pod, self.settings.target),
        }
        if outcome == injection.OVERRIDDEN:
            log.info("trainjob pods redirected to this server", extra=fields)
        else:
            # Its updates go elsewhere: this server will not see that TrainJob's posts.
            log.warning("trainjob pods report elsewhere; left alone", extra=fields)

    async def _selected(self, pod: Obj, namespace: str, trainjob: str, deadline: float) -> bool:
        selector = self.settings.selector
        labels = injection.labels_of(pod)
        if selector.matches(labels):
            return True
        replicated_job = labels.get(injection.REPLICATED_JOB_LABEL)
        if self.steps is None or replicated_job is None:
            return False
        step = await self.steps.labels(namespace, trainjob, replicated_job, _left(deadline))
        return selector.matches({**step, **labels})

    async def _trainjob_exists(self, namespace: str, name: str, deadline: float) -> bool:
        return await self.trainjobs.wait_for(namespace, name, _left(deadline)) is not None


def _left(deadline: float) -> float:
    return max(0.0, deadline - asyncio.get_running_loop().time())


def review_response(uid: str, patch: injection.Patch) -> web.Response:
    """An AdmissionReview answer that admits the pod, with ``patch`` if there is one."""
    answer: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        answer["patchType"] = "JSONPatch"
        answer["patch"] = base64.b64encode(
            json.dumps(patch, separators=(",", ":")).encode()
        ).decode()
    body = {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": answer}
    return Answer(text=json.dumps(body), content_type="application/json")
