"""Paths outside the resource API: health, version, legacy discovery, issuer discovery.

Anything else (``/openapi/v2``, ``/openapi/v3``, ``/metrics`` ...) is a path the
development cluster does not serve: Go's plain-text 404, as kube-apiserver answers a
path it has no handler for."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..auth.authz import User
from ..auth.tokens import TokenIssuer
from ..common.resources import ResourceType
from ..common.status import ApiError
from ..storage.store import dumps
from . import discovery
from .httpserver import Request, Response

_HEALTH = ("/healthz", "/livez", "/readyz")
_JWKS = "/openid/v1/jwks"
# The issuer's documents and the one type each route produces.
_ISSUER_DOCUMENTS = {
    "/.well-known/openid-configuration": "application/json",
    _JWKS: "application/jwk-set+json",
}


def acceptable(accept: str | None, produces: str) -> bool:
    """go-restful's Accept check, which kube-apiserver uses for the issuer's routes. A
    missing or empty header counts as ``*/*``; each listed type is compared without its
    parameters; only ``*/*`` is a wildcard (``application/*`` is not); q values are
    ignored. So ``application/json`` alone gets 406 from the JWKS route."""
    media = (entry.split(";", 1)[0].strip() for entry in (accept or "*/*").split(","))
    return any(m in ("*/*", produces) for m in media)


def not_acceptable(produces: str) -> ApiError:
    """406 as the real server words it (go-restful's text inside a Status)."""
    message = f"406: Not Acceptable\n\nAvailable representations: {produces}"
    return ApiError(406, "NotAcceptable", message, {})


def _not_found() -> Response:
    return Response(404, b"404 page not found\n", "text/plain; charset=utf-8")


class NonResourcePaths:
    """Serves every GET that is not a resource request."""

    def __init__(self, resources: Sequence[ResourceType], tokens: TokenIssuer) -> None:
        self.resources = list(resources)
        self.tokens = tokens

    def serve(self, request: Request, user: User) -> Response:
        path = request.path
        if request.method not in ("GET", "HEAD"):
            return _not_found()
        accept = request.headers.get("Accept")
        if path in _HEALTH or path.startswith(tuple(p + "/" for p in _HEALTH)):
            return Response(200, b"ok", "text/plain; charset=utf-8")
        if path in _ISSUER_DOCUMENTS:
            return self._issuer_document(request, path, accept)
        answer = discovery.discover(self.resources, path, accept, request.host)
        if answer is None:
            return _not_found()
        return Response(answer.status, dumps(answer.body), answer.content_type)

    def _issuer_document(self, request: Request, path: str, accept: str | None) -> Response:
        produces = _ISSUER_DOCUMENTS[path]
        if not acceptable(accept, produces):
            error = not_acceptable(produces)
            return self._json(error.code, error.to_json())
        if path == _JWKS:
            return Response(200, dumps(self.tokens.jwks()), produces)
        base = f"{request.scheme}://{request.host}"
        return self._json(200, self.tokens.openid_configuration(base))

    @staticmethod
    def _json(code: int, body: Any) -> Response:
        return Response(code, dumps(body))
