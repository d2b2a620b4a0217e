"""Legacy discovery documents of the development cluster: pure builders, no I/O.

``/api``, ``/apis``, ``/api/v1`` and ``/apis/{group}/{version}`` (and ``/apis/{group}``),
computed from the served ``ResourceType`` list, shaped as a real kube-apiserver's and
restricted to what the development cluster serves. Aggregated discovery is not served:
kubectl asks for it with plain JSON as its last choice and falls back to these.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..common.resources import ResourceType

JSON = "application/json"

# The apiextensions handler lists a custom resource's verbs in this order, not sorted
# as built-in resources are.
_CRD_VERB_ORDER = (
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
)

# Subresource -> (verbs, (group, version, kind) when it answers another type).
_SUBRESOURCES: dict[str, tuple[tuple[str, ...], tuple[str, str, str] | None]] = {
    "status": (("get", "patch", "update"), None),
    "token": (("create",), ("authentication.k8s.io", "v1", "TokenRequest")),
}


@dataclass(frozen=True)
class Answer:
    """What to send: status code, Content-Type, and a JSON body."""

    status: int
    content_type: str
    body: dict[str, Any]


def version_info() -> dict[str, str]:
    """``/version`` of the development cluster.

    This is the dev cluster, not a real kube-apiserver: it claims v1.32 (the kubectl the
    tests drive, so no version-skew warning) and marks gitVersion ``+devcluster``.
    """
    return {
        "major": "1",
        "minor": "32",
        "emulationMajor": "1",
        "emulationMinor": "32",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "31",
        "gitVersion": "v1.32.4+devcluster",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-05-15T00:00:00Z",
        "goVersion": "go1.23.8",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


def storage_version_hash(group: str, version: str, kind: str) -> str:
    """base64 of the first 8 bytes of sha256("group/version/kind"), as the server computes."""
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode("ascii")


def _groups(resources: Sequence[ResourceType]) -> dict[str, list[str]]:
    """group -> served versions, in first-served order (each group serves one here)."""
    found: dict[str, list[str]] = {}
    for r in resources:
        versions = found.setdefault(r.group, [])
        if r.version not in versions:
            versions.append(r.version)
    return found


def _verbs(resource: ResourceType) -> list[str]:
    if resource.builtin:
        return sorted(resource.verbs)
    known = [v for v in _CRD_VERB_ORDER if v in resource.verbs]
    return known + sorted(v for v in resource.verbs if v not in _CRD_VERB_ORDER)


def _group_version_ref(group: str, version: str) -> dict[str, str]:
    gv = f"{group}/{version}" if group else version
    return {"groupVersion": gv, "version": version}


def _api_group(group: str, versions: list[str]) -> dict[str, Any]:
    return {
        "name": group,
        "versions": [_group_version_ref(group, v) for v in versions],
        "preferredVersion": _group_version_ref(group, versions[0]),
    }


def _entry(resource: ResourceType) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": resource.plural,
        "singularName": resource.singular,
        "namespaced": resource.namespaced,
        "kind": resource.kind,
        "verbs": _verbs(resource),
    }
    if resource.short_names:
        entry["shortNames"] = list(resource.short_names)
    if resource.categories:
        entry["categories"] = list(resource.categories)
    if "get" in resource.verbs:  # create-only reviews are never stored
        entry["storageVersionHash"] = storage_version_hash(
            resource.group, resource.version, resource.kind
        )
    return entry


def _subresource_entry(resource: ResourceType, name: str) -> dict[str, Any]:
    verbs, response_kind = _SUBRESOURCES.get(name, (("get",), None))
    entry: dict[str, Any] = {
        "name": f"{resource.plural}/{name}",
        "singularName": "",
        "namespaced": resource.namespaced,
    }
    if response_kind is not None:
        group, version, kind = response_kind
        entry.update(group=group, version=version, kind=kind)
    else:
        entry["kind"] = resource.kind
    entry["verbs"] = list(verbs)
    return entry


def api_resource_list(
    resources: Sequence[ResourceType], group: str, version: str
) -> dict[str, Any] | None:
    """``/api/v1`` or ``/apis/{group}/{version}``: APIResourceList, or None if not served."""
    served = sorted(
        (r for r in resources if r.group == group and r.version == version),
        key=lambda r: r.plural,
    )
    if not served:
        return None
    entries: list[dict[str, Any]] = []
    for r in served:
        entries.append(_entry(r))
        entries.extend(_subresource_entry(r, s) for s in sorted(r.subresources))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def _document(resources: Sequence[ResourceType], parts: list[str], host: str) -> Any:
    groups = _groups(resources)
    if parts == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": groups.get("", []),
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
        }
    if parts == ["apis"]:
        named = [_api_group(g, vs) for g, vs in groups.items() if g]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": named}
    if len(parts) == 2 and parts[0] == "api":
        return api_resource_list(resources, "", parts[1])
    if len(parts) == 2 and parts[0] == "apis" and parts[1] and groups.get(parts[1]):
        return {"kind": "APIGroup", "apiVersion": "v1", **_api_group(parts[1], groups[parts[1]])}
    if len(parts) == 3 and parts[0] == "apis":
        return api_resource_list(resources, parts[1], parts[2])
    return None


def accepts_json(accept: str | None) -> bool:
    """Whether an Accept header lets plain JSON through (absent or empty: anything)."""
    if not accept or not accept.strip():
        return True
    for part in accept.split(","):
        media, *params = [f.strip().lower() for f in part.split(";")]
        named = dict(p.partition("=")[::2] for p in params)
        if named.get("q", "1").strip() in ("0", "0.0", "0.00", "0.000"):
            continue
        if media in ("*/*", "application/*") or (media == JSON and "as" not in named):
            return True
    return False


def discover(
    resources: Sequence[ResourceType], path: str, accept: str | None, server_address: str
) -> Answer | None:
    """The answer for a GET of ``/version`` or a discovery path, or None: the caller then
    answers a plain-text ``404 page not found``, as a real server does for a group it does
    not serve. ``server_address`` is ``host:port`` as the client reached the server."""
    parts = [p for p in path.split("/") if p]
    if parts == ["version"]:
        return Answer(200, JSON, version_info())  # JSON whatever the Accept
    body = _document(resources, parts, server_address)
    if body is None:
        return None
    if not accepts_json(accept):
        # Aggregated discovery (APIGroupDiscoveryList) alone, or protobuf alone.
        refused = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        refused["message"] = "only the following media types are accepted: application/json"
        return Answer(406, JSON, {**refused, "reason": "NotAcceptable", "code": 406})
    return Answer(200, JSON, body)
