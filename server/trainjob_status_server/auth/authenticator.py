"""The authenticator seam: a request's Authorization header -> an Identity, or a refusal.

The server runs ``TokenAuthenticator`` (``verifier.py``); the development cluster's
``AcceptAll`` stands in for it in tests and benchmarks, and nothing in ``serve`` can
select it.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol


class Identity(NamedTuple):
    """Who is posting: enough to rate-limit and to log (never the token itself). One is
    made for every post: a named tuple is immutable and costs a fraction of a frozen
    dataclass to build."""

    namespace: str
    service_account: str
    pod: str | None = None


class Authenticator(Protocol):
    async def authenticate(
        self, authorization: str | None, namespace: str, trainjob: str, source: str = ""
    ) -> Identity:
        """The caller's identity for a post to ``namespace/trainjob`` from the address
        ``source`` (what it may cause is limited per address); raises a
        ``failures.Failure`` when it may not post there (``AuthFailure``), not now
        (``RateLimited``) or cannot be told (``Unavailable``)."""
        ...
