"""One kept-alive HTTP(S) connection to the status server: a post in, an ``Answer`` out.

Used from the sending thread only, but for ``abort``, which the closing thread calls. The
connection is opened on first use, reused while the server keeps it, and reopened after
any error. A request on a reused connection that
the server had already closed is sent again once on a fresh one (the usual keep-alive
race; a status post may be repeated safely, the server orders by lastUpdatedTime).

The socket is made here, not by http.client, so that ``abort`` can reach it while it
connects and while its TLS handshake runs: a server that accepts the connection and then
drips or withholds its handshake must not hold the sending thread after ``close``.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass

from .credentials import CAFile

USER_AGENT = "trainjob-status-client/0.1"
# A status answer is a few hundred bytes; anything larger is not read to the end.
MAX_ANSWER_BYTES = 64 * 1024
NO_ANSWER = 0
# How a kept-alive connection the server already closed fails on reuse.
_STALE = (
    http.client.RemoteDisconnected,
    ConnectionResetError,
    BrokenPipeError,
    ssl.SSLEOFError,
    ssl.SSLZeroReturnError,
)


@dataclass(frozen=True)
class Answer:
    """The server's answer, or ``code`` 0 (``NO_ANSWER``) when none came (network, TLS)."""

    code: int
    reason: str = ""
    message: str = ""
    retry_after: str | None = None


# What a post cut short (or not sent) by abort() gets.
_CLOSED = Answer(NO_ANSWER, "Closed", "the reporter was closed")


class _Connection(http.client.HTTPConnection):
    """http.client's connection over a socket that ``open_socket`` makes (plain or TLS,
    connected), also when http.client reopens it by itself."""

    def __init__(
        self, host: str, port: int, timeout: float, open_socket: Callable[[], socket.socket]
    ) -> None:
        super().__init__(host, port, timeout=timeout)
        self._open_socket = open_socket

    def connect(self) -> None:
        self.sock = self._open_socket()


class Transport:
    """Posts bodies to ``url`` (``https://`` verified with ``ca``, or plain ``http://``)."""

    def __init__(self, url: str, ca: CAFile, timeout: float) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.secure = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.secure else 80)
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.ca = ca
        self.timeout = timeout
        self._connection: http.client.HTTPConnection | None = None
        self._used = False
        self._aborted = False
        # The socket being connected or shaking hands, for abort() to shut down.
        self._opening: socket.socket | None = None
        self.connections_opened = 0

    def post(self, body: bytes, token: str | None) -> Answer:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        for attempt in (1, 2):
            if self._aborted:
                return _CLOSED
            reused = self._used
            try:
                connection = self._connect()
                self._used = True
                connection.request("POST", self.target, body, headers)
                return self._answer(connection.getresponse())
            except _STALE as exc:
                self.close()
                if reused and attempt == 1:
                    continue  # unless aborted meanwhile: then the loop's check answers
                if self._aborted:
                    return _CLOSED
                return Answer(NO_ANSWER, type(exc).__name__, _scrub(exc, token))
            except (OSError, http.client.HTTPException, ValueError) as exc:
                self.close()
                if self._aborted:
                    return _CLOSED
                return Answer(NO_ANSWER, type(exc).__name__, _scrub(exc, token))
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        connection, self._connection = self._connection, None
        self._used = False
        if connection is not None:
            connection.close()

    def abort(self) -> None:
        """From another thread: the post in progress, if any, ends at once with an error
        (its socket is shut down; reading from it returns), and no later post is sent.
        The sending thread still closes the connection."""
        self._aborted = True
        connection = self._connection
        for sock in (self._opening, None if connection is None else connection.sock):
            if sock is not None:
                # The plain socket's shutdown: SSLSocket's own would drop its TLS object
                # under the reading thread. OSError: closed meanwhile by the sending
                # thread, or not connected yet (then the sending thread sees the flag).
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def forget(self) -> None:
        """Drop the connection without touching its socket (after fork, in the child)."""
        self._connection = None
        self._used = False
        self._aborted = False

    def _connect(self) -> http.client.HTTPConnection:
        if self._connection is None:
            self._connection = _Connection(self.host, self.port, self.timeout, self._open)
            self._connection.default_port = 443 if self.secure else 80  # for the Host header
            self.connections_opened += 1
        return self._connection

    def _open(self) -> socket.socket:
        """A connected socket, TLS done for https, within ``timeout`` from the start of
        the connect to the end of the handshake. The name lookup is not cut by abort()."""
        deadline = time.monotonic() + self.timeout
        failure: OSError = OSError(f"no address for {self.host!r}")
        for family, kind, proto, _, address in socket.getaddrinfo(
            self.host, self.port, type=socket.SOCK_STREAM
        ):
            sock = self._watched(socket.socket(family, kind, proto))
            try:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                sock.connect(address)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError as exc:
                sock.close()
                self._opening = None
                failure = exc
                if self._aborted:
                    break
                continue
            try:
                if self.secure:
                    sock = self._handshake(sock, deadline)
                sock.settimeout(self.timeout)
            except BaseException:
                sock.close()
                raise
            finally:
                self._opening = None
            return sock
        raise failure

    def _handshake(self, sock: socket.socket, deadline: float) -> ssl.SSLSocket:
        tls = self.ca.context().wrap_socket(
            sock, server_hostname=self.host, do_handshake_on_connect=False
        )
        self._watched(tls)
        # A socket timeout bounds the whole handshake (not each read), so a server that
        # drips it cannot stretch it; abort() cuts it sooner.
        tls.settimeout(max(deadline - time.monotonic(), 0.001))
        tls.do_handshake()
        return tls

    def _watched(self, sock: socket.socket) -> socket.socket:
        """Make ``sock`` the one abort() shuts down; raises if abort() came first (it
        sets its flag before it looks, so one of the two always sees the other)."""
        self._opening = sock
        if self._aborted:
            self._opening = None
            sock.close()
            raise ConnectionAbortedError("the reporter was closed")
        return sock

    def _answer(self, response: http.client.HTTPResponse) -> Answer:
        raw = response.read(MAX_ANSWER_BYTES + 1)
        if len(raw) > MAX_ANSWER_BYTES or not response.isclosed():
            self.close()
        reason, message = describe(raw, response.reason)
        return Answer(response.status, reason, message, response.getheader("Retry-After"))


def _scrub(exc: BaseException, token: str | None) -> str:
    """An exception's text for the log, with the token cut out should it appear there
    (http.client quotes a header value it refuses)."""
    text = str(exc)
    return text.replace(token, "[token]") if token else text


def describe(raw: bytes, fallback: str) -> tuple[str, str]:
    """``reason`` and ``message`` of a metav1.Status body, tolerant of anything else
    (the Trainer's Status has no kind or apiVersion; proxies answer HTML)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return fallback, raw[:200].decode("utf-8", "replace").strip()
    if not isinstance(body, dict):
        return fallback, ""
    return str(body.get("reason") or fallback), str(body.get("message") or "")[:200]
