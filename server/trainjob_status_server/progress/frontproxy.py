"""Who a request proxied by the Kubernetes API server comes from (pure): the front
proxy's request headers, trusted only from a client certificate of the proxy's CA.

The API server publishes how it proxies in the ConfigMap
``kube-system/extension-apiserver-authentication``: the CA of its proxy client
certificate, the names that certificate may have, and the headers that carry the user
it authenticated (``X-Remote-User``, ``X-Remote-Group``, ``X-Remote-Extra-*`` by
default). The TLS layer checks the certificate against the CA; these functions check its
name and read the user. A request without them is no one's: nothing else is trusted on
that port, not a bearer token, not a header from a client that is not the proxy.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote

CONFIGMAP_NAMESPACE = "kube-system"
CONFIGMAP_NAME = "extension-apiserver-authentication"
CONFIGMAP_PATH = f"/api/v1/namespaces/{CONFIGMAP_NAMESPACE}/configmaps/{CONFIGMAP_NAME}"


class Headers(Protocol):
    """What is read of a request's headers (a ``multidict.CIMultiDictProxy``)."""

    def getall(self, key: str, default: list[str]) -> list[str]: ...

    def items(self) -> Iterable[tuple[str, str]]: ...


@dataclass(frozen=True, slots=True)
class RequestHeaderSettings:
    """How the API server proxies: ``client_ca`` (PEM) signs its proxy certificate,
    whose common name must be one of ``allowed_names`` (any, when empty)."""

    client_ca: str
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    uid_headers: tuple[str, ...] = ()
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)


@dataclass(frozen=True, slots=True)
class User:
    """The user the API server authenticated, as a SubjectAccessReview names it."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def review_fields(self) -> dict[str, Any]:
        """The SubjectAccessReview spec's user fields."""
        spec: dict[str, Any] = {"user": self.name}
        if self.uid:
            spec["uid"] = self.uid
        if self.groups:
            spec["groups"] = list(self.groups)
        if self.extra:
            spec["extra"] = {key: list(values) for key, values in self.extra.items()}
        return spec


class SettingsError(ValueError):
    """The ConfigMap does not say how the API server proxies."""


def _names(data: Mapping[str, str], key: str) -> tuple[str, ...] | None:
    """A key holding a JSON list of strings; None when the key is absent."""
    text = data.get(key)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        raise SettingsError(f"{key} is not JSON") from None
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise SettingsError(f"{key} is not a list of strings")
    return tuple(value)


def settings_of(data: Mapping[str, str]) -> RequestHeaderSettings:
    """The settings in the ConfigMap's ``data``; SettingsError when the API server runs
    without a front proxy (no ``requestheader-client-ca-file``) or a key is malformed."""
    ca = data.get("requestheader-client-ca-file", "")
    if "-----BEGIN CERTIFICATE-----" not in ca:
        raise SettingsError(
            "no requestheader-client-ca-file: the API server has no front proxy "
            "(kube-apiserver --requestheader-client-ca-file)"
        )
    defaults = RequestHeaderSettings(ca)
    usernames = _names(data, "requestheader-username-headers")
    if usernames == ():
        raise SettingsError("requestheader-username-headers is empty")
    return RequestHeaderSettings(
        ca,
        allowed_names=_names(data, "requestheader-allowed-names") or (),
        username_headers=usernames or defaults.username_headers,
        uid_headers=_names(data, "requestheader-uid-headers") or (),
        group_headers=_names(data, "requestheader-group-headers") or defaults.group_headers,
        extra_prefixes=_names(data, "requestheader-extra-headers-prefix")
        or defaults.extra_prefixes,
    )


def common_name(peercert: Mapping[str, Any] | None) -> str | None:
    """The subject's common name of a verified peer certificate (``ssl``'s dict form)."""
    if not peercert:
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def _first(headers: Headers, names: Sequence[str]) -> str:
    for name in names:
        for value in headers.getall(name, []):
            if value:
                return value
    return ""


def proxied_user(
    settings: RequestHeaderSettings, peercert: Mapping[str, Any] | None, headers: Headers
) -> User | None:
    """The user a request carries, or None: no verified certificate, a name the
    settings do not allow, or no user header."""
    name = common_name(peercert)
    if name is None or (settings.allowed_names and name not in settings.allowed_names):
        return None
    username = _first(headers, settings.username_headers)
    if not username:
        return None
    groups = tuple(
        value for header in settings.group_headers for value in headers.getall(header, [])
    )
    return User(
        username,
        uid=_first(headers, settings.uid_headers),
        groups=groups,
        extra=_extra(settings.extra_prefixes, headers),
    )


def _extra(prefixes: Sequence[str], headers: Headers) -> dict[str, tuple[str, ...]]:
    """``X-Remote-Extra-<key>`` headers: the key lowercased and percent-decoded, as the
    API server encodes it."""
    found: dict[str, list[str]] = {}
    lowered = [prefix.lower() for prefix in prefixes]
    for header, value in headers.items():
        low = header.lower()
        for prefix in lowered:
            if low.startswith(prefix) and len(low) > len(prefix):
                found.setdefault(unquote(low[len(prefix) :]), []).append(value)
                break
    return {key: tuple(values) for key, values in found.items()}
