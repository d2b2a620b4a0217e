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
from ..storage.store import dumps
from . import discovery
from .httpserver import Request, Response

_HEALTH = ("/healthz", "/livez", "/readyz")


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
        if path == "/.well-known/openid-configuration":
            base = f"{request.scheme}://{request.host}"
            return self._json(200, self.tokens.openid_configuration(base))
        if path == "/openid/v1/jwks":
            if not self.tokens.jwks_acceptable(accept):
                error = self.tokens.jwks_not_acceptable()
                return self._json(error.code, error.to_json())
            return Response(200, dumps(self.tokens.jwks()), "application/jwk-set+json")
        answer = discovery.discover(self.resources, path, accept, request.host)
        if answer is None:
            return _not_found()
        return Response(answer.status, dumps(answer.body), answer.content_type)

    @staticmethod
    def _json(code: int, body: Any) -> Response:
        return Response(code, dumps(body))
