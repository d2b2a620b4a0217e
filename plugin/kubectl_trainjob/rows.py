"""The figures of one TrainJob as ``kubectl trainjob`` shows them, and their formatting
(pure: the clock is an argument)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rich.table import Table
from rich.text import Text

from .formats import human_duration, parse_number, parse_time
from .kube import Obj, key_of
from .terminal import printable

BAR_WIDTH = 20
DEFAULT_METRICS = 3
"""Metric columns shown when none are chosen (``-o wide``: all of them)."""
# The conditions that say what became of a TrainJob, the most telling first.
STATES = ("Failed", "Complete", "Suspended", "Created")
SORT_KEYS = ("name", "state", "runtime", "progress", "eta", "updated")
METRIC_SORT = "metric:"


@dataclass(frozen=True)
class Row:
    """What the plugin shows of one TrainJob (None: not reported)."""

    namespace: str
    name: str
    progress: int | None = None
    eta_seconds: int | None = None
    last_updated: str | None = None
    metrics: tuple[tuple[str, str], ...] = ()
    state: str | None = None
    runtime: str | None = None
    # The TrainJob's: tells its progress from that of another TrainJob of the same name.
    uid: str | None = None

    def metric(self, name: str) -> str | None:
        """The last value reported under ``name``."""
        found = None
        for key, value in self.metrics:
            if key == name:
                found = value
        return found


def row_of(trainjob: Obj) -> Row:
    namespace, name = key_of(trainjob)
    meta = trainjob.get("metadata")
    uid = meta.get("uid") if isinstance(meta, dict) else None
    status = trainjob.get("status")
    state = state_of(status.get("conditions") if isinstance(status, dict) else None)
    spec = trainjob.get("spec")
    ref = spec.get("runtimeRef") if isinstance(spec, dict) else None
    runtime = ref.get("name") if isinstance(ref, dict) else None
    row = Row(
        namespace,
        name,
        state=state,
        runtime=runtime if isinstance(runtime, str) else None,
        uid=uid if isinstance(uid, str) else None,
    )
    trainer = status.get("trainerStatus") if isinstance(status, dict) else None
    return with_trainer_status(row, trainer)


def with_trainer_status(row: Row, trainer: Any) -> Row:
    """``row`` with the figures of ``trainer`` (a ``trainerStatus``), each None where it
    holds none; ``row`` as is when ``trainer`` is not one."""
    if not isinstance(trainer, dict):
        return row
    items = trainer.get("metrics")
    metrics = tuple(
        (str(item.get("name")), str(item.get("value")))
        for item in (items if isinstance(items, list) else [])
        if isinstance(item, dict)
    )
    stamp = trainer.get("lastUpdatedTime")
    return replace(
        row,
        progress=_integer(trainer.get("progressPercentage")),
        eta_seconds=_integer(trainer.get("estimatedRemainingSeconds")),
        last_updated=stamp if isinstance(stamp, str) else None,
        metrics=metrics,
    )


def fresher(row: Row, progress: Any) -> Row:
    """``row`` (a TrainJob's stored status) with the figures of ``progress`` (its
    ``TrainJobProgress``: the newest update the status server accepted) when that
    update's ``lastUpdatedTime`` is later than the row's, or the row has none that
    parses; else ``row`` as is. The state and runtime stay the TrainJob's. A progress of
    another TrainJob of the same name (another uid: deleted and made again) is not used.
    """
    if not isinstance(progress, dict):
        return row
    trainer = progress.get("trainerStatus")
    meta = progress.get("metadata")
    uid = meta.get("uid") if isinstance(meta, dict) else None
    if not isinstance(trainer, dict) or (row.uid and isinstance(uid, str) and uid != row.uid):
        return row
    stamp = trainer.get("lastUpdatedTime")
    newer = parse_time(stamp) if isinstance(stamp, str) else None
    if newer is None:
        return row
    stored = None if row.last_updated is None else parse_time(row.last_updated)
    if stored is not None and newer <= stored:
        return row
    return with_trainer_status(row, trainer)


def state_of(conditions: Any) -> str | None:
    """The state the TrainJob's controller set: the most telling condition of ``STATES``
    whose status is True (Failed before Complete before Suspended before Created);
    None before it set any."""
    held = {
        item.get("type")
        for item in (conditions if isinstance(conditions, list) else [])
        if isinstance(item, dict) and item.get("status") == "True"
    }
    return next((state for state in STATES if state in held), None)


def progress_bar(percent: int | None, width: int = BAR_WIDTH) -> str:
    """``██████░░░░  60%``; ``-`` when no progress was reported."""
    if percent is None:
        return "-"
    clamped = min(max(percent, 0), 100)
    filled = round(clamped * width / 100)
    return f"{'█' * filled}{'░' * (width - filled)} {percent:>3}%"


def eta_text(row: Row) -> str:
    return "-" if row.eta_seconds is None else human_duration(row.eta_seconds)


def updated_text(row: Row, now: float) -> str:
    """The age of the last update: ``12s ago``."""
    if row.last_updated is None:
        return "-"
    stamp = parse_time(row.last_updated)
    if stamp is None:
        return row.last_updated
    return f"{human_duration(now - stamp)} ago"


def document(row: Row, metrics: Sequence[str] = ()) -> dict[str, Any]:
    """A row for ``-o json|yaml``: the state and runtime name, the trainerStatus fields
    as stored; ``metrics`` as reported, or only the chosen ones when ``metrics`` names
    some."""
    chosen = [
        {"name": name, "value": value}
        for name, value in row.metrics
        if not metrics or name in metrics
    ]
    return {
        "namespace": row.namespace,
        "name": row.name,
        "state": row.state,
        "runtime": row.runtime,
        "progressPercentage": row.progress,
        "estimatedRemainingSeconds": row.eta_seconds,
        "lastUpdatedTime": row.last_updated,
        "metrics": chosen,
    }


def table(
    rows: Iterable[Row],
    *,
    metrics: Sequence[str],
    all_namespaces: bool,
    now: float,
    wide: bool = False,
    stale: bool = False,
    sort_by: str = "name",
) -> Table:
    """The progress table (kubectl's layout: no borders, upper-case headers); with
    ``wide`` a RUNTIME column too; ``stale`` marks every row's STATE (the rows are what
    the API server said last, not what it holds now).

    Every cell and header is a ``Text`` of ``printable`` text: the strings come from the
    cluster (and the command line), and Rich would read a plain string as markup.
    """
    out = Table(box=None, pad_edge=False, padding=(0, 3, 0, 0), header_style="bold")
    headers = [*(["NAMESPACE"] if all_namespaces else []), "NAME", "STATE", "PROGRESS", "ETA"]
    headers += ["UPDATED", *(["RUNTIME"] if wide else [])]
    for header in [*headers, *metrics]:
        out.add_column(_cell(header), no_wrap=True)
    for row in sorted_rows(rows, sort_by):
        cells = [_cell(row.namespace)] if all_namespaces else []
        bar = progress_bar(row.progress)
        cells += [
            _cell(row.name),
            _cell(state_text(row, stale)),
            Text(bar, style="green" if row.progress == 100 else "cyan"),
            _cell(eta_text(row)),
            _cell(updated_text(row, now)),
        ]
        if wide:
            cells.append(_cell(row.runtime or "-"))
        cells += [_cell(row.metric(name) or "-") for name in metrics]
        out.add_row(*cells)
    return out


def state_text(row: Row, stale: bool) -> str:
    """``Created``, ``-`` before the controller set a state; ``Created (stale)`` while the
    rows are not current."""
    shown = row.state or "-"
    return f"{shown} (stale)" if stale else shown


def shown_metrics(rows: Iterable[Row], chosen: Sequence[str], wide: bool) -> list[str]:
    """The metric columns: the chosen ones; else the names reported, in the order they
    first appear (rows by namespace and name), the first ``DEFAULT_METRICS`` of them
    unless ``wide``."""
    if chosen:
        return list(chosen)
    names: dict[str, None] = {}
    for row in sorted_rows(rows):
        for name, _ in row.metrics:
            names.setdefault(name, None)
    found = list(names)
    return found if wide else found[:DEFAULT_METRICS]


def sort_key(value: str) -> str:
    """``--sort-by``'s argument checked: a column of ``SORT_KEYS`` or ``metric:NAME``."""
    if value in SORT_KEYS or (value.startswith(METRIC_SORT) and len(value) > len(METRIC_SORT)):
        return value
    choices = ", ".join(SORT_KEYS)
    raise ValueError(f"--sort-by: {value!r} is none of {choices} or metric:NAME")


def sorted_rows(rows: Iterable[Row], by: str = "name") -> list[Row]:
    """Rows by namespace and name, or by ``by`` first (see ``sort_key``): rows without
    that figure come last; a metric sorts as a number when every value shown is one."""
    by_name = sorted(rows, key=lambda r: (r.namespace, r.name))
    if by == "name":
        return by_name
    values = [_sort_value(row, by) for row in by_name]
    shown = [i for i, value in enumerate(values) if value is not None]
    if all(isinstance(values[i], float) for i in shown):
        shown.sort(key=lambda i: float(values[i] or 0.0))
    else:
        shown.sort(key=lambda i: str(values[i]))
    missing = [i for i, value in enumerate(values) if value is None]
    # A stable sort: rows that tie stay in namespace and name order.
    return [by_name[i] for i in [*shown, *missing]]


def _sort_value(row: Row, by: str) -> str | float | None:
    if by == "state":
        return row.state
    if by == "runtime":
        return row.runtime
    if by == "progress":
        return None if row.progress is None else float(row.progress)
    if by == "eta":
        return None if row.eta_seconds is None else float(row.eta_seconds)
    if by == "updated":
        return None if row.last_updated is None else parse_time(row.last_updated)
    value = row.metric(by.removeprefix(METRIC_SORT))
    if value is None:
        return None
    number = parse_number(value)
    return value if number is None else number


def _cell(text: str) -> Text:
    return Text(printable(text))


def chosen_metrics(values: Sequence[str] | None) -> list[str]:
    """``--metric a --metric b,c`` -> [a, b, c], each once, in order."""
    names: list[str] = []
    for value in values or ():
        for name in value.split(","):
            if name and name not in names:
                names.append(name)
    return names


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
