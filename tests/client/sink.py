"""A local HTTPS status server for client tests: records every post and answers as told.

It runs in its own threads (the client under test blocks in ``flush``, so the sink must
not share an event loop with the test). It can stall (hold requests at a gate), answer
scripted replies (401/429/503, peer-style 403 without kind/apiVersion, a dropped
connection), refuse tokens it was not told to accept, and rotate its certificate to a
new CA.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import trustme

from trainjob_status.contract import CA_CERT_ENV, TOKEN_ENV, URL_ENV, status_path

STATUS_PATH = status_path("team-a", "job1")


def make_token(subject: str, exp: float | None = None) -> str:
    """A JWT-shaped token (unsigned; the sink does not verify it) with an ``exp`` claim."""

    def part(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).rstrip(b"=").decode()

    claims: dict[str, Any] = {"sub": subject}
    if exp is not None:
        claims["exp"] = int(exp)
    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2ln"


def peer_status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1.Status as the Trainer's status server answers it: no kind, no apiVersion."""
    return {"status": "Failure", "message": message, "reason": reason, "code": code}


@dataclass
class Reply:
    """One scripted answer. ``body`` None echoes the request (as the Trainer's status server does on 200)."""

    code: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    close: bool = False  # close the connection after answering
    drop: bool = False  # close the connection without answering
    action: Callable[[], object] | None = None  # run before answering


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any
    connection: int  # the client's port: one per TCP connection
    token: str | None

    @property
    def status(self) -> dict[str, Any]:
        status = self.body["trainerStatus"]
        assert isinstance(status, dict)
        return status


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    sink: Sink


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = -1  # one write per answer (headers and body apart would meet delayed ACKs)
    server: _Server

    def do_POST(self) -> None:
        self.server.sink._handle(self)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class Sink:
    """``Sink(tmp_path)``: HTTPS on 127.0.0.1, certificate for localhost and 127.0.0.1.

    ``ca_file`` holds the sink's CA and ``token_file`` a token, for the client to read.
    """

    def __init__(self, directory: Path, *, dns_names: tuple[str, ...] = ("localhost",)) -> None:
        self.directory = directory
        self.dns_names = list(dns_names)
        self.ca = trustme.CA()
        self.ca_file = directory / "ca.crt"
        self.ca_file.write_bytes(self.ca.cert_pem.bytes())
        self.token_file = directory / "token"
        self.token = make_token("first", time.time() + 3600)
        self.token_file.write_text(self.token)
        self._context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._load_cert()
        self.requests: list[Received] = []
        self.replies: deque[Reply] = deque()
        # None: accept any token; else answer 401 (Status) to any other.
        self.accepted_tokens: set[str] | None = None
        self.gate = threading.Event()
        self.gate.set()
        self.held = threading.Event()  # a request is waiting at the closed gate
        self.answered = 0
        self._cond = threading.Condition()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.sink = self
        self._server.socket = self._context.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def url(self, host: str = "localhost") -> str:
        return f"https://{host}:{self.port}{STATUS_PATH}"

    def environ(self, host: str = "localhost") -> dict[str, str]:
        """A pod's three variables, pointing at this sink and its files."""
        return {
            URL_ENV: self.url(host),
            TOKEN_ENV: str(self.token_file),
            CA_CERT_ENV: str(self.ca_file),
        }

    def close(self) -> None:
        self.gate.set()
        self._server.shutdown()
        self._server.server_close()

    # -- controls --------------------------------------------------------------------------

    def rotate(self, dns_names: tuple[str, ...] | None = None) -> trustme.CA:
        """Serve a certificate from a brand-new CA (the client's CA file is not touched)."""
        if dns_names is not None:
            self.dns_names = list(dns_names)
        self.ca = trustme.CA()
        self._load_cert()
        return self.ca

    def write_token(self, subject: str, exp: float | None = None) -> str:
        """Replace the token file as kubelet does (a new file renamed over the old)."""
        self.token = make_token(subject, exp)
        fresh = self.directory / "token.new"
        fresh.write_text(self.token)
        fresh.replace(self.token_file)
        return self.token

    @contextmanager
    def stalled(self) -> Iterator[None]:
        """Requests wait at the gate (with the connection open) until the block ends."""
        self.gate.clear()
        try:
            yield
        finally:
            self.gate.set()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[Received]:
        """The first ``count`` requests, once they have arrived (fails after ``timeout``)."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.requests) >= count, timeout):
                raise AssertionError(f"{len(self.requests)} requests arrived, not {count}")
            return list(self.requests[:count])

    def wait_answered(self, count: int, timeout: float = 10.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.answered >= count, timeout):
                raise AssertionError(f"{self.answered} requests answered, not {count}")

    # -- serving ---------------------------------------------------------------------------

    def _load_cert(self) -> None:
        self.ca.issue_cert(*self.dns_names, "127.0.0.1").configure_cert(self._context)

    def _handle(self, handler: _Handler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length)
        authorization = handler.headers.get("Authorization")
        token = authorization.split(" ", 1)[1] if authorization else None
        received = Received(
            path=handler.path,
            headers={k.lower(): v for k, v in handler.headers.items()},
            body=json.loads(raw) if raw else None,
            connection=handler.client_address[1],
            token=token,
        )
        with self._cond:
            self.requests.append(received)
            self._cond.notify_all()
        if not self.gate.is_set():
            self.held.set()
            self.gate.wait(60)
        reply = self._reply(received)
        if reply.action is not None:
            reply.action()
        if reply.drop:
            handler.close_connection = True
        else:
            body = json.dumps(received.body if reply.body is None else reply.body).encode()
            handler.send_response(reply.code)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            for name, value in reply.headers.items():
                handler.send_header(name, value)
            if reply.close:
                handler.send_header("Connection", "close")
                handler.close_connection = True
            handler.end_headers()
            handler.wfile.write(body)
            handler.wfile.flush()
        with self._cond:
            self.answered += 1
            self._cond.notify_all()

    def _reply(self, received: Received) -> Reply:
        if self.accepted_tokens is not None and received.token not in self.accepted_tokens:
            return Reply(401, peer_status(401, "Unauthorized", "Unauthorized"))
        if self.replies:
            return self.replies.popleft()
        return Reply()
