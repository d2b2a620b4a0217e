"""Decode request bodies by media type, with the errors a real API server gives (pure)."""

from __future__ import annotations

import json
from typing import Any

import yaml

from ..common import status
from ..common.status import ApiError
from ..storage.patches import PatchError, decode_patch

JSON = "application/json"
YAML = "application/yaml"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
PROTOBUF = "application/vnd.kubernetes.protobuf"

_OBJECT_TYPES = (JSON, YAML)


class _PlainLoader(yaml.SafeLoader):
    """YAML 1.1 without the timestamp type: ``2026-12-02T18:33:25Z`` stays a string, as
    in Kubernetes' YAML-to-JSON conversion."""


_PlainLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def media_type(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def unsupported(accepted: tuple[str, ...]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def load_yaml(body: bytes) -> Any:
    """YAML (a superset of JSON) with timestamps left as strings."""
    return yaml.load(body, Loader=_PlainLoader)  # noqa: S506 - a SafeLoader subclass


def protobuf_refused() -> ApiError:
    """kubectl's typed commands (``create namespace``, ``create token``, ``auth whoami``
    ...) send protobuf and do not retry as JSON: say why, rather than list media types."""
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the development cluster speaks JSON only, not {PROTOBUF}: send the object as "
        "JSON or YAML (kubectl: apply --validate=false -f)",
    )


def decode_object(body: bytes, content_type: str) -> dict[str, Any]:
    """The body of a create, update or subresource POST: JSON or YAML."""
    kind = media_type(content_type) or JSON
    if kind == PROTOBUF:
        raise protobuf_refused()
    if kind not in _OBJECT_TYPES:
        raise unsupported(_OBJECT_TYPES)
    if kind == YAML:
        try:
            decoded = load_yaml(body)
        except yaml.YAMLError as exc:
            raise status.bad_request(f"error decoding YAML: {exc}") from exc
    else:
        try:
            decoded = decode_patch(body)
        except PatchError as exc:
            raise status.bad_request(
                exc.message.replace("decoding patch", "decoding body")
            ) from exc
    if not isinstance(decoded, dict):
        raise status.bad_request("Object 'Kind' is missing in the request body")
    return decoded


def decode_apply(body: bytes) -> dict[str, Any]:
    """An apply configuration: YAML, of which JSON is a subset (tried first: faster)."""
    try:
        config = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        try:
            config = load_yaml(body)
        except yaml.YAMLError as exc:
            raise status.bad_request(f"error decoding YAML: {exc}") from exc
    if not isinstance(config, dict):
        raise status.bad_request("error decoding YAML: the body is not an object")
    return config
