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

from .faults import RequestInfo
from .resources import ResourceType
from .status import ApiError

PUBLIC_PATHS = ("/healthz", "/livez", "/readyz", "/version")
DISCOVERY_PREFIXES = ("/api", "/apis", "/openapi", "/version")
ISSUER_PATHS = ("/.well-known/openid-configuration", "/openid/v1/jwks")


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


def _path_allowed(user: User, path: str) -> bool:
    if path in PUBLIC_PATHS or path.startswith(tuple(p + "/" for p in PUBLIC_PATHS)):
        return True
    if user.anonymous:
        return False
    if path in ISSUER_PATHS:
        return "system:serviceaccounts" in user.groups
    return any(path == p or path.startswith(p + "/") for p in DISCOVERY_PREFIXES)


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


def _rule_allows(rule: dict[str, Any], info: RequestInfo, group: str) -> bool:
    verbs = rule.get("verbs") or []
    if "*" not in verbs and info.verb not in verbs:
        return False
    if not info.resource:
        urls = rule.get("nonResourceURLs") or []
        return any(
            u == info.path or (u.endswith("*") and info.path.startswith(u[:-1])) for u in urls
        )
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


# What the default ClusterRole system:basic-user lets every authenticated user create.
SELF_REVIEWS = frozenset({"selfsubjectaccessreviews"})


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
    if resource is not None and resource.plural in SELF_REVIEWS and info.verb == "create":
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
