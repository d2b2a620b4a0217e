"""How long the in-pod client waits, and whether its sending thread outlives ``close()``.

Two scenarios against endpoints on this machine, with the reporter as a training script
uses it:

- ``flush``: a server that answers each post after ``--answer-after`` seconds (4 s). Each
  round reports, reports again while that post is in flight, then calls
  ``flush(--flush-wait)`` (10 s, twice the reporter's 5 s ``flush_timeout``): what each
  flush returns and how long it waited. An explicit flush waits up to its own timeout.
- ``handshake``: a server that accepts the connection and drips its TLS handshake (a
  byte every half second, never finishing it). The reporter (socket timeout 60 s,
  ``flush_timeout`` 0.5 s) reports, and ``close()`` is called while the handshake runs:
  how long ``close()`` took, and whether the sending thread was still alive when it
  returned.

To compare with another build of the client, put its ``client`` folder first on the path
(``PYTHONPATH=OTHER/client python bench/client_waits.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import ssl
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from trainjob_devcluster.harness.testing import ServingCerts
from trainjob_status import StatusReporter

SENDER = "trainjob-status"


def sender_alive() -> bool:
    return any(t.name == SENDER and t.is_alive() for t in threading.enumerate())


class SlowServer:
    """HTTPS on 127.0.0.1 answering every post with 200 after ``delay`` seconds."""

    def __init__(self, certs: ServingCerts, delay: float) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                time.sleep(delay)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certs.cert_file, certs.key_file)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class DrippingServer:
    """Accepts TCP connections on 127.0.0.1 and drips a TLS handshake record that never
    ends: each read of the client's handshake gets a byte well within its timeout."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self.listener.accept()
                self.held.append(connection)
                threading.Thread(target=self._drip, args=(connection,), daemon=True).start()

    @staticmethod
    def _drip(connection: socket.socket) -> None:
        with contextlib.suppress(OSError):
            connection.sendall(b"\x16\x03\x03\x40\x00")  # a handshake record of 16 KiB
            while True:
                time.sleep(0.5)
                connection.sendall(b"\x02")

    def close(self) -> None:
        self.listener.close()
        for connection in self.held:
            connection.close()


def flush_rounds(certs: ServingCerts, token: Path, args: argparse.Namespace) -> None:
    server = SlowServer(certs, args.answer_after)
    reporter = StatusReporter(
        f"https://localhost:{server.port}/status",
        str(token),
        str(certs.ca_file),
        min_interval=0,
        flush_timeout=args.flush_timeout,
        environ={},
    )
    try:
        for number in range(1, args.rounds + 1):
            reporter.report(10 * number)
            time.sleep(0.1)  # the first post is in flight
            reporter.report(10 * number + 1)
            started = time.perf_counter()
            delivered = reporter.flush(args.flush_wait)
            print(
                f"flush({args.flush_wait:g}) #{number}, server answering after "
                f"{args.answer_after:g} s: {delivered} after "
                f"{time.perf_counter() - started:.2f} s",
                flush=True,
            )
    finally:
        reporter.close(0)
        server.close()


def handshake_rounds(certs: ServingCerts, token: Path, args: argparse.Namespace) -> None:
    server = DrippingServer()
    took: list[float] = []
    left = 0
    try:
        for _ in range(args.rounds):
            reporter = StatusReporter(
                f"https://localhost:{server.port}/status",
                str(token),
                str(certs.ca_file),
                timeout=args.socket_timeout,
                flush_timeout=0.5,
                environ={},
            )
            reporter.report(1)
            time.sleep(0.3)  # the handshake is under way
            started = time.perf_counter()
            reporter.close()
            took.append(time.perf_counter() - started)
            if sender_alive():
                left += 1
                # A client that leaves it running: wait for its handshake to time out, so
                # that the next round starts clean.
                deadline = time.monotonic() + args.socket_timeout + 5
                while sender_alive() and time.monotonic() < deadline:
                    time.sleep(0.1)
    finally:
        server.close()
    print(
        f"close() during a dripping TLS handshake (socket timeout {args.socket_timeout:g} s): "
        f"{min(took):.2f}-{max(took):.2f} s, sender alive after close in {left} of {len(took)}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="short waits, one round each")
    parser.add_argument("--rounds", type=int, help="rounds per scenario (default 2, smoke 1)")
    parser.add_argument(
        "--answer-after", type=float, help="the slow server's delay in s (default 4, smoke 0.4)"
    )
    parser.add_argument(
        "--flush-wait", type=float, help="the explicit flush's timeout in s (default 10, smoke 1)"
    )
    parser.add_argument(
        "--flush-timeout",
        type=float,
        help="the reporter's flush_timeout in s (default 5, smoke 0.5)",
    )
    parser.add_argument(
        "--socket-timeout",
        type=float,
        help="the reporter's socket timeout against the dripping server (default 60, smoke 5)",
    )
    args = parser.parse_args()
    args.rounds = args.rounds or (1 if args.smoke else 2)
    args.answer_after = args.answer_after or (0.4 if args.smoke else 4.0)
    args.flush_wait = args.flush_wait or (1.0 if args.smoke else 10.0)
    args.flush_timeout = args.flush_timeout or (0.5 if args.smoke else 5.0)
    args.socket_timeout = args.socket_timeout or (5.0 if args.smoke else 60.0)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        certs = ServingCerts.create(workdir)
        token = workdir / "token"
        token.write_text("bench-token")
        flush_rounds(certs, token, args)
        handshake_rounds(certs, token, args)


if __name__ == "__main__":
    main()
