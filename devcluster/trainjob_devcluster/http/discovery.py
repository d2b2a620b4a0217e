"""Discovery documents of the development cluster: pure builders, no I/O.

Everything here is computed from the list of served ``ResourceType`` on each call; the
HTTP layer caches the answers. Shapes follow a real kube-apiserver (v1.36 recordings),
restricted to the groups the development cluster actually serves.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..common.resources import ResourceType

JSON = "application/json"
AGGREGATED_V2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGGREGATED_V2BETA1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"

# The apiextensions handler lists a custom resource's verbs in this order, not sorted
# as built-in resources are (see h_apis_group_version).
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


@dataclass(frozen=True)
class Subresource:
    """What discovery says about one subresource kind."""

    verbs: tuple[str, ...]
    # (group, version, kind) when the subresource answers another type than its parent.
    response_kind: tuple[str, str, str] | None = None


SUBRESOURCES: dict[str, Subresource] = {
    "status": Subresource(("get", "patch", "update")),
    "scale": Subresource(("get", "patch", "update"), ("autoscaling", "v1", "Scale")),
    "token": Subresource(("create",), ("authentication.k8s.io", "v1", "TokenRequest")),
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
    """base64 of the first 8 bytes of sha256("group/version/kind"), as the server computes.

    ``trainer.kubeflow.org/v1alpha1/TrainJob`` gives ``9Kb7D6SpiCQ=`` (recorded).
    """
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return base64.b64encode(digest[:8]).decode("ascii")


_VERSION_RE = re.compile(r"^v(\d+)(?:(alpha|beta)(\d+))?$")


def _version_priority(version: str) -> tuple[int, int, int, str]:
    """Kubernetes version order: GA before beta before alpha, higher numbers first."""
    m = _VERSION_RE.match(version)
    if m is None:
        return (3, 0, 0, version)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {None: 0, "beta": 1, "alpha": 2}[stage]
    return (rank, -major, -minor, "")


def _groups(resources: Sequence[ResourceType]) -> dict[str, list[str]]:
    """group -> served versions, preferred first; groups in first-served order."""
    found: dict[str, list[str]] = {}
    for r in resources:
        versions = found.setdefault(r.group, [])
        if r.version not in versions:
            versions.append(r.version)
    return {g: sorted(vs, key=_version_priority) for g, vs in found.items()}


def _in_version(resources: Sequence[ResourceType], group: str, version: str) -> list[ResourceType]:
    return sorted(
        (r for r in resources if r.group == group and r.version == version),
        key=lambda r: r.plural,
    )


def _verbs(resource: ResourceType) -> list[str]:
    if resource.builtin:
        return sorted(resource.verbs)
    known = [v for v in _CRD_VERB_ORDER if v in resource.verbs]
    return known + sorted(v for v in resource.verbs if v not in _CRD_VERB_ORDER)


def _group_version_ref(group: str, version: str) -> dict[str, str]:
    gv = f"{group}/{version}" if group else version
    return {"groupVersion": gv, "version": version}


def api_versions(resources: Sequence[ResourceType], server_address: str) -> dict[str, Any]:
    """``/api``: APIVersions of the core group (it has no apiVersion field)."""
    return {
        "kind": "APIVersions",
        "versions": _groups(resources).get("", []),
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _api_group(group: str, versions: list[str]) -> dict[str, Any]:
    return {
        "name": group,
        "versions": [_group_version_ref(group, v) for v in versions],
        "preferredVersion": _group_version_ref(group, versions[0]),
    }


def api_group_list(resources: Sequence[ResourceType]) -> dict[str, Any]:
    """``/apis``: APIGroupList of the named groups."""
    groups = [_api_group(g, vs) for g, vs in _groups(resources).items() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(resources: Sequence[ResourceType], group: str) -> dict[str, Any] | None:
    """``/apis/{group}``: APIGroup, or None for a group that is not served."""
    versions = _groups(resources).get(group)
    if not group or not versions:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_api_group(group, versions)}


def _legacy_entry(resource: ResourceType) -> dict[str, Any]:
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
    # Only stored resources have a storage version; create-only reviews are never stored.
    # The hash is always derived from the storage GVK, as the server does (the recorded
    # TrainJob value is exactly that), so ResourceType.storage_version_hash is not read.
    if "get" in resource.verbs:
        entry["storageVersionHash"] = storage_version_hash(
            resource.group, resource.version, resource.kind
        )
    return entry


def _legacy_subresource(resource: ResourceType, name: str) -> dict[str, Any]:
    sub = SUBRESOURCES.get(name, Subresource(("get",)))
    entry: dict[str, Any] = {
        "name": f"{resource.plural}/{name}",
        "singularName": "",
        "namespaced": resource.namespaced,
    }
    if sub.response_kind is not None:
        group, version, kind = sub.response_kind
        entry.update(group=group, version=version, kind=kind)
    else:
        entry["kind"] = resource.kind
    entry["verbs"] = list(sub.verbs)
    return entry


def api_resource_list(
    resources: Sequence[ResourceType], group: str, version: str
) -> dict[str, Any] | None:
    """``/api/v1`` or ``/apis/{group}/{version}``: APIResourceList, or None if not served."""
    served = _in_version(resources, group, version)
    if not served:
        return None
    entries: list[dict[str, Any]] = []
    for r in served:
        entries.append(_legacy_entry(r))
        entries.extend(_legacy_subresource(r, s) for s in sorted(r.subresources))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def _response_kind(resource: ResourceType, target: tuple[str, str, str]) -> dict[str, str]:
    # Built-in resources leave group/version empty when the kind is in their own
    # group-version; the apiextensions server always fills them in (h_apis_aggregated).
    group, version, kind = target
    if resource.builtin and (group, version) == (resource.group, resource.version):
        return {"group": "", "version": "", "kind": kind}
    return {"group": group, "version": version, "kind": kind}


def _aggregated_resource(resource: ResourceType) -> dict[str, Any]:
    own = (resource.group, resource.version, resource.kind)
    entry: dict[str, Any] = {
        "resource": resource.plural,
        "responseKind": _response_kind(resource, own),
        "scope": "Namespaced" if resource.namespaced else "Cluster",
        "singularResource": resource.singular,
        "verbs": _verbs(resource),
    }
    if resource.short_names:
        entry["shortNames"] = list(resource.short_names)
    if resource.categories:
        entry["categories"] = list(resource.categories)
    subs = []
    for name in sorted(resource.subresources):
        sub = SUBRESOURCES.get(name, Subresource(("get",)))
        target = sub.response_kind or own
        subs.append(
            {
                "subresource": name,
                "responseKind": _response_kind(resource, target),
                "verbs": list(sub.verbs),
            }
        )
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated_discovery(
    resources: Sequence[ResourceType], *, core: bool, api_version: str = "v2"
) -> dict[str, Any]:
    """APIGroupDiscoveryList for ``/api`` (``core=True``) or ``/apis`` (``core=False``).

    ``api_version`` is ``v2`` or ``v2beta1``; both have the same shape.
    """
    items = []
    for group, versions in _groups(resources).items():
        if bool(group) == core:
            continue
        items.append(
            {
                # The core group's entry has an empty metadata (h_api_aggregated).
                "metadata": {"name": group} if group else {},
                "versions": [
                    {
                        "version": v,
                        "resources": [
                            _aggregated_resource(r) for r in _in_version(resources, group, v)
                        ],
                        "freshness": "Current",
                    }
                    for v in versions
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": f"apidiscovery.k8s.io/{api_version}",
        "metadata": {},
        "items": items,
    }


def media_ranges(accept: str) -> list[tuple[str, dict[str, str]]]:
    """Parsed Accept entries, highest q first (stable), q=0 dropped."""
    ranges: list[tuple[float, int, str, dict[str, str]]] = []
    for index, part in enumerate(accept.split(",")):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0].lower()
        if not media:
            continue
        params: dict[str, str] = {}
        for f in fields[1:]:
            key, _, value = f.partition("=")
            params[key.strip().lower()] = value.strip().strip('"')
        try:
            q = float(params.pop("q", "1"))
        except ValueError:
            q = 1.0
        if q > 0:
            ranges.append((-q, index, media, params))
    return [(media, params) for _, _, media, params in sorted(ranges)]


def negotiate(accept: str | None, *, aggregated: bool) -> str | None:
    """The Content-Type to answer a discovery request with, or None (406).

    Only ``/api`` and ``/apis`` (``aggregated=True``) offer APIGroupDiscoveryList; a
    client that asks for it and also accepts plain JSON gets whichever it listed first.
    Protobuf and YAML are not served, so entries asking only for them are skipped.
    """
    if not accept or not accept.strip():
        return JSON
    for media, params in media_ranges(accept):
        if media in ("*/*", "application/*") or (media == JSON and not params.get("as")):
            return JSON
        if not aggregated or media != JSON:
            continue
        wanted = (params.get("g"), params.get("as"))
        if wanted == ("apidiscovery.k8s.io", "APIGroupDiscoveryList"):
            if params.get("v") == "v2":
                return AGGREGATED_V2
            if params.get("v") == "v2beta1":
                return AGGREGATED_V2BETA1
    return None


def _not_acceptable(aggregated: bool) -> Answer:
    offered = [JSON, AGGREGATED_V2, AGGREGATED_V2BETA1] if aggregated else [JSON]
    return Answer(
        406,
        JSON,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "only the following media types are accepted: " + ", ".join(offered),
            "reason": "NotAcceptable",
            "code": 406,
        },
    )


def discover(
    resources: Sequence[ResourceType], path: str, accept: str | None, server_address: str
) -> Answer | None:
    """The answer for a discovery GET of ``path`` (``/version``, ``/api``, ``/apis``,
    ``/api/v1``, ``/apis/{group}``, ``/apis/{group}/{version}``), or None: the caller
    then answers a plain-text ``404 page not found``, as a real server does for a group
    it does not serve (h_apis_missing_group).

    ``server_address`` is ``host:port`` as the client reached the server (for ``/api``).
    """
    parts = [p for p in path.split("/") if p]
    if parts == ["version"]:
        return Answer(200, JSON, dict(version_info()))  # JSON whatever the Accept
    aggregated = len(parts) == 1 and parts[0] in ("api", "apis")
    body: dict[str, Any] | None = None
    if aggregated:
        core = parts[0] == "api"
        body = api_versions(resources, server_address) if core else api_group_list(resources)
    elif len(parts) == 2 and parts[0] == "api":
        body = api_resource_list(resources, "", parts[1])
    elif len(parts) == 2 and parts[0] == "apis":
        body = api_group(resources, parts[1])
    elif len(parts) == 3 and parts[0] == "apis":
        body = api_resource_list(resources, parts[1], parts[2])
    if body is None:
        return None
    content_type = negotiate(accept, aggregated=aggregated)
    if content_type is None:
        return _not_acceptable(aggregated)
    if content_type == JSON:
        return Answer(200, JSON, body)
    version = "v2" if content_type == AGGREGATED_V2 else "v2beta1"
    listing = aggregated_discovery(resources, core=parts[0] == "api", api_version=version)
    return Answer(200, content_type, listing)
