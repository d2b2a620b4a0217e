"""Which issuer the cluster's service-account tokens carry.

In order: ``--issuer`` when given; else the ``iss`` of the server's own service-account
token (as Kubeflow Trainer's status server does: in a pod it is the cluster issuer);
else the ``issuer`` of the OIDC discovery document, fetched through the API server
(outside a pod, e.g. with a kubeconfig).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .claims import unverified_claims
from .failures import AuthFailure

log = logging.getLogger(__name__)

DEFAULT_TOKEN_PATH = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
DISCOVERY_PATH = "/.well-known/openid-configuration"

FetchDiscovery = Callable[[], Awaitable[Any]]


def issuer_of_token(text: str) -> str | None:
    """The unverified ``iss`` of a JWT (our own token, read from our own volume)."""
    try:
        issuer = unverified_claims(text.strip()).get("iss")
    except AuthFailure:
        return None
    return issuer if isinstance(issuer, str) and issuer else None


def issuer_of_discovery(document: Any) -> str:
    """The ``issuer`` of an OIDC discovery document; ValueError if it has none."""
    issuer = document.get("issuer") if isinstance(document, dict) else None
    if not isinstance(issuer, str) or not issuer:
        raise ValueError("OIDC discovery document without an issuer")
    return issuer


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


async def own_token_issuer(token_path: Path | None) -> str | None:
    """The ``iss`` of the server's own token file, or None (no such file, not a JWT)."""
    if token_path is None:
        return None
    try:
        text = await asyncio.to_thread(_read, token_path)
    except OSError as exc:
        log.warning("cannot read own token", extra={"path": str(token_path), "error": str(exc)})
        return None
    issuer = issuer_of_token(text) if text is not None else None
    if issuer is not None:
        log.info("issuer from own token", extra={"issuer": issuer, "path": str(token_path)})
    return issuer


async def discover_issuer(
    configured: str | None, token_path: Path | None, fetch_discovery: FetchDiscovery
) -> str:
    """The issuer, from the first source that has one. Raises what the discovery fetch
    raises when it is the last resort and fails."""
    if configured:
        log.info("issuer configured", extra={"issuer": configured})
        return configured
    issuer = await own_token_issuer(token_path)
    if issuer is not None:
        return issuer
    issuer = issuer_of_discovery(await fetch_discovery())
    log.info("issuer from OIDC discovery", extra={"issuer": issuer, "path": DISCOVERY_PATH})
    return issuer
