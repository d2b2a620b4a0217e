"""SubjectAccessReview (authorization.k8s.io/v1), answered from the RBAC evaluation the
API server applies to its own requests (authz.py): resource and non-resource attributes.

As in kube-apiserver, system:masters may do anything, and the paths every user (or
every authenticated user) may read are allowed without a binding. A review that RBAC
allows names the binding in ``status.reason``; a refusal has no reason, as with RBAC
alone (no other authorizer is asked here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..common.faults import RequestInfo
from ..common.status import bad_request, body_field
from . import authz

KIND = "SubjectAccessReview"
API_VERSION = "authorization.k8s.io/v1"


def _attributes(spec: dict[str, Any]) -> tuple[RequestInfo, str, bool]:
    """(request info, API group, is a resource request) from the spec's attributes."""
    resource = body_field(spec, "resourceAttributes", dict, "spec.resourceAttributes")
    non_resource = body_field(spec, "nonResourceAttributes", dict, "spec.nonResourceAttributes")
    if (resource is None) == (non_resource is None):
        raise bad_request(
            f"{KIND}.authorization.k8s.io is invalid: spec.resourceAttributes: Invalid value: "
            '"null": exactly one of nonResourceAttributes or resourceAttributes must be specified'
        )
    if non_resource is not None:
        path, verb = (
            body_field(non_resource, key, str, f"spec.nonResourceAttributes.{key}") or ""
            for key in ("path", "verb")
        )
        return RequestInfo(verb.upper(), path, verb), "", False
    keys = ("namespace", "verb", "group", "resource", "subresource", "name")
    fields = {
        key: body_field(resource, key, str, f"spec.resourceAttributes.{key}") or "" for key in keys
    }
    info = RequestInfo(
        "",
        "",
        fields["verb"],
        fields["resource"],
        fields["subresource"],
        fields["namespace"],
        fields["name"],
    )
    return info, fields["group"], True


def review(
    body: Mapping[str, Any],
    bindings: Callable[[str], Iterable[dict[str, Any]]],
    role_lookup: Any,
) -> dict[str, Any]:
    """The SubjectAccessReview answer (201) for a request body; ``bindings(namespace)``
    gives the ClusterRoleBindings and the namespace's RoleBindings."""
    spec = body_field(body, "spec", dict, "spec") or {}
    username = body_field(spec, "user", str, "spec.user") or ""
    groups = body_field(spec, "groups", list, "spec.groups") or []
    if not username and not groups:
        raise bad_request(
            f"{KIND}.authorization.k8s.io is invalid: spec.user: Invalid value: "
            '"": at least one of user or group must be specified'
        )
    info, group, is_resource = _attributes(spec)
    user = authz.User(username, body_field(spec, "uid", str, "spec.uid") or "", tuple(groups))
    metadata = body_field(body, "metadata", dict, "metadata") or {}
    return {
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": dict(metadata),
        "spec": spec,
        "status": _verdict(user, info, group, is_resource, bindings, role_lookup),
    }


def _verdict(
    user: authz.User,
    info: RequestInfo,
    group: str,
    is_resource: bool,
    bindings: Callable[[str], Iterable[dict[str, Any]]],
    role_lookup: Any,
) -> dict[str, Any]:
    if "system:masters" in user.groups:
        return {"allowed": True}
    if not is_resource and authz.path_allowed(user, info.path, info.verb):
        reason = authz.default_grant(user, info.path)
        return {"allowed": True, "reason": reason} if reason else {"allowed": True}
    granted = authz.granting_binding(user, info, group, bindings(info.namespace), role_lookup)
    if granted is not None:
        return {"allowed": True, "reason": granted}
    return {"allowed": False}
