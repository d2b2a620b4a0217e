"""Service-account tokens of the development cluster: the one entry point for the HTTP layer.

:class:`TokenIssuer` answers OIDC discovery, TokenRequest (``POST
.../serviceaccounts/NAME/token``), TokenReview and the API server's own bearer
authentication of service-account tokens, the way kube-apiserver v1.36 does (see
tests/devcluster/test_tokens.py for the recorded answers it matches). A token is bound
to a Pod or to nothing, and a TokenRequest's metadata is ignored. Everything here is
pure: no network, no logging, time from an injected clock. Tokens are never logged or put
into error messages.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..common.go_text import go_quote
from ..common.status import ApiError, Cause, bad_request, body_field
from ..storage.objects import rfc3339
from .signing import ALGORITHM, SigningKeys
from .tokenreview import API_VERSION, Lookup, TokenAuthenticator

__all__ = ["Lookup", "SigningKeys", "TokenIssuer"]

GROUP = "authentication.k8s.io"
KIND = "TokenRequest"
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 1 << 32
# Pods stored without spec.serviceAccountName run as this account: the ServiceAccount
# admission plugin of a real server fills it in.
DEFAULT_SERVICE_ACCOUNT = "default"


def _expiration_invalid(value: int, why: str) -> ApiError:
    # The real server validates before the request has a name, so the message says ""
    # and details carry no name (unlike status.invalid, which always sets one).
    message = f"Invalid value: {value}: {why}"
    return ApiError(
        422,
        "Invalid",
        f'{KIND}.{GROUP} "" is invalid: spec.expirationSeconds: {message}',
        {
            "group": GROUP,
            "kind": KIND,
            "causes": [Cause("FieldValueInvalid", message, "spec.expirationSeconds").to_json()],
        },
    )


def _check_name(name: str) -> None:
    """The storage key checks a real server applies before the lookup (400)."""
    if not name:
        raise bad_request("Name parameter required.")
    problems = [f"may not be '{name}'"] if name in (".", "..") else []
    problems += [f"may not contain '{c}'" for c in "/%" if c in name]
    if problems:
        raise bad_request(f"Name parameter invalid: {go_quote(name)}: {';'.join(problems)}")


def _claim(name: str, uid: str) -> dict[str, str]:
    """An object reference claim; both members are omitempty in the real claims."""
    return {key: value for key, value in (("name", name), ("uid", uid)) if value}


def _bind_pod(
    ref: Mapping[str, Any], sa_name: str, namespace: str, lookup: Lookup
) -> dict[str, Any]:
    """The ``pod`` and ``node`` claims of a token bound to the Pod ``ref`` names."""
    path = "spec.boundObjectRef"
    kind, api_version, name, want_uid = (
        body_field(ref, key, str, f"{path}.{key}") or ""
        for key in ("kind", "apiVersion", "name", "uid")
    )
    group, _, version = api_version.rpartition("/")
    if "/" in group:  # Go cannot parse "a/b/c" and keeps only the kind
        group = version = ""
    if group or kind != "Pod":
        raise bad_request(f"cannot bind token to object of type {group}/{version}, Kind={kind}")
    _check_name(name)
    pod = lookup("pods", namespace, name)
    if pod is None:
        raise ApiError(
            404, "NotFound", f"pods {go_quote(name)} not found", {"name": name, "kind": "pods"}
        )
    spec = pod.get("spec") or {}
    if (spec.get("serviceAccountName") or DEFAULT_SERVICE_ACCOUNT) != sa_name:
        raise bad_request(
            f"cannot bind token for serviceaccount {go_quote(sa_name)} to pod running "
            "with different serviceaccount name."
        )
    uid = pod["metadata"].get("uid", "")
    if want_uid and want_uid != uid:
        raise ApiError(
            409,
            "Conflict",
            f"Operation cannot be fulfilled on Pod {go_quote(name)}: the UID in the bound "
            f"object reference ({want_uid}) does not match the UID in record. The object "
            "might have been deleted and then recreated",
            {"name": name, "kind": "Pod"},
        )
    claims: dict[str, Any] = {"pod": _claim(name, uid)}
    node = spec.get("nodeName")
    if isinstance(node, str) and node:
        # There are no Node objects here: the claim has the node's name and no uid, as
        # upstream writes it for a node it cannot find.
        claims["node"] = _claim(node, "")
    return claims


class TokenIssuer(TokenAuthenticator):
    """Issues and checks service-account tokens for one issuer.

    ``clock`` returns epoch seconds. ``new_id`` makes the ``jti`` claim (a random UUID
    by default; tests pin it).
    """

    def __init__(
        self,
        issuer: str,
        api_audiences: Sequence[str],
        keys: SigningKeys,
        clock: Callable[[], float],
        *,
        new_id: Callable[[], str] | None = None,
    ) -> None:
        super().__init__(issuer, api_audiences, keys, clock)
        self._new_id = new_id or (lambda: str(uuid.uuid4()))

    def openid_configuration(self, base_url: str) -> dict[str, Any]:
        """``/.well-known/openid-configuration``; ``base_url`` is the server's own address."""
        return {
            "issuer": self.issuer,
            "jwks_uri": base_url.rstrip("/") + "/openid/v1/jwks",
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [ALGORITHM],
        }

    def jwks(self) -> dict[str, Any]:
        """``/openid/v1/jwks`` (served as ``application/jwk-set+json``)."""
        return self.keys.jwks()

    def request_token(
        self,
        namespace: str,
        service_account: Mapping[str, Any],
        body: Mapping[str, Any],
        lookup: Lookup,
    ) -> dict[str, Any]:
        """The TokenRequest answer (201) for ``service_account``, or raise ApiError.

        The caller looks the account up and answers 404 when it is missing. Checks run
        in the real server's order: defaults, expirationSeconds, then the bound object.
        """
        sa_name = service_account["metadata"]["name"]
        sa_uid = service_account["metadata"].get("uid", "")
        body_field(body, "metadata", dict, "metadata")  # type-checked, otherwise not read
        spec = body_field(body, "spec", dict, "spec") or {}
        audiences = body_field(spec, "audiences", list, "spec.audiences") or list(
            self.api_audiences
        )
        expiration = body_field(spec, "expirationSeconds", int, "spec.expirationSeconds")
        if expiration is None:
            expiration = DEFAULT_EXPIRATION_SECONDS
        if expiration < MIN_EXPIRATION_SECONDS:
            raise _expiration_invalid(expiration, "may not specify a duration less than 10 minutes")
        if expiration > MAX_EXPIRATION_SECONDS:
            raise _expiration_invalid(
                expiration, "may not specify a duration larger than 2^32 seconds"
            )
        ref = body_field(spec, "boundObjectRef", dict, "spec.boundObjectRef")
        private = {"namespace": namespace, "serviceaccount": _claim(sa_name, sa_uid)}
        if ref is not None:
            private.update(_bind_pod(ref, sa_name, namespace, lookup))
        # JWT dates are whole seconds; metav1.Time truncates the same way.
        issued = math.floor(self._clock())
        token = self.keys.sign(
            {
                "aud": audiences,
                "exp": issued + expiration,
                "iat": issued,
                "iss": self.issuer,
                "jti": self._new_id(),
                "kubernetes.io": private,
                "nbf": issued,
                "sub": f"system:serviceaccount:{namespace}:{sa_name}",
            }
        )
        answer_spec: dict[str, Any] = {"audiences": audiences, "expirationSeconds": expiration}
        if ref is not None:
            # Known members only, empty ones omitted (omitempty), in Go field order.
            members = ("kind", "apiVersion", "name", "uid")
            answer_spec["boundObjectRef"] = {k: ref[k] for k in members if ref.get(k)}
        return {
            "kind": KIND,
            "apiVersion": API_VERSION,
            "metadata": {
                "name": sa_name,
                "namespace": namespace,
                "uid": sa_uid,
                "creationTimestamp": rfc3339(issued),
            },
            "spec": answer_spec,
            "status": {"token": token, "expirationTimestamp": rfc3339(issued + expiration)},
        }
