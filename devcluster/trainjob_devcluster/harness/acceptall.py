"""An authenticator that admits every request: for tests and benchmarks only.

Nothing in ``serve`` imports this module; no flag or environment variable selects it.
"""

from __future__ import annotations

from trainjob_status_server.auth.authenticator import Identity


class AcceptAll:
    async def authenticate(
        self, authorization: str | None, namespace: str, trainjob: str, source: str = ""
    ) -> Identity:
        return Identity(namespace=namespace, service_account="unauthenticated")
