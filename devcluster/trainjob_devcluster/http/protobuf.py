"""Read the Kubernetes protobuf encoding of the few core objects kubectl sends that way.

kubectl's typed clients (``create namespace|serviceaccount|configmap|secret|token``, and
``create role|clusterrole|rolebinding|clusterrolebinding``) send
``application/vnd.kubernetes.protobuf`` and do not fall back to JSON on 415, so the
development cluster decodes these messages into the JSON objects a real server would
store. The envelope is ``k8s\\x00`` followed by a ``runtime.Unknown`` message; field
numbers below follow k8s.io/api's generated.proto. Only the messages listed in
``_MESSAGES`` are read; any other kind is refused (pure).
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Callable
from typing import Any

MAGIC = b"k8s\x00"
MEDIA_TYPE = "application/vnd.kubernetes.protobuf"


class ProtobufError(ValueError):
    pass


# -- wire format ------------------------------------------------------------------------


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtobufError("varint too long")


def fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs in order: ints for varints, bytes for length-delimited."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ProtobufError("truncated field")
            out.append((number, data[pos : pos + size]))
            pos += size
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")
    return out


# -- field readers ----------------------------------------------------------------------

Reader = Callable[[int | bytes], Any]


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a string")
    return value.decode("utf-8")


def _int(value: int | bytes) -> int:
    if not isinstance(value, int):
        raise ProtobufError("expected an integer")
    return value - (1 << 64) if value >= 1 << 63 else value


def _bool(value: int | bytes) -> bool:
    return bool(_int(value))


def _b64(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected bytes")
    return base64.b64encode(value).decode()


def _time(value: int | bytes) -> str | None:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a time")
    seconds = next((_int(v) for n, v in fields(value) if n == 1), 0)
    if not value:
        return None
    moment = dt.datetime.fromtimestamp(seconds, dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class _Message:
    """Field number -> (JSON name, reader, how it repeats: '' single, 'list', 'map')."""

    def __init__(self, spec: dict[int, tuple[str, Reader | _Message, str]]) -> None:
        self.spec = spec

    def __call__(self, value: int | bytes) -> dict[str, Any]:
        if not isinstance(value, bytes):
            raise ProtobufError("expected a message")
        out: dict[str, Any] = {}
        for number, raw in fields(value):
            entry = self.spec.get(number)
            if entry is None:
                continue
            name, reader, shape = entry
            if shape == "map":
                pair = dict(fields(raw if isinstance(raw, bytes) else b""))
                key = _text(pair.get(1, b""))
                out.setdefault(name, {})[key] = reader(pair.get(2, b""))
            elif shape == "list":
                out.setdefault(name, []).append(reader(raw))
            else:
                out[name] = reader(raw)
        # Go leaves zero values out of JSON (omitempty); so does this.
        return {k: v for k, v in out.items() if v not in ("", None, {}, 0) or k in _KEEP_ZERO}


_KEEP_ZERO = frozenset({"automountServiceAccountToken", "immutable", "controller"})

_OWNER_REFERENCE = _Message(
    {
        1: ("kind", _text, ""),
        3: ("name", _text, ""),
        4: ("uid", _text, ""),
        5: ("apiVersion", _text, ""),
        6: ("controller", _bool, ""),
        7: ("blockOwnerDeletion", _bool, ""),
    }
)
_OBJECT_META = _Message(
    {
        1: ("name", _text, ""),
        2: ("generateName", _text, ""),
        3: ("namespace", _text, ""),
        5: ("uid", _text, ""),
        6: ("resourceVersion", _text, ""),
        7: ("generation", _int, ""),
        8: ("creationTimestamp", _time, ""),
        11: ("labels", _text, "map"),
        12: ("annotations", _text, "map"),
        13: ("ownerReferences", _OWNER_REFERENCE, "list"),
        14: ("finalizers", _text, "list"),
    }
)
_OBJECT_REFERENCE = _Message(
    {
        1: ("kind", _text, ""),
        2: ("namespace", _text, ""),
        3: ("name", _text, ""),
        4: ("uid", _text, ""),
        5: ("apiVersion", _text, ""),
        6: ("resourceVersion", _text, ""),
        7: ("fieldPath", _text, ""),
    }
)
_BOUND_OBJECT_REFERENCE = _Message(
    {
        1: ("kind", _text, ""),
        2: ("apiVersion", _text, ""),
        3: ("name", _text, ""),
        4: ("uid", _text, ""),
    }
)

_POLICY_RULE = _Message(
    {
        1: ("verbs", _text, "list"),
        2: ("apiGroups", _text, "list"),
        3: ("resources", _text, "list"),
        4: ("resourceNames", _text, "list"),
        5: ("nonResourceURLs", _text, "list"),
    }
)
_LABEL_SELECTOR = _Message(
    {
        1: ("matchLabels", _text, "map"),
        2: (
            "matchExpressions",
            _Message(
                {1: ("key", _text, ""), 2: ("operator", _text, ""), 3: ("values", _text, "list")}
            ),
            "list",
        ),
    }
)
_ROLE = _Message({1: ("metadata", _OBJECT_META, ""), 2: ("rules", _POLICY_RULE, "list")})
_CLUSTER_ROLE = _Message(
    {
        1: ("metadata", _OBJECT_META, ""),
        2: ("rules", _POLICY_RULE, "list"),
        3: (
            "aggregationRule",
            _Message({1: ("clusterRoleSelectors", _LABEL_SELECTOR, "list")}),
            "",
        ),
    }
)
_BINDING = _Message(
    {
        1: ("metadata", _OBJECT_META, ""),
        2: (
            "subjects",
            _Message(
                {
                    1: ("kind", _text, ""),
                    2: ("apiGroup", _text, ""),
                    3: ("name", _text, ""),
                    4: ("namespace", _text, ""),
                }
            ),
            "list",
        ),
        3: (
            "roleRef",
            _Message({1: ("apiGroup", _text, ""), 2: ("kind", _text, ""), 3: ("name", _text, "")}),
            "",
        ),
    }
)
_RBAC = "rbac.authorization.k8s.io/v1"

_ACCESS_REVIEW_SPEC = _Message(
    {
        1: (
            "resourceAttributes",
            _Message(
                {
                    1: ("namespace", _text, ""),
                    2: ("verb", _text, ""),
                    3: ("group", _text, ""),
                    4: ("version", _text, ""),
                    5: ("resource", _text, ""),
                    6: ("subresource", _text, ""),
                    7: ("name", _text, ""),
                }
            ),
            "",
        ),
        2: (
            "nonResourceAttributes",
            _Message({1: ("path", _text, ""), 2: ("verb", _text, "")}),
            "",
        ),
    }
)

_MESSAGES: dict[tuple[str, str], _Message] = {
    # kubectl create role|clusterrole|rolebinding|clusterrolebinding.
    (_RBAC, "Role"): _ROLE,
    (_RBAC, "ClusterRole"): _CLUSTER_ROLE,
    (_RBAC, "RoleBinding"): _BINDING,
    (_RBAC, "ClusterRoleBinding"): _BINDING,
    ("v1", "Namespace"): _Message(
        {
            1: ("metadata", _OBJECT_META, ""),
            2: ("spec", _Message({1: ("finalizers", _text, "list")}), ""),
        }
    ),
    ("v1", "ServiceAccount"): _Message(
        {
            1: ("metadata", _OBJECT_META, ""),
            2: ("secrets", _OBJECT_REFERENCE, "list"),
            3: ("imagePullSecrets", _Message({1: ("name", _text, "")}), "list"),
            4: ("automountServiceAccountToken", _bool, ""),
        }
    ),
    ("v1", "ConfigMap"): _Message(
        {
            1: ("metadata", _OBJECT_META, ""),
            2: ("data", _text, "map"),
            3: ("binaryData", _b64, "map"),
            4: ("immutable", _bool, ""),
        }
    ),
    ("v1", "Secret"): _Message(
        {
            1: ("metadata", _OBJECT_META, ""),
            2: ("data", _b64, "map"),
            3: ("type", _text, ""),
            4: ("stringData", _text, "map"),
            5: ("immutable", _bool, ""),
        }
    ),
    # kubectl auth whoami.
    ("authentication.k8s.io/v1", "SelfSubjectReview"): _Message(
        {1: ("metadata", _OBJECT_META, "")}
    ),
    # kubectl auth can-i --list.
    ("authorization.k8s.io/v1", "SelfSubjectRulesReview"): _Message(
        {
            1: ("metadata", _OBJECT_META, ""),
            2: ("spec", _Message({1: ("namespace", _text, "")}), ""),
        }
    ),
    # kubectl auth can-i.
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): _Message(
        {1: ("metadata", _OBJECT_META, ""), 2: ("spec", _ACCESS_REVIEW_SPEC, "")}
    ),
    ("authentication.k8s.io/v1", "TokenRequest"): _Message(
        {
            1: ("metadata", _OBJECT_META, ""),
            2: (
                "spec",
                _Message(
                    {
                        1: ("audiences", _text, "list"),
                        3: ("boundObjectRef", _BOUND_OBJECT_REFERENCE, ""),
                        4: ("expirationSeconds", _int, ""),
                    }
                ),
                "",
            ),
        }
    ),
}

SUPPORTED_KINDS = tuple(sorted(kind for _, kind in _MESSAGES))


def decode(body: bytes) -> dict[str, Any]:
    """The JSON form of a protobuf-encoded object; ProtobufError if it cannot be read."""
    if not body.startswith(MAGIC):
        raise ProtobufError("the body does not start with the protobuf magic number")
    envelope = dict(fields(body[len(MAGIC) :]))
    type_meta = dict(fields(envelope.get(1, b"") or b""))  # type: ignore[arg-type]
    api_version, kind = _text(type_meta.get(1, b"")), _text(type_meta.get(2, b""))
    message = _MESSAGES.get((api_version, kind))
    if message is None:
        raise ProtobufError(f"no protobuf decoding for {kind or 'an object'} ({api_version})")
    obj = message(envelope.get(2, b""))
    return {"apiVersion": api_version, "kind": kind, **obj}
