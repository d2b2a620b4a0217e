"""Mutating admission webhooks, called on create as the API server calls them.

For each webhook of each stored MutatingWebhookConfiguration (in name order) whose rules,
namespaceSelector and objectSelector match the object being created, the cluster POSTs an
``admission.k8s.io/v1`` AdmissionReview over HTTPS, verifying the server with the
webhook's ``caBundle`` under the Service's DNS name, within ``timeoutSeconds``, and
applies the JSON Patch it answers. A call that fails follows ``failurePolicy``: ``Ignore``
creates the object as it was, ``Fail`` (the default) refuses the create with the real
server's 500. A denial (``allowed: false``) refuses it with the webhook's status.

What differs from a real API server: only CREATE is sent (the operations this project's
webhook registers for), each webhook is called once (no reinvocation), and a Service is
reached through the address a test registered for it (``route_service``): there is no
network of pods to route to.
"""

from __future__ import annotations

import base64
import binascii
import json
import ssl
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from ..common import status
from ..common.faults import RequestInfo
from ..common.resources import ResourceType
from ..common.status import ApiError
from ..storage.patches import PatchError, json_patch
from ..storage.selectors import Requirement
from ..storage.store import Obj, Store
from .authz import User

CONFIGURATIONS = "mutatingwebhookconfigurations.admissionregistration.k8s.io"
REVIEW_VERSION = "admission.k8s.io/v1"
DEFAULT_TIMEOUT = 10

_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}


def selector_requirements(selector: Mapping[str, Any] | None) -> list[Requirement]:
    """A metav1.LabelSelector as requirements (an empty or absent one matches all)."""
    if not selector:
        return []
    labels = (selector.get("matchLabels") or {}).items()
    found = [Requirement(k, "in", frozenset({str(v)})) for k, v in labels]
    for expression in selector.get("matchExpressions") or []:
        op = _OPERATORS.get(expression.get("operator", ""))
        if op is None:
            raise ValueError(f"unknown selector operator {expression.get('operator')!r}")
        values = frozenset(expression.get("values") or ())
        found.append(Requirement(expression["key"], op, values))
    return found


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    return all(r.matches(labels) for r in selector_requirements(selector))


def _listed(values: Sequence[str] | None, value: str) -> bool:
    return values is not None and ("*" in values or value in values)


def rule_matches(rule: Mapping[str, Any], operation: str, resource: ResourceType) -> bool:
    """One ``rules`` entry against a create of ``resource`` (not a subresource)."""
    scope = rule.get("scope") or "*"
    if scope == "Namespaced" and not resource.namespaced:
        return False
    if scope == "Cluster" and resource.namespaced:
        return False
    resources = rule.get("resources") or []
    return (
        _listed(rule.get("operations"), operation)
        and _listed(rule.get("apiGroups"), resource.group)
        and _listed(rule.get("apiVersions"), resource.version)
        and ("*" in resources or "*/*" in resources or resource.plural in resources)
    )


def webhook_matches(
    hook: Mapping[str, Any],
    operation: str,
    resource: ResourceType,
    obj: Obj,
    namespace_labels: Mapping[str, str],
) -> bool:
    if not any(rule_matches(r, operation, resource) for r in hook.get("rules") or []):
        return False
    if resource.namespaced and not selects(hook.get("namespaceSelector"), namespace_labels):
        return False
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return selects(hook.get("objectSelector"), labels)


def review_request(
    uid: str, info: RequestInfo, resource: ResourceType, obj: Obj, user: User, dry_run: bool
) -> Obj:
    """The AdmissionReview the API server sends for a create."""
    kind = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    gvr = {"group": resource.group, "version": resource.version, "resource": resource.plural}
    user_info: dict[str, Any] = {"username": user.name, "groups": list(user.groups)}
    if user.uid:
        user_info["uid"] = user.uid
    request: dict[str, Any] = {
        "uid": uid,
        "kind": kind,
        "resource": gvr,
        "requestKind": kind,
        "requestResource": gvr,
        "name": (obj.get("metadata") or {}).get("name", ""),
        "operation": "CREATE",
        "userInfo": user_info,
        "object": obj,
        "oldObject": None,
        "dryRun": dry_run,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    if info.namespace:
        request["namespace"] = info.namespace
    return {"apiVersion": REVIEW_VERSION, "kind": "AdmissionReview", "request": request}


class CallFailed(Exception):
    """The webhook could not be called or answered something that is not a review."""


def patched(obj: Obj, answer: Any, uid: str, hook_name: str) -> Obj:
    """``obj`` with the review answer's patch applied; ApiError for a denial, CallFailed
    for an answer that is not a valid review of this request."""
    response = answer.get("response") if isinstance(answer, dict) else None
    if not isinstance(response, dict) or response.get("uid") != uid:
        raise CallFailed("the answer is not an AdmissionReview response for this request")
    if not response.get("allowed"):
        result = response.get("status") or {}
        message = f'admission webhook "{hook_name}" denied the request'
        if result.get("message"):
            message += f": {result['message']}"
        code = int(result.get("code") or 400)
        raise ApiError(code, str(result.get("reason") or ""), message)
    encoded = response.get("patch")
    if not encoded:
        return obj
    if response.get("patchType") != "JSONPatch":
        raise CallFailed(f"unsupported patch type {response.get('patchType')!r}")
    try:
        operations = json.loads(base64.b64decode(encoded, validate=True))
        result_obj = json_patch(obj, operations)
    except (binascii.Error, ValueError, PatchError) as exc:
        raise CallFailed(f"cannot apply the patch: {exc}") from exc
    if not isinstance(result_obj, dict):
        raise CallFailed("the patch did not leave an object")
    return result_obj


@dataclass(frozen=True)
class Backend:
    """Where a Service's pods listen: ``ports`` maps a target port (number or name) to a
    local port on ``host``."""

    host: str
    ports: Mapping[int | str, int]


class MutatingAdmission:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.backends: dict[tuple[str, str], Backend] = {}
        self.calls: list[tuple[str, str]] = []
        """(webhook name, outcome) per call: ``patched``, ``unchanged``, ``denied``,
        ``ignored: <why>`` or ``failed: <why>``."""

    def configured(self) -> bool:
        return any(True for _ in self.store.list(CONFIGURATIONS))

    def matching(self, info: RequestInfo, resource: ResourceType, obj: Obj) -> list[Obj]:
        if info.verb != "create" or info.subresource:
            return []
        namespace_labels: Mapping[str, str] = {}
        if resource.namespaced:
            found = self.store.get("namespaces", "", info.namespace) or {}
            namespace_labels = (found.get("metadata") or {}).get("labels") or {}
        configurations = sorted(
            self.store.list(CONFIGURATIONS), key=lambda c: c["metadata"]["name"]
        )
        return [
            hook
            for configuration in configurations
            for hook in configuration.get("webhooks") or []
            if webhook_matches(hook, "CREATE", resource, obj, namespace_labels)
        ]

    async def admit(
        self, info: RequestInfo, resource: ResourceType, obj: Obj, user: User, dry_run: bool
    ) -> Obj:
        for hook in self.matching(info, resource, obj):
            name = str(hook.get("name", ""))
            uid = str(uuid.uuid4())
            review = review_request(uid, info, resource, obj, user, dry_run)
            try:
                answer = await self._call(hook, review)
                after = patched(obj, answer, uid, name)
            except ApiError:
                self.calls.append((name, "denied"))
                raise
            except CallFailed as exc:
                if hook.get("failurePolicy", "Fail") == "Ignore":
                    self.calls.append((name, f"ignored: {exc}"))
                    continue
                self.calls.append((name, f"failed: {exc}"))
                raise status.internal(
                    f'Internal error occurred: failed calling webhook "{name}": {exc}'
                ) from exc
            self.calls.append((name, "unchanged" if after is obj else "patched"))
            obj = after
        return obj

    async def _call(self, hook: Mapping[str, Any], review: Obj) -> Any:
        timeout = int(hook.get("timeoutSeconds") or DEFAULT_TIMEOUT)
        url, hostname, context = self._endpoint(hook.get("clientConfig") or {})
        target = f"{url}?timeout={timeout}s"
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
                session.post(target, json=review, ssl=context, server_hostname=hostname) as answer,
            ):
                if answer.status != 200:
                    raise CallFailed(f"failed to call webhook: {target}: HTTP {answer.status}")
                return await answer.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            reason = "context deadline exceeded" if isinstance(exc, TimeoutError) else str(exc)
            raise CallFailed(f'failed to call webhook: Post "{target}": {reason}') from exc

    def _endpoint(self, client: Mapping[str, Any]) -> tuple[str, str | None, ssl.SSLContext]:
        bundle = client.get("caBundle")
        if bundle:
            try:
                pem = base64.b64decode(bundle, validate=True).decode()
                context = ssl.create_default_context(cadata=pem)
            except (binascii.Error, ValueError, ssl.SSLError) as exc:
                raise CallFailed(f"bad caBundle: {exc}") from exc
        else:
            context = ssl.create_default_context()
        if client.get("url"):
            return str(client["url"]), None, context
        service = client.get("service") or {}
        namespace, name = service.get("namespace", ""), service.get("name", "")
        port = int(service.get("port") or 443)
        found = self.store.get("services", namespace, name)
        if found is None:
            raise CallFailed(f'service "{name}" not found')
        target: int | str = port
        for entry in (found.get("spec") or {}).get("ports") or []:
            if entry.get("port") == port:
                target = entry.get("targetPort", port)
                break
        else:
            raise CallFailed(f'service "{name}" has no port {port}')
        backend = self.backends.get((namespace, name))
        if backend is None or target not in backend.ports:
            raise CallFailed(f'no endpoints available for service "{name}"')
        path = service.get("path") or ""
        url = f"https://{backend.host}:{backend.ports[target]}{path}"
        return url, f"{name}.{namespace}.svc", context
