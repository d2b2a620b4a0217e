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
from rich.text import Text

from .rows import Row, chosen_metrics, document, shown_metrics, sorted_rows, table
from .terminal import has_bidi_control, printable


class View:
    """Prints what ``progress`` shows, to ``out`` (a terminal gets colours and, with
    ``-w``, a table redrawn in place), and what it has to say about the API server to
    ``err``."""

    def __init__(
        self,
        args: argparse.Namespace,
        out: TextIO,
        clock: Callable[[], float],
        err: TextIO | None = None,
    ) -> None:
        self.metrics = chosen_metrics(args.metric)
        # "wide" is a table; the other outputs are documents.
        self.wide = args.output == "wide"
        self.output: str | None = None if self.wide else args.output
        self.sort_by: str = args.sort_by
        self.all_namespaces: bool = args.all_namespaces
        self.err = err
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

    def table(self, rows: list[Row], stale: bool = False) -> Table:
        return table(
            rows,
            metrics=shown_metrics(rows, self.metrics, self.wide),
            all_namespaces=self.all_namespaces,
            now=self.clock(),
            wide=self.wide,
            stale=stale,
            sort_by=self.sort_by,
        )

    def snapshot(self, rows: list[Row], stale: bool = False) -> None:
        """All rows at once: the answer without ``-w``, and each redraw with it (``stale``:
        the rows are what the API server said last, not what it holds now)."""
        if self.output == "json":
            items = [document(row, self.metrics) for row in sorted_rows(rows, self.sort_by)]
            self.out.write(json.dumps({"items": items}, indent=2) + "\n")
        elif self.output == "yaml":
            items = [document(row, self.metrics) for row in sorted_rows(rows, self.sort_by)]
            self.out.write(yaml_text({"items": items}))
        elif self.live is not None:
            self.live.update(self.table(rows, stale), refresh=True)
        else:
            with self.console.capture() as captured:
                self.console.print(self.table(rows, stale))
            lines = (line.rstrip() for line in captured.get().splitlines())
            # Piped -w output: one table per change, each ended by a blank line.
            self.out.write("\n".join(lines) + ("\n\n" if self.watching else "\n"))
        self.out.flush()

    def message(self, line: str) -> None:
        """A line for stderr (printable text only: it may quote the API server). When
        stderr is the terminal of a live table, through the table's console, which
        prints it above the table: written past it, it would break the redraw."""
        text = printable(line)
        if self.live is not None and (self.err is None or self.err.isatty()):
            self.live.console.print(Text(text), style="yellow")
        elif self.err is not None:
            self.err.write(text + "\n")
            self.err.flush()

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


def selected(rows: Iterable[Row], names: Sequence[str]) -> list[Row]:
    return [row for row in rows if not names or row.name in names]
