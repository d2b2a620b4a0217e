"""What the pod's environment says: where to report, with which credentials, from which rank.

The TrainJob status injector (or the Trainer controller) sets the three
``KUBEFLOW_TRAINER_SERVER_*`` variables; launchers such as torchrun set ``RANK`` and
``WORLD_SIZE``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .contract import CA_CERT_ENV, TOKEN_ENV, URL_ENV

RANK_ENV = "RANK"
WORLD_SIZE_ENV = "WORLD_SIZE"


@dataclass(frozen=True)
class Settings:
    """Where and whether this process reports, resolved from arguments and environment."""

    url: str | None
    token_path: str | None
    ca_path: str | None
    rank: int | None
    only_rank_zero: bool

    @property
    def reports(self) -> bool:
        """True when this process sends: a URL is known and the rank rule lets it."""
        if not self.url:
            return False
        return not self.only_rank_zero or not self.rank

    @property
    def skip_reason(self) -> str | None:
        """Why this process does not send (for one log line), or None when it does."""
        if not self.url:
            return f"{URL_ENV} is not set: not running in a TrainJob"
        if self.only_rank_zero and self.rank:
            return f"global rank {self.rank}: only rank 0 reports"
        return None


def resolve(
    environ: Mapping[str, str],
    url: str | None = None,
    token_path: str | None = None,
    ca_path: str | None = None,
    only_rank_zero: bool | None = None,
) -> Settings:
    """Arguments win; a None argument falls back to its environment variable.

    ``only_rank_zero`` None means on when ``RANK`` or ``WORLD_SIZE`` is set, i.e. in a
    distributed launch; then only global rank 0 sends.
    """
    if only_rank_zero is None:
        only_rank_zero = RANK_ENV in environ or WORLD_SIZE_ENV in environ
    return Settings(
        url=url if url is not None else (environ.get(URL_ENV) or None),
        token_path=token_path if token_path is not None else (environ.get(TOKEN_ENV) or None),
        ca_path=ca_path if ca_path is not None else (environ.get(CA_CERT_ENV) or None),
        rank=global_rank(environ),
        only_rank_zero=only_rank_zero,
    )


def global_rank(environ: Mapping[str, str]) -> int | None:
    """``RANK`` as an integer; None when it is unset or not a number (taken as rank 0)."""
    raw = environ.get(RANK_ENV)
    if raw is None:
        return None
    try:
        return int(raw.strip())
    except ValueError:
        return None
