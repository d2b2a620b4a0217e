"""Fresh figures for ``kubectl trainjob progress``: each TrainJob's newest update the
status server accepted, read from its aggregated API (``trainjobprogresses`` of
``trainjob-status.kubeflow.org/v1alpha1``, through the Kubernetes API server). The
server writes a TrainJob's status at most so often, so that update may be newer than
the status: a row takes its figures when it is (``rows.fresher``), and keeps the
TrainJob's state and runtime.

Where the API is not registered (404; or 403 where its discovery is 404, as the API
server refuses a user without RBAC on a resource before it looks for it), the rows show
the status, nothing is said, and it is not asked again. Any other failure (403: no RBAC
on trainjobprogresses; 503: the server is down; no answer) shows the status too, says
why on stderr once, and asks again at the next refresh; when it answers again after
that, it says so. It never fails the command. The decisions are pure (``failed``,
``refusal_status``, ``answered``, ``by_trainjob``, ``changed_rows``); ``Freshness``
does the reading.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from .follow import reason_of
from .kube import Key, KubeClient, KubeError, KubeUnavailable, Obj, Resource
from .rows import Row, fresher

# The server's names for it (tests/kubectl_plugin/test_shared_facts.py holds them to
# the server's own).
PROGRESSES = Resource("trainjob-status.kubeflow.org", "v1alpha1", "trainjobprogresses")
DISCOVERY = f"/apis/{PROGRESSES.api_version}"

REFRESH_SECONDS = 5.0
"""With ``-w``, how often the progress is read again (one list through the API server,
for the namespace or, with ``-A``, all of them): TrainJob watch events redraw at once as
before, and an update the server has not written yet shows within this."""

TIMEOUT_SECONDS = 5.0
"""How long a read may take before the rows go on without it (the first table waits
for it at most this long)."""


@dataclass(frozen=True)
class Source:
    """Whether the aggregated API is still asked, and the failure last told on stderr
    ("" when none was told since it last answered)."""

    asking: bool = True
    told: str = ""


def failed(source: Source, status: int | None, detail: str = "") -> tuple[Source, str | None]:
    """After a read failed with HTTP ``status`` (None: no answer, ``detail`` says why):
    the new source and the line for stderr (None: nothing to say). 404 is an API server
    without the APIService: the status is all there is, and that is no news."""
    if status == 404:
        return Source(asking=False), None
    why = failure_reason(status, detail)
    if source.told == why:
        return source, None
    return Source(told=why), f"fresh progress unavailable ({why}): showing stored status"


def refusal_status(discovery: int | None) -> int:
    """What a 403 for the list means, given the status the group-version's discovery
    answered (None: 200, or no answer): the API server authorizes a request before it
    looks for the resource, so a user without RBAC on trainjobprogresses is refused
    them where no APIService serves them too; a discovery 404 says that is so (404)."""
    return 404 if discovery == 404 else 403


def answered(source: Source) -> tuple[Source, str | None]:
    """After a read succeeded: the new source, and a line when a failure was told."""
    if not source.told:
        return source, None
    return Source(), "fresh progress available again"


def failure_reason(status: int | None, detail: str = "") -> str:
    """``403 Forbidden``, ``503 Service Unavailable``; ``detail`` without a status."""
    if status is None:
        return detail or "no answer"
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def by_trainjob(listed: Any) -> dict[Key, Obj]:
    """A ``TrainJobProgressList``'s items by their TrainJob's (namespace, name); whatever
    is not an item with both is left out."""
    items = listed.get("items") if isinstance(listed, dict) else None
    found: dict[Key, Obj] = {}
    for item in items if isinstance(items, list) else []:
        meta = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(meta, dict):
            continue
        namespace, name = meta.get("namespace"), meta.get("name")
        if isinstance(namespace, str) and isinstance(name, str) and namespace and name:
            found[(namespace, name)] = item
    return found


def changed_rows(
    rows: Iterable[Row], before: Mapping[Key, Obj], after: Mapping[Key, Obj]
) -> list[Row]:
    """The rows (of stored status) whose figures differ with ``after``'s progress from
    what ``before``'s gave them: each with ``after``'s."""
    changed = []
    for row in rows:
        key = (row.namespace, row.name)
        now = fresher(row, after.get(key))
        if now != fresher(row, before.get(key)):
            changed.append(now)
    return changed


class Freshness:
    """The progress of the TrainJobs of ``namespace`` (None: all), as last read through
    ``client``; ``on_message`` hears every line for stderr."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str | None,
        on_message: Callable[[str], None],
        timeout: float = TIMEOUT_SECONDS,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.on_message = on_message
        self.timeout = timeout
        self.source = Source()
        self.progress: dict[Key, Obj] = {}

    def row(self, row: Row) -> Row:
        """``row`` with its TrainJob's progress, when that is newer."""
        return fresher(row, self.progress.get((row.namespace, row.name)))

    async def read(self) -> dict[Key, Obj]:
        """Read the progress once (not once the API was found not registered; after a
        failure there is none until a read succeeds); returns what was there before."""
        before = self.progress
        if not self.source.asking:
            return before
        try:
            async with asyncio.timeout(self.timeout):
                listed, status, detail = await self._list()
        except TimeoutError:
            listed, status, detail = None, None, f"no answer within {self.timeout:g}s"
        if listed is None:
            self.progress = {}
            self._after(failed(self.source, status, detail))
        else:
            self.progress = by_trainjob(listed)
            self._after(answered(self.source))
        return before

    async def _list(self) -> tuple[Obj | None, int | None, str]:
        """The list; or None, the failure's status (None: no answer) and what it was."""
        try:
            return await self.client.get_json(PROGRESSES.path(self.namespace)), None, ""
        except KubeUnavailable as exc:
            return None, None, reason_of(exc)
        except KubeError as exc:
            if exc.status != 403:
                return None, exc.status, ""
        # Refused: but is there anything to refuse? Discovery is open to every user.
        return None, refusal_status(await self._discovery_status()), ""

    async def _discovery_status(self) -> int | None:
        """The status of the group-version's discovery when an error; else None."""
        try:
            await self.client.get_json(DISCOVERY)
        except KubeError as exc:
            return exc.status
        except KubeUnavailable:
            pass
        return None

    async def run(
        self,
        on_change: Callable[[Mapping[Key, Obj]], None],
        *,
        paused: Callable[[], bool] = lambda: False,
        interval: float = REFRESH_SECONDS,
    ) -> None:
        """Read again every ``interval`` seconds, until cancelled or the API is found not
        registered; ``on_change`` hears the progress read before each read that changed
        it. Not while ``paused()``: the TrainJobs' watch lost the API server, and says so."""
        while self.source.asking:
            await asyncio.sleep(interval)
            if paused():
                continue
            before = await self.read()
            if self.progress != before:
                on_change(before)

    def _after(self, step: tuple[Source, str | None]) -> None:
        self.source, line = step
        if line is not None:
            self.on_message(line)
