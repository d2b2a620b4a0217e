"""Who may hand updates over: another replica of this server, proven by a token of the
server's own ServiceAccount for the audience ``claims.PEER_AUDIENCE`` (a projected volume
of the Deployment; kubelet rotates it), verified as a post's token is
(``TokenAuthenticator.authenticate_peer``): offline against the issuer's keys, or by
TokenReview after its claims passed and its source address paid for the review. No
new permission: what checks a post's token checks a replica's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .claims import SUBJECT_PREFIX
from .verifier import TokenAuthenticator


@dataclass(frozen=True)
class PeerGate:
    """``check(authorization, source)`` returns when the bearer token is a replica's of
    ``namespace``/``service_account``; raises ``AuthFailure`` (401 or 403),
    ``RateLimited`` or ``Unavailable`` as a post's check does."""

    authenticator: TokenAuthenticator
    namespace: str
    service_account: str

    @property
    def subject(self) -> str:
        return f"{SUBJECT_PREFIX}{self.namespace}:{self.service_account}"

    async def check(self, authorization: str | None, source: str) -> None:
        await self.authenticator.authenticate_peer(authorization, self.subject, source)
