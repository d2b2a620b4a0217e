"""Where a server's CPU per post goes, by layer: py-spy samples of the server's event-loop
thread, each given to the innermost frame that names a layer (so a layer's figure holds
what it calls, less the layers named inside it). For ``ingest_accept.py --profile``.

py-spy (``pip install py-spy``) reads the process from outside, pausing it for each
sample (without the pauses, stacks read mid-change come out torn and the shares wrong);
it needs ptrace rights (root, or CAP_SYS_PTRACE). Native code (TLS, the C parser, system
calls) is counted in the Python frame that called it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

RATE = 250  # samples a second

# (layer, the functions that name it), innermost first in spirit: a sample goes to the
# first function on its stack, from the leaf up, named by any layer.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("bare handler: read, json.loads, json.dumps, Response", ("ceiling_server.<locals>.handle",)),
    (
        "token check, cached (bearer, SHA-256, claims, pod, rate)",
        ("TokenAuthenticator.authenticate",),
    ),
    ("JSON decode", ("decode_payload",)),
    ("validation and encoding of the update", ("parse_trainer_status", "TrainerStatus.encoded")),
    ("body read", ("read_body",)),
    ("coalescing writer (queueing the update)", ("CoalescingWriter.write",)),
    ("TrainJob cache look-up", ("CachedTrainJobs.trainjob_exists",)),
    ("endpoint, the rest (answer object, names, clock)", ("StatusEndpoint.handle",)),
    ("answering: request id, timing, metrics, log level", ("answer",)),
    ("routing (ServingHandler)", ("ServingHandler.__call__", "ServingHandler._status")),
    ("TLS and socket send of the answer", ("_SSLProtocolTransport.write", "UVTransport.write")),
    ("aiohttp: answer headers and framing", ("RequestHandler.finish_response",)),
    (
        "HTTP parse: head budget, aiohttp's parser",
        (
            "StatusRequestHandler.data_received",
            "FirstRequestDeadline.data_received",
            "RequestHandler.data_received",
        ),
    ),
    ("TLS and socket receive", ("_SelectorSocketTransport._read_ready",)),
    (
        "aiohttp: request and task set-up",
        ("RequestHandler.start", "RequestHandler._handle_request"),
    ),
)
REST = "event loop and the rest"
_BY_FUNCTION = {function: layer for layer, functions in LAYERS for function in functions}
_FRAME = re.compile(r"(.*?) \(")


def _py_spy() -> str | None:
    """py-spy of this interpreter's environment (a venv's bin is often not on PATH), or
    the one on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def available() -> bool:
    return _py_spy() is not None


def record(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """Start sampling ``pid`` for ``seconds`` into ``out`` (py-spy's raw format)."""
    return subprocess.Popen(
        [
            _py_spy() or "py-spy", "record", "--pid", str(pid), "--duration", str(max(1, int(seconds))),
            "--rate", str(RATE), "--format", "raw", "--output", str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip


def shares(raw: Path) -> dict[str, float]:
    """Each layer's share of the main thread's samples in ``raw``."""
    counts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not frames or "Thread._bootstrap" in frames[0]:
            continue  # a thread other than the event loop's
        layer = REST
        for frame in reversed(frames):
            match = _FRAME.match(frame)
            found = _BY_FUNCTION.get(match.group(1) if match else frame)
            if found is not None:
                layer = found
                break
        counts[layer] += int(count)
    total = sum(counts.values())
    return {layer: n / total for layer, n in counts.items()} if total else {}


def table(columns: Sequence[tuple[str, dict[str, float], float]]) -> list[str]:
    """Lines of a table: a row per layer any column has, µs of CPU per post per column
    (``(name, shares, µs per post)``)."""
    order = [layer for layer, _ in LAYERS] + [REST]
    rows = [layer for layer in order if any(found.get(layer) for _, found, _ in columns)]
    width = max(len(row) for row in [*rows, "total"])
    names = [name for name, _, _ in columns]
    lines = [
        f"  {'us of CPU per post, by layer':<{width}}  " + "  ".join(f"{n:>12}" for n in names)
    ]
    for row in rows:
        cells = [f"{found.get(row, 0.0) * us:12.1f}" for _, found, us in columns]
        lines.append(f"  {row:<{width}}  " + "  ".join(cells))
    lines.append(f"  {'total':<{width}}  " + "  ".join(f"{us:12.1f}" for _, _, us in columns))
    return lines
