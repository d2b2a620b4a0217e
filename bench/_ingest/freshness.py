"""Freshness measured from outside: from each post's send to the first status at least
as new that a watch saw."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Visible:
    """When statuses became visible, per TrainJob: observation times (us) and the newest
    lastUpdatedTime visible at each (a running maximum, so bisect finds the first)."""

    seen_at: list[int] = field(default_factory=list)
    newest: list[int] = field(default_factory=list)


def read_visible(path: Path) -> dict[str, Visible]:
    table: dict[str, Visible] = {}
    if not path.exists():
        return table
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue  # a line being written
        key, stamp, seen_at = parts[0], int(parts[1]), int(parts[2])
        entry = table.setdefault(key, Visible())
        entry.seen_at.append(seen_at)
        entry.newest.append(max(stamp, entry.newest[-1] if entry.newest else stamp))
    return table


def freshness(sends: Path, visible: dict[str, Visible]) -> list[float]:
    """Seconds from each post's send to the first visible status at least as new, sorted;
    inf for a post never covered."""
    values = []
    for line in sends.read_text().splitlines():
        key, text = line.split()
        sent = int(text)
        entry = visible.get(key)
        index = bisect.bisect_left(entry.newest, sent) if entry else 0
        if entry and index < len(entry.newest):
            values.append((entry.seen_at[index] - sent) / 1e6)
        else:
            values.append(math.inf)
    values.sort()
    return values
