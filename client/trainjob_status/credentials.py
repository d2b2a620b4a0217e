"""The bearer token and the server CA, read from their (rotating) files.

Kubelet rewrites a projected token before it expires (by swapping a symlink, so the
path's inode changes) and the CA file can be rotated the same way. Both are cached and
re-read when the file's identity (inode, size, mtime) changes; the token also when its
JWT ``exp`` is near and at once after the server refuses it. The token's text is never
logged or put into an exception message.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
import time
from collections.abc import Callable

# Re-read a token this close to its expiry even if the file looks unchanged.
REFRESH_MARGIN = 60.0

FileIdentity = tuple[int, int, int, int]


def file_identity(path: str) -> FileIdentity:
    """What changes when a file is replaced or rewritten (follows symlinks)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class TokenFile:
    """The token from ``path``: ``get()`` on every send, ``invalidate()`` after a 401/403.

    With no path there is no token (requests carry no Authorization header).
    """

    def __init__(
        self,
        path: str | None,
        clock: Callable[[], float] = time.time,
        refresh_margin: float = REFRESH_MARGIN,
    ) -> None:
        self.path = path
        self._clock = clock
        self._margin = refresh_margin
        self._token: str | None = None
        self._identity: FileIdentity | None = None
        self._expires: float | None = None
        self._stale = True
        self.error: str | None = None
        self.reads = 0

    def get(self) -> str | None:
        """The current token, re-read when needed; None when there is none or the file
        cannot be read (``error`` then says why, without the content)."""
        if self.path is None:
            return None
        try:
            identity = file_identity(self.path)
            if self._stale or identity != self._identity or self._expiring():
                self._read(identity)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            self._token, self._identity, self._expires = None, None, None
            self.error = f"cannot read token file {self.path}: {type(exc).__name__}"
            return None
        return self._token

    def invalidate(self) -> None:
        """Re-read the file on the next ``get()`` whatever its identity says."""
        self._stale = True

    def _expiring(self) -> bool:
        return self._expires is not None and self._expires - self._clock() <= self._margin

    def _read(self, identity: FileIdentity) -> None:
        assert self.path is not None
        with open(self.path, "rb") as handle:
            token = handle.read().decode("ascii").strip()
        if not token or any(ch in token for ch in "\r\n\0 \t"):
            raise ValueError("not a bearer token")
        self._token = token
        self._identity = identity
        self._expires = jwt_expiry(token)
        self._stale = False
        self.error = None
        self.reads += 1


def jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT, read without verifying it; None when absent or unreadable."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    if isinstance(exp, (int, float)) and not isinstance(exp, bool):
        return float(exp)
    return None


class CAFile:
    """A client TLS context trusting the CA file (hostname checked), rebuilt when the file
    changes. With no path it trusts the system's CAs."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._context: ssl.SSLContext | None = None
        self._identity: FileIdentity | None = None
        self.loads = 0

    def context(self) -> ssl.SSLContext:
        """The context for the next connection; raises OSError/ssl.SSLError when the file
        cannot be used (the caller backs off and tries again)."""
        if self.path is None:
            if self._context is None:
                self._context = self._build(None)
            return self._context
        identity = file_identity(self.path)
        if self._context is None or identity != self._identity:
            self._context = self._build(self.path)
            self._identity = identity
        return self._context

    def _build(self, path: str | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=path)
        self.loads += 1
        return context
