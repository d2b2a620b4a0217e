"""How ``kubectl trainjob progress`` prints: the table (redrawn in place on a terminal,
once more per change when piped), or JSON / YAML documents for scripts."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

import yaml
from rich.console import Console
from rich.live import Live
from rich.table import Table

from .rows import Row, chosen_metrics, document, table
from .terminal import has_bidi_control


class View:
    """Prints what ``progress`` shows, to ``out`` (a terminal gets colours and, with
    ``-w``, a table redrawn in place)."""

    def __init__(self, args: argparse.Namespace, out: TextIO, clock: Callable[[], float]) -> None:
        self.metrics = chosen_metrics(args.metric)
        self.output: str | None = args.output
        self.all_namespaces: bool = args.all_namespaces
        self.clock = clock
        self.out = out
        tty = out.isatty()
        # Piped output is never cut or wrapped: scripts and tests read whole lines.
        self.console = Console(file=out, width=None if tty else 10_000, highlight=False)
        self.watching: bool = args.watch
        self.live: Live | None = None

    @property
    def interactive(self) -> bool:
        return self.console.is_terminal and self.output is None

    def table(self, rows: Iterable[Row]) -> Table:
        return table(
            rows, metrics=self.metrics, all_namespaces=self.all_namespaces, now=self.clock()
        )

    def snapshot(self, rows: list[Row]) -> None:
        """All rows at once: the answer without ``-w``, and each redraw with it."""
        if self.output == "json":
            items = [document(row, self.metrics) for row in sorted_rows(rows)]
            self.out.write(json.dumps({"items": items}, indent=2) + "\n")
        elif self.output == "yaml":
            items = [document(row, self.metrics) for row in sorted_rows(rows)]
            self.out.write(yaml_text({"items": items}))
        elif self.live is not None:
            self.live.update(self.table(rows), refresh=True)
        else:
            with self.console.capture() as captured:
                self.console.print(self.table(rows))
            lines = (line.rstrip() for line in captured.get().splitlines())
            # Piped -w output: one table per change, each ended by a blank line.
            self.out.write("\n".join(lines) + ("\n\n" if self.watching else "\n"))
        self.out.flush()

    def event(self, kind: str, row: Row) -> None:
        """One watch event for ``-o json|yaml``: a JSON line, or a YAML document."""
        doc = {"type": kind, **document(row, self.metrics)}
        if self.output == "json":
            self.out.write(json.dumps(doc) + "\n")
        else:
            self.out.write("---\n" + yaml_text(doc))
        self.out.flush()


def yaml_text(doc: Any) -> str:
    """``doc`` as YAML, non-ASCII text as is unless it holds a bidirectional control.

    YAML escapes every other control character itself, but writes these as they are
    when it may write Unicode, and a terminal would then show the text reordered.
    """
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
    if has_bidi_control(text):
        return yaml.safe_dump(doc, sort_keys=False, allow_unicode=False)
    return text


def sorted_rows(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r.namespace, r.name))


def selected(rows: Iterable[Row], names: Sequence[str]) -> list[Row]:
    return [row for row in rows if not names or row.name in names]
