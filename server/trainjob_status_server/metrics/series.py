"""Which Prometheus series a TrainJob yields, and which of them fit under the cap (pure: no
I/O, no clock, no registry).

Every TrainJob yields its state: ``trainjob_info`` (its runtime reference) and one
``trainjob_condition`` per condition the controller set; one that has reported through
``status.trainerStatus`` yields its progress gauges and metrics as well.

The exporter calls ``series_of`` on every watch event and renders the result at scrape
time; the kubectl plugin reads its figures through ``parse_time``. User metric names
are only ever label values (``trainjob_metric{name="..."}``), never metric names.

What a client sends is exported escaped or not at all: both exposition formats escape a
backslash, a double quote and a line feed in a label value and have no escape for any
other control character, so a name holding one (or a line separator, or an unpaired
surrogate, which is no UTF-8 at all) is refused rather than written raw, where it could
split or end a line for some reader and put terminal controls in front of whoever reads
the page. Over time one TrainJob exports ``admit``'s limit of distinct names at most.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..kube.views import condition_pairs, metric_pairs

PROGRESS = "trainjob_progress_ratio"
ESTIMATED_REMAINING = "trainjob_estimated_remaining_seconds"
LAST_UPDATE = "trainjob_last_update_timestamp_seconds"
METRIC = "trainjob_metric"
INFO = "trainjob_info"
CONDITION = "trainjob_condition"


@dataclass(frozen=True)
class Family:
    name: str
    help: str
    labels: tuple[str, ...]


FAMILIES = (
    Family(
        PROGRESS,
        "Training progress of the TrainJob from 0 to 1: status.trainerStatus.progressPercentage"
        " / 100.",
        ("namespace", "trainjob"),
    ),
    Family(
        ESTIMATED_REMAINING,
        "Seconds of training the TrainJob expects to have left: "
        "status.trainerStatus.estimatedRemainingSeconds.",
        ("namespace", "trainjob"),
    ),
    Family(
        LAST_UPDATE,
        "When the TrainJob's trainer last reported, in Unix seconds: "
        "status.trainerStatus.lastUpdatedTime.",
        ("namespace", "trainjob"),
    ),
    Family(
        METRIC,
        "A training metric the TrainJob reports in status.trainerStatus.metrics, by name; "
        "only values that are finite numbers.",
        ("namespace", "trainjob", "name"),
    ),
    Family(
        INFO,
        "Always 1: the TrainJob exists, with the runtime it references (spec.runtimeRef kind"
        " and name).",
        ("namespace", "trainjob", "runtime_kind", "runtime"),
    ),
    Family(
        CONDITION,
        "Always 1: the TrainJob holds a condition of this type (status.conditions, as its"
        " controller sets them: Created, Suspended, Complete, Failed, ...) with this status"
        " (True, False or Unknown).",
        ("namespace", "trainjob", "type", "status"),
    ),
)
"""In the order they are rendered; ``metrics`` of a TrainJobSeries go to ``METRIC``."""

# Priority under the cap, most important first: the state (``STATE``) before the
# gauges (``CORE``), and the conditions first of all. The staleness alert reads the last
# update, and a last update kept without the condition that says the job is over would
# page someone for a finished job. Then the dashboards' counts by runtime, the last
# update, progress, then the ETA.
STATE = (CONDITION, INFO)
CORE = (LAST_UPDATE, PROGRESS, ESTIMATED_REMAINING)

CONDITION_STATUSES = frozenset({"True", "False", "Unknown"})
MAX_CONDITIONS = 8
"""The CRD's maxItems for status.conditions; a source that ignores it exports no more."""
MAX_STATE_TEXT = 316
"""Longest condition type or runtime reference exported (metav1.Condition's limit on a
type, longer than any Kubernetes name)."""

# A decimal number as people and Python's str(float) write it. Stricter than float():
# no surrounding whitespace, no "1_000", no "infinity" (NaN and infinities are not
# exported anyway).
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")


# No escape exists for these in either format (a line feed has one; see the docstring).
_UNEXPORTABLE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")

NONE_SKIPPED: frozenset[tuple[str, str]] = frozenset()
"""Shared by every TrainJob with nothing skipped, instead of an empty set each."""
NONE_REFUSED: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class TrainJobSeries:
    """What one TrainJob with a trainerStatus exports.

    ``core`` holds (family name, value) in ``CORE`` order, for the fields that are set;
    ``metrics`` (metric name, value) in the order reported, each name once; ``skipped``
    the (name, value) pairs left out because the value is not a finite number;
    ``unexportable`` the names left out because ``exportable`` refuses them; ``state``
    (family name, labels besides namespace and trainjob) for the series valued 1, in
    ``STATE`` order, which come before ``core`` under the cap.
    """

    namespace: str
    trainjob: str
    core: tuple[tuple[str, float], ...] = ()
    metrics: tuple[tuple[str, float], ...] = ()
    skipped: frozenset[tuple[str, str]] = NONE_SKIPPED
    unexportable: frozenset[str] = NONE_REFUSED
    state: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    @property
    def count(self) -> int:
        """Series this TrainJob yields."""
        return len(self.state) + len(self.core) + len(self.metrics)


def series_of(trainjob: Mapping[str, Any]) -> TrainJobSeries | None:
    """The series of a TrainJob object; None when its namespace or name cannot be
    exported (the API server's name rules make that impossible, but nothing here trusts
    the source). A TrainJob without ``status.trainerStatus`` yields its state only.

    Fields that are missing or of the wrong type yield no series (status written by a
    writer other than us passed the CRD's schema, but nothing here trusts that).
    """
    meta = trainjob.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    if not (exportable(namespace) and exportable(name)):
        return None
    status = trainjob.get("status")
    state = state_of(trainjob.get("spec"), status)
    trainer = status.get("trainerStatus") if isinstance(status, dict) else None
    if not isinstance(trainer, dict):
        return TrainJobSeries(namespace=namespace, trainjob=name, state=state)
    fields: dict[str, float] = {}
    stamp = trainer.get("lastUpdatedTime")
    if isinstance(stamp, str) and (seconds := parse_time(stamp)) is not None:
        fields[LAST_UPDATE] = seconds
    progress = _integer(trainer.get("progressPercentage"))
    if progress is not None:
        fields[PROGRESS] = progress / 100
    remaining = _integer(trainer.get("estimatedRemainingSeconds"))
    if remaining is not None:
        fields[ESTIMATED_REMAINING] = float(remaining)
    metrics, skipped, unexportable = _metrics(trainer.get("metrics"))
    return TrainJobSeries(
        namespace=namespace,
        trainjob=name,
        core=tuple((family, fields[family]) for family in CORE if family in fields),
        metrics=metrics,
        skipped=skipped,
        unexportable=unexportable,
        state=state,
    )


def state_of(spec: Any, status: Any) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """A TrainJob's state series: its conditions (``conditions_of``), then its info.

    The info series is there for every TrainJob, so counting it counts TrainJobs; a
    runtime reference that is missing or cannot be exported leaves its labels empty.
    """
    ref = spec.get("runtimeRef") if isinstance(spec, dict) else None
    kind = name = ""
    if isinstance(ref, dict):
        kind, name = _state_text(ref.get("kind")), _state_text(ref.get("name"))
    conditions = conditions_of(status.get("conditions") if isinstance(status, dict) else None)
    return (
        *((CONDITION, (("type", type_), ("status", value))) for type_, value in conditions),
        (INFO, (("runtime_kind", kind), ("runtime", name))),
    )


def conditions_of(items: Any) -> tuple[tuple[str, str], ...]:
    """(type, status) of each condition that can be exported, in the order held, each
    type once (the last one held wins, as the list's map key makes it unique on the API
    server) and ``MAX_CONDITIONS`` at most; the API's list of objects or a cache view's
    pairs. A status other than True, False or Unknown is no condition status at all."""
    if isinstance(items, list):
        items = condition_pairs(items)
    elif not isinstance(items, tuple):
        return ()
    latest: dict[str, str] = {}
    for kind, value in items:
        if _state_text(kind) and value in CONDITION_STATUSES:
            latest.pop(kind, None)
            latest[kind] = value
    return tuple(latest.items())[:MAX_CONDITIONS]


def _state_text(value: Any) -> str:
    if isinstance(value, str) and len(value) <= MAX_STATE_TEXT and exportable(value):
        return value
    return ""


def exportable(text: str) -> bool:
    """Whether ``text`` can be a label value on the page: every character is written
    as is or with one of the formats' escapes (backslash, double quote, line feed)."""
    # isprintable (in C) holds for most names and implies the answer.
    return text.isprintable() or _UNEXPORTABLE.search(text) is None


def _metrics(
    items: Any,
) -> tuple[tuple[tuple[str, float], ...], frozenset[tuple[str, str]], frozenset[str]]:
    # The API's list of {name, value} objects, or a cache view's (name, value) pairs.
    if isinstance(items, list):
        items = metric_pairs(items)
    elif not isinstance(items, tuple):
        return (), NONE_SKIPPED, NONE_REFUSED
    # A name reported twice would give two samples with the same labels, which
    # Prometheus rejects: the last one reported wins, as in a JSON object.
    latest: dict[str, str] = {}
    for name, value in items:
        if name:
            latest.pop(name, None)  # the last occurrence also decides the position
            latest[name] = value
    exported: list[tuple[str, float]] = []
    skipped: set[tuple[str, str]] = set()
    unexportable: set[str] = set()
    for name, value in latest.items():
        if not exportable(name):
            unexportable.add(name)
        elif (number := parse_number(value)) is None:
            skipped.add((name, value))
        else:
            exported.append((name, number))
    return (
        tuple(exported),
        frozenset(skipped) if skipped else NONE_SKIPPED,
        frozenset(unexportable) if unexportable else NONE_REFUSED,
    )


def admit(
    names: Sequence[str], held: AbstractSet[str], limit: int
) -> tuple[tuple[str, ...], frozenset[str]]:
    """Which of a TrainJob's metric ``names`` (in the order reported) it may export,
    given ``held``, every name it was let export before: (admitted names in order, the
    names refused).

    A name held before is always admitted; a new one only while the TrainJob holds
    fewer than ``limit`` names (0: no limit). So however often a job renames its
    metrics, it yields ``limit`` distinct ``trainjob_metric`` series at most over its
    life, and a job that keeps its names never meets the limit.
    """
    if limit <= 0:
        return tuple(names), NONE_REFUSED
    room = limit - len(held)
    admitted: list[str] = []
    refused: set[str] = set()
    for name in names:
        if name in held:
            admitted.append(name)
        elif room > 0:
            admitted.append(name)
            room -= 1
        else:
            refused.add(name)
    return tuple(admitted), frozenset(refused) if refused else NONE_REFUSED


def parse_number(text: str) -> float | None:
    """The value of a metric if it is a finite decimal number, else None."""
    if _NUMBER.match(text) is None:
        return None
    number = float(text)
    return number if math.isfinite(number) else None  # "1e999" overflows to inf


def parse_time(text: str) -> float | None:
    """Unix seconds of an RFC 3339 date-time (fraction digits past 6 dropped; no offset
    read as UTC); None if it does not parse."""
    try:
        stamp = datetime.fromisoformat(text.upper())
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    try:
        return stamp.timestamp()
    except (OverflowError, ValueError):
        return None


def newly_skipped(old: frozenset[tuple[str, str]], new: frozenset[tuple[str, str]]) -> int:
    """How many of a TrainJob's non-numeric (name, value) pairs ``new`` holds that ``old``
    (what it skipped before this change) did not.

    The skip counter counts these on each change of a TrainJob, so a value that stays
    non-numeric across updates and scrapes is counted once, and a new one once more.
    """
    return len(new - old) if new else 0


def allowance(
    counts: Sequence[tuple[int, int]], cap: int, tenants: Sequence[str] | None = None
) -> tuple[list[tuple[int, int]], int]:
    """Given (core, metric) series counts per TrainJob in a stable order, how many of
    each are exported under ``cap`` (0: no cap), and how many are dropped in all.

    The core series of every TrainJob come before any ``trainjob_metric`` series:
    progress and staleness stay visible for every job, and the user metrics, where
    the cardinality is, go first. In each pass the series left are shared fairly among
    ``tenants`` (each TrainJob's namespace; one tenant when not given): none gets more
    than it has, the rest is split evenly (``fair_shares``), so no tenant loses series
    to another for the name it sorts by. Within a tenant, earlier TrainJobs come first.
    """
    total = sum(core + metrics for core, metrics in counts)
    if cap <= 0 or total <= cap:
        return list(counts), 0
    groups = list(tenants) if tenants is not None else [""] * len(counts)
    cores = _fill([core for core, _ in counts], groups, cap)
    metrics = _fill([m for _, m in counts], groups, cap - sum(cores))
    return list(zip(cores, metrics, strict=True)), total - cap


def _fill(wanted: Sequence[int], groups: Sequence[str], budget: int) -> list[int]:
    """How many of ``wanted`` each item gets of ``budget``: a fair share per group,
    then in order within a group."""
    demand: dict[str, int] = {}
    for group, want in zip(groups, wanted, strict=True):
        demand[group] = demand.get(group, 0) + want
    left = fair_shares(demand, budget)
    kept = []
    for group, want in zip(groups, wanted, strict=True):
        given = min(want, left[group])
        left[group] -= given
        kept.append(given)
    return kept


def fair_shares(demand: Mapping[str, int], budget: int) -> dict[str, int]:
    """A max-min fair split of ``budget`` among groups asking ``demand``: no group gets
    more than it asks, the rest is split evenly among the others, and what an even split
    leaves over (fewer than the groups still asking) goes one each in name order."""
    shares = dict.fromkeys(demand, 0)
    asking = {group: want for group, want in demand.items() if want > 0}
    while budget > 0 and asking:
        each = budget // len(asking)
        if each == 0:
            for group in sorted(asking)[:budget]:
                shares[group] += 1
            break
        for group in sorted(asking):
            given = min(asking[group], each)
            shares[group] += given
            asking[group] -= given
            budget -= given
            if not asking[group]:
                del asking[group]
    return shares


def _integer(value: Any) -> int | None:
    # JSON integers only: True is an int to Python, and 42.0 not a CRD integer.
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None
