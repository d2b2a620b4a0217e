"""How long the caller may still wait for the server: one flush timeout per reporter.

Train end, ``close`` and the exit hook each wait for the last update; against a server
that does not answer, waiting for each in turn would multiply the cost of leaving. The
budget is one flush timeout shared by all of them: what a wait spends without the server
delivering is gone for the next one. A delivery shows the server alive again and restores
the whole budget, so a wait hours later (after a long evaluation) is not cut short by an
outage that has since ended. Pure: times are passed in.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class WaitBudget:
    """Seconds waited for a server that has not delivered since; the budget itself (the
    flush timeout) is passed in, so a changed ``flush_timeout`` takes effect at once."""

    spent: float = 0.0

    def allowance(self, wanted: float, total: float) -> float:
        """How long a wait that asks for ``wanted`` seconds may last."""
        return max(0.0, min(wanted, total - self.spent))

    def spend(self, seconds: float) -> None:
        """A wait of ``seconds`` ended without everything delivered."""
        self.spent += max(0.0, seconds)

    def restore(self) -> None:
        """An update was delivered: the server answers again."""
        self.spent = 0.0
