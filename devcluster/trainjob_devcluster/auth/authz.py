"""Who may do what: the admin, service accounts under RBAC, and anonymous callers (pure).

The policy is the one a fresh cluster has: system:masters may do anything; everyone may
read the health and version paths; authenticated users may read discovery and OpenAPI;
service accounts may read the issuer discovery documents; everything else needs a Role
or ClusterRole bound to the user, one of its groups, or its service account.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..common.faults import RequestInfo
from ..common.resources import ResourceType
from ..common.status import ApiError

# The non-resource URLs of the default ClusterRoles, as a fresh cluster binds them:
# system:public-info-viewer to everyone, system:discovery to authenticated users,
# system:service-account-issuer-discovery to service accounts. "x/*" is a prefix.
PUBLIC_INFO_URLS = ("/healthz", "/livez", "/readyz", "/version", "/version/")
DISCOVERY_URLS = (
    "/api",
    "/api/*",
    "/apis",
    "/apis/*",
    "/healthz",
    "/livez",
    "/openapi",
    "/openapi/*",
    "/readyz",
    "/version",
    "/version/",
)
ISSUER_URLS = (
    "/.well-known/openid-configuration",
    "/.well-known/openid-configuration/",
    "/openid/v1/jwks",
    "/openid/v1/jwks/",
)


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()

    @property
    def anonymous(self) -> bool:
        return self.name == "system:anonymous"


ANONYMOUS = User("system:anonymous", groups=("system:unauthenticated",))
ADMIN = User("devcluster-admin", groups=("system:masters", "system:authenticated"))


def url_matches(pattern: str, path: str) -> bool:
    """RBAC's nonResourceURLs match: exact, or a prefix where the pattern ends in ``*``."""
    return pattern == path or (pattern.endswith("*") and path.startswith(pattern[:-1]))


def _any_url(patterns: Iterable[str], path: str) -> bool:
    return any(url_matches(p, path) for p in patterns)


def _path_allowed(user: User, path: str) -> bool:
    if _any_url(PUBLIC_INFO_URLS, path):
        return True
    if user.anonymous:
        return False
    if _any_url(ISSUER_URLS, path):
        return "system:serviceaccounts" in user.groups
    return _any_url(DISCOVERY_URLS, path)


def default_grant(user: User, path: str) -> str | None:
    """The reason RBAC gives for a ``get`` of ``path`` that a fresh cluster's default
    ClusterRoleBindings allow, or None. Where two allow it (``/healthz`` for an
    authenticated user: system:discovery and system:public-info-viewer) the real API
    server names whichever its cache lists first; this names system:discovery."""
    if not _path_allowed(user, path):
        return None
    if _any_url(ISSUER_URLS, path):
        return _default_reason("system:service-account-issuer-discovery", "system:serviceaccounts")
    if "system:authenticated" in user.groups:
        return _default_reason("system:discovery", "system:authenticated")
    return _default_reason("system:public-info-viewer", "system:unauthenticated")


def _default_reason(name: str, group: str) -> str:
    return (
        f'RBAC: allowed by ClusterRoleBinding "{name}" of ClusterRole "{name}" to Group "{group}"'
    )


def _subject_matches(subject: dict[str, Any], user: User, binding_ns: str) -> bool:
    kind = subject.get("kind")
    if kind == "User":
        return bool(subject.get("name") == user.name)
    if kind == "Group":
        return subject.get("name") in user.groups
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or binding_ns
        return user.name == f"system:serviceaccount:{ns}:{subject.get('name')}"
    return False


def bound_rules(
    user: User, namespace: str, bindings: Iterable[dict[str, Any]], role_lookup: Any
) -> list[dict[str, Any]]:
    """Every rule of every stored Role and ClusterRole bound to ``user`` (cluster-wide, or
    in ``namespace``), in the bindings' order."""
    rules: list[dict[str, Any]] = []
    for binding in bindings:
        binding_ns = binding.get("metadata", {}).get("namespace", "")
        if binding_ns and binding_ns != namespace:
            continue
        if not any(_subject_matches(s, user, binding_ns) for s in binding.get("subjects") or []):
            continue
        ref = binding.get("roleRef") or {}
        role = role_lookup(ref.get("kind", ""), binding_ns, ref.get("name", ""))
        rules.extend((role or {}).get("rules") or [])
    return rules


def _rule_allows(rule: dict[str, Any], info: RequestInfo, group: str) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and info.verb not in verbs:
        return False
    if not info.resource:
        urls = rule.get("nonResourceURLs") or []
        return _any_url(urls, info.path)
    groups = rule.get("apiGroups") or []
    if "*" not in groups and group not in groups:
        return False
    resources = rule.get("resources") or []
    wanted = info.resource_key
    if "*" not in resources and wanted not in resources:
        return False
    names = rule.get("resourceNames") or []
    return not names or info.name in names


def _subject_text(subject: dict[str, Any], binding_ns: str) -> str:
    if subject.get("kind") == "ServiceAccount":
        return f'ServiceAccount "{subject.get("name")}/{subject.get("namespace") or binding_ns}"'
    return f'{subject.get("kind")} "{subject.get("name")}"'


def granting_binding(
    user: User,
    info: RequestInfo,
    group: str,
    bindings: Iterable[dict[str, Any]],
    role_lookup: Any,
) -> str | None:
    """The RBAC reason (which binding of which role to which subject) a RoleBinding or
    ClusterRoleBinding gives ``user`` a rule that fits, or None when none does.

    ``role_lookup(kind, namespace, name)`` returns the Role/ClusterRole object or None.
    """
    for binding in bindings:
        meta = binding.get("metadata", {})
        binding_ns = meta.get("namespace", "")
        if binding_ns and binding_ns != info.namespace:
            continue
        subjects = [
            s for s in binding.get("subjects") or [] if _subject_matches(s, user, binding_ns)
        ]
        if not subjects:
            continue
        ref = binding.get("roleRef") or {}
        role = role_lookup(ref.get("kind", ""), binding_ns, ref.get("name", ""))
        if role is None:
            continue
        if any(_rule_allows(rule, info, group) for rule in role.get("rules") or []):
            kind = "RoleBinding" if binding_ns else "ClusterRoleBinding"
            name = f"{meta.get('name')}/{binding_ns}" if binding_ns else meta.get("name")
            return (
                f'RBAC: allowed by {kind} "{name}" of {ref.get("kind")} "{ref.get("name")}" '
                f"to {_subject_text(subjects[0], binding_ns)}"
            )
    return None


def rbac_allows(
    user: User,
    info: RequestInfo,
    group: str,
    bindings: Iterable[dict[str, Any]],
    role_lookup: Any,
) -> bool:
    """True when a RoleBinding or ClusterRoleBinding gives ``user`` a rule that fits."""
    return granting_binding(user, info, group, bindings, role_lookup) is not None


def path_allowed(user: User, path: str, verb: str = "get") -> bool:
    """Whether the default policy lets ``user`` ``verb`` a non-resource ``path`` without
    any binding (the discovery and public-info roles only grant get)."""
    return verb == "get" and _path_allowed(user, path)


def authorize(
    user: User,
    info: RequestInfo,
    resource: ResourceType | None,
    bindings: Iterable[dict[str, Any]],
    role_lookup: Any,
) -> None:
    """Raise the API server's 403 unless ``user`` may make this request."""
    if "system:masters" in user.groups:
        return
    if resource is None and _path_allowed(user, info.path):
        return
    group = resource.group if resource else ""
    info_for_rbac = info if resource is not None else RequestInfo(info.method, info.path, "get")
    if rbac_allows(user, info_for_rbac, group, bindings, role_lookup):
        return
    raise forbidden(user, info, resource)


def forbidden(user: User, info: RequestInfo, resource: ResourceType | None) -> ApiError:
    if resource is None:
        return ApiError(
            403,
            "Forbidden",
            f'forbidden: User "{user.name}" cannot {info.method.lower()} path "{info.path}"',
            {},
        )
    subject = f'{resource.qualified} "{info.name}"' if info.name else resource.qualified
    scope = f'in the namespace "{info.namespace}"' if info.namespace else "at the cluster scope"
    details: dict[str, Any] = {}
    if info.name:
        details["name"] = info.name
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    return ApiError(
        403,
        "Forbidden",
        f'{subject} is forbidden: User "{user.name}" cannot {info.verb} resource '
        f'"{info.resource_key}" in API group "{resource.group}" {scope}',
        details,
    )
