"""Service-account tokens of the development cluster: the one entry point for the HTTP layer.

:class:`TokenIssuer` answers OIDC discovery, TokenRequest, TokenReview and the API
server's own bearer authentication of service-account tokens, the way kube-apiserver
v1.36 does (see tests/devcluster/test_tokens.py for the recorded answers it matches).
Everything here is pure: no network, no logging, time from an injected clock. Tokens
are never logged or put into error messages.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from ..common.status import ApiError
from .signing import (
    ALGORITHM,
    CRYPTO_FAILURE,
    NO_KEYS_FOUND,
    MalformedToken,
    SignatureRejected,
    SigningKeys,
    key_id,
)
from .tokenrequest import Lookup, check_target, core_not_found, create, service_account_not_found
from .tokenreview import ServiceAccountAuthenticator, review

__all__ = [
    "ALGORITHM",
    "CONFIGURATION_CONTENT_TYPE",
    "CONFIGURATION_PATH",
    "CRYPTO_FAILURE",
    "JWKS_CONTENT_TYPE",
    "JWKS_PATH",
    "NO_KEYS_FOUND",
    "Lookup",
    "MalformedToken",
    "SignatureRejected",
    "SigningKeys",
    "TokenIssuer",
    "accept_matches",
    "check_target",
    "core_not_found",
    "key_id",
    "not_acceptable",
    "service_account_not_found",
]

CONFIGURATION_PATH = "/.well-known/openid-configuration"
JWKS_PATH = "/openid/v1/jwks"
CONFIGURATION_CONTENT_TYPE = "application/json"
JWKS_CONTENT_TYPE = "application/jwk-set+json"


def accept_matches(accept: str | None, produces: str) -> bool:
    """go-restful's Accept check, which kube-apiserver uses for the discovery routes.

    A missing or empty header counts as ``*/*``. Each listed type is compared without
    its parameters; only ``*/*`` is a wildcard (``application/*`` is not), and q values
    are ignored. So ``application/json`` alone gets 406 from the JWKS route.
    """
    if not accept:
        return True
    for entry in accept.split(","):
        media = entry.split(";", 1)[0].strip()
        if media in ("*/*", produces):
            return True
    return False


def not_acceptable(produces: str) -> ApiError:
    """406 as the real server words it (go-restful's text inside a Status)."""
    return ApiError(
        406,
        "NotAcceptable",
        f"406: Not Acceptable\n\nAvailable representations: {produces}",
        {},
    )


class TokenIssuer:
    """Issues and checks service-account tokens for one issuer.

    ``clock`` returns epoch seconds. ``success_cache_ttl`` mirrors kube-apiserver's
    10 s cache of successful authentications but defaults to 0 (off): see
    :class:`~.tokenreview.ServiceAccountAuthenticator`. ``new_id`` makes the ``jti``
    claim (a random UUID by default; tests pin it).
    """

    def __init__(
        self,
        issuer: str,
        api_audiences: list[str],
        keys: SigningKeys,
        clock: Callable[[], float],
        *,
        success_cache_ttl: float = 0.0,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        self.issuer = issuer
        self.api_audiences: tuple[str, ...] = tuple(api_audiences)
        self.keys = keys
        self._clock = clock
        self._new_id = new_id or (lambda: str(uuid.uuid4()))
        self._authenticator = ServiceAccountAuthenticator(
            issuer, self.api_audiences, keys, clock, success_cache_ttl
        )

    def openid_configuration(self, base_url: str) -> dict[str, Any]:
        """``/.well-known/openid-configuration``; ``base_url`` is the server's own address."""
        return {
            "issuer": self.issuer,
            "jwks_uri": base_url.rstrip("/") + JWKS_PATH,
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [ALGORITHM],
        }

    def jwks(self) -> dict[str, Any]:
        """``/openid/v1/jwks`` (served as ``application/jwk-set+json``)."""
        return self.keys.jwks()

    @staticmethod
    def jwks_acceptable(accept_header: str | None) -> bool:
        """False means answer :meth:`jwks_not_acceptable` (406)."""
        return accept_matches(accept_header, JWKS_CONTENT_TYPE)

    @staticmethod
    def jwks_not_acceptable() -> ApiError:
        return not_acceptable(JWKS_CONTENT_TYPE)

    @staticmethod
    def openid_configuration_acceptable(accept_header: str | None) -> bool:
        return accept_matches(accept_header, CONFIGURATION_CONTENT_TYPE)

    def request_token(
        self,
        namespace: str,
        service_account: dict[str, Any],
        body: dict[str, Any],
        lookup: Lookup,
    ) -> dict[str, Any]:
        """The TokenRequest answer (201) for ``service_account``, or raise ApiError.

        The caller resolves the account first and answers
        ``service_account_not_found(name)`` when it is missing (calling
        ``check_target`` before the lookup gives the real server's precedence).
        """
        return create(
            issuer=self.issuer,
            api_audiences=self.api_audiences,
            keys=self.keys,
            now=self._clock(),
            new_id=self._new_id,
            namespace=namespace,
            service_account=service_account,
            body=body,
            lookup=lookup,
        )

    def review(self, body: dict[str, Any], lookup: Lookup) -> dict[str, Any]:
        """The TokenReview answer (201), or raise ApiError (400) for a malformed body."""
        return review(body, self._authenticator, lookup)

    def authenticate(self, token: str, lookup: Lookup) -> dict[str, Any] | None:
        """The user behind a bearer token sent to the API itself, or None (answer 401).

        The token's audiences must include an API audience: a token minted for another
        audience is refused even though its signature is good.
        """
        outcome = self._authenticator.authenticate(token, self.api_audiences, lookup)
        return outcome.user.to_json() if outcome.user is not None else None
