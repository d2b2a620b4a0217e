"""Map a request path and method to a resource and verb (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..common.faults import RequestInfo
from ..common.resources import ResourceType

_VERBS_BY_METHOD = {"POST": "create", "PUT": "update", "PATCH": "patch"}


@dataclass(frozen=True)
class Route:
    info: RequestInfo
    resource: ResourceType | None  # None: a path the resource API does not serve


class Registry:
    """Resource types by (group/version, plural)."""

    def __init__(self, resources: list[ResourceType]) -> None:
        self.resources = resources
        self._by_gv = {(r.group_version, r.plural): r for r in resources}
        self._builtin_group_versions = {r.group_version for r in resources if r.builtin}

    def under_group_version(self, path: str) -> bool:
        """Whether ``path`` lies below a built-in group-version (``/api/v1/x``,
        ``/apis/g/v/x``): kube-apiserver answers an unknown resource there with a
        NotFound Status, and a path elsewhere (custom resource groups included) with a
        plain-text 404."""
        parts = [p for p in path.split("/") if p]
        if len(parts) >= 3 and parts[0] == "api":
            return parts[1] in self._builtin_group_versions
        if len(parts) >= 4 and parts[0] == "apis":
            return f"{parts[1]}/{parts[2]}" in self._builtin_group_versions
        return False

    def find(self, group_version: str, plural: str) -> ResourceType | None:
        return self._by_gv.get((group_version, plural))

    def by_plural(self, plural: str, group: str = "") -> ResourceType:
        return next(r for r in self.resources if r.plural == plural and r.group == group)


_GO_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})


def query_flag(query: Mapping[str, str], name: str) -> bool:
    """A boolean query parameter as Go's strconv.ParseBool reads it (Python clients send
    ``True``)."""
    return query.get(name, "") in _GO_TRUE


def _verb(method: str, has_name: bool, query: Mapping[str, str]) -> str:
    if method == "GET":
        if query_flag(query, "watch"):
            return "watch"
        return "get" if has_name else "list"
    if method == "DELETE":
        return "delete" if has_name else "deletecollection"
    return _VERBS_BY_METHOD.get(method, "")


def route(registry: Registry, method: str, path: str, query: Mapping[str, str]) -> Route:
    """Resolve ``/api/v1/...`` and ``/apis/GROUP/VERSION/...`` paths; anything else is
    returned with ``resource=None`` and an empty verb."""
    parts = [p for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group_version, rest = parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
    else:
        return Route(RequestInfo(method, path, ""), None)

    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        candidate = registry.find(group_version, rest[2])
        if candidate is not None and candidate.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return Route(RequestInfo(method, path, ""), None)
    resource = registry.find(group_version, rest[0])
    if resource is None or (resource.namespaced and not namespace and len(rest) > 1):
        return Route(RequestInfo(method, path, ""), None)
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    if subresource and subresource not in resource.subresources:
        return Route(RequestInfo(method, path, ""), None)
    info = RequestInfo(
        method=method,
        path=path,
        verb=_verb(method, bool(name), query),
        resource=resource.plural,
        subresource=subresource,
        namespace=namespace,
        name=name,
    )
    return Route(info, resource)
