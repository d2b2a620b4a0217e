"""SelfSubjectRulesReview (authorization.k8s.io/v1, ``kubectl auth can-i --list``): the
rules the caller holds in a namespace, from the roles bound to it and from the default
ClusterRoleBindings a fresh cluster has (which this cluster does not store)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..common.status import bad_request
from . import authz
from .tokenfmt import object_field, string_field

KIND = "SelfSubjectRulesReview"
API_VERSION = "authorization.k8s.io/v1"

_GET = ["get"]
# The default ClusterRoles' rules, by the group their default binding names.
_EVERYTHING = [
    {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
    {"verbs": ["*"], "nonResourceURLs": ["*"]},
]
_BASIC_USER = [
    {
        "verbs": ["create"],
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
    },
    {
        "verbs": ["create"],
        "apiGroups": ["authentication.k8s.io"],
        "resources": ["selfsubjectreviews"],
    },
]


def _default_rules(user: authz.User) -> list[dict[str, Any]]:
    groups = set(user.groups)
    rules: list[dict[str, Any]] = []
    if "system:masters" in groups:
        rules += _EVERYTHING
    if "system:authenticated" in groups:
        rules += _BASIC_USER
        rules.append({"verbs": _GET, "nonResourceURLs": list(authz.DISCOVERY_URLS)})
    if groups & {"system:authenticated", "system:unauthenticated"}:
        rules.append({"verbs": _GET, "nonResourceURLs": list(authz.PUBLIC_INFO_URLS)})
    if "system:serviceaccounts" in groups:
        rules.append({"verbs": _GET, "nonResourceURLs": list(authz.ISSUER_URLS)})
    return rules


def review(
    body: Mapping[str, Any],
    user: authz.User,
    bindings: Callable[[str], Iterable[dict[str, Any]]],
    role_lookup: Any,
) -> dict[str, Any]:
    """The answer (201): every rule that applies, resource and non-resource apart."""
    doc = dict(body)
    spec = object_field(KIND, doc, "spec", KIND, "spec", "v1.SelfSubjectRulesReviewSpec") or {}
    namespace = string_field(KIND, spec, "namespace", "SelfSubjectRulesReviewSpec", "namespace")
    if not namespace:
        raise bad_request(f"no namespace on request for {KIND}")
    rules = _default_rules(user) + authz.bound_rules(
        user, namespace, bindings(namespace), role_lookup
    )
    resource_rules, non_resource_rules = [], []
    for rule in rules:
        if rule.get("nonResourceURLs"):
            non_resource_rules.append(
                {"verbs": list(rule.get("verbs") or []), "nonResourceURLs": rule["nonResourceURLs"]}
            )
        else:
            resource_rules.append(
                {
                    key: list(rule[key])
                    for key in ("verbs", "apiGroups", "resources", "resourceNames")
                    if rule.get(key)
                }
            )
    metadata = object_field(KIND, doc, "metadata", KIND, "metadata", "v1.ObjectMeta") or {}
    return {
        "kind": KIND,
        "apiVersion": API_VERSION,
        "metadata": dict(metadata),
        "spec": spec,
        "status": {
            "resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules,
            "incomplete": False,
        },
    }
