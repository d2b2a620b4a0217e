"""The authenticator seam: a request's Authorization header -> an Identity, or a 401/403.

The server ships one implementation that rejects everything it cannot verify
(``RejectAll``) until token verification lands; ``AcceptAll`` lives in
``auth/testing.py`` for tests and benchmarks and nothing in ``serve`` can select it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .. import errors


@dataclass(frozen=True)
class Identity:
    """Who is posting: enough to rate-limit and to log (never the token itself)."""

    namespace: str
    service_account: str
    pod: str | None = None


class Authenticator(Protocol):
    async def authenticate(
        self, authorization: str | None, namespace: str, trainjob: str
    ) -> Identity:
        """The caller's identity for a post to ``namespace/trainjob``; raises
        ``errors.StatusError`` (401 or 403) when it may not post there."""
        ...


class RejectAll:
    """Verifies nothing, so admits nobody: 401 for every request."""

    async def authenticate(
        self, authorization: str | None, namespace: str, trainjob: str
    ) -> Identity:
        raise errors.unauthorized()
