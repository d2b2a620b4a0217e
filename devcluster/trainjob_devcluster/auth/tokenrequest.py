"""TokenRequest (``POST .../serviceaccounts/NAME/token``) as kube-apiserver v1.36 answers it.

The order of checks is the real server's, because it decides which error a client sees
when a request is wrong in several ways: body metadata, service-account UID, defaults,
static validation (expirationSeconds), then the bound object (kind, lookup, service
account of the pod, UID).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..common.go_text import go_quote
from ..common.status import ApiError, Cause, bad_request, invalid
from .signing import SigningKeys
from .tokenfmt import (
    cannot_unmarshal,
    format_rfc3339,
    object_field,
    string_field,
    string_list_field,
)

# lookup(kind, namespace, name) -> the stored object, or None when it does not exist.
# kind is "ServiceAccount", "Pod", "Secret" or "Node" (namespace "" for nodes).
Lookup = Callable[[str, str, str], dict[str, Any] | None]

GROUP = "authentication.k8s.io"
API_VERSION = f"{GROUP}/v1"
KIND = "TokenRequest"
DEFAULT_EXPIRATION_SECONDS = 3600
MIN_EXPIRATION_SECONDS = 600
MAX_EXPIRATION_SECONDS = 1 << 32
_INT64 = range(-(1 << 63), 1 << 63)
# Pods stored without spec.serviceAccountName run as this account: the ServiceAccount
# admission plugin of a real server fills it in.
DEFAULT_SERVICE_ACCOUNT = "default"


def core_not_found(plural: str, name: str) -> ApiError:
    """404 for a core (group "") resource: ``pods "x" not found``, details without group.

    status.not_found always writes ``details.group``; for the core group the real
    server omits it (omitempty), so this builder exists.
    """
    message = f"{plural} {go_quote(name)} not found"
    return ApiError(404, "NotFound", message, {"name": name, "kind": plural})


def service_account_not_found(name: str) -> ApiError:
    """``serviceaccounts "x" not found``: the caller's answer when the account is missing."""
    return core_not_found("serviceaccounts", name)


def _conflict(qualified: str, group: str, kind: str, name: str, why: str) -> ApiError:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    return ApiError(
        409,
        "Conflict",
        f"Operation cannot be fulfilled on {qualified} {go_quote(name)}: {why}",
        details,
    )


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


def _metadata(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = object_field(KIND, dict(body), "metadata", KIND, "metadata", "v1.ObjectMeta")
    return meta or {}


def check_target(namespace: str, name: str, body: Mapping[str, Any]) -> None:
    """Reject a body whose metadata names another account or namespace (422).

    The real server runs this before it looks the service account up; a caller that
    wants the same precedence calls it first. :func:`create` runs it again.
    """
    meta = _metadata(body)
    for key, expected in (("name", name), ("namespace", namespace)):
        sent = string_field(KIND, meta, key, "ObjectMeta", f"metadata.{key}")
        if sent and sent != expected:
            raise invalid(
                f"{KIND}.{GROUP}",
                GROUP,
                KIND,
                name,
                [
                    Cause(
                        "FieldValueInvalid",
                        f"Invalid value: {go_quote(sent)}: "
                        f"must match the service account {key} if specified",
                        f"metadata.{key}",
                    )
                ],
            )


@dataclass(frozen=True)
class _Ref:
    name: str
    uid: str

    def to_json(self) -> dict[str, str]:
        # Both members are omitempty in the real claims.
        out: dict[str, str] = {}
        if self.name:
            out["name"] = self.name
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass(frozen=True)
class _Binding:
    pod: _Ref | None = None
    secret: _Ref | None = None
    node: _Ref | None = None


def _meta_str(obj: Mapping[str, Any], key: str) -> str:
    meta = obj.get("metadata")
    value = meta.get(key) if isinstance(meta, dict) else None
    return value if isinstance(value, str) else ""


def _parse_group_version(api_version: str) -> tuple[str, str]:
    """schema.FromAPIVersionAndKind's view of apiVersion: (group, version)."""
    if api_version in ("", "/"):
        return "", ""
    parts = api_version.split("/")
    if len(parts) == 1:
        return "", parts[0]
    if len(parts) == 2:
        return parts[0], parts[1]
    return "", ""  # unparseable: Go keeps only the kind


def _check_object_name(name: str) -> None:
    """The storage key checks a real server applies before any lookup (400)."""
    if not name:
        raise bad_request("Name parameter required.")
    problems = [f"may not be '{name}'"] if name in (".", "..") else []
    problems += [f"may not contain '{c}'" for c in ("/", "%") if c in name]
    if problems:
        raise bad_request(f"Name parameter invalid: {go_quote(name)}: {';'.join(problems)}")


def _resolve(ref: dict[str, Any], sa_name: str, namespace: str, lookup: Lookup) -> _Binding:
    path = "spec.boundObjectRef"
    kind = string_field(KIND, ref, "kind", "BoundObjectReference", f"{path}.kind")
    api_version = string_field(
        KIND, ref, "apiVersion", "BoundObjectReference", f"{path}.apiVersion"
    )
    name = string_field(KIND, ref, "name", "BoundObjectReference", f"{path}.name")
    want_uid = string_field(KIND, ref, "uid", "BoundObjectReference", f"{path}.uid")
    group, version = _parse_group_version(api_version)
    binding: _Binding
    if group == "" and kind == "Pod":
        _check_object_name(name)
        pod = lookup("Pod", namespace, name)
        if pod is None:
            raise core_not_found("pods", name)
        spec = pod.get("spec")
        runs_as = spec.get("serviceAccountName") if isinstance(spec, dict) else None
        if (runs_as or DEFAULT_SERVICE_ACCOUNT) != sa_name:
            raise bad_request(
                f"cannot bind token for serviceaccount {go_quote(sa_name)} to pod running "
                "with different serviceaccount name."
            )
        node_name = spec.get("nodeName") if isinstance(spec, dict) else None
        node: _Ref | None = None
        if isinstance(node_name, str) and node_name:
            # A missing Node still yields its name, without a uid, as upstream does.
            found = lookup("Node", "", node_name)
            node = _Ref(node_name, _meta_str(found, "uid") if found else "")
        binding = _Binding(pod=_Ref(name, _meta_str(pod, "uid")), node=node)
        actual_uid = _meta_str(pod, "uid")
    elif group == "" and kind == "Node":
        _check_object_name(name)
        found = lookup("Node", "", name)
        if found is None:
            raise core_not_found("nodes", name)
        actual_uid = _meta_str(found, "uid")
        binding = _Binding(node=_Ref(name, actual_uid))
    elif group == "" and kind == "Secret":
        _check_object_name(name)
        found = lookup("Secret", namespace, name)
        if found is None:
            raise core_not_found("secrets", name)
        actual_uid = _meta_str(found, "uid")
        binding = _Binding(secret=_Ref(name, actual_uid))
    else:
        raise bad_request(f"cannot bind token to object of type {group}/{version}, Kind={kind}")
    if want_uid and want_uid != actual_uid:
        raise _conflict(
            kind,
            "",
            kind,
            name,
            f"the UID in the bound object reference ({want_uid}) does not match the UID in "
            "record. The object might have been deleted and then recreated",
        )
    return binding


def _expiration(spec: dict[str, Any]) -> int:
    value = spec.get("expirationSeconds")
    if value is None:
        return DEFAULT_EXPIRATION_SECONDS
    if isinstance(value, bool) or not isinstance(value, int) or value not in _INT64:
        raise cannot_unmarshal(KIND, value, "TokenRequestSpec", "spec.expirationSeconds", "int64")
    return value


def create(
    *,
    issuer: str,
    api_audiences: Sequence[str],
    keys: SigningKeys,
    now: float,
    new_id: Callable[[], str],
    namespace: str,
    service_account: Mapping[str, Any],
    body: Mapping[str, Any],
    lookup: Lookup,
) -> dict[str, Any]:
    """Mint a token for ``service_account`` and return the TokenRequest answer (201).

    The caller adds ``metadata.managedFields`` if it records them.
    """
    sa_name = _meta_str(service_account, "name")
    sa_uid = _meta_str(service_account, "uid")
    check_target(namespace, sa_name, body)
    meta = _metadata(body)
    sent_uid = string_field(KIND, meta, "uid", "ObjectMeta", "metadata.uid")
    if sent_uid and sent_uid != sa_uid:
        raise _conflict(
            f"{KIND}.{GROUP}",
            GROUP,
            KIND,
            sa_name,
            f"the UID in the token request ({sent_uid}) does not match the UID of the "
            f"service account ({sa_uid})",
        )
    spec = object_field(KIND, dict(body), "spec", KIND, "spec", "v1.TokenRequestSpec") or {}
    audiences = string_list_field(KIND, spec, "audiences", "TokenRequestSpec", "spec.audiences")
    if not audiences:
        audiences = list(api_audiences)
    expiration = _expiration(spec)
    if expiration < MIN_EXPIRATION_SECONDS:
        raise _expiration_invalid(expiration, "may not specify a duration less than 10 minutes")
    if expiration > MAX_EXPIRATION_SECONDS:
        raise _expiration_invalid(expiration, "may not specify a duration larger than 2^32 seconds")
    ref = object_field(
        KIND,
        spec,
        "boundObjectRef",
        "TokenRequestSpec",
        "spec.boundObjectRef",
        "v1.BoundObjectReference",
    )
    binding = _resolve(ref, sa_name, namespace, lookup) if ref is not None else _Binding()

    # JWT dates are whole seconds; metav1.Time truncates the same way.
    issued = math.floor(now)
    private: dict[str, Any] = {"namespace": namespace}
    if binding.node is not None:
        private["node"] = binding.node.to_json()
    if binding.pod is not None:
        private["pod"] = binding.pod.to_json()
    if binding.secret is not None:
        private["secret"] = binding.secret.to_json()
    private["serviceaccount"] = _Ref(sa_name, sa_uid).to_json()
    token = keys.sign(
        {
            "aud": audiences,
            "exp": issued + expiration,
            "iat": issued,
            "iss": issuer,
            "jti": new_id(),
            "kubernetes.io": private,
            "nbf": issued,
            "sub": f"system:serviceaccount:{namespace}:{sa_name}",
        }
    )

    return {
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": _answer_metadata(meta, sa_name, namespace, sa_uid, now),
        "spec": _answer_spec(audiences, expiration, ref),
        "status": {"token": token, "expirationTimestamp": format_rfc3339(issued + expiration)},
    }


def _answer_metadata(
    sent: Mapping[str, Any], name: str, namespace: str, uid: str, now: float
) -> dict[str, Any]:
    """The answer's ObjectMeta, in Go field order.

    Labels and annotations a client sent survive (the server returns a copy of the
    request); other system fields are replaced.
    """
    out: dict[str, Any] = {"name": name}
    if sent.get("generateName"):
        out["generateName"] = sent["generateName"]
    out.update({"namespace": namespace, "uid": uid, "creationTimestamp": format_rfc3339(now)})
    for key in ("labels", "annotations"):
        if sent.get(key):
            out[key] = sent[key]
    return out


def _answer_spec(
    audiences: list[str], expiration: int, ref: Mapping[str, Any] | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"audiences": audiences, "expirationSeconds": expiration}
    if ref is not None:
        # Known members only, empty ones omitted (omitempty), in Go field order.
        members = ("kind", "apiVersion", "name", "uid")
        out["boundObjectRef"] = {
            k: ref[k] for k in members if isinstance(ref.get(k), str) and ref[k]
        }
    return out
