"""Paths outside the resource API: health, version, discovery, OpenAPI, issuer discovery;
and rendering objects as JSON or as a meta.k8s.io Table."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from ..auth.authz import User
from ..auth.tokens import TokenIssuer
from ..common.resources import ResourceType
from ..storage.store import dumps
from . import discovery, openapi, printers
from .httpserver import Request, Response

_HEALTH = ("/healthz", "/livez", "/readyz")


def _not_found() -> Response:
    # Unknown paths get Go's plain-text mux answer, not a Status (h_apis_missing_group).
    return Response(404, b"404 page not found\n", "text/plain; charset=utf-8")


class NonResourcePaths:
    """Serves every GET that is not a resource request."""

    def __init__(self, resources: Sequence[ResourceType], tokens: TokenIssuer) -> None:
        self.resources = list(resources)
        self.tokens = tokens
        self._openapi = openapi.OpenApiDocuments(self.resources)

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
        if path == "/openapi/v2" or path.startswith("/openapi/v3"):
            found = self._openapi.serve(path, dict(request.query), accept)
            if found is None:
                return _not_found()
            return Response(found.status, found.body, found.content_type, dict(found.headers))
        answer = discovery.discover(self.resources, path, accept, request.host)
        if answer is None:
            return _not_found()
        return Response(answer.status, dumps(answer.body), answer.content_type)

    @staticmethod
    def _json(code: int, body: Any) -> Response:
        return Response(code, dumps(body))

    def watch_encoder(
        self, request: Request, resource: ResourceType
    ) -> Callable[[bytes], bytes] | None:
        """For ``kubectl get -w`` (Accept ``as=Table``): each ADDED/MODIFIED/DELETED event
        carries a one-row Table, column definitions only in the first, as a real server
        sends them; other events pass unchanged. None when the client wants objects."""
        if "as=Table" not in request.headers.get("Accept", ""):
            return None
        sent_columns = False

        def encode(line: bytes) -> bytes:
            nonlocal sent_columns
            event = json.loads(line)
            if event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
                return line
            table = printers.table(resource, [event["object"]])
            if sent_columns:
                table["columnDefinitions"] = None
            sent_columns = True
            return dumps({"type": event["type"], "object": table}) + b"\n"

        return encode

    def render(
        self, request: Request, resource: ResourceType, body: dict[str, Any], code: int
    ) -> Response:
        """JSON, or a Table when the client asks for one (``kubectl get``)."""
        accept = request.headers.get("Accept", "")
        if "as=Table" in accept and code < 300 and body.get("kind") != "Status":
            items = body.get("items") if body.get("kind", "").endswith("List") else None
            objects = items if items is not None else [body]
            table = printers.table(
                resource, objects, list_meta=body.get("metadata") if items is not None else None
            )
            return Response(code, dumps(table), "application/json;as=Table;v=v1;g=meta.k8s.io")
        return Response(code, dumps(body))
