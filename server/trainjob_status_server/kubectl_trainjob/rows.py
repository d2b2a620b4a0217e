"""The figures of one TrainJob as ``kubectl trainjob`` shows them, and their formatting
(pure: the clock is an argument)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table
from rich.text import Text

from ..kube.resources import Obj, key_of
from ..series import parse_time
from .terminal import printable

BAR_WIDTH = 20


@dataclass(frozen=True)
class Row:
    """What the plugin shows of one TrainJob (None: not reported)."""

    namespace: str
    name: str
    progress: int | None = None
    eta_seconds: int | None = None
    last_updated: str | None = None
    metrics: tuple[tuple[str, str], ...] = ()

    def metric(self, name: str) -> str | None:
        """The last value reported under ``name``."""
        found = None
        for key, value in self.metrics:
            if key == name:
                found = value
        return found


def row_of(trainjob: Obj) -> Row:
    namespace, name = key_of(trainjob)
    status = trainjob.get("status")
    trainer = status.get("trainerStatus") if isinstance(status, dict) else None
    if not isinstance(trainer, dict):
        return Row(namespace, name)
    items = trainer.get("metrics")
    metrics = tuple(
        (str(item.get("name")), str(item.get("value")))
        for item in (items if isinstance(items, list) else [])
        if isinstance(item, dict)
    )
    stamp = trainer.get("lastUpdatedTime")
    return Row(
        namespace,
        name,
        progress=_integer(trainer.get("progressPercentage")),
        eta_seconds=_integer(trainer.get("estimatedRemainingSeconds")),
        last_updated=stamp if isinstance(stamp, str) else None,
        metrics=metrics,
    )


def human_duration(seconds: float) -> str:
    """A duration as kubectl prints ages (``duration.HumanDuration``): 45s, 5m30s, 3h,
    2d4h ..."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 24 * 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if hours < 24 * 365 * 2:
        return f"{days}d"
    years = days // 365
    if hours < 24 * 365 * 8:
        return f"{years}y{days % 365}d" if days % 365 else f"{years}y"
    return f"{years}y"


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
    """A row for ``-o json|yaml``: the trainerStatus fields as stored; ``metrics`` as
    reported, or only the chosen ones when ``metrics`` names some."""
    chosen = [
        {"name": name, "value": value}
        for name, value in row.metrics
        if not metrics or name in metrics
    ]
    return {
        "namespace": row.namespace,
        "name": row.name,
        "progressPercentage": row.progress,
        "estimatedRemainingSeconds": row.eta_seconds,
        "lastUpdatedTime": row.last_updated,
        "metrics": chosen,
    }


def table(
    rows: Iterable[Row], *, metrics: Sequence[str], all_namespaces: bool, now: float
) -> Table:
    """The progress table (kubectl's layout: no borders, upper-case headers).

    Every cell and header is a ``Text`` of ``printable`` text: the strings come from the
    cluster (and the command line), and Rich would read a plain string as markup.
    """
    out = Table(box=None, pad_edge=False, padding=(0, 3, 0, 0), header_style="bold")
    headers = [*(["NAMESPACE"] if all_namespaces else []), "NAME", "PROGRESS", "ETA", "UPDATED"]
    for header in [*headers, *metrics]:
        out.add_column(_cell(header), no_wrap=True)
    for row in sorted(rows, key=lambda r: (r.namespace, r.name)):
        cells = [_cell(row.namespace)] if all_namespaces else []
        bar = progress_bar(row.progress)
        cells += [
            _cell(row.name),
            Text(bar, style="green" if row.progress == 100 else "cyan"),
            _cell(eta_text(row)),
            _cell(updated_text(row, now)),
        ]
        cells += [_cell(row.metric(name) or "-") for name in metrics]
        out.add_row(*cells)
    return out


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
